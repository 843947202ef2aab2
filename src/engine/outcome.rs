//! What happened to each live action of a plan: typed, so the daemon's holds,
//! `/status`, the CLI and the journal read the same values.

use std::fmt;

use serde::Serialize;

use super::effect::EffectKey;

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
    /// The action as people read it (`restart app.service`).
    pub action: String,
    pub status: ActionStatus,
    pub detail: String,
    /// The effect's key, which a failing effect is held back by (restarts have
    /// their own guard: the plan hold).
    #[serde(skip)]
    pub key: Option<EffectKey>,
}

impl ActionOutcome {
    pub fn new(action: impl Into<String>, status: ActionStatus, detail: impl Into<String>) -> Self {
        ActionOutcome {
            action: action.into(),
            status,
            detail: detail.into(),
            key: None,
        }
    }

    pub fn keyed(mut self, key: EffectKey) -> Self {
        self.key = Some(key);
        self
    }
}
