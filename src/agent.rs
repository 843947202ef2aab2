//! Runs every concern over one host: gather facts, decide, report checks, plan,
//! apply through the ledger, revert.

use std::path::PathBuf;

use serde::Serialize;

use crate::check::{Check, Report, Status};
use crate::config::Config;
use crate::containerd::{self, ContainerdError, validate::Validation};
use crate::host::{Host, HostError};
use crate::ledger::{Ledger, LedgerError, RevertOutcome};
use crate::plan::{ActionKind, Plan};
use crate::pods;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Containerd(#[from] ContainerdError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Host(#[from] HostError),
}

pub struct Agent {
    pub host: Host,
    pub config: Config,
}

/// One pass over the host: what every concern found and what it would change.
pub struct Assessment {
    pub checks: Vec<Check>,
    pub plan: Result<Plan, AgentError>,
}

#[derive(Debug, Serialize)]
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

impl Agent {
    pub fn new(host: Host, config: Config) -> Self {
        Agent { host, config }
    }

    pub fn assess(&self) -> Assessment {
        let mut checks = Vec::new();
        let mut plan = Plan::default();
        let mut error: Option<AgentError> = None;

        let cfg = &self.config.containerd;
        if cfg.enabled {
            match self.containerd_plan() {
                Ok((facts, decision, notes)) => {
                    checks.push(containerd::check(Some(&facts), &Ok(decision.clone()), cfg));
                    plan.extend(decision.plan);
                    plan.notes.extend(notes);
                }
                Err(e) => {
                    checks.push(containerd::check(None, &Err(e.to_string()), cfg));
                    error = Some(e);
                }
            }
        } else {
            checks.push(containerd::check(None, &Err(String::new()), cfg));
        }

        checks.push(match pods::gather(&self.host) {
            Ok(procs) => pods::check(&procs, cfg.memlock, self.config.pods.below_target),
            Err(e) => Check::new(pods::CHECK_ID, Status::Unknown, e.to_string()),
        });

        Assessment {
            checks,
            plan: match error {
                Some(e) => Err(e),
                None => Ok(plan),
            },
        }
    }

    fn containerd_plan(
        &self,
    ) -> Result<(containerd::Facts, containerd::Decision, Vec<String>), AgentError> {
        let cfg = &self.config.containerd;
        let facts = containerd::gather(&self.host, cfg)?;
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
        if touches_config {
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

    pub fn check(&self) -> Report {
        Report::new(self.assess().checks)
    }

    pub fn plan(&self) -> Result<Plan, AgentError> {
        self.assess().plan
    }

    /// Converges the host. Live actions run only on the live root and when allowed.
    pub fn apply(&self, restart: bool) -> Result<ApplyOutcome, AgentError> {
        let plan = self.plan()?;
        let mut ledger = Ledger::load(&self.host)?;
        ledger.apply(&self.host, &plan)?;
        let actions = plan
            .actions
            .iter()
            .map(|a| {
                let (status, detail) = if !self.host.is_live() {
                    (
                        "skipped",
                        format!("--root {} is not the live host", self.host.root().display()),
                    )
                } else if !restart {
                    ("skipped", "--no-restart".to_owned())
                } else {
                    match &a.kind {
                        ActionKind::RestartUnit { unit } => (
                            "pending",
                            format!("restart it to take effect: systemctl restart {unit}"),
                        ),
                    }
                };
                ActionOutcome {
                    action: a.kind.to_string(),
                    status,
                    detail: format!("{detail} ({})", a.reason),
                }
            })
            .collect();
        Ok(ApplyOutcome {
            changed: plan.changes.iter().map(|c| c.path.clone()).collect(),
            actions,
            notes: plan.notes,
        })
    }

    pub fn revert(&self, force: bool) -> Result<RevertOutcome, AgentError> {
        Ok(Ledger::load(&self.host)?.revert(&self.host, force)?)
    }
}
