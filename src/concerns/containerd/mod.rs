//! The containerd concern: every CRI runtime handler that runs RDMA pods starts its
//! containers from a base OCI spec whose RLIMIT_MEMLOCK is the target.
//!
//! gather (files under the root) → decide (pure: handlers, edits, checks) → plan.

pub mod concern;
pub mod spec;
pub mod toml;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::check::{Check, Status};
use crate::config::ContainerdConfig;
use crate::host::snapshot::Snapshot;
use crate::host::{Host, HostError};
use crate::plan::{Action, ActionKind, FileChange, Plan};
use crate::procfs;
use crate::systemd::ServiceManager;
use spec::{Rlimits, SpecError};
use toml::{ConfigFile, Version};

pub const CHECK_ID: &str = "containerd.memlock";
pub const UNIT: &str = "containerd.service";
/// The ledger owner of base spec files (config files are owned by "containerd").
pub const SPEC_OWNER: &str = "containerd-spec";
const RUNC_TYPE: &str = "io.containerd.runc.v2";
/// containerd ≥ 2.2 imports these by default when config.toml names no imports.
const DEFAULT_V3_IMPORTS: &str = "/etc/containerd/conf.d/*.toml";
/// k3s and rke2 write containerd's config here and regenerate it at each start.
const RANCHER_CONFIGS: &[&str] = &[
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
];

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
}

/// A CRI runtime handler as containerd will see it once every file is merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    pub name: String,
    /// Its runtime table exists in some file.
    pub defined: bool,
    /// The effective `base_runtime_spec` (non-empty).
    pub spec: Option<String>,
    /// Index of the file an edit of this handler belongs in.
    pub file: usize,
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
    pub set: ConfigSet,
    /// k3s/rke2: the template the live config is regenerated from, when it is plain TOML.
    pub rancher_template: Option<ConfigSet>,
    /// Base spec files referenced (or to be written): path → (text, mode), `None` if absent.
    pub specs: BTreeMap<PathBuf, Option<(String, u32)>>,
    /// containerd's default spec, from `ctr oci spec` when possible.
    pub template: String,
    pub template_source: String,
    /// When the running containerd started (`None`: not running).
    pub containerd_started: Option<Started>,
    /// Newest modification time among the config files and the specs they reference.
    pub newest_change: Option<SystemTime>,
    /// Spec files the agent created (not the operator's).
    pub owned_specs: BTreeSet<PathBuf>,
    /// Live actions can follow from this decision (the live host, not a --root tree).
    pub live: bool,
    /// containerd's socket (`grpc.address`), to verify it answers after a restart.
    pub grpc_address: PathBuf,
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
        if let Some(t) = &self.rancher_template {
            v.extend(t.files.iter().map(|f| f.path.clone()));
        }
        v.extend(self.specs.keys().cloned());
        v
    }

    /// containerd started before its config or a base spec last changed, so it
    /// has not read them. A /proc-derived start time is only trusted to a second.
    pub fn restart_pending(&self) -> bool {
        match (self.containerd_started, self.newest_change) {
            (Some(s), Some(changed)) => {
                let slack = if s.exact {
                    Duration::ZERO
                } else {
                    Duration::from_secs(1)
                };
                s.at + slack < changed
            }
            _ => false,
        }
    }
}

/// What the concern decided: the edits and what to report.
#[derive(Debug, Clone)]
pub struct Decision {
    pub plan: Plan,
    pub handlers: Vec<(String, String)>,
    pub pending: Vec<String>,
}

/// Facts for a single config text and nothing else on the host (built-in spec
/// template, no running containerd): for benchmarks and fuzzing of `decide`.
pub fn facts_from_text(text: &str) -> Result<Facts, ContainerdError> {
    let path = Path::new("/etc/containerd/config.toml");
    let file = ConfigFile::parse(path, path, Some(text.to_owned()), 0o644)?;
    let version = version_of(&file, path)?;
    Ok(Facts {
        set: ConfigSet {
            version,
            files: vec![file],
        },
        rancher_template: None,
        specs: BTreeMap::new(),
        template: spec::BUILTIN_DEFAULT.to_owned(),
        template_source: "built-in default".into(),
        containerd_started: None,
        newest_change: None,
        owned_specs: BTreeSet::new(),
        live: false,
        grpc_address: "/run/containerd/containerd.sock".into(),
    })
}

