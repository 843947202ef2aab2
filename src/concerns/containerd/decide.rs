//! decide (pure): which handlers get the base spec, the edits that give it to
//! them where containerd reads it, and the `containerd.memlock` check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::effective::{Effective, Merge, RUNC_TYPE, winner};
use super::layout::Layout;
use super::spec::{self, Rlimits};
use super::toml::Version;
use super::{ConfigSet, ContainerdError, Decision, Facts, SPEC_OWNER};
use crate::config::ContainerdConfig;
use crate::engine::plan::{Action, ActionKind, FileChange, Plan};

/// How containerd merges this set: fixed by the config version where only one
/// containerd major reads it, else by the installed containerd. When that is not
/// known and the two rules give different handlers, the truth cannot be told.
pub fn merge_for(
    set: &ConfigSet,
    daemon_major: Option<u32>,
    shown: &dyn Fn(&Path) -> PathBuf,
) -> Result<Merge, ContainerdError> {
    match (set.version, daemon_major) {
        (Version::V1, _) => Ok(Merge::Replace),
        (Version::V3 | Version::V4, _) => Ok(Merge::Deep),
        (Version::V2, Some(1)) => Ok(Merge::Replace),
        (Version::V2, Some(_)) => Ok(Merge::Deep),
        (Version::V2, None) => {
            let a = Effective::of(set, Merge::Replace);
            let b = Effective::of(set, Merge::Deep);
            if a == b {
                return Ok(Merge::Replace);
            }
            let files: Vec<String> = set
                .files
                .iter()
                .map(|f| shown(&f.path).display().to_string())
                .collect();
            let names = |e: &Effective| {
                e.handlers
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            Err(ContainerdError::Unknown(format!(
                "cannot tell which runtime handlers containerd uses: {} read by {} gives [{}] (default {}), read by {} gives [{}] (default {}) (1.x lets the last file's CRI table replace the others and its `runtimes` replace the built-in runc; 2.x merges both), and the installed containerd's version is not known (`containerd --version` and the dpkg database gave none). Set `daemon_version = 1` or `2` under [containerd] in the agent config",
                files.join(" + "),
                Merge::Replace.describe(),
                names(&a),
                a.default,
                Merge::Deep.describe(),
                names(&b),
                b.default
            )))
        }
    }
}

/// What `decide` builds up over the live config and its template.
#[derive(Default)]
struct Draft {
    plan: Plan,
    /// The live config's handlers that get the spec, and its path.
    handlers: Vec<(String, String)>,
    unmanaged: Vec<String>,
    foreign: Vec<String>,
    /// Every base spec a handler is pointed at, and whether it is the agent's
    /// own path (then the whole spec is the agent's to keep in shape).
    spec_for_path: BTreeMap<PathBuf, bool>,
    /// The live config's default handler: a template's `${RUNTIME}` stands for it.
    live_default: Option<String>,
}

/// Decides every edit. Pure: the same facts always give the same plan.
pub fn decide(
    facts: &Facts,
    cfg: &ContainerdConfig,
    shown: &dyn Fn(&Path) -> PathBuf,
) -> Result<Decision, ContainerdError> {
    let mut d = Draft::default();
    if facts.cri_disabled.is_some() {
        // containerd serves no pods: an edit would change nothing (the check says so).
        return Ok(d.into_decision(Vec::new()));
    }
    let mut sets = vec![facts.set.clone()];
    if let Some(t) = &facts.template {
        sets.push(t.clone());
    }
    for (i, set) in sets.into_iter().enumerate() {
        d.edit_set(i == 0, set, facts, cfg, shown)?;
    }
    let mut pending = d.write_specs(facts, cfg, shown)?;
    d.remove_stale_specs(facts);
    // Each change names containerd's unit as its reader, so the restart follows from it.
    if d.plan.changes.is_empty() && facts.live && facts.restart_pending() == Ok(true) {
        // Files already right (an earlier apply with --no-restart, or one that was
        // killed before restarting): the restart is still owed.
        d.plan.actions.push(Action {
            kind: ActionKind::RestartUnit {
                unit: facts.unit.clone(),
            },
            reason: facts.pending_reason(),
        });
    }
    for c in &d.plan.changes {
        if !pending
            .iter()
            .any(|p| p.starts_with(&c.path.display().to_string()))
        {
            pending.push(format!("{}: {}", c.path.display(), c.reason));
        }
    }
    if !d.foreign.is_empty() {
        d.plan.notes.push(format!(
            "left alone: runtime handler(s) {} run Windows containers (runhcs), which have no rlimits",
            d.foreign.join(", ")
        ));
    }
    Ok(d.into_decision(pending))
}

impl Draft {
    fn into_decision(self, pending: Vec<String>) -> Decision {
        Decision {
            plan: self.plan,
            handlers: self.handlers,
            pending,
            unmanaged: self.unmanaged,
            foreign: self.foreign,
        }
    }

    /// Points the managed handlers of one config set (`live`: the config
    /// containerd reads now, else its template) at their base spec, and plans
    /// the files that changed.
    fn edit_set(
        &mut self,
        live: bool,
        mut set: ConfigSet,
        facts: &Facts,
        cfg: &ContainerdConfig,
        shown: &dyn Fn(&Path) -> PathBuf,
    ) -> Result<(), ContainerdError> {
        let main = set.files[0].path.clone();
        if set.version == Version::V1 && set.files[0].get(&Version::V2.runtime_plugin()).is_some() {
            return Err(ContainerdError::V1IgnoresV2Sections { path: shown(&main) });
        }
        let merge = merge_for(&set, facts.daemon_major, shown)?;
        let eff = Effective::of(&set, merge);
        let mut default = eff.default.clone();
        if default.contains("${") {
            default = self
                .live_default
                .clone()
                .unwrap_or_else(|| "runc".to_owned());
        }
        self.live_default.get_or_insert_with(|| default.clone());
        let linux: BTreeSet<String> = eff
            .handlers
            .iter()
            .filter(|h| h.linux())
            .map(|h| h.name.clone())
            .collect();
        if live {
            let foreign = eff.handlers.iter().filter(|h| !h.linux());
            self.foreign.extend(foreign.map(|h| h.name.clone()));
        }
        let managed = managed_handlers(cfg, &eff, &linux, &default);
        if live {
            self.note_unmanaged(facts, cfg, &eff, &linux, &default, &managed);
        }
        // k0s (or k3s/rke2) owns the main file and the admin the other
        // drop-ins: every edit goes to the agent's own drop-in, which containerd merges.
        let dropin = super::rancher::dropin_index(&set).filter(|_| facts.layout != Layout::Plain);
        let at = Target {
            merge,
            dropin,
            default: &default,
        };
        for name in managed {
            let Some(Located {
                file,
                table,
                current,
            }) = locate_handler(&mut set, &eff, &name, &at)?
            else {
                return Err(ContainerdError::UnknownHandler {
                    name,
                    path: shown(&main),
                });
            };
            let spec_path = spec_path_for(facts, current.as_deref());
            if current.as_deref().map(Path::new) != Some(spec_path.as_path()) {
                let mut p: Vec<&str> = table.iter().map(String::as_str).collect();
                p.push("base_runtime_spec");
                set.files[file].set_str(&p, &spec_path.to_string_lossy())?;
            }
            if live {
                self.handlers
                    .push((name.clone(), spec_path.display().to_string()));
            }
            self.spec_for_path
                .insert(spec_path.clone(), spec_path == facts.spec_path);
        }
        self.plan_changed_files(&set, facts);
        Ok(())
    }

    /// Plans the set's files that the edits changed; containerd reads them
    /// at its restart.
    fn plan_changed_files(&mut self, set: &ConfigSet, facts: &Facts) {
        for f in set.files.iter().filter(|f| f.changed()) {
            self.plan.changes.push(FileChange {
                path: f.path.clone(),
                old: f.original.clone().map(String::into_bytes),
                new: Some(f.rendered().into_bytes()),
                mode: f.mode,
                owner: "containerd",
                reason: "point runtime handlers at a base spec with the target RLIMIT_MEMLOCK"
                    .into(),
                restart: vec![facts.unit.clone()],
            });
        }
    }

    /// Handlers CRI can use that the operator left out (and whose spec does
    /// not already give the memlock): said, never silent.
    fn note_unmanaged(
        &mut self,
        facts: &Facts,
        cfg: &ContainerdConfig,
        eff: &Effective,
        linux: &BTreeSet<String>,
        default: &str,
        managed: &[String],
    ) {
        let mut left: BTreeSet<String> = linux.clone();
        left.insert(default.to_owned());
        for name in left.iter().filter(|n| !managed.contains(n)) {
            let spec = eff.get(name).and_then(|h| h.spec.clone());
            let has = spec
                .as_ref()
                .and_then(|p| facts.specs.get(Path::new(p)).cloned().flatten())
                .and_then(|(text, _)| spec::memlock(&text))
                .is_some_and(|(soft, _)| soft >= cfg.memlock.0);
            if !has {
                self.unmanaged.push(name.clone());
            }
        }
    }

    /// Plans each base spec with the target limits (patched, or made from the
    /// template). Returns what is pending, one line per spec.
    fn write_specs(
        &mut self,
        facts: &Facts,
        cfg: &ContainerdConfig,
        shown: &dyn Fn(&Path) -> PathBuf,
    ) -> Result<Vec<String>, ContainerdError> {
        let limits = Rlimits {
            memlock: cfg.memlock,
            extra: cfg.rlimits.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        };
        let mut pending = Vec::new();
        for (path, own) in &self.spec_for_path {
            let (path, own) = (path.clone(), *own);
            let current = facts.specs.get(&path).cloned().flatten();
            let new = match &current {
                Some((text, _)) => spec::patch(text, &limits, own),
                None => spec::generate(&facts.template_spec, &limits),
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
                self.plan.changes.push(FileChange {
                    path: path.clone(),
                    old: old.map(String::into_bytes),
                    new: Some(new.into_bytes()),
                    mode: current.map_or(0o644, |(_, m)| m),
                    owner: SPEC_OWNER,
                    reason,
                    restart: vec![facts.unit.clone()],
                });
            }
        }
        Ok(pending)
    }

    /// A spec the agent wrote earlier that no handler uses any more goes away.
    fn remove_stale_specs(&mut self, facts: &Facts) {
        for stale in facts
            .owned_specs
            .iter()
            .filter(|p| !self.spec_for_path.contains_key(*p))
        {
            if let Some(Some((text, mode))) = facts.specs.get(stale) {
                self.plan.changes.push(FileChange {
                    path: stale.clone(),
                    old: Some(text.clone().into_bytes()),
                    new: None,
                    mode: *mode,
                    owner: SPEC_OWNER,
                    reason: "no runtime handler uses this base spec any more".into(),
                    restart: vec![facts.unit.clone()],
                });
            }
        }
    }
}

/// The handlers to give the spec: the operator's list, else every Linux
/// handler and the default.
fn managed_handlers(
    cfg: &ContainerdConfig,
    eff: &Effective,
    linux: &BTreeSet<String>,
    default: &str,
) -> Vec<String> {
    if !cfg.handlers.is_empty() {
        return cfg.handlers.clone();
    }
    let mut names = linux.clone();
    if eff.get(default).is_none_or(|h| h.linux()) {
        names.insert(default.to_owned());
    }
    names.into_iter().collect()
}

/// Where a set's edits go.
struct Target<'a> {
    merge: Merge,
    /// The agent's own drop-in, where every edit goes on a managed layout.
    dropin: Option<usize>,
    /// The default handler's name.
    default: &'a str,
}

