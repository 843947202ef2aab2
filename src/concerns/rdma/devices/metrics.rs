//! `rdma.devices`' families: each port's state and rate, from the typed
//! `Observation::Port` (registered in `concerns::registry::METRICS`).

use super::gbps_to_bytes;
use crate::exposition::{Families, Kind, bool01};
use crate::observe::Observation;

pub fn families(m: &mut Families, seen: &[Observation]) {
    let ports: Vec<_> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::Port(p) => Some((
                vec![
                    ("device", p.device.clone()),
                    ("port", p.port.to_string()),
                    (
                        "link_layer",
                        p.link_layer.map_or("unknown", |l| l.as_str()).to_owned(),
                    ),
                ],
                p.active,
                p.rate_gbps.map(gbps_to_bytes),
            )),
            _ => None,
        })
        .collect();
    let active = m.family(
        "port_active",
        Kind::Gauge,
        "1 when the RDMA port's state is ACTIVE, 0 when the kernel names another state (DOWN, INIT, ARMED...); no series when the state cannot be read",
    );
    for (labels, a, _) in &ports {
        if let Some(a) = a {
            active.sample(labels.clone(), bool01(*a));
        }
    }
    let rate = m.family(
        "port_rate_bytes_per_second",
        Kind::Gauge,
        "RDMA port rate in bytes per second (sysfs rate x 10^9 / 8, as node_exporter's node_infiniband_rate_bytes_per_second); no series when unreadable",
    );
    for (labels, _, r) in &ports {
        if let Some(r) = r {
            rate.sample(labels.clone(), *r as f64);
        }
    }
}