// ---------- gather ----------

/// `owned_specs`: spec files the agent created earlier (from its ledger): a handler
/// pointing at one of them follows `base_spec_path` when that setting changes.
pub fn gather(
    host: &Snapshot,
    cfg: &ContainerdConfig,
    manager: Option<&dyn ServiceManager>,
    owned_specs: &BTreeSet<PathBuf>,
) -> Result<Facts, ContainerdError> {
    let main_path = config_path(host, cfg);
    let rancher = RANCHER_CONFIGS.iter().any(|p| Path::new(p) == main_path);
    let set = load_set(host, &main_path)?;
    let rancher_template = if rancher {
        Some(load_rancher_template(host, &main_path)?)
    } else {
        None
    };

    // The specs containerd reads (those the handlers reference), and the ones the
    // agent may write: its configured path and the spec files it created before.
    let mut referenced: BTreeSet<PathBuf> = BTreeSet::new();
    for s in std::iter::once(&set).chain(rancher_template.as_ref()) {
        let (handlers, _) = handlers(s);
        referenced.extend(
            handlers
                .into_iter()
                .filter_map(|h| h.spec.map(PathBuf::from)),
        );
    }
    let mut spec_paths = referenced.clone();
    spec_paths.insert(cfg.base_spec_path.clone());
    spec_paths.extend(owned_specs.iter().cloned());
    let mut specs = BTreeMap::new();
    // Only what containerd reads can make a restart due.
    let mut newest = set
        .files
        .iter()
        .filter_map(|f| host.read(&f.path).ok().flatten()?.modified)
        .max();
    for p in spec_paths {
        let data = host.read_trusted(&p, "a base runtime spec")?;
        if let Some(d) = data.as_ref().filter(|_| referenced.contains(&p)) {
            newest = newest.max(d.modified);
        }
        let entry = match data {
            None => None,
            Some(d) => Some((
                String::from_utf8(d.bytes).map_err(|_| ContainerdError::Spec {
                    path: host.path(&p),
                    source: SpecError::Json("not UTF-8".into()),
                })?,
                d.mode,
            )),
        };
        specs.insert(p, entry);
    }

    let (template, template_source) = match host.run("ctr", &["oci", "spec"]) {
        Some(Ok(out)) if out.status.success() => match spec::template_from_ctr(&out.stdout) {
            Some(t) => (t, "ctr oci spec".to_owned()),
            None => builtin_template(),
        },
        _ => builtin_template(),
    };

    let containerd_started = match manager.and_then(|m| m.status(UNIT).ok()) {
        Some(st) if st.active_state == "active" => st.started.map(|at| Started { at, exact: true }),
        Some(_) => None,
        None => procfs::find_by_comm(host, "containerd")?
            .and_then(|pid| procfs::start_time(host, pid))
            .map(|at| Started { at, exact: false }),
    };
    let grpc_address = set.files[0]
        .get_str(&["grpc", "address"])
        .unwrap_or("/run/containerd/containerd.sock")
        .into();

    Ok(Facts {
        set,
        rancher_template,
        specs,
        template,
        template_source,
        containerd_started,
        newest_change: newest,
        owned_specs: owned_specs.clone(),
        live: host.is_live(),
        grpc_address,
    })
}

fn builtin_template() -> (String, String) {
    (
        spec::BUILTIN_DEFAULT.to_owned(),
        "built-in default (containerd 1.6)".to_owned(),
    )
}

/// The configured path; when that is the default and absent but k3s/rke2's exists, theirs.
fn config_path(host: &Host, cfg: &ContainerdConfig) -> PathBuf {
    let default = ContainerdConfig::default().config_path;
    if cfg.config_path == default && !host.exists(&default) {
        if let Some(p) = RANCHER_CONFIGS.iter().find(|p| host.exists(Path::new(p))) {
            return PathBuf::from(p);
        }
    }
    cfg.config_path.clone()
}

