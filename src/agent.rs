//! Runs every concern over one host: gather facts, decide, report checks, plan,
//! apply through the ledger (restarting what the changes need, verified, rolled
//! back when the restarted service does not come back healthy), revert.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::check::{Check, Report, Status};
use crate::config::Config;
use crate::containerd::{self, ContainerdError, validate::Validation};
use crate::holds::Holds;
use crate::host::{Host, HostError};
use crate::kernel;
use crate::ledger::{Ledger, LedgerError, RevertOutcome};
use crate::lock::{self, LockError};
use crate::nfd;
use crate::plan::{ActionKind, Plan};
use crate::pods;
use crate::rdma;
use crate::reboot;
use crate::systemd::{ServiceManager, SystemdError, dropin};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Containerd(#[from] ContainerdError),
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
}

pub struct Agent {
    pub host: Host,
    pub config: Config,
    /// systemd, on the live host when its bus answers.
    pub manager: Option<Box<dyn ServiceManager>>,
}

/// One pass over the host: what every concern found and what it would change.
pub struct Assessment {
    pub checks: Vec<Check>,
    pub plan: Result<Plan, AgentError>,
    /// containerd's socket, to verify it after a restart.
    grpc_address: Option<PathBuf>,
    /// Files whose change should trigger a new reconcile.
    pub watch: Vec<PathBuf>,
    /// The kernel and boot to record once this apply has run.
    kernel_state: Option<kernel::KernelState>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ActionOutcome {
    pub action: String,
    pub status: &'static str,
    pub detail: String,
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

impl Agent {
    pub fn new(host: Host, config: Config) -> Self {
        Agent {
            host,
            config,
            manager: None,
        }
    }

    /// On the live host, also connects to systemd; without it, restarts are
    /// reported as pending and checks rely on files and /proc.
    pub fn connect(host: Host, config: Config) -> Self {
        let manager: Option<Box<dyn ServiceManager>> = if host.is_live() {
            match crate::systemd::dbus::Dbus::system() {
                Ok(d) => Some(Box::new(d)),
                Err(e) => {
                    tracing::warn!("{e}; restarts will be left pending");
                    None
                }
            }
        } else {
            None
        };
        Agent {
            host,
            config,
            manager,
        }
    }

    fn manager(&self) -> Option<&dyn ServiceManager> {
        self.manager.as_deref()
    }

    /// Checks and plan. `validate`: have containerd itself check edited configs
    /// (a process spawn, ~20 ms): needed before writing, not to report.
    pub fn assess(&self, validate: bool) -> Assessment {
        let mut checks = Vec::new();
        let mut plan = Plan::default();
        let mut error: Option<AgentError> = None;
        let mut grpc_address = None;
        let mut containerd_started = None;
        let mut watch = Vec::new();

        let cfg = &self.config.containerd;
        if cfg.enabled {
            match self.containerd_plan(validate) {
                Ok((facts, decision, notes)) => {
                    checks.push(containerd::check(Some(&facts), &Ok(decision.clone()), cfg));
                    plan.extend(decision.plan);
                    plan.notes.extend(notes);
                    watch.extend(facts.watched_files());
                    // Until containerd restarts, every container has the old spec.
                    if !facts.restart_pending() {
                        containerd_started = facts.containerd_started.map(|s| s.at);
                    }
                    grpc_address = Some(facts.grpc_address);
                }
                Err(e) => {
                    checks.push(containerd::check(None, &Err(e.to_string()), cfg));
                    error = Some(e);
                }
            }
        } else {
            checks.push(containerd::check(None, &Err(String::new()), cfg));
        }

        let sd = &self.config.systemd;
        if sd.enabled {
            match dropin::gather(&self.host, sd, self.manager()) {
                Ok(facts) => {
                    watch.extend(facts.iter().map(|f| f.path.clone()));
                    checks.push(dropin::check(&facts, sd));
                    plan.extend(dropin::decide(&facts, sd));
                }
                Err(e) => {
                    checks.push(Check::new(dropin::CHECK_ID, Status::Unknown, e.to_string()));
                    error.get_or_insert(e.into());
                }
            }
        } else {
            checks.push(dropin::check(&[], sd));
        }

        checks.push(match pods::gather(&self.host) {
            Ok(procs) => pods::check(
                &procs,
                cfg.memlock,
                self.config.pods.below_target,
                containerd_started,
            ),
            Err(e) => Check::new(pods::CHECK_ID, Status::Unknown, e.to_string()),
        });

        let rdma = rdma::assess(&self.host, &self.config.rdma);
        checks.extend(rdma.checks);
        match rdma.plan {
            Ok(p) => plan.extend(p),
            Err(e) => {
                error.get_or_insert(e.into());
            }
        }
        let kcfg = &self.config.kernel;
        let mut hold_back = Vec::new();
        let mut kernel_state = None;
        if kcfg.enabled {
            match kernel::gather(&self.host, kcfg) {
                Ok(f) => {
                    checks.push(kernel::check_change(&f));
                    checks.push(kernel::check_modules(&f, kcfg));
                    checks.push(kernel::check_dkms(&f, kcfg));
                    hold_back = kernel::hold_back_reasons(&f, kcfg);
                    kernel_state = kernel::next_state(&f);
                }
                Err(e) => {
                    for id in [kernel::CHANGE, kernel::MODULES, kernel::DKMS] {
                        checks.push(Check::new(id, Status::Unknown, e.to_string()));
                    }
                }
            }
        } else {
            for id in [kernel::CHANGE, kernel::MODULES, kernel::DKMS] {
                checks.push(Check::new(
                    id,
                    Status::Skipped,
                    "disabled in the agent config",
                ));
            }
        }

        let reboot = reboot::Request {
            reasons: rdma.reboot_reasons,
            hold_back,
        };
        match reboot::change(&self.host, self.config.rdma.reboot_sentinel, &reboot) {
            Ok(change) => plan.changes.extend(change),
            Err(e) => {
                error.get_or_insert(e.into());
            }
        }

        // Last: the labels summarise every check above.
        match self.nfd_change(&checks) {
            Ok(change) => plan.changes.extend(change),
            Err(e) => {
                error.get_or_insert(e);
            }
        }

        Assessment {
            checks,
            plan: match error {
                Some(e) => Err(e),
                None => Ok(plan),
            },
            grpc_address,
            watch,
            kernel_state,
        }
    }

    fn containerd_plan(
        &self,
        validate: bool,
    ) -> Result<(containerd::Facts, containerd::Decision, Vec<String>), AgentError> {
        let cfg = &self.config.containerd;
        let owned = Ledger::load(&self.host)?.created_by(containerd::SPEC_OWNER);
        let facts = containerd::gather(&self.host, cfg, self.manager(), &owned)?;
        let host = &self.host;
        let decision = containerd::decide(&facts, cfg, &|p| host.path(p))?;
        let mut notes = Vec::new();
        let edited: Vec<String> = facts
            .set
            .files
            .iter()
            .map(|f| {
                decision
                    .plan
                    .changes
                    .iter()
                    .find(|c| c.path == f.path)
                    .and_then(|c| c.new.clone())
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_else(|| f.original.clone().unwrap_or_default())
            })
            .collect();
        let touches_config = decision
            .plan
            .changes
            .iter()
            .any(|c| facts.set.files.iter().any(|f| f.path == c.path));
        if validate && touches_config {
            match containerd::validate::validate(&cfg.binary, &edited, facts.set.version) {
                Ok(Validation::Passed(m)) | Ok(Validation::Skipped(m)) => notes.push(m),
                Err(e) => {
                    let current: Vec<String> = facts
                        .set
                        .files
                        .iter()
                        .map(|f| f.original.clone().unwrap_or_default())
                        .collect();
                    return Err(
                        match containerd::validate::current_fails(&cfg.binary, &current) {
                            Some(m) => ContainerdError::Validation(format!(
                                "containerd cannot read the current config either: {m}; fix it first, nothing was written"
                            )),
                            None => e,
                        }
                        .into(),
                    );
                }
            }
        }
        Ok((facts, decision, notes))
    }

    fn nfd_change(&self, checks: &[Check]) -> Result<Option<crate::plan::FileChange>, AgentError> {
        let cfg = &self.config.nfd;
        if !cfg.enabled {
            return Ok(None);
        }
        let current = self.host.read(&cfg.path)?.map(|d| d.bytes);
        Ok(nfd::decide(
            cfg,
            current,
            &nfd::labels(checks, &self.config),
        ))
    }

    pub fn check(&self) -> Report {
        Report::new(self.assess(false).checks)
    }

    pub fn plan(&self) -> Result<Plan, AgentError> {
        self.assess(true).plan
    }

    /// Converges the host. Live actions run only on the live root and when allowed.
    pub fn apply(&self, restart: bool) -> Result<ApplyOutcome, AgentError> {
        self.apply_unless(restart, &Holds::default())
    }

    /// Like `apply`, but refuses a plan that was rolled back before, so a failing
    /// change does not restart a service in a loop, and defers live actions that
    /// failed until their next try is due.
    pub fn apply_unless(&self, restart: bool, holds: &Holds) -> Result<ApplyOutcome, AgentError> {
        let _lock = lock::acquire(
            &self.host,
            Path::new(lock::LOCK_PATH),
            Duration::from_secs(10),
        )?;
        let assessment = self.assess(true);
        let plan = assessment.plan?;
        if let Some((digest, reason)) = &holds.plan {
            if !plan.is_empty() && plan.digest() == *digest {
                return Err(AgentError::HeldBack {
                    reason: reason.clone(),
                });
            }
        }
        let now = SystemTime::now();
        let mut ledger = Ledger::load(&self.host)?;
        ledger.apply(&self.host, &plan)?;

        let mut actions = Vec::new();
        let mut reloaded = false;
        for a in &plan.actions {
            let rdma_outcome = |(status, detail)| ActionOutcome {
                action: a.kind.to_string(),
                status,
                detail,
            };
            // Restarts have their own guard (verification, rollback, the plan hold).
            let hold = match a.kind {
                ActionKind::RestartUnit { .. } => None,
                _ => holds.deferred(&a.kind.to_string(), now),
            };
            if let Some(h) = hold {
                let wait = h.until.duration_since(now).unwrap_or_default().as_secs();
                actions.push(rdma_outcome((
                    "deferred",
                    format!(
                        "failed {} time(s) in a row; next try in {wait} s, or now with `systemctl reload rdma-node-agent` ({})",
                        h.failures, a.reason
                    ),
                )));
                continue;
            }
            let unit = match &a.kind {
                ActionKind::RestartUnit { unit } => unit,
                ActionKind::SetRdmaNetnsMode { mode } => {
                    actions.push(rdma_outcome(rdma::set_netns_mode(
                        &self.host,
                        &self.config.rdma,
                        *mode,
                        &a.reason,
                    )));
                    continue;
                }
                ActionKind::RebuildInitramfs { command } => {
                    actions.push(rdma_outcome(rdma::rebuild_initramfs(
                        &self.host,
                        self.manager(),
                        command,
                        &a.reason,
                    )));
                    continue;
                }
            };
            let skipped = |why: String| ActionOutcome {
                action: a.kind.to_string(),
                status: "skipped",
                detail: format!("{why} ({})", a.reason),
            };
            let manager = match self.manager() {
                _ if !self.host.is_live() => {
                    actions.push(skipped(format!(
                        "--root {} is not the live host",
                        self.host.root().display()
                    )));
                    continue;
                }
                _ if !restart => {
                    actions.push(skipped("--no-restart: restart it to take effect".into()));
                    continue;
                }
                None => {
                    actions.push(ActionOutcome {
                        action: a.kind.to_string(),
                        status: "pending",
                        detail: format!(
                            "systemd is not reachable over D-Bus: run `systemctl daemon-reload && systemctl restart {unit}` ({})",
                            a.reason
                        ),
                    });
                    continue;
                }
                Some(m) => m,
            };
            if !reloaded {
                manager.reload()?;
                reloaded = true;
            }
            match self.restart_verified(manager, unit, assessment.grpc_address.as_deref()) {
                Ok(()) => actions.push(ActionOutcome {
                    action: a.kind.to_string(),
                    status: "done",
                    detail: a.reason.clone(),
                }),
                Err(reason) => {
                    tracing::error!(unit = %unit, "restart failed, rolling back: {reason}");
                    ledger.rollback(&self.host, &plan)?;
                    manager.reload()?;
                    let after = match self.restart_verified(
                        manager,
                        unit,
                        assessment.grpc_address.as_deref(),
                    ) {
                        Ok(()) => "it is healthy again".to_owned(),
                        Err(e) => format!("it is still unhealthy: {e}"),
                    };
                    return Err(AgentError::RolledBack {
                        unit: unit.clone(),
                        reason,
                        after,
                        digest: plan.digest(),
                    });
                }
            }
        }
        // The run converged on this kernel: remember it, so a later kernel change shows.
        let mut notes = plan.notes.clone();
        if let Some(state) = &assessment.kernel_state {
            kernel::record(&self.host, state)?;
            if let Some(prev) = &state.previous {
                notes.push(format!(
                    "kernel changed from {prev} to {}: host preparation re-applied",
                    state.release
                ));
            }
        }
        let mut changed: Vec<PathBuf> = plan.changes.iter().map(|c| c.path.clone()).collect();
        // The labels were computed before this apply changed the node: refresh them.
        if !plan.changes.is_empty() {
            let after = self.assess(false);
            if let Some(c) = self.nfd_change(&after.checks)? {
                let labels = Plan {
                    changes: vec![c],
                    ..Plan::default()
                };
                ledger.apply(&self.host, &labels)?;
                changed.extend(labels.changes.into_iter().map(|c| c.path));
                changed.dedup();
            }
        }
        Ok(ApplyOutcome {
            changed,
            actions,
            notes,
        })
    }

    fn restart_verified(
        &self,
        manager: &dyn ServiceManager,
        unit: &str,
        grpc_address: Option<&Path>,
    ) -> Result<(), String> {
        let timeout = Duration::from_secs(self.config.daemon.restart_timeout_secs);
        manager.restart(unit, timeout).map_err(|e| e.to_string())?;
        match (unit, grpc_address) {
            (containerd::UNIT, Some(addr)) => {
                containerd::verify(&self.host, manager, addr, timeout)
            }
            _ => match manager.status(unit) {
                Ok(s) if s.active_state == "active" => Ok(()),
                Ok(s) => Err(format!("{unit} is {}", s.active_state)),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    /// Restores every file the agent changed, then restarts the units that read
    /// them (on the live host) so the node runs as it did before the agent.
    pub fn revert(&self, force: bool) -> Result<RevertResult, AgentError> {
        let _lock = lock::acquire(
            &self.host,
            Path::new(lock::LOCK_PATH),
            Duration::from_secs(10),
        )?;
        let ledger = Ledger::load(&self.host)?;
        let unit_of: Vec<(PathBuf, Option<String>)> = ledger
            .files
            .iter()
            .map(|(p, o)| (p.clone(), unit_reading(p, &o.owner)))
            .collect();
        let files = ledger.revert(&self.host, force)?;
        let mut units: Vec<String> = unit_of
            .into_iter()
            .filter(|(p, _)| files.restored.contains(p) || files.removed.contains(p))
            .filter_map(|(_, u)| u)
            .collect();
        units.sort();
        units.dedup();
        let mut actions = Vec::new();
        for unit in units {
            let action = format!("restart {unit}");
            let outcome = match self.manager() {
                _ if !self.host.is_live() => ("skipped", "not the live host".to_owned()),
                None => (
                    "pending",
                    format!(
                        "systemd is not reachable: run `systemctl daemon-reload && systemctl restart {unit}`"
                    ),
                ),
                Some(m) => {
                    match m.reload().map_err(|e| e.to_string()).and_then(|_| {
                        self.restart_verified(m, &unit, self.grpc_address().as_deref())
                    }) {
                        Ok(()) => ("done", "runs with its original configuration".to_owned()),
                        Err(e) => ("failed", e),
                    }
                }
            };
            actions.push(ActionOutcome {
                action,
                status: outcome.0,
                detail: outcome.1,
            });
        }
        Ok(RevertResult { files, actions })
    }

    fn grpc_address(&self) -> Option<PathBuf> {
        containerd::gather(
            &self.host,
            &self.config.containerd,
            None,
            &Default::default(),
        )
        .ok()
        .map(|f| f.grpc_address)
    }
}

/// The unit that reads a file the agent owns, so a revert knows what to restart.
fn unit_reading(path: &Path, owner: &str) -> Option<String> {
    match owner {
        "containerd" | containerd::SPEC_OWNER => Some(containerd::UNIT.to_owned()),
        "systemd" => path
            .parent()?
            .file_name()?
            .to_str()?
            .strip_suffix(".d")
            .map(str::to_owned),
        _ => None,
    }
}

#[derive(Debug, Serialize)]
pub struct RevertResult {
    #[serde(flatten)]
    pub files: RevertOutcome,
    pub actions: Vec<ActionOutcome>,
}
