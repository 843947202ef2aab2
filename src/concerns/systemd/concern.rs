//! `systemd.memlock` as a concern.

use super::dropin::{CHECK_ID, UnitFacts, check, decide, gather};
use crate::config::Config;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::snapshot::Snapshot;

pub struct Memlock;

impl Concern for Memlock {
    type Facts = Vec<UnitFacts>;

    fn ids(&self) -> &'static [&'static str] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.systemd.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Vec<UnitFacts>, GatherError> {
        gather(snap, &cfg.systemd, snap.manager()).map_err(GatherError::unknown)
    }

    fn decide(&self, facts: &Vec<UnitFacts>, ctx: &Ctx) -> Decision {
        let cfg = &ctx.config.systemd;
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
