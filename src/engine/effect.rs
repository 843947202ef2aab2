//! Side effects as values a concern owns. The engine knows one shape: a typed
//! key, a description, and `run` against the live host's generic capabilities.
//! A concern adds a live action by implementing `Effect` in its own folder; the
//! plan carries it, the executor runs it, holds back a failing one by its key,
//! and never needs to know what it does.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::outcome::ActionStatus;
use crate::host::Host;
use crate::host::netlink::RdmaNetlink;
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

/// The live host's capabilities an effect may use. Generic on purpose: nothing
/// here names a concern, so tests drive the executor with a fake.
pub trait LiveHost: Send + Sync {
    /// The host's files, for a fact read fresh at the moment of acting (who
    /// keeps the kernel from switching a mode).
    fn host(&self) -> &Host;
    /// A fresh RDMA netlink socket.
    fn rdma_netlink(&self) -> Result<Box<dyn RdmaNetlink>, String>;
    /// The absolute path of a host program, if installed.
    fn which(&self, program: &str) -> Option<PathBuf>;
    /// Runs a host program to completion: its stdout, or what went wrong
    /// (its stderr, not installed, not startable).
    fn run(&self, argv: &[String]) -> Result<Vec<u8>, String>;
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
    /// Carries it out: the status and a detail that says what happened.
    fn run(&self, cx: &LiveCtx) -> (ActionStatus, String);
}

/// How to tell that a restarted unit is healthy when "active" is not enough
/// (the daemon runs, but a plugin it needs did not load).
pub trait Probe: fmt::Debug + Send + Sync {
    /// `Err` says what is still wrong; the executor asks until its deadline.
    fn healthy(&self, cx: &LiveCtx) -> Result<(), String>;
}

/// A check candidate file contents must pass before anything is written
/// (the reader's own parser on an edited config).
pub trait Preflight: fmt::Debug + Send + Sync {
    /// A note when the candidate passes (or could not be checked), the
    /// reason when it does not.
    fn check(&self) -> Result<String, String>;
}
