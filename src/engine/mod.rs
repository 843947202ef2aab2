//! The engine: runs the registered concerns over one host snapshot and merges
//! their decisions into checks, observations and one plan; the executor then
//! carries the plan out.
//!
//! ```text
//! host snapshot ─▶ concerns (gather → decide) ─▶ checks + observations + plan
//!                                                   │            │
//!                                   outputs ◀───────┘            ▼
//!                     (CLI, /status, metrics, labels)        executor ─▶ ledger, restarts, effects
//! ```

pub mod check;
pub mod concern;
pub mod effect;
pub mod executor;
#[cfg(test)]
pub mod fakes;
pub mod holds;
pub mod ledger;
mod needs;

pub mod outcome;
pub mod plan;

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::config::Config;
use crate::engine::check::{Check, CheckId, Status};
use crate::engine::plan::Plan;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, ObservationKind};
use crate::reason::Reason;
use concern::{Ctx, Decision, GatherError, Run};
use needs::{need_checks, selected, unknown_needs};

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A concern that owns files could not establish its facts, or refused.
    #[error("{0}")]
    Blocked(String),
    /// An edited file did not pass its preflight check; nothing was written.
    #[error("{0}")]
    Preflight(String),
}

/// One pass over the host.
pub struct Assessment {
    pub checks: Vec<Check>,
    pub observations: Vec<Observation>,
    pub plan: Result<Plan, PlanError>,
    /// Files whose change should trigger a new reconcile.
    pub watch: Vec<PathBuf>,
    /// Files that summarise the checks (node labels): planned again after an
    /// apply changed the node.
    pub summaries: Vec<PathBuf>,
}

/// What to assess.
#[derive(Debug, Clone, Copy, Default)]
pub enum Scope<'a> {
    /// Every concern, and the plan.
    #[default]
    All,
    /// Only the concerns these checks need (`check --only`); no plan.
    Only(&'a [String]),
}

pub fn assess(
    snap: &Snapshot,
    config: &Config,
    concerns: &[&dyn Run],
    scope: Scope,
    validate: bool,
) -> Assessment {
    let keep = match scope {
        Scope::All => vec![true; concerns.len()],
        Scope::Only(ids) => selected(concerns, ids),
    };
    let mut pass = Pass {
        needed: concerns.iter().flat_map(|c| c.needs()).copied().collect(),
        ..Pass::default()
    };
    for (i, (c, _)) in concerns
        .iter()
        .zip(&keep)
        .enumerate()
        .filter(|(_, (_, k))| **k)
    {
        if !c.enabled(config) {
            pass.checks.extend(
                c.ids()
                    .iter()
                    .map(|id| Check::new(*id, Status::Skipped, "disabled in the agent config")),
            );
            continue;
        }
        if pass.needs_unknown(*c, &need_checks(&concerns[..i], *c)) {
            continue;
        }
        let ctx = Ctx {
            config,
            checks: &pass.checks,
            observations: &pass.observations,
        };
        match c.run(snap, &ctx) {
            Ok(d) => pass.decided(*c, d),
            Err(e) => pass.not_gathered(*c, e),
        }
    }
    let Pass {
        checks,
        observations,
        plan,
        watch,
        summaries,
        blocked,
        ..
    } = pass;
    let plan = match blocked {
        Some(why) => Err(PlanError::Blocked(why)),
        None if validate => run_preflights(plan),
        None => Ok(plan),
    };
    Assessment {
        checks,
        observations,
        plan,
        watch,
        summaries,
    }
}

/// What one pass over the concerns has gathered so far, in their order.
#[derive(Default)]
struct Pass {
    checks: Vec<Check>,
    observations: Vec<Observation>,
    plan: Plan,
    watch: Vec<PathBuf>,
    summaries: Vec<PathBuf>,
    /// Why the plan cannot be carried out (the first writer that said so).
    blocked: Option<String>,
    /// Check ids of the concerns whose gather failed: they left no observations.
    not_gathered: BTreeSet<CheckId>,
    /// Every kind of observation some concern of the list needs.
    needed: Vec<ObservationKind>,
}

