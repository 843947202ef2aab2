//! Reading the kernel's facts from files (and `dkms status`, bounded, live only).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use super::config::KernelConfig;
use super::dkms::{BuildState, DkmsBuild, DkmsLine, ToolError, parse_dkms_status};
use super::{
    Facts, InstalledKernel, KernelState, ModuleFile, ModuleTree, Resolved, modinfo, module_name,
    norm, state_path,
};
use crate::host::HostError;
use crate::host::command::RunError;
use crate::host::read::ReadHost;

const MODULES: &str = "/lib/modules";
const DKMS_TREE: &str = "/var/lib/dkms";
/// Where DKMS installs on Debian/Ubuntu/Arch (updates/dkms), SUSE (updates)
/// and RHEL/Fedora (extra): /usr/sbin/dkms's override_dest_module_location.
pub(crate) const DKMS_DESTS: &[&str] = &["updates/dkms", "updates", "extra"];
/// `dkms status` (a shell script) walks every build; past this it is stuck (a
/// lock, a slow /usr/src). 10 s was not enough for two kernels' builds in the
/// VM tier's emulated guest on a busy host. `ofed_info` gets the same bound.
const DKMS_STATUS_TIMEOUT: Duration = Duration::from_secs(30);

pub fn gather(host: &ReadHost, cfg: &KernelConfig) -> Result<Facts, HostError> {
    let release = trimmed(host, "/proc/sys/kernel/osrelease")?;
    let boot_id = trimmed(host, "/proc/sys/kernel/random/boot_id")?;
    let (state, state_error) = agent_state(host)?;
    let loaded = host.read_string(Path::new("/proc/modules"))?.map(|t| {
        t.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(norm)
            .collect()
    });
    let required: BTreeSet<String> = cfg.required_modules.iter().map(|m| norm(m)).collect();
    let running_builtin = required
        .iter()
        .filter(|m| {
            !loaded
                .as_ref()
                .is_some_and(|l: &BTreeSet<String>| l.contains(*m))
        })
        .filter_map(|m| builtin_evidence(host, m).map(|e| (m.clone(), e)))
        .collect();
    let modules = match &release {
        Some(rel) => Some(module_tree(host, rel, &required)?),
        None => None,
    };
    let kernels = installed_kernels(host)?;
    let (dkms_modules, dkms) = dkms_tree(host)?;
    let dkms_status = dkms_status(host);
    let driver = match host.query_bounded("ofed_info", &["-s"], DKMS_STATUS_TIMEOUT) {
        Some(Ok(out)) if out.status.success() => Some(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .trim_end_matches(':')
                .to_owned(),
        ),
        _ => trimmed(host, "/sys/module/mlx5_core/version")?.map(|v| format!("mlx5_core {v}")),
    };
    Ok(Facts {
        release,
        boot_id,
        state,
        state_error,
        loaded,
        running_builtin,
        modules,
        kernels,
        dkms_modules,
        dkms,
        dkms_status,
        driver,
    })
}

/// A file's text, trimmed; `None` when absent or empty.
fn trimmed(host: &ReadHost, p: &str) -> Result<Option<String>, HostError> {
    Ok(host
        .read_string(Path::new(p))?
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty()))
}

/// The agent's kernel state, and why it does not parse. A state file that
/// does not parse is not a first run: the kernel the agent last ran on is
/// unknown, and so is whether it changed.
fn agent_state(host: &ReadHost) -> Result<(Option<KernelState>, Option<String>), HostError> {
    Ok(match host.state_read(&state_path())? {
        None => (None, None),
        Some(d) => match serde_json::from_slice(&d) {
            Ok(s) => (Some(s), None),
            Err(e) => (
                None,
                Some(format!("{}: {e}", host.path(&state_path()).display())),
            ),
        },
    })
}

