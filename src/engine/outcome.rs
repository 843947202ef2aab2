//! What happened to each live action of a plan: typed, so the daemon's holds,
//! `/status`, the CLI and the journal read the same values.

use std::fmt;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionStatus {
    Done,
    Failed,
    /// Not attempted: not the live host, or `--no-restart`.
    Skipped,
    /// Owed, but nothing could carry it out (systemd unreachable).
    Pending,
    /// Failed before; waits for its backoff.
    Deferred,
    /// Given up because the agent is stopping; the files are consistent.
    Interrupted,
}

impl ActionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Done => "done",
            ActionStatus::Failed => "failed",
            ActionStatus::Skipped => "skipped",
            ActionStatus::Pending => "pending",
            ActionStatus::Deferred => "deferred",
            ActionStatus::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for ActionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    /// The action as people read it (`restart containerd.service`); also the key
    /// a failing action is deferred by.
    pub action: String,
    pub status: ActionStatus,
    pub detail: String,
}

impl ActionOutcome {
    pub fn new(action: impl Into<String>, status: ActionStatus, detail: impl Into<String>) -> Self {
        ActionOutcome {
            action: action.into(),
            status,
            detail: detail.into(),
        }
    }
}
