//! Side effects as values a concern owns. The engine knows one shape: a typed
//! key, a description, and `run` against the live host's generic capabilities.
//! A concern adds a live action by implementing `Effect` in its own folder; the
//! plan carries it, the executor runs it, holds back a failing one by its key,
//! and never needs to know what it does.

use std::fmt;
use std::io;
use std::path::PathBuf;

use serde::Serialize;

use super::outcome::ActionStatus;
use crate::host::live_files::LiveFiles;
use crate::host::netlink::{NetlinkError, RdmaNetlink};
use crate::host::service::ServiceManager;
use crate::host::stop::Stop;

/// Which effect, and on what: a plan keeps one effect per key (one restart per
/// unit, one switch of a kernel mode), and a failing effect is held back by it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EffectKey {
    /// The kind of effect, snake_case (`restart_unit`, `set_kernel_mode`).
    pub kind: &'static str,
    /// What it acts on (a unit, a PCI function); empty when the host has one.
    pub target: String,
}

impl EffectKey {
    pub fn new(kind: &'static str, target: impl Into<String>) -> Self {
        EffectKey {
            kind,
            target: target.into(),
        }
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.target.is_empty() {
            f.write_str(self.kind)
        } else {
            write!(f, "{} {}", self.kind, self.target)
        }
    }
}

/// The live host's capabilities an effect may use, and no more: its files
/// through `LiveFiles` (read, the agent's own state and journal, PCI config
/// space), netlink, programs. Not the `Host`: files the agent manages change
/// only through a plan and the ledger. Generic on purpose: nothing here names
/// a concern, so tests drive the executor with a fake.
///
/// ```compile_fail
/// # use rdma_node_agent::engine::effect::LiveCtx;
/// // An effect cannot reach the whole host (to write a managed file aside).
/// fn run(cx: &LiveCtx) {
///     let _ = cx.host.host();
/// }
/// ```
pub trait LiveHost: Send + Sync {
    /// The host's files as an effect may touch them.
    fn files(&self) -> LiveFiles<'_>;
    /// A fresh RDMA netlink socket.
    fn rdma_netlink(&self) -> Result<Box<dyn RdmaNetlink>, NetlinkError>;
    /// The absolute path of a host program, if installed.
    fn which(&self, program: &str) -> Option<PathBuf>;
    /// Runs a host program to completion: its stdout, or what went wrong
    /// (its stderr, not installed, not startable).
    fn run(&self, argv: &[String]) -> Result<Vec<u8>, CommandError>;
}

/// Why a host program did not run to a successful end, and which program.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("no command")]
    Empty,
    #[error("{program} is not installed")]
    NotInstalled { program: String },
    /// It ran and exited non-zero (or was killed): what it said on stderr.
    #[error("failed: {stderr}")]
    Failed {
        program: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("{source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
}

/// What an effect is run with.
pub struct LiveCtx<'a> {
    pub host: &'a dyn LiveHost,
    /// systemd, when its bus answers (a long job runs as a transient unit).
    pub manager: Option<&'a dyn ServiceManager>,
    /// Set when the agent is stopping: long effects give up cleanly.
    pub stop: &'a Stop,
}

/// A live action a concern plans besides file changes and the restarts they
/// imply (switching a kernel mode, rebuilding a boot image). Pure data until
/// the executor calls `run`, and only on the live host.
pub trait Effect: fmt::Debug + Send + Sync {
    fn key(&self) -> EffectKey;
    /// What it does, as people read it: `set the kernel mode to exclusive`.
    fn describe(&self) -> String;
    /// Carries it out: what happened, or the concern's typed error that says
    /// what failed and where.
    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError>;
}

/// An effect that did its part: done, or deliberately not (skipped, pending a
/// reboot). A failure is never a `Ran`: it is an `EffectError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    status: ActionStatus,
    detail: String,
}

impl Ran {
    pub fn done(detail: impl Into<String>) -> Self {
        Ran::new(ActionStatus::Done, detail)
    }
    /// Nothing to do, or nothing safe to do: the detail says why.
    pub fn skipped(detail: impl Into<String>) -> Self {
        Ran::new(ActionStatus::Skipped, detail)
    }
    /// Owed, taking effect later (at the next boot).
    pub fn pending(detail: impl Into<String>) -> Self {
        Ran::new(ActionStatus::Pending, detail)
    }
    fn new(status: ActionStatus, detail: impl Into<String>) -> Self {
        Ran {
            status,
            detail: detail.into(),
        }
    }
    pub fn status(&self) -> ActionStatus {
        self.status
    }
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// A concern's own error type (a thiserror enum in its folder), carried
/// through the engine's extension points without the engine naming it.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Declares an engine-side error that wraps a concern's typed error.
macro_rules! concern_error {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, thiserror::Error)]
        #[error(transparent)]
        pub struct $name(Cause);

        impl $name {
            pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
                $name(Box::new(e))
            }
            /// The concern's error, to match on its type.
            pub fn cause(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
                self.0.as_ref()
            }
        }
    };
}

concern_error!(
    /// Why an effect did not do its work.
    EffectError
);
concern_error!(
    /// Why a restarted unit is not healthy (yet).
    Unhealthy
);
concern_error!(
    /// Why a candidate file set was refused before anything was written.
    Rejected
);

/// An effect's result as the executor reports it: (status, detail).
pub fn settle(r: Result<Ran, EffectError>) -> (ActionStatus, String) {
    match r {
        Ok(ran) => (ran.status, ran.detail),
        Err(e) => (ActionStatus::Failed, e.to_string()),
    }
}

/// How to tell that a restarted unit is healthy when "active" is not enough
/// (the daemon runs, but a plugin it needs did not load).
pub trait Probe: fmt::Debug + Send + Sync {
    /// `Err` says what is still wrong; the executor asks until its deadline.
    fn healthy(&self, cx: &LiveCtx) -> Result<(), Unhealthy>;
}

/// A check candidate file contents must pass before anything is written
/// (the reader's own parser on an edited config).
pub trait Preflight: fmt::Debug + Send + Sync {
    /// A note when the candidate passes (or could not be checked), the
    /// reason when it does not.
    fn check(&self) -> Result<String, Rejected>;
}
