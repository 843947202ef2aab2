//! The executor: the only code that changes the host. It writes a plan's files
//! through the ledger, restarts exactly the units that read what changed,
//! verifies them, rolls back what a failed restart broke, defers failing live
//! actions and gives up cleanly when the agent is stopping. The live host is a
//! capability passed in (`Live`); without it (a `--root` tree) every live
//! action is reported as skipped, and tests pass fakes to exercise every path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::effect::{Effect, LiveCtx, LiveHost, Probe, settle};
use super::holds::Holds;
use super::outcome::{ActionOutcome, ActionStatus};
use crate::engine::ledger::{Ledger, LedgerError, LegacyReaders, RevertOutcome};
use crate::engine::plan::{Action, ActionKind, Plan};
use crate::host::lock::{self, LockError};
use crate::host::service::{ServiceManager, SystemdError, UnitState};
use crate::host::state_writer::{Access, StateWriter};
use crate::host::stop::Stop;
use crate::host::{Host, HostError};

/// How often a restarted unit is looked at until it is healthy.
const VERIFY_POLL: Duration = Duration::from_millis(250);

/// The capabilities of the live host.
pub struct Live {
    /// systemd, when its bus answers.
    pub manager: Option<Arc<dyn ServiceManager>>,
    pub host: Box<dyn LiveHost>,
}

impl Live {
    /// What an effect or a probe runs with.
    pub fn ctx<'a>(&'a self, stop: &'a Stop) -> LiveCtx<'a> {
        LiveCtx {
            host: self.host.as_ref(),
            manager: self.manager.as_deref(),
            stop,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Systemd(#[from] SystemdError),
    #[error(
        "{unit} did not come back healthy after the restart ({reason}); the previous files were restored and {unit} restarted again: {after}"
    )]
    RolledBack {
        unit: String,
        reason: String,
        after: String,
        /// The plan that failed, so it is not retried until something changes.
        digest: String,
    },
    #[error(
        "not retried: the same change was rolled back before ({reason}); fix the cause or change the config"
    )]
    HeldBack { reason: String },
    #[error("stopped during the apply: {0}")]
    Interrupted(String),
}

#[derive(Debug, Serialize)]
pub struct ApplyOutcome {
    pub changed: Vec<PathBuf>,
    pub actions: Vec<ActionOutcome>,
    pub notes: Vec<String>,
}

impl ApplyOutcome {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.actions.is_empty()
    }
}

#[derive(Debug, Serialize)]
pub struct RevertResult {
    #[serde(flatten)]
    pub files: RevertOutcome,
    pub actions: Vec<ActionOutcome>,
}

/// Why a restart did not end healthy.
enum RestartError {
    Failed(String),
    /// The agent is stopping; `cancelled`: the job never ran.
    Stopped {
        cancelled: bool,
    },
}

/// A plan rolled back before waits for its backoff (an empty plan never).
fn refuse_held(plan: &Plan, holds: &Holds) -> Result<(), ExecError> {
    let Some(h) = holds.plan_held(&plan.digest(), SystemTime::now()) else {
        return Ok(());
    };
    if plan.is_empty() {
        return Ok(());
    }
    let wait = h
        .until
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .as_secs();
    Err(ExecError::HeldBack {
        reason: format!(
            "{} (rolled back {} time(s) in a row; tried again in {wait} s)",
            h.reason, h.failures
        ),
    })
}

pub struct Executor<'a> {
    pub host: &'a Host,
    /// `None`: not the live host; live actions are skipped.
    pub live: Option<&'a Live>,
    pub restart_timeout: Duration,
    pub stop: &'a Stop,
    /// What the owners of old ledger entries restarted (the concerns know).
    pub legacy_readers: LegacyReaders,
}

