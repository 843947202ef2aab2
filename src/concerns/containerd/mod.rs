//! The containerd concern: every CRI runtime handler that runs RDMA pods starts its
//! containers from a base OCI spec whose RLIMIT_MEMLOCK is the target.
//!
//! gather (files under the root) → decide (pure: handlers, edits, checks) → plan.
//!
//! - `layout`: who runs containerd (containerd.service, k3s/rke2, microk8s), which
//!   files it reads in which order, and its major version;
//! - `effective`: the handlers CRI will use once those files are merged, as the
//!   installed containerd merges them;
//! - `decide`: the edits that give each of them the base spec, and the check;
//! - `toml`, `spec`, `splice`: style-keeping edits of config.toml and base specs;
//! - `validate`: containerd's own parser on the edited files before any write.

pub mod concern;
mod decide;
pub mod effective;
pub mod effects;
mod gather;
mod judge;
pub mod k0s;
pub mod layout;
pub mod metrics;
pub mod nri;
pub mod rancher;
pub mod reasons;
pub mod spec;
mod splice;
pub mod toml;
pub mod validate;
pub mod view;

pub use decide::decide;
pub use effective::{Effective, Handler, Merge};
pub use gather::gather;
pub use judge::check;
pub use layout::{Layout, load_set, version_of};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::engine::check::CheckId;
use crate::engine::plan::Plan;
use crate::host::HostError;
use spec::SpecError;
use toml::{ConfigFile, Version};

use crate::reason::Reason;

pub const CHECK_ID: CheckId = CheckId::new("containerd.memlock");
/// The unit of a distribution's own containerd package.
pub const UNIT: &str = "containerd.service";
/// The ledger owner of base spec files (config files are owned by "containerd").
pub const SPEC_OWNER: &str = "containerd-spec";

#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{path}: containerd config version {found} is not one this agent knows (1 to 4); refusing to guess where its runtime handlers live"
    )]
    Version { path: PathBuf, found: String },
    #[error("{path}: {key} holds a value where containerd expects a table; fix the file by hand")]
    Shape { path: PathBuf, key: String },
    #[error(
        "{path} has no `version` key, so containerd reads it as version 1 and silently ignores its [plugins.\"io.containerd.grpc.v1.cri\"] settings; review them and add `version = 2` (the agent will not change what the file means)"
    )]
    V1IgnoresV2Sections { path: PathBuf },
    #[error(
        "runtime handler {name:?} (from the agent config's containerd.handlers) is not defined in {path} or its imports"
    )]
    UnknownHandler { name: String, path: PathBuf },
    #[error("{path}: import {pattern:?}: {message}")]
    Import {
        path: PathBuf,
        pattern: String,
        message: String,
    },
    #[error("base spec {path} {source}")]
    Spec { path: PathBuf, source: SpecError },
    #[error("{0}")]
    Rancher(String),
    #[error("{0}")]
    Validation(String),
    /// containerd's effective config cannot be established: the check says unknown.
    #[error("{0}")]
    Unknown(String),
    /// No containerd on this node: nothing to prepare (skipped, or failed when required).
    #[error("no containerd on this node: {0}")]
    Absent(String),
}

impl ContainerdError {
    /// The check's status for this error: a config containerd cannot read fails;
    /// one whose meaning depends on what the agent cannot see is unknown.
    pub fn status(&self, required: bool) -> crate::engine::check::Status {
        match self {
            ContainerdError::Unknown(_) => crate::engine::check::Status::Unknown,
            ContainerdError::Absent(_) if !required => crate::engine::check::Status::Skipped,
            _ => crate::engine::check::Status::Fail,
        }
    }

    /// The check's reason for this error.
    pub fn reason(&self) -> Reason {
        match self {
            ContainerdError::Unknown(_) | ContainerdError::Host(_) => Reason::FACT_UNREADABLE,
            ContainerdError::Absent(_) => Reason::CONTAINERD_ABSENT,
            ContainerdError::UnknownHandler { .. } => reasons::HANDLER_NOT_DEFINED,
            _ => reasons::CONFIG_UNREADABLE,
        }
    }
}

/// One set of files containerd reads as one config (the main file and its imports).
#[derive(Debug, Clone)]
pub struct ConfigSet {
    pub version: Version,
    /// Load order, main file first.
    pub files: Vec<ConfigFile>,
}

