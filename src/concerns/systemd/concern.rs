//! `systemd.memlock` as a concern.

use super::dropin::{CHECK_ID, UnitFacts, check, decide, gather};
use crate::config::{Config, SystemdConfig};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::snapshot::Snapshot;

pub struct Memlock;

/// The units this cycle works on (the configured ones, with containerd's own
/// unit, as the containerd concern detects it, in place of the default
/// containerd.service: k3s, rke2 and microk8s run containerd from their own unit).
pub struct Units {
    cfg: SystemdConfig,
    facts: Vec<UnitFacts>,
}

impl Concern for Memlock {
    type Facts = Units;

    fn ids(&self) -> &'static [&'static str] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.systemd.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Units, GatherError> {
        let mut scfg = cfg.systemd.clone();
        if scfg.units == SystemdConfig::default().units && cfg.containerd.enabled {
            if let Ok(unit) = crate::concerns::containerd::layout::containerd_unit(
                snap,
                &cfg.containerd,
                snap.manager(),
            ) {
                scfg.units = vec![unit];
            }
        }
        let facts = gather(snap, &scfg, snap.manager()).map_err(GatherError::unknown)?;
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