impl Pass {
    /// What a concern reads of others is not known: neither is its verdict,
    /// and nothing is planned from it. Returns whether that is so.
    fn needs_unknown(&mut self, c: &dyn Run, needs: &[Result<CheckId, ObservationKind>]) -> bool {
        let unknown = unknown_needs(needs, &self.checks, &self.not_gathered);
        if unknown.is_empty() {
            return false;
        }
        let why = unknown.join("; ");
        self.checks.extend(c.ids().iter().map(|id| {
            Check::new(
                *id,
                Status::Unknown,
                format!("not established: it reads {why}"),
            )
            .with_reason(Reason::DEPENDENCY_UNKNOWN)
        }));
        if c.writes() {
            self.plan.notes.push(format!(
                "nothing planned by the concern that reads {}: {why}",
                needs
                    .iter()
                    .map(|n| match n {
                        Ok(id) => id.to_string(),
                        Err(kind) => kind.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        true
    }

    fn decided(&mut self, c: &dyn Run, d: Decision) {
        // A kind a later concern needs is declared by its maker, or the
        // reader's dependency rule would not see it.
        debug_assert!(
            d.observations
                .iter()
                .map(Observation::kind)
                .filter(|k| self.needed.contains(k))
                .all(|k| c.provides().iter().any(|p| p.kind == k)),
            "{:?} makes observations a concern needs without declaring them in provides()",
            c.ids()
        );
        self.checks.extend(d.checks);
        self.observations.extend(d.observations);
        self.watch.extend(d.watch);
        if let Some(why) = d.blocked {
            self.blocked.get_or_insert(why);
        }
        if c.summarises() {
            self.summaries
                .extend(d.changes.iter().map(|f| f.path.clone()));
        }
        self.plan.extend(Plan {
            changes: d.changes,
            actions: d.actions,
            notes: d.notes,
            verify: d.verify,
            preflight: d.preflight,
            records: d.records,
        });
    }

    fn not_gathered(&mut self, c: &dyn Run, e: GatherError) {
        if e.status != Status::Skipped {
            self.not_gathered.extend(c.ids());
        }
        self.checks.extend(
            c.ids()
                .iter()
                .map(|id| Check::new(*id, e.status, e.message.clone()).with_reason(e.reason())),
        );
        // Nothing to act on (skipped) blocks nothing; a writer that
        // could not tell what to write blocks the whole plan.
        if c.writes() && e.status != Status::Skipped {
            self.blocked.get_or_insert(e.message);
        }
    }
}

/// Each preflight of the plan (they may spawn programs: only before writing).
fn run_preflights(mut plan: Plan) -> Result<Plan, PlanError> {
    let checks = plan.preflight.clone();
    for check in checks {
        plan.notes.push(
            check
                .check()
                .map_err(|e| PlanError::Preflight(e.to_string()))?,
        );
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::concern::{Concern, Decision, GatherError, Provides};
    use super::*;
    use crate::host::Host;

    /// A concern whose facts are given; `needs` names a kind another provides.
    const A: &[CheckId] = &[CheckId::new("a")];
    const BASE: &[CheckId] = &[CheckId::new("base")];
    const DEVICES: &[CheckId] = &[CheckId::new("devices")];
    const OFF: &[CheckId] = &[CheckId::new("off")];
    const OTHER: &[CheckId] = &[CheckId::new("other")];
    const R1_R2: &[CheckId] = &[CheckId::new("r1"), CheckId::new("r2")];
    const READER: &[CheckId] = &[CheckId::new("reader")];
    const TOP: &[CheckId] = &[CheckId::new("top")];
    const W: &[CheckId] = &[CheckId::new("w")];
    const WRITER: &[CheckId] = &[CheckId::new("writer")];
    /// What "base" makes for "top": a type of its own.
    #[derive(Debug, PartialEq)]
    struct BaseSeen;
    const PORTS: &[ObservationKind] = &[ObservationKind::Port];
    const BASE_SEEN: &[ObservationKind] = &[ObservationKind::own::<BaseSeen>()];
    const DEVICES_PORTS: &[Provides] = &[Provides::new(ObservationKind::Port, DEVICES[0])];
    const OFF_PORTS: &[Provides] = &[Provides::new(ObservationKind::Port, OFF[0])];
    const BASE_MAKES: &[Provides] = &[Provides::new(BASE_SEEN[0], BASE[0])];
    const OTHER_PORTS: &[Provides] = &[Provides::new(ObservationKind::Port, OTHER[0])];

    struct Fixed {
        ids: &'static [CheckId],
        needs: &'static [ObservationKind],
        provides: &'static [Provides],
        facts: Result<u32, GatherError>,
        writes: bool,
    }

    impl Concern for Fixed {
        type Facts = u32;

        fn reasons(&self) -> &'static [Reason] {
            &[]
        }
        fn ids(&self) -> &'static [CheckId] {
            self.ids
        }
        fn needs(&self) -> &'static [ObservationKind] {
            self.needs
        }
        fn provides(&self) -> &'static [Provides] {
            self.provides
        }
        fn enabled(&self, _cfg: &Config) -> bool {
            self.ids != OFF
        }
        fn writes(&self) -> bool {
            self.writes
        }
        fn gather(&self, _s: &Snapshot, _c: &Config) -> Result<u32, GatherError> {
            self.facts.clone()
        }
        fn decide(&self, n: &u32, ctx: &Ctx) -> Decision {
            // Sees every check registered before it.
            let msg = format!("{n} after {}", ctx.checks.len());
            Decision {
                checks: self
                    .ids
                    .iter()
                    .map(|id| Check::new(*id, Status::Ok, msg.clone()))
                    .collect(),
                ..Decision::default()
            }
        }
    }

    fn fixed(ids: &'static [CheckId], facts: Result<u32, GatherError>) -> Fixed {
        Fixed {
            ids,
            needs: &[],
            provides: &[],
            facts,
            writes: false,
        }
    }

    #[test]
    fn disabled_and_failed_concerns_are_handled_once_here() {
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(Host::new(t.path()));
        let a = fixed(A, Ok(1));
        let off = fixed(OFF, Ok(2));
        let reader = fixed(R1_R2, Err(GatherError::unknown("no /proc")));
        let mut writer = fixed(W, Err(GatherError::fail("bad TOML")));
        writer.writes = true;
        let list: [&dyn Run; 4] = [&a, &off, &reader, &writer];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        let got: Vec<(&str, Status, &str)> = out
            .checks
            .iter()
            .map(|c| (c.id.as_str(), c.status, c.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", Status::Ok, "1 after 0"),
                ("off", Status::Skipped, "disabled in the agent config"),
                ("r1", Status::Unknown, "no /proc"),
                ("r2", Status::Unknown, "no /proc"),
                ("w", Status::Fail, "bad TOML"),
            ]
        );
        // Only a concern that owns files blocks the plan.
        assert!(
            matches!(&out.plan, Err(PlanError::Blocked(m)) if m == "bad TOML"),
            "{:?}",
            out.plan
        );
        let list: [&dyn Run; 2] = [&a, &reader];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        assert!(out.plan.is_ok());
    }

    /// A concern that reads another's facts says nothing when they are not
    /// known: before, it decided from no observations ("0 of 0 ACTIVE": ok).
    #[test]
    fn a_need_that_is_unknown_or_not_gathered_makes_the_reader_unknown() {
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(Host::new(t.path()));
        let mut failed = fixed(DEVICES, Err(GatherError::fail("no sysfs")));
        failed.provides = DEVICES_PORTS;
        let mut reader = fixed(READER, Ok(1));
        reader.needs = PORTS;
        let list: [&dyn Run; 2] = [&failed, &reader];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        let c = &out.checks[1];
        assert_eq!((c.id.as_str(), c.status), ("reader", Status::Unknown));
        assert_eq!(c.reason, Some(Reason::DEPENDENCY_UNKNOWN));
        assert_eq!(
            c.message,
            "not established: it reads devices, whose facts could not be gathered (fail: no sysfs)"
        );

        // A need whose own verdict is unknown.
        struct Unknowing;
        impl Concern for Unknowing {
            type Facts = ();

            fn reasons(&self) -> &'static [Reason] {
                &[]
            }
            fn ids(&self) -> &'static [CheckId] {
                DEVICES
            }
            fn provides(&self) -> &'static [Provides] {
                DEVICES_PORTS
            }
            fn enabled(&self, _cfg: &Config) -> bool {
                true
            }
            fn gather(&self, _s: &Snapshot, _c: &Config) -> Result<(), GatherError> {
                Ok(())
            }
            fn decide(&self, _f: &(), _ctx: &Ctx) -> Decision {
                Decision {
                    checks: vec![Check::new(
                        CheckId::new("devices"),
                        Status::Unknown,
                        "mlx5_0/1 unreadable",
                    )],
                    ..Decision::default()
                }
            }
        }
        let mut writer = fixed(WRITER, Ok(2));
        writer.needs = PORTS;
        writer.writes = true;
        let list: [&dyn Run; 3] = [&Unknowing, &reader, &writer];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        assert_eq!(out.checks[1].status, Status::Unknown);
        assert_eq!(
            out.checks[1].message,
            "not established: it reads devices, which is unknown (mlx5_0/1 unreadable)"
        );
        // A writer plans nothing from it, and says so, without blocking the rest.
        let plan = out.plan.unwrap();
        assert!(
            plan.notes.iter().any(|n| n.contains("reads devices")),
            "{:?}",
            plan.notes
        );

