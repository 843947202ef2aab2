//! `systemd.memlock` as a concern.

use super::dropin::{CHECK_ID, UnitFacts, check, decide, gather};
use crate::config::{Config, SystemdConfig};
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::runtime::Discovery;
use crate::host::snapshot::Snapshot;
use crate::reason::Reason;

pub struct Memlock;

/// The unit this cycle works on: the one that runs containerd, as the snapshot
/// found it (k3s, rke2 and microk8s run containerd from their own unit).
pub struct Units {
    cfg: SystemdConfig,
    facts: Vec<UnitFacts>,
}

impl Concern for Memlock {
    type Facts = Units;

    fn reasons(&self) -> &'static [Reason] {
        crate::concerns::systemd::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.systemd.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Units, GatherError> {
        // The NRI route raises memlock per container: containerd's own limit
        // (and the restart it takes) stays as it is.
        if !cfg.containerd.base_spec_route(snap) {
            return Err(GatherError::skipped(format!(
                "memlock_via = \"{}\": containerd's LimitMEMLOCK is left as it is (no restart); the agent's NRI plugin gives RDMA containers memlock (containerd.nri)",
                cfg.containerd.memlock_via.as_str()
            )));
        }
        // The unit that runs containerd: the one fact every concern follows.
        let unit = match snap.containerd(&cfg.containerd.hints()) {
            Discovery::Found(c) => (c.unit.clone(), c.pid.ok_or(c.pid_unknown.clone())),
            Discovery::Absent { looked_for } if !cfg.containerd.required => {
                return Err(GatherError::skipped(format!(
                    "no containerd on this node: {looked_for}"
                )));
            }
            Discovery::Absent { looked_for } => {
                return Err(GatherError::fail(format!(
                    "containerd.required is set, but there is no containerd on this node: {looked_for}"
                ))
                .with_reason(Reason::CONTAINERD_ABSENT));
            }
            Discovery::Unknown(why) => return Err(GatherError::unknown(why.clone())),
        };
        let scfg = cfg.systemd.clone();
        let facts = gather(snap, &scfg, &[unit], snap.manager()).map_err(GatherError::unknown)?;
        Ok(Units { cfg: scfg, facts })
    }

    fn decide(&self, units: &Units, _ctx: &Ctx) -> Decision {
        let (cfg, facts) = (&units.cfg, &units.facts);
        let plan = decide(facts, cfg);
        Decision {
            checks: vec![check(facts, cfg)],
            changes: plan.changes,
            actions: plan.actions,
            watch: facts.iter().map(|f| f.path.clone()).collect(),
            ..Decision::default()
        }
    }
}
