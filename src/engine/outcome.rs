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

/// `apply`'s exit code when it ran to the end (an apply that failed or was
/// rolled back exits 1): 3 when a live action failed or was given up, else 2
/// when one is still owed (pending: a reboot, or a restart systemd could not be
/// asked for), else 0. Skipped actions were asked to be skipped (`--no-restart`,
/// `--root`) and count as nothing.
pub fn apply_exit_code(actions: &[ActionOutcome]) -> u8 {
    let failed = |s: ActionStatus| {
        matches!(
            s,
            ActionStatus::Failed | ActionStatus::Deferred | ActionStatus::Interrupted
        )
    };
    if actions.iter().any(|a| failed(a.status)) {
        APPLY_ACTION_FAILED
    } else if actions.iter().any(|a| a.status == ActionStatus::Pending) {
        APPLY_PENDING
    } else {
        0
    }
}

/// `apply`: an action is owed that this run could not carry out.
pub const APPLY_PENDING: u8 = 2;
/// `apply`: a live action (a restart, or an effect a concern asked for) failed.
pub const APPLY_ACTION_FAILED: u8 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    fn with(statuses: &[ActionStatus]) -> u8 {
        let actions: Vec<_> = statuses
            .iter()
            .map(|s| ActionOutcome::new("x", *s, ""))
            .collect();
        apply_exit_code(&actions)
    }

    #[test]
    fn apply_exit_code_tells_failed_from_pending() {
        use ActionStatus::*;
        assert_eq!(with(&[]), 0);
        assert_eq!(with(&[Done, Skipped]), 0);
        assert_eq!(with(&[Done, Pending]), APPLY_PENDING);
        assert_eq!(with(&[Pending, Failed]), APPLY_ACTION_FAILED);
        assert_eq!(with(&[Interrupted]), APPLY_ACTION_FAILED);
        assert_eq!(with(&[Deferred, Done]), APPLY_ACTION_FAILED);
    }
}
