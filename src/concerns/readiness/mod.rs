//! RDMA workload readiness: what a pod on this node really gets, checked from
//! the host. `pods.rdma` looks at running pod containers that have RDMA
//! devices (their capabilities and locked-memory limit); `kubelet.devices`
//! compares what the kubelet advertises with the host's RDMA ports.

pub mod checkpoint;
pub mod config;
pub mod kubelet;
pub mod metrics;
pub mod pods_rdma;
pub mod reasons;
