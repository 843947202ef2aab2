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
    let mut unmanaged = Vec::new();
    let mut foreign = Vec::new();
    let mut spec_for_path: BTreeMap<PathBuf, bool> = BTreeMap::new();
    // The live config's default handler: a template's `${RUNTIME}` stands for it.
    let mut live_default = None;

    if facts.cri_disabled.is_some() {
        // containerd serves no pods: an edit would change nothing (the check says so).
        return Ok(Decision {
            plan,
            handlers: report,
            pending: Vec::new(),
            unmanaged,
            foreign,
        });
    }
    let mut sets = vec![facts.set.clone()];
    if let Some(t) = &facts.template {
        sets.push(t.clone());
    }
    for (i, mut set) in sets.into_iter().enumerate() {
        let main = set.files[0].path.clone();
        if set.version == Version::V1 && set.files[0].get(&Version::V2.runtime_plugin()).is_some() {
            return Err(ContainerdError::V1IgnoresV2Sections { path: shown(&main) });
        }
        let merge = merge_for(&set, facts.daemon_major, shown)?;
        let eff = Effective::of(&set, merge);
        let mut default = eff.default.clone();
        if default.contains("${") {
            default = live_default.clone().unwrap_or_else(|| "runc".to_owned());
        }
        live_default.get_or_insert_with(|| default.clone());
        let linux: BTreeSet<String> = eff
            .handlers
            .iter()
            .filter(|h| h.linux())
            .map(|h| h.name.clone())
            .collect();
        if i == 0 {
            foreign.extend(
                eff.handlers
                    .iter()
                    .filter(|h| !h.linux())
                    .map(|h| h.name.clone()),
            );
        }
        let managed: Vec<String> = if cfg.handlers.is_empty() {
            let mut names = linux.clone();
            if eff.get(&default).is_none_or(|h| h.linux()) {
                names.insert(default.clone());
            }
            names.into_iter().collect()
        } else {
            cfg.handlers.clone()
        };
        if i == 0 {
            // Handlers CRI can use that the operator left out: said, never silent.
            let mut left: BTreeSet<String> = linux.clone();
            left.insert(default.clone());
            for name in left.iter().filter(|n| !managed.contains(n)) {
                let spec = eff.get(name).and_then(|h| h.spec.clone());
                let has = spec
                    .as_ref()
                    .and_then(|p| facts.specs.get(Path::new(p)).cloned().flatten())
                    .and_then(|(text, _)| spec::memlock(&text))
                    .is_some_and(|(soft, _)| soft >= cfg.memlock.0);
                if !has {
                    unmanaged.push(name.clone());
                }
            }
        }
        // k0s (or k3s/rke2) owns the main file and the admin the other
        // drop-ins: every edit goes to the agent's own drop-in, which containerd merges.
        let dropin = super::rancher::dropin_index(&set).filter(|_| facts.layout != Layout::Plain);
        let to = |file: usize| dropin.unwrap_or(file);
        for name in managed {
            let (file, table, current) = match eff.get(&name) {
                Some(h) if h.implicit => {
                    // A table we create must keep its runtime_type, or containerd
                    // reads it as empty.
                    set.files[to(h.file)].set_str(&h.key("runtime_type"), RUNC_TYPE)?;
                    (to(h.file), h.table.clone(), None)
                }
                Some(h) => (to(h.file), h.table.clone(), h.spec.clone()),
                None if name == "runc" && name == default => {
                    // containerd's implicit default handler: a table we create must keep
                    // its runtime_type, or containerd reads it as empty.
                    let idx = to(match merge {
                        Merge::Replace => winner(&set),
                        Merge::Deep => 0,
                    });
                    let mut table: Vec<String> = set
                        .version
                        .runtimes_path()
                        .iter()
                        .map(|s| s.to_string())
                        .collect();
                    table.push(name.clone());
                    let mut p: Vec<&str> = table.iter().map(String::as_str).collect();
                    p.push("runtime_type");
                    set.files[idx].set_str(&p, RUNC_TYPE)?;
                    (idx, table, None)
                }
                None => {
                    return Err(ContainerdError::UnknownHandler {
                        name,
                        path: shown(&main),
                    });
                }
            };
            // A spec the agent created is its own to move; an operator's stays.
            // Not behind a Go template the agent cannot edit (k3s/rke2): it
            // would render the old path back at the next start.
            let movable = facts.template.is_some() || facts.layout == super::Layout::Plain;
            let spec_path = current
                .clone()
                .map(PathBuf::from)
                .filter(|p| !movable || !facts.owned_specs.contains(p))
                .unwrap_or_else(|| facts.spec_path.clone());
            if current.as_deref().map(Path::new) != Some(spec_path.as_path()) {
                let mut p: Vec<&str> = table.iter().map(String::as_str).collect();
                p.push("base_runtime_spec");
                set.files[file].set_str(&p, &spec_path.to_string_lossy())?;
            }
            if i == 0 {
                report.push((name.clone(), spec_path.display().to_string()));
            }
            spec_for_path.insert(spec_path.clone(), spec_path == facts.spec_path);
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
                    restart: vec![facts.unit.clone()],
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
            plan.changes.push(FileChange {
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
                restart: vec![facts.unit.clone()],
            });
        }
    }
    // Each change names containerd's unit as its reader, so the restart follows from it.
    if plan.changes.is_empty() && facts.live && facts.restart_pending() == Ok(true) {
        // Files already right (an earlier apply with --no-restart, or one that was
        // killed before restarting): the restart is still owed.
        plan.actions.push(Action {
            kind: ActionKind::RestartUnit {
                unit: facts.unit.clone(),
            },
            reason: facts.pending_reason(),
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
    if !foreign.is_empty() {
        plan.notes.push(format!(
            "left alone: runtime handler(s) {} run Windows containers (runhcs), which have no rlimits",
            foreign.join(", ")
        ));
    }
    Ok(Decision {
        plan,
        handlers: report,
        pending,
        unmanaged,
        foreign,
    })
}
