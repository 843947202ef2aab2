//! `containerd.memlock` as a concern: the engine's view of this module.

use std::sync::Arc;

use super::effects::{ConfigPreflight, CriProbe};
use super::{CHECK_ID, Facts, SPEC_OWNER, check, decide, gather};
use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError, Provides};
use crate::engine::ledger::Ledger;
use crate::host::read::ReadHost;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, ObservationKind};
use crate::reason::Reason;

pub struct Memlock;

pub struct Gathered {
    facts: Facts,
    /// For paths in messages only (where a file is under `--root`).
    host: ReadHost,
    /// `memlock_via` leaves memlock to the NRI plugin: why (no base spec planned).
    nri_route: Option<String>,
}

impl Concern for Memlock {
    type Facts = Gathered;

    fn reasons(&self) -> &'static [Reason] {
        crate::concerns::containerd::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    /// When the running containerd read its config (`pods.memlock` reads it).
    fn provides(&self) -> &'static [Provides] {
        const PROVIDES: &[Provides] = &[Provides::new(ObservationKind::Containerd, CHECK_ID)];
        PROVIDES
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.containerd.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    /// A config containerd cannot read is itself the failure, so errors here fail.
    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Gathered, GatherError> {
        let owned = Ledger::load(snap)
            .map_err(|e| GatherError::fail(e).with_reason(Reason::AGENT_STATE_UNREADABLE))?
            .created_by(SPEC_OWNER);
        let facts =
            gather(snap, &cfg.containerd, snap.manager(), &owned).map_err(|e| GatherError {
                status: e.status(cfg.containerd.required),
                message: e.to_string(),
                reason: Some(e.reason()),
            })?;
        let via = cfg.containerd.memlock_via;
        let nri_route = (!cfg.containerd.base_spec_route(snap)).then(|| {
            format!(
                "memlock_via = \"{}\": new RDMA containers get memlock from the agent's NRI plugin (containerd.nri), so no base spec is planned",
                via.as_str()
            )
        });
        Ok(Gathered {
            facts,
            host: (*snap).clone(),
            nri_route,
        })
    }

    fn decide(&self, g: &Gathered, ctx: &Ctx) -> Decision {
        let cfg = &ctx.config.containerd;
        let f = &g.facts;
        let mut d = Decision {
            watch: f.watched_files(),
            // Until containerd restarts, every new container gets the old spec.
            observations: vec![Observation::Containerd {
                current_since: f
                    .containerd_started
                    .clone()
                    .ok()
                    .flatten()
                    .filter(|_| f.restart_pending() == Ok(false))
                    .map(|s| s.at),
                grpc_address: f.grpc_address.clone(),
            }],
            verify: vec![(
                f.unit.clone(),
                Arc::new(CriProbe {
                    grpc_address: f.grpc_address.clone(),
                    ctr: f.ctr.clone(),
                }),
            )],
            ..Decision::default()
        };
        d.observations.extend(super::nri::base_spec_observations(f));
        if let Some(why) = &g.nri_route {
            d.checks.push(crate::engine::check::Check::new(
                CHECK_ID,
                crate::engine::check::Status::Skipped,
                why.clone(),
            ));
            return d;
        }
        let decision = match decide(f, cfg, &|p| g.host.path(p)) {
            Ok(x) => x,
            Err(e) => {
                d.checks.push(check(Some(f), &Err(&e), cfg));
                d.blocked = Some(e.to_string());
                return d;
            }
        };
        d.checks.push(check(Some(f), &Ok(decision.clone()), cfg));
        let touches_config = decision
            .plan
            .changes
            .iter()
            .any(|c| f.set.files.iter().any(|file| file.path == c.path));
        if touches_config {
            d.preflight.push(Arc::new(ConfigPreflight {
                binary: f.binary.clone(),
                candidate: f
                    .set
                    .files
                    .iter()
                    .map(|file| {
                        decision
                            .plan
                            .changes
                            .iter()
                            .find(|c| c.path == file.path)
                            .and_then(|c| c.new.clone())
                            .map(|b| String::from_utf8_lossy(&b).into_owned())
                            .unwrap_or_else(|| file.original.clone().unwrap_or_default())
                    })
                    .collect(),
                current: f
                    .set
                    .files
                    .iter()
                    .map(|file| file.original.clone().unwrap_or_default())
                    .collect(),
                version: f.set.version,
            }));
        }
        d.changes = decision.plan.changes;
        d.actions = decision.plan.actions;
        d.notes = decision.plan.notes;
        d
    }
}