        // Known needs (ok, warn, fail from a decision, skipped) change nothing.
        let mut known = fixed(DEVICES, Err(GatherError::skipped("no RDMA device")));
        known.provides = DEVICES_PORTS;
        let list: [&dyn Run; 2] = [&known, &reader];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        assert_eq!(out.checks[1].status, Status::Ok);
        let mut off = fixed(OFF, Ok(0));
        off.provides = OFF_PORTS;
        let list: [&dyn Run; 2] = [&off, &reader];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        assert_eq!(out.checks[1].status, Status::Ok);

        // A kind no concern before it makes (a list the registry would
        // refuse) is not taken as known.
        let list: [&dyn Run; 2] = [&reader, &known];
        let out = assess(&snap, &Config::default(), &list, Scope::All, false);
        assert_eq!(out.checks[0].status, Status::Unknown);
        assert_eq!(
            out.checks[0].message,
            "not established: it reads Port observations, which no concern before it provides"
        );
    }

    #[test]
    fn only_runs_the_asked_concerns_and_what_they_need() {
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(Host::new(t.path()));
        let mut base = fixed(BASE, Ok(1));
        base.provides = BASE_MAKES;
        // Makes another kind of observation: not needed, not run.
        let mut other = fixed(OTHER, Err(GatherError::unknown("must not run")));
        other.provides = OTHER_PORTS;
        let mut top = fixed(TOP, Ok(3));
        top.needs = BASE_SEEN;
        let list: [&dyn Run; 3] = [&base, &other, &top];
        let only = ["top".to_owned()];
        let out = assess(&snap, &Config::default(), &list, Scope::Only(&only), false);
        let ids: Vec<&str> = out.checks.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["base", "top"]);
    }
}