/// Everything the decision needs, read from the host.
#[derive(Debug, Clone)]
pub struct Facts {
    /// How the agent knows which config containerd reads (its unit's ExecStart, …).
    pub config_source: String,
    /// Disagreements found on the way (an explicit config_path unlike the unit's).
    pub warnings: Vec<String>,
    /// The `disabled_plugins` entry that turns CRI off in the files, if any.
    pub cri_disabled: Option<String>,
    /// containerd's own view of the files as they are (`config dump`); `None`
    /// when there is nothing to ask it about (no file yet, CRI off).
    pub dump_view: Option<Result<view::View, String>>,
    /// The running containerd's own view over CRI (live host, containerd up).
    pub cri_view: Option<Result<view::View, String>>,
    /// The kubelet's `containerRuntimeEndpoint`, when its config says.
    pub kubelet_endpoint: Option<String>,
    pub set: ConfigSet,
    /// Who runs containerd here, and so what to edit and restart.
    pub layout: Layout,
    /// k3s/rke2/microk8s: the template the live config is regenerated from.
    pub template: Option<ConfigSet>,
    /// The running containerd's major version (`None`: not known), which decides
    /// how imports merge and whether the legacy runtime tables count.
    pub daemon_major: Option<u32>,
    /// Base spec files referenced (or to be written): path → (text, mode), `None` if absent.
    pub specs: BTreeMap<PathBuf, Option<(String, u32)>>,
    /// The unit that runs containerd here (and is restarted to apply a change).
    pub unit: String,
    /// containerd's default spec, from `ctr oci spec` when possible.
    pub template_spec: String,
    pub template_source: String,
    /// When the running containerd started (`None`: not running; `Err`: not known).
    pub containerd_started: Result<Option<Started>, String>,
    /// Newest modification time among the config files and the specs they
    /// reference (`Err`: one could not be read).
    pub newest_change: Result<Option<(SystemTime, PathBuf)>, String>,
    /// Spec files the agent created (not the operator's).
    pub owned_specs: BTreeSet<PathBuf>,
    /// Live actions can follow from this decision (the live host, not a --root tree).
    pub live: bool,
    /// containerd's socket (`grpc.address`), to verify it answers after a restart.
    pub grpc_address: PathBuf,
    /// The base spec the agent writes for the handlers it manages (`base_spec_path`,
    /// or the layout's own place for it: `Layout::spec_path`).
    pub spec_path: PathBuf,
    /// The containerd whose `config dump` judges configs (the layout's own first).
    pub binary: PathBuf,
    /// The `ctr` the layout bundles, if any (else the one on PATH).
    pub ctr: Option<PathBuf>,
}

/// When a process started, and whether that is exact (systemd's microsecond
/// timestamp) or derived from /proc (whole-second boot time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub at: SystemTime,
    pub exact: bool,
}

impl Facts {
    /// The config files (and k3s template) and base specs this concern reads.
    pub fn watched_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.set.files.iter().map(|f| f.path.clone()).collect();
        if let Some(t) = &self.template {
            v.extend(t.files.iter().map(|f| f.path.clone()));
        }
        v.extend(self.specs.keys().cloned());
        v
    }

    /// Why a restart is owed, with the times, for messages.
    /// (The times are in the check's details: a message stays the same while
    /// the facts do.)
    pub fn pending_reason(&self) -> String {
        match &self.newest_change {
            Ok(Some((_, p))) => format!("containerd started before {} last changed", p.display()),
            _ => "containerd started before its config or base spec last changed".into(),
        }
    }

    /// containerd started before its config or a base spec last changed, so it
    /// has not read them. A /proc-derived start time is only trusted to a second.
    /// `Err`: a time could not be read, so it cannot be told.
    pub fn restart_pending(&self) -> Result<bool, String> {
        let started = self.containerd_started.clone()?;
        let changed = self.newest_change.clone()?.map(|(t, _)| t);
        Ok(match (started, changed) {
            (Some(s), Some(changed)) => {
                let slack = if s.exact {
                    Duration::ZERO
                } else {
                    Duration::from_secs(1)
                };
                s.at + slack < changed
            }
            _ => false,
        })
    }
}

/// What the concern decided: the edits and what to report.
#[derive(Debug, Clone)]
pub struct Decision {
    pub plan: Plan,
    pub handlers: Vec<(String, String)>,
    pub pending: Vec<String>,
    /// CRI handlers left without the spec, and why (not in `containerd.handlers`).
    pub unmanaged: Vec<String>,
    /// Handlers left alone because they do not run Linux containers (runhcs).
    pub foreign: Vec<String>,
}

/// Facts for a single config text and nothing else on the host (built-in spec
/// template, no running containerd): for benchmarks and fuzzing of `decide`.
pub fn facts_from_text(text: &str) -> Result<Facts, ContainerdError> {
    let path = Path::new("/etc/containerd/config.toml");
    let file = ConfigFile::parse(path, path, Some(text.to_owned()), 0o644)?;
    let version = version_of(&file, path)?;
    Ok(Facts {
        config_source: "the text given".into(),
        warnings: Vec::new(),
        cri_disabled: None,
        dump_view: None,
        cri_view: None,
        kubelet_endpoint: None,
        set: ConfigSet {
            version,
            files: vec![file],
        },
        layout: Layout::Plain,
        template: None,
        daemon_major: None,
        specs: BTreeMap::new(),
        unit: UNIT.to_owned(),
        template_spec: spec::BUILTIN_DEFAULT.to_owned(),
        template_source: "built-in default".into(),
        containerd_started: Ok(None),
        newest_change: Ok(None),
        owned_specs: BTreeSet::new(),
        live: false,
        grpc_address: "/run/containerd/containerd.sock".into(),
        spec_path: layout::DEFAULT_SPEC_PATH.into(),
        binary: "containerd".into(),
        ctr: None,
    })
}

/// The status column of the CRI plugin's row in `ctr plugins ls`.
pub fn cri_status(plugins_ls: &str) -> Option<String> {
    plugins_ls.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 3 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri")
            .then(|| f[f.len() - 1].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_row_of_plugins_ls() {
        let out = "TYPE                                  ID                       PLATFORMS      STATUS\n\
io.containerd.grpc.v1                 introspection            -              ok\n\
io.containerd.grpc.v1                 cri                      linux/amd64    error\n";
        assert_eq!(cri_status(out).as_deref(), Some("error"));
        assert_eq!(cri_status("nothing"), None);
    }
}
