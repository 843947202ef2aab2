//! The composition root: the registered concerns, what the live host can
//! do, and the commands (`check`, `plan`, `apply`, `revert`) as one engine pass
//! followed by the executor.

mod live;

pub use live::Connection;

use std::sync::Arc;
use std::time::Duration;

use crate::concerns;
use crate::config::Config;
use crate::engine::check::Report;
use crate::engine::executor::{ApplyOutcome, ExecError, Executor, Live, RevertResult};
use crate::engine::holds::Holds;
use crate::engine::plan::Plan;
use crate::engine::{self, Assessment, PlanError, Scope};
use crate::host::Host;
use crate::host::own::OwnPaths;
use crate::host::snapshot::Snapshot;
use crate::host::stop::Stop;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Exec(#[from] ExecError),
}

pub struct Agent {
    pub host: Host,
    pub config: Config,
    /// The live host's capabilities; `None` for a tree under `--root`.
    pub live: Option<Arc<Live>>,
    /// Set when the daemon is asked to stop: waits end, files stay consistent.
    pub stop: Stop,
    /// Why systemd could not be asked, on a live host without its bus.
    pub manager_error: Option<String>,
    /// The daemon's NRI plugin state (`None` outside the daemon).
    pub nri: Option<std::sync::Arc<crate::host::nri::State>>,
}

/// The files the agent writes whole, which it never reads or writes through a
/// link (`host::own`): its drop-in in every unit's directory, its modprobe
/// options, its base spec, the NFD feature file.
fn own_paths(cfg: &Config) -> OwnPaths {
    OwnPaths::default()
        .dropin("/etc/systemd/system", cfg.systemd.dropin.as_str())
        .file(&cfg.rdma.modprobe_file)
        .file(&cfg.containerd.base_spec_path)
        .file(&cfg.nfd.path)
}

impl Agent {
    /// On a tree: checks and plans, no live action.
    pub fn new(host: Host, config: Config) -> Self {
        Agent {
            host: host.with_own_paths(own_paths(&config)),
            config,
            live: None,
            stop: Stop::new(),
            manager_error: None,
            nri: None,
        }
    }

    /// On the live host: with systemd, RDMA netlink and host programs.
    pub fn live(host: Host, config: Config) -> Self {
        let c = Connection::open(&host);
        Agent::connected(host, config, &c)
    }

    /// On the live host, through a connection kept across cycles (the daemon's:
    /// one bus connection for its whole life).
    pub fn connected(host: Host, config: Config, c: &Connection) -> Self {
        // Where this process may not chown (the unit), systemd does it.
        let host = match (&c.live.manager, host.which("chown")) {
            (Some(m), Some(chown)) => host.with_chown_helper(Arc::new(live::SystemdChown {
                manager: m.clone(),
                chown,
            })),
            _ => host,
        };
        Agent {
            live: Some(c.live.clone()),
            manager_error: c.error.clone(),
            ..Agent::new(host, config)
        }
    }

    /// With the given capabilities (a test's fakes, on a tree).
    pub fn with_live(host: Host, config: Config, live: Live) -> Self {
        Agent {
            live: Some(Arc::new(live)),
            ..Agent::new(host, config)
        }
    }

    /// This cycle's view of the host.
    fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::new(self.host.clone());
        if let Some(nri) = &self.nri {
            snap = snap.with_nri(nri.status());
        }
        match self.live.as_ref().and_then(|l| l.manager.clone()) {
            Some(m) => snap.with_manager(m),
            None => match &self.manager_error {
                Some(e) => snap.with_manager_error(e.clone()),
                None => snap,
            },
        }
    }

    /// Checks and plan. `validate`: have containerd itself check edited configs
    /// (a process spawn, ~20 ms): needed before writing, not to report.
    pub fn assess(&self, scope: Scope, validate: bool) -> Assessment {
        engine::assess(
            &self.snapshot(),
            &self.config,
            concerns::ALL,
            scope,
            validate,
        )
    }

    /// The checks; with `only`, only those checks' concerns run.
    pub fn check(&self, only: &[String]) -> Report {
        let scope = if only.is_empty() {
            Scope::All
        } else {
            Scope::Only(only)
        };
        Report::new(self.assess(scope, false).checks)
    }

    pub fn plan(&self) -> Result<Plan, AgentError> {
        Ok(self.assess(Scope::All, true).plan?)
    }

    fn executor(&self) -> Executor<'_> {
        Executor {
            host: &self.host,
            live: self.live.as_deref(),
            restart_timeout: Duration::from_secs(self.config.daemon.restart_timeout_secs),
            stop: &self.stop,
            legacy_readers: concerns::legacy_readers,
        }
    }

    /// Converges the host.
    pub fn apply(&self, restart: bool) -> Result<ApplyOutcome, AgentError> {
        self.apply_unless(restart, &Holds::default())
    }

    /// Like `apply`, but refuses a plan that was rolled back before, so a failing
    /// change does not restart a service in a loop, and defers live actions that
    /// failed until their next try is due.
    pub fn apply_unless(&self, restart: bool, holds: &Holds) -> Result<ApplyOutcome, AgentError> {
        let plan = self.assess(Scope::All, true).plan?;
        self.execute(&plan, restart, holds)
    }

    /// Carries out a plan made by `assess` (with validation).
    pub fn execute(
        &self,
        plan: &Plan,
        restart: bool,
        holds: &Holds,
    ) -> Result<ApplyOutcome, AgentError> {
        let ex = self.executor();
        let mut out = ex.apply(plan, restart, holds)?;
        // The labels summarise checks made before this apply changed the node:
        // once it did, label it as it is now.
        if !plan.changes.is_empty() {
            let after = self.assess(Scope::All, false);
            if let Ok(p) = after.plan {
                let labels = Plan {
                    changes: p
                        .changes
                        .into_iter()
                        .filter(|c| after.summaries.contains(&c.path))
                        .collect(),
                    ..Plan::default()
                };
                if !labels.changes.is_empty() {
                    ex.apply(&labels, restart, holds)?;
                    for c in &labels.changes {
                        if !out.changed.contains(&c.path) {
                            out.changed.push(c.path.clone());
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Restores every file the agent changed, then restarts the units that read them.
    pub fn revert(&self, force: bool) -> Result<RevertResult, AgentError> {
        let verify = match self.assess(Scope::All, false).plan {
            Ok(p) => p.verify,
            Err(_) => Vec::new(),
        };
        let mut out = self.executor().revert(force, &verify)?;
        // Then what concerns changed beyond files (ACS registers), from their records.
        let snap = self.snapshot();
        let undo: Vec<_> = concerns::ALL
            .iter()
            .flat_map(|c| c.undo(&snap, &self.config))
            .collect();
        out.actions.extend(self.executor().run_undo(&undo));
        Ok(out)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
