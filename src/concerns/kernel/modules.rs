//! `kernel.modules`: the required modules are loaded, and the file modprobe
//! would load for each (depmod's choice in modules.dep) was built for the
//! running kernel.

use crate::concerns::kernel::reasons;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::config::KernelConfig;
use super::{Facts, MODULES, ModuleTree, Resolved, norm};
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

pub fn check_modules(f: &Facts, cfg: &KernelConfig) -> Check {
    if cfg.required_modules.is_empty() {
        return Check::new(
            MODULES,
            Status::Ok,
            "no modules required (kernel.required_modules is empty)",
        );
    }
    let (Some(release), Some(loaded)) = (&f.release, &f.loaded) else {
        return Check::new(
            MODULES,
            Status::Unknown,
            "no /proc/modules or kernel release under this root",
        )
        .with_reason(Reason::FACT_UNREADABLE);
    };
    let resolved = match &f.modules {
        Some(ModuleTree::Read(r)) => Some(r),
        _ => None,
    };
    let mut t = Tally::default();
    for m in &cfg.required_modules {
        t.module(f, m, release, loaded, resolved);
    }
    let Tally {
        problems,
        reason,
        unknown,
        builtin,
        notes,
        details,
    } = t;
    let details = json!({"release": release, "modules": details, "driver": f.driver, "shadowed": notes, "builtin": builtin});
    if !problems.is_empty() {
        return Check::new(
            MODULES,
            Status::Fail,
            [problems, unknown].concat().join("; "),
        )
        .with_reason(reason.unwrap_or(Reason::FACT_UNREADABLE))
        .with_details(details);
    }
    if !unknown.is_empty() {
        let gap = tree_gap(f, release).unwrap_or_default();
        return Check::new(
            MODULES,
            Status::Unknown,
            format!("{}: {gap}", unknown.join("; ")),
        )
        .with_reason(Reason::FACT_UNREADABLE)
        .with_details(details);
    }
    let mut msg = ok_message(cfg, &builtin, release);
    if let Some(d) = &f.driver {
        msg.push_str(&format!("; driver {d}"));
    }
    if !notes.is_empty() {
        msg.push_str(&format!("; {}", notes.join("; ")));
    }
    Check::new(MODULES, Status::Ok, msg).with_details(details)
}

/// Why /lib/modules/<release> says nothing, when it does not.
fn tree_gap(f: &Facts, release: &str) -> Option<String> {
    match &f.modules {
        Some(ModuleTree::Read(_)) => None,
        Some(ModuleTree::NoModulesDep) => Some(format!(
            "/lib/modules/{release}/modules.dep is missing, so which file modprobe \
             would load is unknown: run `depmod {release}`"
        )),
        Some(ModuleTree::Absent) | None => {
            Some(format!("/lib/modules/{release} is not there to read"))
        }
    }
}

/// What the required modules showed, one module at a time.
#[derive(Default)]
struct Tally {
    problems: Vec<String>,
    /// The reason of the first problem.
    reason: Option<Reason>,
    unknown: Vec<String>,
    builtin: Vec<String>,
    notes: Vec<String>,
    details: Vec<serde_json::Value>,
}

impl Tally {
    fn module(
        &mut self,
        f: &Facts,
        m: &str,
        release: &str,
        loaded: &BTreeSet<String>,
        resolved: Option<&BTreeMap<String, Resolved>>,
    ) {
        let name = norm(m);
        let is_loaded = loaded.contains(&name);
        // The running kernel's own word first: built into its image.
        if let Some(why) = f.running_builtin.get(&name) {
            self.builtin.push(m.to_owned());
            self.details.push(
                json!({"module": m, "loaded": false, "resolved": "builtin", "evidence": why}),
            );
            return;
        }
        let Some(r) = resolved.map(|r| r.get(&name).unwrap_or(&Resolved::Missing)) else {
            self.unknown.push(if is_loaded {
                format!("{m} is loaded, but the file modprobe would load next is unknown")
            } else {
                format!("{m} is not loaded, and the running kernel does not show it built in")
            });
            self.details
                .push(json!({"module": m, "loaded": is_loaded, "resolved": null}));
            return;
        };
        if !is_loaded && *r != Resolved::Builtin {
            self.problems.push(format!("{m} is not loaded"));
            self.reason.get_or_insert(reasons::MODULE_NOT_LOADED);
        }
        match r {
            Resolved::Builtin => self.builtin.push(m.to_owned()),
            Resolved::Missing => {
                self.problems.push(format!(
                    "{m} has no file in /lib/modules/{release}/modules.dep (nor is it built in)"
                ));
                self.reason.get_or_insert(reasons::MODULE_NOT_LOADED);
            }
            Resolved::File(file) => {
                match &file.built_for {
                    Ok(k) if k != release => {
                        self.problems.push(format!(
                            "{m}: {} was built for {k}, not {release} (vermagic mismatch)",
                            file.path
                        ));
                        self.reason.get_or_insert(reasons::MODULE_MISMATCH);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.problems.push(format!("{m}: {}: {e}", file.path));
                        self.reason.get_or_insert(Reason::FACT_UNREADABLE);
                    }
                }
                if let Some(intree) = &file.shadows {
                    self.notes
                        .push(format!("{m}: {} shadows in-tree {intree}", file.path));
                }
            }
        }
        self.details
            .push(json!({"module": m, "loaded": is_loaded, "resolved": r}));
    }
}

/// The ok message: which modules are loaded from files that match the
/// release, and which are built in.
fn ok_message(cfg: &KernelConfig, builtin: &[String], release: &str) -> String {
    let from_files: Vec<&String> = cfg
        .required_modules
        .iter()
        .filter(|m| !builtin.contains(m))
        .collect();
    match (from_files.is_empty(), builtin.is_empty()) {
        (false, true) => format!(
            "{} loaded, files match {release}",
            cfg.required_modules.join(", ")
        ),
        (true, _) => format!("{} built into kernel {release}", builtin.join(", ")),
        (false, false) => format!(
            "{} loaded, files match {release}; {} built in",
            from_files
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            builtin.join(", ")
        ),
    }
}
