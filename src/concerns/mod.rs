//! The concerns: each owns one part of the node's preparation or health and
//! implements `engine::concern::Concern` (gather from the snapshot, decide
//! purely). `ALL` registers them, in order: the one place that names them.

pub mod containerd;
pub mod driver;
pub mod fleet;
pub mod fleet_metrics;
pub mod gpudirect;
pub mod kernel;
pub mod nfd;
pub mod pcie;
pub mod pods;
pub mod rdma;
pub mod readiness;
pub mod reboot;
pub mod registry;
pub mod systemd;

use std::path::Path;

use crate::engine::concern::Run;

/// Every concern, in the order they run: one registers with one line. A
/// concern may read the observations of those before it (pods reads
/// containerd's; the reboot sentinel the RDMA and kernel ones'; NFD every check).
pub static ALL: &[&dyn Run] = &[
    &containerd::concern::Memlock,
    &containerd::nri::NriCheck,
    &systemd::concern::Memlock,
    &pods::Memlock,
    &readiness::pods_rdma::PodsRdma,
    &rdma::concern::Devices,
    &rdma::link::Link,
    &rdma::counters::Counters,
    &rdma::peers::Peers,
    &rdma::peers::gate_check::Gate,
    &gpudirect::Path,
    &pcie::Aer,
    &driver::Health,
    &readiness::kubelet::Kubelet,
    &rdma::concern::Netns,
    &kernel::concern::Kernel,
    &fleet::Export,
    &reboot::Sentinel,
    &nfd::Labels,
];

/// The units a ledger entry's owner restarted, for entries written before
/// each change recorded its readers: containerd's files are read by
/// containerd, a drop-in by the unit of its directory.
pub fn legacy_readers(owner: &str, path: &Path) -> Vec<String> {
    match owner {
        "containerd" | "containerd-spec" => vec!["containerd.service".to_owned()],
        "systemd" => path
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".d"))
            .map(str::to_owned)
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_ledger_owners_name_their_readers() {
        let p = Path::new("/etc/systemd/system/containerd.service.d/50-x.conf");
        assert_eq!(legacy_readers("systemd", p), ["containerd.service"]);
        let c = Path::new("/etc/containerd/config.toml");
        assert_eq!(legacy_readers("containerd-spec", c), ["containerd.service"]);
        assert!(legacy_readers("nfd", c).is_empty());
    }
}
