//! `kernel.modules`: the required modules are loaded, and the file modprobe
//! would load for each (depmod's choice in modules.dep) was built for the
//! running kernel.

use serde_json::json;

use super::{Facts, MODULES, ModuleTree, Resolved, norm};
use crate::check::{Check, Status};
use crate::config::KernelConfig;

pub fn check_modules(f: &Facts, cfg: &KernelConfig) -> Check {
    if cfg.required_modules.is_empty() {
        return Check::new(
            MODULES,
            Status::Ok,
            "no modules required (kernel.required_modules is empty)",
        );
    }
    let (Some(release), Some(loaded), Some(tree)) = (&f.release, &f.loaded, &f.modules) else {
        return Check::new(
            MODULES,
            Status::Unknown,
            "no /proc/modules or kernel release under this root",
        );
    };
    let resolved = match tree {
        ModuleTree::Absent => {
            return Check::new(
                MODULES,
                Status::Unknown,
                format!("/lib/modules/{release} is not there to read"),
            );
        }
        ModuleTree::NoModulesDep => {
            return Check::new(
                MODULES,
                Status::Unknown,
                format!(
                    "/lib/modules/{release}/modules.dep is missing, so which file modprobe \
                     would load is unknown: run `depmod {release}`"
                ),
            );
        }
        ModuleTree::Read(r) => r,
    };
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut details = Vec::new();
    for m in &cfg.required_modules {
        let name = norm(m);
        let is_loaded = loaded.contains(&name);
        let r = resolved.get(&name).unwrap_or(&Resolved::Missing);
        if !is_loaded && *r != Resolved::Builtin {
            problems.push(format!("{m} is not loaded"));
        }
        match r {
            Resolved::Builtin => {}
            Resolved::Missing => problems.push(format!(
                "{m} has no file in /lib/modules/{release}/modules.dep (nor is it built in)"
            )),
            Resolved::File(file) => {
                match &file.built_for {
                    Ok(k) if k != release => problems.push(format!(
                        "{m}: {} was built for {k}, not {release} (vermagic mismatch)",
                        file.path
                    )),
                    Ok(_) => {}
                    Err(e) => problems.push(format!("{m}: {}: {e}", file.path)),
                }
                if let Some(intree) = &file.shadows {
                    notes.push(format!("{m}: {} shadows in-tree {intree}", file.path));
                }
            }
        }
        details.push(json!({"module": m, "loaded": is_loaded, "resolved": r}));
    }
    let details =
        json!({"release": release, "modules": details, "driver": f.driver, "shadowed": notes});
    if problems.is_empty() {
        let mut msg = format!(
            "{} loaded, files match {release}",
            cfg.required_modules.join(", ")
        );
        if let Some(d) = &f.driver {
            msg.push_str(&format!("; driver {d}"));
        }
        if !notes.is_empty() {
            msg.push_str(&format!("; {}", notes.join("; ")));
        }
        Check::new(MODULES, Status::Ok, msg).with_details(details)
    } else {
        Check::new(MODULES, Status::Fail, problems.join("; ")).with_details(details)
    }
}