fn read_file(host: &Host, path: &Path) -> Result<ConfigFile, ContainerdError> {
    // It names the files the agent edits and the spec paths it writes.
    let data = host.read_trusted(path, "a containerd config file")?;
    let (text, mode) = match data {
        None => (None, 0o644),
        Some(d) => (
            Some(String::from_utf8(d.bytes).map_err(|_| HostError::NotUtf8 {
                path: host.path(path),
            })?),
            d.mode,
        ),
    };
    ConfigFile::parse(path, &host.path(path), text, mode)
}

pub fn version_of(file: &ConfigFile, shown: &Path) -> Result<Version, ContainerdError> {
    match file.get(&["version"]) {
        None => Ok(Version::V1),
        Some(item) => match item.as_integer() {
            Some(1) => Ok(Version::V1),
            Some(2) => Ok(Version::V2),
            Some(3) => Ok(Version::V3),
            Some(4) => Ok(Version::V4),
            _ => Err(ContainerdError::Version {
                path: shown.to_owned(),
                found: item.to_string().trim().to_owned(),
            }),
        },
    }
}

/// The main file and, breadth-first as containerd loads them, its imports.
pub fn load_set(host: &Host, main_path: &Path) -> Result<ConfigSet, ContainerdError> {
    let mut main = read_file(host, main_path)?;
    if main.original.is_none() {
        // A new file must say its version: without one containerd reads version 1.
        // Version 2 is read by containerd 1.3 to 2.x (2.x migrates it on load).
        main.doc.insert("version", toml_edit::value(2));
    }
    let version = version_of(&main, &host.path(main_path))?;
    let mut files = vec![main];
    if version == Version::V1 {
        return Ok(ConfigSet { version, files });
    }
    let mut seen: BTreeSet<PathBuf> = BTreeSet::from([main_path.to_owned()]);
    let mut next = 0;
    while next < files.len() {
        let patterns = import_patterns(&files[next], version, next == 0);
        let base = files[next]
            .path
            .parent()
            .unwrap_or(Path::new("/"))
            .to_owned();
        let from = files[next].path.clone();
        for pattern in patterns {
            let abs = base.join(&pattern);
            let abs = abs.to_string_lossy();
            let matches = if is_glob(&abs) {
                host.glob(&abs).map_err(|e| ContainerdError::Import {
                    path: host.path(&from),
                    pattern: pattern.clone(),
                    message: e.to_string(),
                })?
            } else {
                // containerd fails to start on a missing plain import: so do we.
                let p = PathBuf::from(abs.as_ref());
                if !host.exists(&p) {
                    return Err(ContainerdError::Import {
                        path: host.path(&from),
                        pattern,
                        message: format!("{} does not exist", host.path(&p).display()),
                    });
                }
                vec![p]
            };
            for p in matches {
                if seen.insert(p.clone()) {
                    files.push(read_file(host, &p)?);
                }
            }
        }
        next += 1;
    }
    Ok(ConfigSet { version, files })
}

