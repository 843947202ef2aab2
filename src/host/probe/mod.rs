//! Peer probes: real RDMA exchanges between this node's ACTIVE ports and
//! peers on the same fabric (issue 35). The daemon's prober runs them through
//! the dynamically linked probe helper (the static agent cannot `dlopen` the
//! verbs providers) and keeps their results as agent state (`record`), which
//! `rdma.peers` judges and the fleet view compares.

pub mod helper;
pub mod local;
pub mod record;
pub mod responder;
pub mod settings;
pub mod sources;
