//! What the daemon publishes after each reconcile, for the health outputs
//! (HTTP, metrics) to render: they read this record, never the host.

pub mod assets;
pub mod heap;
pub mod http;
pub mod listen;
pub mod metrics;

use std::path::PathBuf;

use serde::Serialize;

use crate::config::Mode;
use crate::engine::check::Report;
use crate::engine::outcome::ActionOutcome;
use crate::observe::Observation;

/// The outcome of one reconcile, as the health outputs show it.
#[derive(Debug, Clone, Serialize)]
pub struct Cycle {
    #[serde(flatten)]
    pub report: Option<Report>,
    /// `None`: the cycle ended before a config was read (shown as "unknown").
    #[serde(serialize_with = "mode_or_unknown")]
    pub mode: Option<Mode>,
    /// SHA-256 of the config file this cycle ran with (null: built-in defaults,
    /// or none loaded): a rollout waits for the one it wrote.
    pub config_sha256: Option<String>,
    pub finished_unix: u64,
    pub duration_ms: u64,
    pub trigger: String,
    pub changed: Vec<PathBuf>,
    /// What it did besides writing files (restarts, netns switch, initramfs rebuild).
    pub actions: Vec<ActionOutcome>,
    /// Why the cycle could not converge (a bad config, a refused edit, a rollback).
    pub error: Option<String>,
    /// What the concerns observed, for metrics.
    #[serde(skip)]
    pub observations: Vec<Observation>,
    /// A write refused as read-only in the service's own mount namespace while
    /// the host sees that file system writable: only a restart of the service
    /// gives it the host's view again (its read-write paths are bound at start).
    #[serde(skip)]
    pub stale_mounts: Option<String>,
}

impl Cycle {
    /// A cycle that ended before any report: only its trigger and why.
    pub fn failed(trigger: String, error: String) -> Cycle {
        Cycle {
            report: None,
            mode: None,
            config_sha256: None,
            finished_unix: 0,
            duration_ms: 0,
            trigger,
            changed: Vec::new(),
            actions: Vec::new(),
            error: Some(error),
            observations: Vec::new(),
            stale_mounts: None,
        }
    }
}

fn mode_or_unknown<S: serde::Serializer>(m: &Option<Mode>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => m.serialize(s),
        None => s.serialize_str("unknown"),
    }
}