impl Target<'_> {
    fn to(&self, file: usize) -> usize {
        self.dropin.unwrap_or(file)
    }
}

/// A handler's table in a config set.
struct Located {
    /// The file its edits go to.
    file: usize,
    table: Vec<String>,
    /// The base spec it names now.
    current: Option<String>,
}

/// Where a handler's table is; a table containerd only implies is made.
/// `None` for a handler the config lacks.
fn locate_handler(
    set: &mut ConfigSet,
    eff: &Effective,
    name: &str,
    at: &Target,
) -> Result<Option<Located>, ContainerdError> {
    let (file, table, current) = match eff.get(name) {
        Some(h) if h.implicit => {
            // A table we create must keep its runtime_type, or containerd
            // reads it as empty.
            set.files[at.to(h.file)].set_str(&h.key("runtime_type"), RUNC_TYPE)?;
            (at.to(h.file), h.table.clone(), None)
        }
        Some(h) => (at.to(h.file), h.table.clone(), h.spec.clone()),
        None if name == "runc" && name == at.default => {
            // containerd's implicit default handler: a table we create must keep
            // its runtime_type, or containerd reads it as empty.
            let idx = at.to(match at.merge {
                Merge::Replace => winner(set),
                Merge::Deep => 0,
            });
            let mut table: Vec<String> = set
                .version
                .runtimes_path()
                .iter()
                .map(|s| s.to_string())
                .collect();
            table.push(name.to_owned());
            let mut p: Vec<&str> = table.iter().map(String::as_str).collect();
            p.push("runtime_type");
            set.files[idx].set_str(&p, RUNC_TYPE)?;
            (idx, table, None)
        }
        None => return Ok(None),
    };
    Ok(Some(Located {
        file,
        table,
        current,
    }))
}

/// The base spec a handler should name. A spec the agent created is its own
/// to move; an operator's stays. Not behind a Go template the agent cannot
/// edit (k3s/rke2): it would render the old path back at the next start.
fn spec_path_for(facts: &Facts, current: Option<&str>) -> PathBuf {
    let movable = facts.template.is_some() || facts.layout == Layout::Plain;
    current
        .map(PathBuf::from)
        .filter(|p| !movable || !facts.owned_specs.contains(p))
        .unwrap_or_else(|| facts.spec_path.clone())
}
