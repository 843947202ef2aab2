//! The one shape every concern has: `gather` facts from the cycle's host
//! snapshot, then a pure `decide` that turns them into checks, typed
//! observations and planned file changes (each naming the units that read it).
//! The engine runs the registered list; disabled and failed concerns are
//! handled there, once.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::engine::check::{Check, CheckId, Status};
use crate::engine::effect::{Effect, Preflight, Probe};
use crate::engine::plan::{Action, FileChange};
use crate::host::snapshot::Snapshot;
use crate::host::state::Record;
use crate::reason::Reason;

use crate::observe::{Observation, ObservationKind};

/// Why a concern could not gather its facts, and what its checks then say:
/// `unknown` when the fact could not be established, `fail` when what was read
/// is itself the problem (a config its reader cannot load).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherError {
    pub status: Status,
    pub message: String,
    /// The checks' reason; `fact_unreadable` when none is given.
    pub reason: Option<Reason>,
}

impl GatherError {
    pub fn unknown(e: impl fmt::Display) -> Self {
        GatherError {
            status: Status::Unknown,
            message: e.to_string(),
            reason: None,
        }
    }

    /// Nothing to look at on this node (the check says why it was skipped).
    pub fn skipped(e: impl fmt::Display) -> Self {
        GatherError {
            status: Status::Skipped,
            message: e.to_string(),
            reason: None,
        }
    }

    pub fn fail(e: impl fmt::Display) -> Self {
        GatherError {
            status: Status::Fail,
            message: e.to_string(),
            reason: None,
        }
    }
}

impl GatherError {
    pub fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// The reason its checks carry: the one given, else `fact_unreadable`.
    pub fn reason(&self) -> Reason {
        self.reason.unwrap_or(Reason::FACT_UNREADABLE)
    }
}

impl fmt::Display for GatherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What one concern decided. Pure data.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub checks: Vec<Check>,
    pub observations: Vec<Observation>,
    /// File changes, each naming the units that must restart to read it.
    pub changes: Vec<FileChange>,
    /// Live actions besides the restarts the changes imply (a restart still
    /// owed, switching a kernel mode, rebuilding a boot image).
    pub actions: Vec<Action>,
    /// How to tell that a restarted unit is healthy, when "active" is not enough.
    pub verify: Vec<(String, Arc<dyn Probe>)>,
    /// Checks to pass before any file is written (the reader's own parser).
    pub preflight: Vec<Arc<dyn Preflight>>,
    /// The agent's own state to record once an apply has converged.
    pub records: Vec<Record>,
    pub notes: Vec<String>,
    /// Files whose change should trigger a reconcile.
    pub watch: Vec<PathBuf>,
    /// This concern's part of the plan cannot be carried out (its checks say why).
    pub blocked: Option<String>,
}

/// A kind of observation a concern makes for later ones to read, and the
/// check of its own whose verdict says whether that observation is known:
/// a reader of the kind is `unknown` while that check is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provides {
    pub kind: ObservationKind,
    pub check: CheckId,
}

impl Provides {
    pub const fn new(kind: ObservationKind, check: CheckId) -> Self {
        Provides { kind, check }
    }
}

/// What `decide` may look at besides its own facts: the config, and the checks
/// and observations of the concerns registered before it.
pub struct Ctx<'a> {
    pub config: &'a Config,
    pub checks: &'a [Check],
    pub observations: &'a [Observation],
}

pub trait Concern: Send + Sync {
    type Facts;

    /// Check ids this concern reports, in order.
    fn ids(&self) -> &'static [CheckId];

    /// The reason codes its checks report (its folder's `reasons::ALL`), for
    /// the registry: JSON is read back and docs/reasons.md generated from them.
    fn reasons(&self) -> &'static [Reason];

    fn enabled(&self, cfg: &Config) -> bool;

    /// The kinds of observation `decide` reads, made by concerns registered
    /// before it (their `provides()`): `check --only` runs those too, and
    /// while the check that provides one is unknown, so is this concern.
    fn needs(&self) -> &'static [ObservationKind] {
        &[]
    }

    /// The kinds of observation it makes that later concerns may need, each
    /// with the check of its own that says whether it is known.
    fn provides(&self) -> &'static [Provides] {
        &[]
    }

    /// A concern that owns files: without its facts no plan can be made.
    fn writes(&self) -> bool {
        false
    }

    /// Its files summarise the other concerns' checks (node labels): once an
    /// apply changed the node, they are planned again from the node as it is.
    fn summarises(&self) -> bool {
        false
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Self::Facts, GatherError>;

    fn decide(&self, facts: &Self::Facts, ctx: &Ctx) -> Decision;

    /// Effects that undo what this concern's effects changed on the host, from
    /// the agent's own record of it: `revert` runs them after restoring files.
    fn undo(&self, _snap: &Snapshot, _cfg: &Config) -> Vec<Arc<dyn Effect>> {
        Vec::new()
    }
}

/// A concern with its facts type erased, so the engine can hold a list of them.
pub trait Run: Send + Sync {
    fn ids(&self) -> &'static [CheckId];
    fn needs(&self) -> &'static [ObservationKind];
    fn provides(&self) -> &'static [Provides];
    fn reasons(&self) -> &'static [Reason];
    fn enabled(&self, cfg: &Config) -> bool;
    fn writes(&self) -> bool;
    fn summarises(&self) -> bool;
    fn run(&self, snap: &Snapshot, ctx: &Ctx) -> Result<Decision, GatherError>;
    fn undo(&self, snap: &Snapshot, cfg: &Config) -> Vec<Arc<dyn Effect>>;
}

impl<C: Concern> Run for C {
    fn ids(&self) -> &'static [CheckId] {
        Concern::ids(self)
    }

    fn needs(&self) -> &'static [ObservationKind] {
        Concern::needs(self)
    }

    fn provides(&self) -> &'static [Provides] {
        Concern::provides(self)
    }

    fn reasons(&self) -> &'static [Reason] {
        Concern::reasons(self)
    }

    fn enabled(&self, cfg: &Config) -> bool {
        Concern::enabled(self, cfg)
    }

    fn writes(&self) -> bool {
        Concern::writes(self)
    }

    fn summarises(&self) -> bool {
        Concern::summarises(self)
    }

    fn run(&self, snap: &Snapshot, ctx: &Ctx) -> Result<Decision, GatherError> {
        let facts = self.gather(snap, ctx.config)?;
        Ok(self.decide(&facts, ctx))
    }

    fn undo(&self, snap: &Snapshot, cfg: &Config) -> Vec<Arc<dyn Effect>> {
        Concern::undo(self, snap, cfg)
    }
}