/// The kernels with a module directory, and the image each boots from.
fn installed_kernels(host: &ReadHost) -> Result<Vec<InstalledKernel>, HostError> {
    let mut kernels = Vec::new();
    for k in host.list_dir(Path::new(MODULES))? {
        let dir = Path::new(MODULES).join(&k);
        if !host.is_dir(&dir) {
            continue;
        }
        let image = [
            format!("/boot/vmlinuz-{k}"),
            format!("{MODULES}/{k}/vmlinuz"),
        ]
        .into_iter()
        .find(|p| host.exists(Path::new(p)));
        kernels.push(InstalledKernel {
            has_modules: host.is_dir(&dir.join("kernel")),
            release: k,
            image,
        });
    }
    Ok(kernels)
}

/// `dkms status`, bounded; `None` where it cannot run (not the live host).
fn dkms_status(host: &ReadHost) -> Option<Result<Vec<DkmsLine>, ToolError>> {
    host.query_bounded("dkms", &["status"], DKMS_STATUS_TIMEOUT)
        .map(|r| match r {
            Ok(out) if out.status.success() => {
                Ok(parse_dkms_status(&String::from_utf8_lossy(&out.stdout)))
            }
            Ok(out) => Err(ToolError::Failed(format!(
                "dkms status exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
            Err(e @ RunError::TimedOut { .. }) => Err(ToolError::TimedOut(e.to_string())),
            Err(e) => Err(ToolError::Failed(e.to_string())),
        })
}

/// The file modprobe would load for each required module: depmod's choice in
/// modules.dep (it applies depmod.d's search order and overrides), else
/// modules.builtin. modules.order names the in-tree file a choice shadows.
/// Kernel interfaces a module that is not loaded can only have from the
/// kernel image: its class or device (built-in modules without parameters
/// have no /sys/module directory).
const BUILTIN_INTERFACES: &[(&str, &str)] = &[
    ("ib_uverbs", "/sys/class/infiniband_verbs"),
    ("ib_umad", "/sys/class/infiniband_mad"),
    ("rdma_ucm", "/sys/class/misc/rdma_cm"),
    ("rdma_ucm", "/dev/infiniband/rdma_cm"),
];

/// Why the running kernel shows module `m` as built in, if it does: a
/// /sys/module directory without `initstate` (a loaded module has one), or an
/// interface only it provides. Only asked for modules not in /proc/modules.
fn builtin_evidence(host: &ReadHost, m: &str) -> Option<String> {
    let dir = Path::new("/sys/module").join(m);
    if host.is_dir(&dir) && !host.exists(&dir.join("initstate")) {
        return Some(format!("{} has no initstate", dir.display()));
    }
    BUILTIN_INTERFACES
        .iter()
        .filter(|(name, _)| *name == m)
        .find(|(_, p)| host.exists(Path::new(p)))
        .map(|(_, p)| format!("{p} is there"))
}

fn module_tree(
    host: &ReadHost,
    release: &str,
    required: &BTreeSet<String>,
) -> Result<ModuleTree, HostError> {
    let base = Path::new(MODULES).join(release);
    if !host.is_dir(&base) {
        return Ok(ModuleTree::Absent);
    }
    let Some(dep) = host.read_string(&base.join("modules.dep"))? else {
        return Ok(ModuleTree::NoModulesDep);
    };
    let by_name = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .filter_map(|p| {
                let name = module_name(p.rsplit('/').next()?)?;
                required.contains(&name).then(|| (name, p.to_owned()))
            })
            .collect()
    };
    let chosen = by_name(&dep);
    let builtin = by_name(
        &host
            .read_string(&base.join("modules.builtin"))?
            .unwrap_or_default(),
    );
    let in_tree = by_name(
        &host
            .read_string(&base.join("modules.order"))?
            .unwrap_or_default(),
    );
    let mut out = BTreeMap::new();
    for name in required {
        let resolved = match (chosen.get(name), builtin.contains_key(name)) {
            (Some(path), _) => {
                // Module files may be links (RHEL's weak-updates): not managed files.
                let info = host
                    .read_any(&base.join(path))?
                    .map(|d| modinfo::parse_file(path, &d))
                    .unwrap_or(Err(modinfo::ModinfoError::Absent));
                let (built_for, version) = match info {
                    Ok(m) => (
                        m.built_for()
                            .map(str::to_owned)
                            .ok_or_else(|| "no vermagic".to_owned()),
                        m.get("version").map(str::to_owned),
                    ),
                    Err(e) => (Err(e.to_string()), None),
                };
                // modules.order lists in-tree paths without compression suffixes.
                let shadows = in_tree
                    .get(name)
                    .filter(|t| !path.starts_with(t.trim_end_matches(".ko")))
                    .cloned();
                Resolved::File(ModuleFile {
                    path: path.clone(),
                    built_for,
                    version,
                    shadows,
                })
            }
            (None, true) => Resolved::Builtin,
            (None, false) => Resolved::Missing,
        };
        out.insert(name.clone(), resolved);
    }
    Ok(ModuleTree::Read(out))
}

/// DKMS module → its added versions.
type Added = BTreeMap<String, BTreeSet<String>>;

/// /var/lib/dkms as /usr/sbin/dkms (3.0) lays it out: `<m>/<v>/source` once
/// added; `<m>/<v>/<k>/<arch>/module/*.ko*` once built; the link
/// `<m>/kernel-<k>-<arch>` → `<v>/<k>/<arch>` once installed, its files copied
/// to /lib/modules/<k>/<dest>/ (compared here as `dkms status` does).
fn dkms_tree(host: &ReadHost) -> Result<(Added, Vec<DkmsBuild>), HostError> {
    let mut added = BTreeMap::new();
    let mut builds = Vec::new();
    for module in host.list_dir(Path::new(DKMS_TREE))? {
        let mdir = Path::new(DKMS_TREE).join(&module);
        if !host.is_dir(&mdir) {
            continue;
        }
        for version in host.list_dir(&mdir)? {
            let vdir = mdir.join(&version);
            if version.starts_with("kernel-") || version == "original_module" || !host.is_dir(&vdir)
            {
                continue;
            }
            added
                .entry(module.clone())
                .or_insert_with(BTreeSet::new)
                .insert(version.clone());
            for kernel in host.list_dir(&vdir)? {
                if kernel == "source" || kernel == "build" || !host.is_dir(&vdir.join(&kernel)) {
                    continue;
                }
                for arch in host.list_dir(&vdir.join(&kernel))? {
                    let built = vdir.join(&kernel).join(&arch).join("module");
                    let files = host.list_dir(&built)?;
                    if files.is_empty() {
                        continue;
                    }
                    let link = mdir.join(format!("kernel-{kernel}-{arch}"));
                    let installed = host
                        .read_link(&link)?
                        .is_some_and(|t| t == Path::new(&version).join(&kernel).join(&arch));
                    let state = if installed {
                        compare_installed(host, &built, &kernel, &files)?
                    } else {
                        BuildState::Built
                    };
                    builds.push(DkmsBuild {
                        module: module.clone(),
                        version: version.clone(),
                        kernel: kernel.clone(),
                        arch,
                        files,
                        state,
                    });
                }
            }
        }
    }
    Ok((added, builds))
}

/// Installed: every built file has a byte-identical copy in the kernel's tree.
fn compare_installed(
    host: &ReadHost,
    built: &Path,
    kernel: &str,
    files: &[String],
) -> Result<BuildState, HostError> {
    use sha2::{Digest, Sha256};
    let mut missing = Vec::new();
    let mut differ = Vec::new();
    for f in files {
        let ours = host.read_any(&built.join(f))?.map(|d| Sha256::digest(&d));
        let installed = DKMS_DESTS
            .iter()
            .map(|d| Path::new(MODULES).join(kernel).join(d).join(f))
            .find(|p| host.exists(p));
        match installed {
            None => missing.push(f.clone()),
            Some(p) => {
                let theirs = host.read_any(&p)?.map(|d| Sha256::digest(&d));
                if theirs != ours {
                    differ.push(p.to_string_lossy().into_owned());
                }
            }
        }
    }
    Ok(if !missing.is_empty() {
        BuildState::InstalledMissing(missing)
    } else if !differ.is_empty() {
        BuildState::InstalledDiffers(differ)
    } else {
        BuildState::Installed
    })
}
