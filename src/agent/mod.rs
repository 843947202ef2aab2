//! The composition root: which concerns run (in order), what the live host can
//! do, and the commands (`check`, `plan`, `apply`, `revert`) as one engine pass
//! followed by the executor.

mod live;

use std::time::Duration;

use crate::concerns::containerd;
use crate::concerns::fleet;
use crate::concerns::gpudirect;
use crate::concerns::kernel;
use crate::concerns::pods;
use crate::concerns::rdma;
use crate::concerns::readiness;
use crate::concerns::reboot;
use crate::concerns::systemd;
use crate::config::Config;
use crate::engine::check::Report;
use crate::engine::concern::Run;
use crate::engine::executor::{ApplyOutcome, ExecError, Executor, Live, RevertResult};
use crate::engine::holds::Holds;
use crate::engine::plan::{Plan, Preflight};
use crate::engine::{self, Assessment, PlanError, Preflights, Scope};
use crate::host::Host;
use crate::host::snapshot::Snapshot;
use crate::host::stop::Stop;
use crate::outputs::nfd;

/// Every concern, in the order they run: one registers with one line. A
/// concern may read the observations of those before it (pods reads
/// containerd's; the reboot sentinel the RDMA and kernel ones'; NFD every check).
pub static CONCERNS: &[&dyn Run] = &[
    &containerd::concern::Memlock,
    &systemd::concern::Memlock,
    &pods::Memlock,
    &readiness::pods_rdma::PodsRdma,
    &rdma::concern::Devices,
    &rdma::link::Link,
    &gpudirect::Path,
    &readiness::kubelet::Kubelet,
    &rdma::concern::Netns,
    &kernel::concern::Kernel,
    &fleet::Export,
    &reboot::Sentinel,
    &nfd::Labels,
];

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
    pub live: Option<Live>,
    /// Set when the daemon is asked to stop: waits end, files stay consistent.
    pub stop: Stop,
    /// Why systemd could not be asked, on a live host without its bus.
    pub manager_error: Option<String>,
}

/// containerd's own parser, run on edited configs before they are written.
struct ContainerdPreflight;

impl Preflights for ContainerdPreflight {
    fn run(&self, p: &Preflight) -> Result<String, String> {
        containerd::concern::preflight(p)
    }
}

impl Agent {
    /// On a tree: checks and plans, no live action.
    pub fn new(host: Host, config: Config) -> Self {
        Agent {
            host,
            config,
            live: None,
            stop: Stop::new(),
            manager_error: None,
        }
    }

    /// On the live host: with systemd, containerd's CRI probe and RDMA netlink.
    pub fn live(host: Host, config: Config) -> Self {
        let (live, manager_error) = live::connect(&host, &config.rdma);
        // Where this process may not chown (the unit), systemd does it.
        let host = match (&live.manager, host.which("chown")) {
            (Some(m), Some(chown)) => {
                host.with_chown_helper(std::sync::Arc::new(live::SystemdChown {
                    manager: m.clone(),
                    chown,
                }))
            }
            _ => host,
        };
        Agent {
            live: Some(live),
            manager_error,
            ..Agent::new(host, config)
        }
    }

    /// With the given capabilities (a test's fakes, on a tree).
    pub fn with_live(host: Host, config: Config, live: Live) -> Self {
        Agent {
            live: Some(live),
            ..Agent::new(host, config)
        }
    }

    /// This cycle's view of the host.
    fn snapshot(&self) -> Snapshot {
        let snap = Snapshot::new(self.host.clone());
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
            CONCERNS,
            scope,
            validate.then_some(&ContainerdPreflight as &dyn Preflights),
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
            live: self.live.as_ref(),
            restart_timeout: Duration::from_secs(self.config.daemon.restart_timeout_secs),
            stop: &self.stop,
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
        if !plan.changes.is_empty() && self.config.nfd.enabled {
            if let Ok(after) = self.assess(Scope::All, false).plan {
                let labels = Plan {
                    changes: after
                        .changes
                        .into_iter()
                        .filter(|c| c.path == self.config.nfd.path)
                        .collect(),
                    ..Plan::default()
                };
                if !labels.changes.is_empty() {
                    ex.apply(&labels, restart, holds)?;
                    out.changed.push(self.config.nfd.path.clone());
                    out.changed.dedup();
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
        Ok(self.executor().revert(force, &verify)?)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
