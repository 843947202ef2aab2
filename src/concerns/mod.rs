//! The concerns: each owns one part of the node's preparation or health and
//! implements `engine::concern::Concern` (gather from the snapshot, decide
//! purely). `ALL` registers them, in order: the one place that names them.

pub mod containerd;
pub mod gpudirect;
pub mod kernel;
pub mod pods;
pub mod rdma;
pub mod readiness;
pub mod reboot;
pub mod systemd;

use crate::engine::concern::Run;

/// Every concern, in the order they run: one registers with one line. A
/// concern may read the observations of those before it (pods reads
/// containerd's; the reboot sentinel the RDMA and kernel ones'; NFD every check).
pub static ALL: &[&dyn Run] = &[
    &containerd::concern::Memlock,
    &systemd::concern::Memlock,
    &pods::Memlock,
    &readiness::pods_rdma::PodsRdma,
    &rdma::concern::Devices,
    &gpudirect::Path,
    &readiness::kubelet::Kubelet,
    &rdma::concern::Netns,
    &kernel::concern::Kernel,
    &reboot::Sentinel,
    &crate::outputs::nfd::Labels,
];