fn import_patterns(file: &ConfigFile, version: Version, is_main: bool) -> Vec<String> {
    match file.get(&["imports"]).and_then(|i| i.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        None if is_main && version >= Version::V3 => vec![DEFAULT_V3_IMPORTS.to_owned()],
        None => Vec::new(),
    }
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn load_rancher_template(host: &Host, main_path: &Path) -> Result<ConfigSet, ContainerdError> {
    let dir = main_path.parent().unwrap_or(Path::new("/"));
    let candidates = ["config-v3.toml.tmpl", "config.toml.tmpl"];
    let Some(tmpl) = candidates
        .iter()
        .map(|n| dir.join(n))
        .find(|p| host.exists(p))
    else {
        return Err(ContainerdError::Rancher(format!(
            "{} is generated by k3s/rke2 at every start, so edits to it would be lost. Create {} (a copy of config.toml is a good start), then run apply again: the agent edits both",
            host.path(main_path).display(),
            host.path(&dir.join("config.toml.tmpl")).display()
        )));
    };
    let text = host
        .read_trusted(&tmpl, "the k3s/rke2 containerd template")?
        .map(|d| String::from_utf8_lossy(&d.bytes).into_owned())
        .unwrap_or_default();
    if text.contains("{{") {
        return Err(ContainerdError::Rancher(format!(
            "{} is a Go template, which the agent cannot edit safely. Add base_runtime_spec = \"…\" to each runtime handler in it by hand, or make it plain TOML",
            host.path(&tmpl).display()
        )));
    }
    let file = read_file(host, &tmpl)?;
    let version = version_of(&file, &host.path(&tmpl))?;
    Ok(ConfigSet {
        version,
        files: vec![file],
    })
}

// ---------- decide (pure) ----------

/// The runtime handlers of a config set and the default handler's name.
pub fn handlers(set: &ConfigSet) -> (Vec<Handler>, String) {
    let v = set.version;
    let runtimes = v.runtimes_path();
    let plugin = v.runtime_plugin();
    let mut by_name: BTreeMap<String, Handler> = BTreeMap::new();
    let mut default = "runc".to_owned();

    if v.imports_replace_sections() {
        // The last file that has the plugin section is the only one that counts.
        let idx = set
            .files
            .iter()
            .rposition(|f| f.get(&plugin).is_some())
            .unwrap_or(0);
        let f = &set.files[idx];
        for name in f.keys(&runtimes) {
            let spec = handler_spec(f, &runtimes, &name);
            by_name.insert(
                name.clone(),
                Handler {
                    name,
                    defined: true,
                    spec,
                    file: idx,
                },
            );
        }
        if let Some(d) = f.get_str(&v.default_runtime_path()) {
            default = d.to_owned();
        }
    } else {
        for (idx, f) in set.files.iter().enumerate() {
            for name in f.keys(&runtimes) {
                let spec = handler_spec(f, &runtimes, &name);
                let h = by_name.entry(name.clone()).or_insert(Handler {
                    name,
                    defined: true,
                    spec: None,
                    file: idx,
                });
                // Later files override; an edit goes where the value now comes from,
                // else into the last file that defines the handler.
                if spec.is_some() || h.spec.is_none() {
                    h.file = idx;
                }
                if spec.is_some() {
                    h.spec = spec;
                }
            }
            if let Some(d) = f.get_str(&v.default_runtime_path()) {
                default = d.to_owned();
            }
        }
    }
    (by_name.into_values().collect(), default)
}

fn handler_spec(f: &ConfigFile, runtimes: &[&str], name: &str) -> Option<String> {
    let mut p = runtimes.to_vec();
    p.extend([name, "base_runtime_spec"]);
    f.get_str(&p).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Decides every edit. Pure: the same facts always give the same plan.
pub fn decide(
    facts: &Facts,
    cfg: &ContainerdConfig,
    shown: &dyn Fn(&Path) -> PathBuf,
) -> Result<Decision, ContainerdError> {
    let limits = Rlimits {
        memlock: cfg.memlock,
        extra: cfg.rlimits.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    };
    let mut plan = Plan::default();
    let mut report = Vec::new();
    let mut spec_for_path: BTreeMap<PathBuf, bool> = BTreeMap::new();

    let mut sets = vec![facts.set.clone()];
    if let Some(t) = &facts.rancher_template {
        sets.push(t.clone());
    }
    for (i, mut set) in sets.into_iter().enumerate() {
        let main = set.files[0].path.clone();
        if set.version == Version::V1 && set.files[0].get(&Version::V2.runtime_plugin()).is_some() {
            return Err(ContainerdError::V1IgnoresV2Sections { path: shown(&main) });
        }
        let (found, default) = handlers(&set);
        let managed: Vec<String> = if cfg.handlers.is_empty() {
            let mut names: BTreeSet<String> = found.iter().map(|h| h.name.clone()).collect();
            names.insert(default.clone());
            names.into_iter().collect()
        } else {
            cfg.handlers.clone()
        };
        let runtimes = set.version.runtimes_path();
        for name in managed {
            let h = found.iter().find(|h| h.name == name);
            let (file, current) = match h {
                Some(h) => (h.file, h.spec.clone()),
                None if name == "runc" && name == default => {
                    // containerd's implicit default handler: a table we create must keep
                    // its runtime_type, or containerd reads it as empty.
                    let idx = match set.version.imports_replace_sections() {
                        true => set
                            .files
                            .iter()
                            .rposition(|f| f.get(&set.version.runtime_plugin()).is_some())
                            .unwrap_or(0),
                        false => 0,
                    };
                    let mut p = runtimes.clone();
                    p.extend([name.as_str(), "runtime_type"]);
                    set.files[idx].set_str(&p, RUNC_TYPE)?;
                    (idx, None)
                }
                None => {
                    return Err(ContainerdError::UnknownHandler {
                        name,
                        path: shown(&main),
                    });
                }
            };
            // A spec the agent created is its own to move; an operator's stays.
            let spec_path = current
                .clone()
                .map(PathBuf::from)
                .filter(|p| !facts.owned_specs.contains(p))
                .unwrap_or_else(|| cfg.base_spec_path.clone());
            if current.as_deref().map(Path::new) != Some(spec_path.as_path()) {
                let mut p = runtimes.clone();
                p.extend([name.as_str(), "base_runtime_spec"]);
                set.files[file].set_str(&p, &spec_path.to_string_lossy())?;
            }
            if i == 0 {
                report.push((name.clone(), spec_path.display().to_string()));
            }
            spec_for_path.insert(spec_path.clone(), spec_path == cfg.base_spec_path);
        }
        for f in &set.files {
            if f.changed() {
                plan.changes.push(FileChange {
                    path: f.path.clone(),
                    old: f.original.clone().map(String::into_bytes),
                    new: Some(f.rendered().into_bytes()),
                    mode: f.mode,
                    owner: "containerd",
                    reason: "point runtime handlers at a base spec with the target RLIMIT_MEMLOCK"
                        .into(),
                    restart: vec![UNIT.to_owned()],
                });
            }
        }
    }

    let mut pending = Vec::new();
    for (path, own) in &spec_for_path {
        let (path, own) = (path.clone(), *own);
        let current = facts.specs.get(&path).cloned().flatten();
        let new = match &current {
            Some((text, _)) => spec::patch(text, &limits, own),
            None => spec::generate(&facts.template, &limits),
        }
        .map_err(|source| ContainerdError::Spec {
            path: shown(&path),
            source,
        })?;
        let old = current.as_ref().map(|(t, _)| t.clone());
        if old.as_deref() != Some(new.as_str()) {
            let reason = match &old {
                None => format!("new base spec from {}", facts.template_source),
                Some(_) => format!("set RLIMIT_MEMLOCK to {}", cfg.memlock),
            };
            pending.push(format!("{}: {reason}", path.display()));
            plan.changes.push(FileChange {
                path: path.clone(),
                old: old.map(String::into_bytes),
                new: Some(new.into_bytes()),
                mode: current.map_or(0o644, |(_, m)| m),
                owner: SPEC_OWNER,
                reason,
                restart: vec![UNIT.to_owned()],
            });
        }
    }
    // A spec the agent wrote earlier that no handler uses any more goes away.
    for stale in facts
        .owned_specs
        .iter()
        .filter(|p| !spec_for_path.contains_key(*p))
    {
        if let Some(Some((text, mode))) = facts.specs.get(stale) {
            plan.changes.push(FileChange {
                path: stale.clone(),
                old: Some(text.clone().into_bytes()),
                new: None,
                mode: *mode,
                owner: SPEC_OWNER,
                reason: "no runtime handler uses this base spec any more".into(),
                restart: vec![UNIT.to_owned()],
            });
        }
    }
    // Each change names containerd as its reader, so the restart follows from it.
    if plan.changes.is_empty() && facts.live && facts.restart_pending() {
        // Files already right (an earlier apply with --no-restart, or one that was
        // killed before restarting): the restart is still owed.
        plan.actions.push(Action {
            kind: ActionKind::RestartUnit {
                unit: UNIT.to_owned(),
            },
            reason: "containerd started before its config or base spec last changed".into(),
        });
    }
    for c in &plan.changes {
        if !pending
            .iter()
            .any(|p| p.starts_with(&c.path.display().to_string()))
        {
            pending.push(format!("{}: {}", c.path.display(), c.reason));
        }
    }
    Ok(Decision {
        plan,
        handlers: report,
        pending,
    })
}

/// The `containerd.memlock` check from a decision (or the error that prevented one).
pub fn check(
    facts: Option<&Facts>,
    decision: &Result<Decision, String>,
    cfg: &ContainerdConfig,
) -> Check {
    if !cfg.enabled {
        return Check::new(CHECK_ID, Status::Skipped, "disabled in the agent config");
    }
    let d = match decision {
        Err(e) => return Check::new(CHECK_ID, Status::Fail, e.clone()),
        Ok(d) => d,
    };
    let details = json!({
        "target": cfg.memlock.to_string(),
        "handlers": d.handlers.iter().map(|(h, s)| json!({"handler": h, "base_runtime_spec": s})).collect::<Vec<_>>(),
    });
    let names: Vec<&str> = d.handlers.iter().map(|(h, _)| h.as_str()).collect();
    if !d.plan.changes.is_empty() {
        return Check::new(
            CHECK_ID,
            Status::Fail,
            format!(
                "not prepared for memlock {}: {} (run `rdma-node-agent apply`)",
                cfg.memlock,
                d.pending.join("; ")
            ),
        )
        .with_details(details);
    }
    let facts = facts.expect("a decision comes from facts");
    match facts.containerd_started {
        None => Check::new(
            CHECK_ID,
            Status::Warn,
            format!(
                "handlers {} are configured for memlock {}, but containerd is not running",
                names.join(", "),
                cfg.memlock
            ),
        ),
        Some(_) if facts.restart_pending() => Check::new(
            CHECK_ID,
            Status::Fail,
            format!(
                "containerd restart pending: it started before its config or base spec last changed, so new containers do not get memlock {} yet",
                cfg.memlock
            ),
        ),
        Some(_) => Check::new(
            CHECK_ID,
            Status::Ok,
            format!(
                "handlers {} start containers with memlock {}",
                names.join(", "),
                cfg.memlock
            ),
        ),
    }
    .with_details(details)
}

/// After a restart: the unit is active, its socket answers and the CRI plugin
/// loaded. A base spec CRI cannot load does not stop containerd, it only makes the
/// CRI plugin fail: so the plugin is checked, not just the process.
pub fn verify(
    host: &Host,
    manager: &dyn ServiceManager,
    grpc_address: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let address = grpc_address.to_string_lossy().into_owned();
    loop {
        let state = manager
            .status(UNIT)
            .map(|s| s.active_state)
            .unwrap_or_else(|e| e.to_string());
        let cri = if state == "active" {
            match host.run("ctr", &["--address", &address, "plugins", "ls"]) {
                Some(Ok(out)) if out.status.success() => {
                    cri_status(&String::from_utf8_lossy(&out.stdout))
                        .unwrap_or_else(|| "not listed".into())
                }
                Some(Ok(out)) => format!(
                    "socket {address} does not answer: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Some(Err(e)) => format!("cannot run ctr: {e}"),
                None => "ctr not found".into(),
            }
        } else {
            String::new()
        };
        if state == "active" && cri == "ok" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(if state != "active" {
                format!("{UNIT} is {state} after the restart (see journalctl -u containerd)")
            } else {
                format!(
                    "containerd runs but its CRI plugin is {cri:?}: kubelet cannot start pods (see journalctl -u containerd)"
                )
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
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
