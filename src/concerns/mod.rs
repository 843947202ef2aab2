//! The concerns: each owns one part of the node's preparation or health and
//! implements `engine::concern::Concern` (gather from the snapshot, decide purely).
//! They are registered, in order, in `agent::CONCERNS`.

pub mod containerd;
pub mod fleet;
pub mod gpudirect;
pub mod kernel;
pub mod pods;
pub mod rdma;
pub mod readiness;
pub mod reboot;
pub mod systemd;