impl Executor<'_> {
    fn manager(&self) -> Option<&dyn ServiceManager> {
        self.live.and_then(|l| l.manager.as_deref())
    }

    fn not_live(&self, reason: &str) -> String {
        format!(
            "--root {} is not the live host ({reason})",
            self.host.root().display()
        )
    }

    /// Carries out `plan`: files first (atomically, through the ledger), then the
    /// restarts their readers need and the other live actions. A plan that was
    /// rolled back before is refused; a failing live action waits for its backoff.
    pub fn apply(
        &self,
        plan: &Plan,
        restart: bool,
        holds: &Holds,
    ) -> Result<ApplyOutcome, ExecError> {
        let _lock = lock::acquire(
            self.host,
            Path::new(lock::LOCK_PATH),
            Duration::from_secs(10),
        )?;
        refuse_held(plan, holds)?;
        if self.stop.requested() && !plan.is_empty() {
            return Err(ExecError::Interrupted(
                "stopping before the first write: nothing was changed".into(),
            ));
        }
        let now = SystemTime::now();
        let mut ledger = Ledger::load(&self.host.reader())?;
        ledger.apply(self.host, plan)?;

        let mut actions = Vec::new();
        let mut reloaded = false;
        for a in &plan.actions {
            let unit = match &a.kind {
                ActionKind::RestartUnit { unit } => unit,
                // Restarts have their own guard (verification, rollback, the plan hold).
                ActionKind::Effect(_) => {
                    actions.push(self.effect(a, holds, now));
                    continue;
                }
            };
            let manager = match self.restarter(unit, &a.reason, restart) {
                Ok(m) => m,
                Err((status, detail)) => {
                    actions.push(ActionOutcome::new(a.kind.to_string(), status, detail));
                    continue;
                }
            };
            if !reloaded {
                manager.reload()?;
                reloaded = true;
            }
            self.restart_or_roll_back(manager, unit, plan, &mut ledger)?;
            actions.push(ActionOutcome::new(
                a.kind.to_string(),
                ActionStatus::Done,
                a.reason.clone(),
            ));
        }
        // The run converged: record the agent's own state (what it last saw).
        let mut notes = plan.notes.clone();
        for r in &plan.records {
            StateWriter::new(self.host).keep(r, Access::Public)?;
            notes.extend(r.note.clone());
        }
        Ok(ApplyOutcome {
            changed: plan.changes.iter().map(|c| c.path.clone()).collect(),
            actions,
            notes,
        })
    }

    /// A live action other than a restart, unless its backoff defers it.
    fn effect(&self, a: &Action, holds: &Holds, now: SystemTime) -> ActionOutcome {
        let text = a.kind.to_string();
        if let Some(h) = holds.deferred(&a.kind.key(), now) {
            let wait = h.until.duration_since(now).unwrap_or_default().as_secs();
            return ActionOutcome::new(
                text,
                ActionStatus::Deferred,
                format!(
                    "failed {} time(s) in a row; next try in {wait} s, or now with `systemctl reload rdma-node-agent` ({})",
                    h.failures, a.reason
                ),
            );
        }
        let (status, detail) = self.live_action(a);
        ActionOutcome::new(text, status, detail).keyed(a.kind.key())
    }

    /// Restarts a reader of the plan's files and verifies it. A failed
    /// restart puts the files back and restarts it again (`RolledBack`); a
    /// stop leaves the restart to systemd, or rolls back when the job never ran.
    fn restart_or_roll_back(
        &self,
        manager: &dyn ServiceManager,
        unit: &str,
        plan: &Plan,
        ledger: &mut Ledger,
    ) -> Result<(), ExecError> {
        match self.restart_verified(manager, unit, plan.verify_of(unit)) {
            Ok(()) => Ok(()),
            Err(RestartError::Stopped { cancelled: true }) => {
                // The job never ran: the unit still runs with the files it read
                // before. Put those files back so files and process agree; the
                // next start applies the change again.
                ledger.rollback(self.host, plan)?;
                Err(ExecError::Interrupted(format!(
                    "the restart of {unit} was cancelled before it ran and this apply's files were rolled back; the next start applies them again"
                )))
            }
            Err(RestartError::Stopped { cancelled: false }) => {
                Err(ExecError::Interrupted(format!(
                    "the files are written and {unit}'s restart was left to systemd; the next start verifies it"
                )))
            }
            Err(RestartError::Failed(reason)) => {
                tracing::error!(unit = %unit, "restart failed, rolling back: {reason}");
                ledger.rollback(self.host, plan)?;
                manager.reload()?;
                let after = match self.restart_verified(manager, unit, plan.verify_of(unit)) {
                    Ok(()) => "it is healthy again".to_owned(),
                    Err(RestartError::Failed(e)) => format!("it is still unhealthy: {e}"),
                    Err(RestartError::Stopped { .. }) => {
                        "the agent is stopping: its restart was left to systemd".to_owned()
                    }
                };
                Err(ExecError::RolledBack {
                    unit: unit.to_owned(),
                    reason,
                    after,
                    digest: plan.digest(),
                })
            }
        }
    }

    /// Effects that undo what concerns changed on the host (`revert`), each on
    /// the live host only; a failing one does not stop the others.
    pub fn run_undo(&self, effects: &[Arc<dyn Effect>]) -> Vec<ActionOutcome> {
        effects
            .iter()
            .map(|e| {
                let (status, detail) = match self.live {
                    None => (ActionStatus::Skipped, "not the live host".to_owned()),
                    Some(live) => settle(e.run(&live.ctx(self.stop))),
                };
                ActionOutcome::new(e.describe(), status, detail).keyed(e.key())
            })
            .collect()
    }

    /// systemd, to restart `unit` now; or the outcome that says why it is not
    /// restarted (not the live host, `--no-restart`, no bus) and what to run.
    fn restarter(
        &self,
        unit: &str,
        reason: &str,
        restart: bool,
    ) -> Result<&dyn ServiceManager, (ActionStatus, String)> {
        match (self.live, self.manager()) {
            (None, _) => Err((ActionStatus::Skipped, self.not_live(reason))),
            _ if !restart => Err((
                ActionStatus::Skipped,
                format!("--no-restart: restart it to take effect ({reason})"),
            )),
            (Some(_), None) => Err((
                ActionStatus::Pending,
                format!(
                    "systemd is not reachable over D-Bus: run `systemctl daemon-reload && systemctl restart {unit}` ({reason})"
                ),
            )),
            (Some(_), Some(m)) => Ok(m),
        }
    }

    /// A concern's effect, on the live host only. Returns (status, detail).
    fn live_action(&self, a: &Action) -> (ActionStatus, String) {
        let Some(live) = self.live else {
            return (ActionStatus::Skipped, self.not_live(&a.reason));
        };
        match &a.kind {
            ActionKind::Effect(e) => settle(e.run(&live.ctx(self.stop))),
            ActionKind::RestartUnit { .. } => unreachable!("restarts are handled by apply"),
        }
    }

    /// Restarts `unit` and waits until it is healthy (active, and what `verify`
    /// asks besides), within the restart timeout.
    fn restart_verified(
        &self,
        manager: &dyn ServiceManager,
        unit: &str,
        verify: Option<&dyn Probe>,
    ) -> Result<(), RestartError> {
        match manager.restart(unit, self.restart_timeout, self.stop) {
            Ok(()) => {}
            Err(SystemdError::Stopped { cancelled, .. }) => {
                return Err(RestartError::Stopped { cancelled });
            }
            Err(e) => return Err(RestartError::Failed(e.to_string())),
        }
        let deadline = Instant::now() + self.restart_timeout;
        loop {
            let problem = match manager.status(unit) {
                Ok(s) if s.active_state == UnitState::Active => match (verify, self.live) {
                    (Some(probe), Some(live)) => probe
                        .healthy(&live.ctx(self.stop))
                        .err()
                        .map(|e| e.to_string()),
                    _ => None,
                },
                Ok(s) => Some(format!(
                    "{unit} is {} after the restart (see journalctl -u {unit})",
                    s.active_state
                )),
                Err(e) => Some(e.to_string()),
            };
            let Some(problem) = problem else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(RestartError::Failed(problem));
            }
            if self.stop.sleep(VERIFY_POLL) {
                return Err(RestartError::Stopped { cancelled: false });
            }
        }
    }

    /// Restores every file the agent changed, then restarts the units that read
    /// them (on the live host), so the node runs as it did before the agent.
    /// `verify`: how to verify each unit, from a fresh assessment.
    pub fn revert(
        &self,
        force: bool,
        verify: &[(String, Arc<dyn Probe>)],
    ) -> Result<RevertResult, ExecError> {
        let _lock = lock::acquire(
            self.host,
            Path::new(lock::LOCK_PATH),
            Duration::from_secs(10),
        )?;
        let ledger = Ledger::load(&self.host.reader())?;
        let readers: Vec<(PathBuf, Vec<String>)> = ledger
            .files
            .iter()
            .map(|(p, o)| (p.clone(), o.readers(p, self.legacy_readers)))
            .collect();
        let files = ledger.revert(self.host, force)?;
        let mut units: Vec<String> = readers
            .into_iter()
            .filter(|(p, _)| files.restored.contains(p) || files.removed.contains(p))
            .flat_map(|(_, u)| u)
            .collect();
        units.sort();
        units.dedup();
        let mut actions = Vec::new();
        let mut reloaded = false;
        for unit in units {
            let action = format!("restart {unit}");
            let why = "it read a restored file";
            let (status, detail) = match self.restarter(&unit, why, true) {
                Err(not_now) => not_now,
                Ok(m) => {
                    let reload = if reloaded {
                        Ok(())
                    } else {
                        reloaded = true;
                        m.reload().map_err(|e| e.to_string())
                    };
                    let how = verify
                        .iter()
                        .find(|(u, _)| *u == unit)
                        .map(|(_, v)| v.as_ref());
                    match reload.and_then(|()| {
                        self.restart_verified(m, &unit, how).map_err(|e| match e {
                            RestartError::Failed(e) => e,
                            RestartError::Stopped { .. } => "the agent is stopping".into(),
                        })
                    }) {
                        Ok(()) => (
                            ActionStatus::Done,
                            "runs with its original configuration".to_owned(),
                        ),
                        Err(e) => (ActionStatus::Failed, e),
                    }
                }
            };
            actions.push(ActionOutcome::new(action, status, detail));
        }
        Ok(RevertResult { files, actions })
    }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
