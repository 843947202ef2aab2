//! `kernel.modules`: the required modules are loaded, and the file modprobe
//! would load for each (depmod's choice in modules.dep) was built for the
//! running kernel.

use serde_json::json;

use super::{Facts, MODULES, ModuleTree, Resolved, norm};
use crate::config::KernelConfig;
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
        .with_reason(Reason::FactUnreadable);
    };
    // Why /lib/modules/<release> says nothing, when it does not.
    let tree_gap = match &f.modules {
        Some(ModuleTree::Read(_)) => None,
        Some(ModuleTree::NoModulesDep) => Some(format!(
            "/lib/modules/{release}/modules.dep is missing, so which file modprobe \
             would load is unknown: run `depmod {release}`"
        )),
        Some(ModuleTree::Absent) | None => {
            Some(format!("/lib/modules/{release} is not there to read"))
        }
    };
    let resolved = match &f.modules {
        Some(ModuleTree::Read(r)) => Some(r),
        _ => None,
    };
    let mut problems = Vec::new();
    // The reason of the first problem.
    let mut reason = None;
    let mut unknown = Vec::new();
    let mut builtin = Vec::new();
    let mut notes = Vec::new();
    let mut details = Vec::new();
    for m in &cfg.required_modules {
        let name = norm(m);
        let is_loaded = loaded.contains(&name);
        // The running kernel's own word first: built into its image.
        if let Some(why) = f.running_builtin.get(&name) {
            builtin.push(m.clone());
            details.push(
                json!({"module": m, "loaded": false, "resolved": "builtin", "evidence": why}),
            );
            continue;
        }
        let Some(r) = resolved.map(|r| r.get(&name).unwrap_or(&Resolved::Missing)) else {
            unknown.push(if is_loaded {
                format!("{m} is loaded, but the file modprobe would load next is unknown")
            } else {
                format!("{m} is not loaded, and the running kernel does not show it built in")
            });
            details.push(json!({"module": m, "loaded": is_loaded, "resolved": null}));
            continue;
        };
        if !is_loaded && *r != Resolved::Builtin {
            problems.push(format!("{m} is not loaded"));
            reason.get_or_insert(Reason::ModuleNotLoaded);
        }
        match r {
            Resolved::Builtin => builtin.push(m.clone()),
            Resolved::Missing => {
                problems.push(format!(
                    "{m} has no file in /lib/modules/{release}/modules.dep (nor is it built in)"
                ));
                reason.get_or_insert(Reason::ModuleNotLoaded);
            }
            Resolved::File(file) => {
                match &file.built_for {
                    Ok(k) if k != release => {
                        problems.push(format!(
                            "{m}: {} was built for {k}, not {release} (vermagic mismatch)",
                            file.path
                        ));
                        reason.get_or_insert(Reason::ModuleMismatch);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        problems.push(format!("{m}: {}: {e}", file.path));
                        reason.get_or_insert(Reason::FactUnreadable);
                    }
                }
                if let Some(intree) = &file.shadows {
                    notes.push(format!("{m}: {} shadows in-tree {intree}", file.path));
                }
            }
        }
        details.push(json!({"module": m, "loaded": is_loaded, "resolved": r}));
    }
    let details = json!({"release": release, "modules": details, "driver": f.driver, "shadowed": notes, "builtin": builtin});
    if !problems.is_empty() {
        return Check::new(
            MODULES,
            Status::Fail,
            [problems, unknown].concat().join("; "),
        )
        .with_reason(reason.unwrap_or(Reason::FactUnreadable))
        .with_details(details);
    }
    if !unknown.is_empty() {
        let gap = tree_gap.unwrap_or_default();
        return Check::new(
            MODULES,
            Status::Unknown,
            format!("{}: {gap}", unknown.join("; ")),
        )
        .with_reason(Reason::FactUnreadable)
        .with_details(details);
    }
    let from_files: Vec<&String> = cfg
        .required_modules
        .iter()
        .filter(|m| !builtin.contains(m))
        .collect();
    let mut msg = match (from_files.is_empty(), builtin.is_empty()) {
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
    };
    if let Some(d) = &f.driver {
        msg.push_str(&format!("; driver {d}"));
    }
    if !notes.is_empty() {
        msg.push_str(&format!("; {}", notes.join("; ")));
    }
    Check::new(MODULES, Status::Ok, msg).with_details(details)
}
