//! rdma-node-agent: host preparation and RDMA health for Kubernetes GPU/RDMA nodes.
//!
//! Each concern gathers facts through the root-aware [`host`] layer, decides with
//! pure functions, and hands file changes to the [`ledger`], which can undo them.

pub mod agent;
pub mod check;
pub mod config;
pub mod containerd;
pub mod daemon;
pub mod engine;
pub mod host;
pub mod http;
pub mod kernel;
pub mod ledger;
pub mod lock;
pub mod metrics;
pub mod netlink;
pub mod nfd;
pub mod outputs;
pub mod plan;
pub mod pods;
pub mod procfs;
pub mod rdma;
pub mod reboot;
pub mod systemd;
