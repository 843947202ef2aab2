//! rdma-node-agent: host preparation and RDMA health for Kubernetes GPU/RDMA nodes.
//!
//! The flow of one cycle: the [`host`] layer (the only I/O, root-aware) gives a
//! snapshot; each of the [`concerns`] gathers its facts from it and decides,
//! purely, its checks, typed observations and file changes; the [`engine`]
//! merges them into one plan, which its executor carries out through the
//! ledger, systemd and netlink; the [`outputs`] (CLI, HTTP, metrics, NFD)
//! render the result. [`agent`] wires them together; [`daemon`] loops.

pub mod agent;
pub mod concerns;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod exposition;
pub mod fleet;
pub mod fleetview;
pub mod host;
pub mod logging;
pub mod observe;
pub mod outputs;
pub mod reason;
pub mod redact;
pub mod selftest;
