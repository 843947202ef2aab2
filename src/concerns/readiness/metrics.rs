//! `pods.rdma`'s and `kubelet.devices`' families (registered in
//! `concerns::registry::METRICS`).

use crate::exposition::{Families, Kind};
use crate::observe::{Observation, RdmaProblem};

/// RDMA pod containers by problem (`none` for those that can register memory)
/// and the kubelet's device-plugin resources, from `pods.rdma`'s and
/// `kubelet.devices`' typed observations. Every problem value is always
/// present, so an alert needs no `absent()`.
pub fn families(m: &mut Families, seen: &[Observation]) {
    let names: Vec<&'static str> = RdmaProblem::ALL
        .map(RdmaProblem::as_str)
        .into_iter()
        .chain(["none"])
        .collect();
    let mut counts = vec![0u64; names.len()];
    for o in seen {
        if let Observation::RdmaContainer { problems, .. } = o {
            if problems.is_empty() {
                counts[names.len() - 1] += 1;
            }
            for p in problems {
                if let Some(i) = names.iter().position(|n| *n == p.as_str()) {
                    counts[i] += 1;
                }
            }
        }
    }
    let containers = m.family(
        "rdma_containers",
        Kind::Gauge,
        "Running pod containers with RDMA devices, by what keeps them from registering memory (no_ipc_lock, low_memlock...; none: nothing, they can)",
    );
    for (name, n) in names.iter().zip(counts) {
        containers.sample(vec![("problem", (*name).to_owned())], n as f64);
    }
    let resources = m.family(
        "kubelet_resource_devices",
        Kind::Gauge,
        "Healthy devices the kubelet has registered per device-plugin resource (from its checkpoint); rdma=\"true\" for RDMA resources",
    );
    for o in seen {
        if let Observation::KubeletResource {
            name,
            devices,
            rdma,
        } = o
        {
            resources.sample(
                vec![("resource", name.clone()), ("rdma", rdma.to_string())],
                *devices as f64,
            );
        }
    }
}
