//! The host's own truth about the RDMA driver stack, before and after a reboot:
//! `kernel.change` (the kernel changed since the last run), `kernel.modules` (the
//! required modules are loaded and their files match the kernel they sit under),
//! `kernel.dkms` (DKMS built the RDMA stack for the running kernel and for every
//! newer installed one, i.e. the one the next reboot boots).

pub mod concern;
pub mod modinfo;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::check::{Check, Status};
use crate::config::KernelConfig;
use crate::host::{Host, HostError};
use crate::ledger::STATE_DIR;

pub const CHANGE: &str = "kernel.change";
pub const MODULES: &str = "kernel.modules";
pub const DKMS: &str = "kernel.dkms";

/// Where modules are looked for, in depmod's order: updates (DKMS puts its builds
/// in updates/dkms) and extra shadow the in-tree kernel/ tree.
const SEARCH: &[&str] = &["updates", "extra", "kernel"];

/// The agent's own bookkeeping (not a host file: never reverted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelState {
    pub release: String,
    pub boot_id: String,
    /// The release before `release`, when the last recorded run saw a change.
    #[serde(default)]
    pub previous: Option<String>,
}

pub fn state_path() -> PathBuf {
    Path::new(STATE_DIR).join("kernel.json")
}

/// One line of `dkms status`: a module version and, once built, the kernel and
/// its state there (`added`, `built`, `installed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DkmsStatus {
    pub module: String,
    pub version: String,
    pub kernel: Option<String>,
    pub state: String,
}

/// One candidate file of a module under /lib/modules/<release>/.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFile {
    /// Relative to /lib/modules/<release>/, e.g. `updates/dkms/mlx5_ib.ko`.
    pub rel: String,
    /// The release its vermagic names, or why it could not be read.
    pub built_for: Result<String, String>,
    pub version: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub release: Option<String>,
    pub boot_id: Option<String>,
    pub state: Option<KernelState>,
    /// Loaded modules (names with '_').
    pub loaded: Option<BTreeSet<String>>,
    /// Required module → its files under the running kernel, in search order.
    pub files: BTreeMap<String, Vec<ModuleFile>>,
    pub modules_dir_exists: bool,
    /// Installed kernels (directories of /lib/modules).
    pub installed: Vec<String>,
    /// DKMS module → version → kernels it is built for.
    pub dkms: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// `dkms status` on the live host, when the tool is there: the cross-check.
    pub dkms_status: Option<Vec<DkmsStatus>>,
    /// The MLNX_OFED/DOCA or mlx5_core driver version, for fleets to compare.
    pub driver: Option<String>,
}

fn norm(name: &str) -> String {
    name.replace('-', "_")
}

fn module_name(file: &str) -> Option<String> {
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.zst"))?;
    Some(norm(stem))
}

pub fn gather(host: &Host, cfg: &KernelConfig) -> Result<Facts, HostError> {
    let trimmed = |p: &str| -> Result<Option<String>, HostError> {
        Ok(host
            .read_string(Path::new(p))?
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()))
    };
    let release = trimmed("/proc/sys/kernel/osrelease")?;
    let boot_id = trimmed("/proc/sys/kernel/random/boot_id")?;
    let state = host
        .state_read(&state_path())?
        .and_then(|d| serde_json::from_slice(&d).ok());
    let loaded = host.read_string(Path::new("/proc/modules"))?.map(|t| {
        t.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(norm)
            .collect()
    });

    let required: BTreeSet<String> = cfg.required_modules.iter().map(|m| norm(m)).collect();
    let mut files: BTreeMap<String, Vec<ModuleFile>> = BTreeMap::new();
    let mut modules_dir_exists = false;
    if let Some(rel) = &release {
        let base = Path::new("/lib/modules").join(rel);
        modules_dir_exists = host.is_dir(&base);
        for top in SEARCH {
            let mut found = Vec::new();
            walk(host, &base.join(top), &mut found)?;
            for p in found {
                let Some(name) = p.file_name().and_then(|n| n.to_str()).and_then(module_name)
                else {
                    continue;
                };
                if !required.contains(&name) {
                    continue;
                }
                let rel_path = p
                    .strip_prefix(&base)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned();
                // Module files may be links (RHEL's weak-updates): not managed files.
                let info = host
                    .read_any(&p)?
                    .map(|d| modinfo::parse_file(&rel_path, &d))
                    .unwrap_or(Err(modinfo::ModinfoError::NotElf));
                let (built_for, version) = match info {
                    Ok(m) => (
                        m.built_for()
                            .map(str::to_owned)
                            .ok_or_else(|| "no vermagic".to_owned()),
                        m.get("version").map(str::to_owned),
                    ),
                    Err(e) => (Err(e.to_string()), None),
                };
                files.entry(name).or_default().push(ModuleFile {
                    rel: rel_path,
                    built_for,
                    version,
                });
            }
        }
    }

    let installed = host.list_dir(Path::new("/lib/modules"))?;
    let mut dkms: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for module in host.list_dir(Path::new("/var/lib/dkms"))? {
        let mdir = Path::new("/var/lib/dkms").join(&module);
        if !host.is_dir(&mdir) {
            continue;
        }
        for version in host.list_dir(&mdir)? {
            let vdir = mdir.join(&version);
            // `kernel-<release>-<arch>` links and `source` are not builds.
            if version == "source" || version.starts_with("kernel-") || !host.is_dir(&vdir) {
                continue;
            }
            let kernels: BTreeSet<String> = host
                .list_dir(&vdir)?
                .into_iter()
                .filter(|k| k != "source" && k != "build")
                .filter(|k| {
                    // Built: <kernel>/<arch>/module/ holds the .ko files.
                    host.list_dir(&vdir.join(k))
                        .unwrap_or_default()
                        .iter()
                        .any(|arch| {
                            !host
                                .list_dir(&vdir.join(k).join(arch).join("module"))
                                .unwrap_or_default()
                                .is_empty()
                        })
                })
                .collect();
            dkms.entry(module.clone())
                .or_default()
                .insert(version, kernels);
        }
    }

    let dkms_status = match host.run("dkms", &["status"]) {
        Some(Ok(out)) if out.status.success() => {
            Some(parse_dkms_status(&String::from_utf8_lossy(&out.stdout)))
        }
        _ => None,
    };

    let driver = match host.run("ofed_info", &["-s"]) {
        Some(Ok(out)) if out.status.success() => Some(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .trim_end_matches(':')
                .to_owned(),
        ),
        _ => trimmed("/sys/module/mlx5_core/version")?.map(|v| format!("mlx5_core {v}")),
    };

    Ok(Facts {
        release,
        boot_id,
        state,
        loaded,
        files,
        modules_dir_exists,
        installed,
        dkms,
        dkms_status,
        driver,
    })
}

/// Every file under `dir`, recursively (a missing dir is empty).
fn walk(host: &Host, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), HostError> {
    for name in host.list_dir(dir)? {
        let p = dir.join(&name);
        if host.is_dir(&p) {
            walk(host, &p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// Kernel releases in version order: digits compare as numbers (6.8.0-51 > 6.8.0-9).
pub fn compare_releases(a: &str, b: &str) -> Ordering {
    fn parts(s: &str) -> Vec<Result<u64, String>> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut digits = false;
        for c in s.chars() {
            let d = c.is_ascii_digit();
            if !cur.is_empty() && d != digits {
                out.push(if digits {
                    cur.parse().map_err(|_| cur.clone())
                } else {
                    Err(cur.clone())
                });
                cur.clear();
            }
            digits = d;
            cur.push(c);
        }
        if !cur.is_empty() {
            out.push(if digits {
                cur.parse().map_err(|_| cur.clone())
            } else {
                Err(cur)
            });
        }
        out
    }
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x, y) {
            (Ok(x), Ok(y)) => x.cmp(y),
            (Err(x), Err(y)) => x.cmp(y),
            (Ok(_), Err(_)) => Ordering::Greater,
            (Err(_), Ok(_)) => Ordering::Less,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

// ---------- decide (pure) ----------

/// The state `apply` records, if it differs from what is recorded.
pub fn next_state(f: &Facts) -> Option<KernelState> {
    let (release, boot_id) = (f.release.clone()?, f.boot_id.clone().unwrap_or_default());
    let state = match &f.state {
        None => KernelState {
            release,
            boot_id,
            previous: None,
        },
        Some(s) if s.release != release => KernelState {
            release,
            boot_id,
            previous: Some(s.release.clone()),
        },
        // Same kernel, new boot: the change was reported in its boot; forget it.
        Some(s) if s.boot_id != boot_id => KernelState {
            release,
            boot_id,
            previous: None,
        },
        Some(_) => return None,
    };
    Some(state)
}

/// The release this boot changed from, once per boot: for metrics and alerts.
pub fn changed_from(f: &Facts) -> Option<String> {
    let release = f.release.as_ref()?;
    match &f.state {
        Some(s) if &s.release != release => Some(s.release.clone()),
        Some(s) if f.boot_id.as_deref() == Some(s.boot_id.as_str()) => s.previous.clone(),
        _ => None,
    }
}

pub fn check_change(f: &Facts) -> Check {
    let Some(release) = &f.release else {
        return Check::new(
            CHANGE,
            Status::Unknown,
            "no /proc/sys/kernel/osrelease under this root",
        );
    };
    let changed_from = changed_from(f);
    let details = json!({"release": release, "boot_id": f.boot_id, "recorded": f.state, "changed_from": changed_from});
    match &f.state {
        None => Check::new(CHANGE, Status::Ok, format!("kernel {release}; first run, nothing to compare with")),
        Some(s) if &s.release != release => Check::new(
            CHANGE,
            Status::Warn,
            format!(
                "kernel changed from {} to {release} since the last run: the host preparation is re-applied at the next apply",
                s.release
            ),
        ),
        Some(s) if s.previous.is_some() && f.boot_id.as_deref() == Some(s.boot_id.as_str()) => Check::new(
            CHANGE,
            Status::Ok,
            format!(
                "kernel changed from {} to {release} at this boot; host preparation re-applied",
                s.previous.as_deref().unwrap_or_default()
            ),
        ),
        Some(_) => Check::new(CHANGE, Status::Ok, format!("kernel {release}, unchanged")),
    }
    .with_details(details)
}

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
        );
    };
    if !f.modules_dir_exists {
        return Check::new(
            MODULES,
            Status::Unknown,
            format!("/lib/modules/{release} is not there to read"),
        );
    }
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut details = Vec::new();
    for m in &cfg.required_modules {
        let name = norm(m);
        let files = f.files.get(&name).cloned().unwrap_or_default();
        let is_loaded = loaded.contains(&name);
        if !is_loaded {
            problems.push(format!("{m} is not loaded"));
        }
        match files.first() {
            None => problems.push(format!("{m} has no file under /lib/modules/{release}")),
            Some(chosen) => {
                match &chosen.built_for {
                    Ok(k) if k != release => problems.push(format!(
                        "{m}: {} was built for {k}, not {release} (vermagic mismatch)",
                        chosen.rel
                    )),
                    Ok(_) => {}
                    Err(e) => problems.push(format!("{m}: {}: {e}", chosen.rel)),
                }
                if !chosen.rel.starts_with("kernel/") {
                    if let Some(intree) = files.iter().find(|x| x.rel.starts_with("kernel/")) {
                        notes.push(format!(
                            "{m}: {} shadows in-tree {}",
                            chosen.rel, intree.rel
                        ));
                    }
                }
            }
        }
        details.push(json!({
            "module": m,
            "loaded": is_loaded,
            "files": files.iter().map(|x| json!({
                "path": x.rel,
                "built_for": x.built_for.as_ref().ok(),
                "error": x.built_for.as_ref().err(),
                "version": x.version,
            })).collect::<Vec<_>>(),
        }));
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

/// `dkms status` lines, in dkms 3's `module/version, kernel, arch: state` and
/// dkms 2's `module, version, kernel, arch: state` forms (`module/version: added`
/// before a build). A note after the state, such as `(WARNING! …)`, is dropped.
pub fn parse_dkms_status(text: &str) -> Vec<DkmsStatus> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(": ")?;
            let state = right.split_whitespace().next()?.to_owned();
            let parts: Vec<&str> = left.split(',').map(str::trim).collect();
            let (module, version, rest) = match parts[0].split_once('/') {
                Some((m, v)) => (m, v, &parts[1..]),
                None if parts.len() >= 2 => (parts[0], parts[1], &parts[2..]),
                None => return None,
            };
            (!module.is_empty() && !version.is_empty()).then(|| DkmsStatus {
                module: module.to_owned(),
                version: version.to_owned(),
                kernel: rest.first().map(|k| (*k).to_owned()),
                state,
            })
        })
        .collect()
}

/// Why a kernel lacks a DKMS module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lack {
    /// No build under /var/lib/dkms.
    NotBuilt,
    /// Built, but `dkms status` does not say installed: its files are not under
    /// /lib/modules/<kernel>, so booting it loads no such module.
    NotInstalled,
}

impl Lack {
    fn why(self) -> &'static str {
        match self {
            Lack::NotBuilt => "not built by DKMS",
            Lack::NotInstalled => {
                "built by DKMS but not installed (dkms status): run `dkms install`"
            }
        }
    }
}

/// The kernels a DKMS build must exist for: the running one and every newer installed one.
fn kernels_to_cover<'a>(f: &'a Facts, release: &'a str) -> Vec<&'a str> {
    let mut v: Vec<&str> = f
        .installed
        .iter()
        .map(String::as_str)
        .filter(|k| compare_releases(k, release) == Ordering::Greater)
        .collect();
    v.sort_by(|a, b| compare_releases(a, b));
    v.insert(0, release);
    v
}

/// Why a reboot must wait: newer kernels that would boot without the RDMA stack.
pub fn hold_back_reasons(f: &Facts, cfg: &KernelConfig) -> Vec<String> {
    dkms_gaps(f, cfg)
        .into_iter()
        .filter(|(k, _, _)| Some(k.as_str()) != f.release.as_deref())
        .map(|(k, lack, missing)| lost_on_reboot(&k, lack, &missing))
        .collect()
}

fn lost_on_reboot(kernel: &str, lack: Lack, missing: &[String]) -> String {
    format!(
        "rebooting into {kernel} would lose {}: {}",
        missing.join(", "),
        lack.why()
    )
}

/// (kernel, why, DKMS modules it lacks), one entry per kernel and reason.
fn dkms_gaps(f: &Facts, cfg: &KernelConfig) -> Vec<(String, Lack, Vec<String>)> {
    let Some(release) = &f.release else {
        return Vec::new();
    };
    let wanted: Vec<&String> = if cfg.dkms_modules.is_empty() {
        f.dkms.keys().collect()
    } else {
        cfg.dkms_modules.iter().collect()
    };
    let mut out = Vec::new();
    for k in kernels_to_cover(f, release) {
        let mut lacks: BTreeMap<Lack, Vec<String>> = BTreeMap::new();
        for m in &wanted {
            let built = f
                .dkms
                .get(m.as_str())
                .is_some_and(|versions| versions.values().any(|ks| ks.contains(k)));
            let installed = |st: &Vec<DkmsStatus>| {
                st.iter().any(|s| {
                    s.module == **m && s.kernel.as_deref() == Some(k) && s.state == "installed"
                })
            };
            let lack = if !built {
                Some(Lack::NotBuilt)
            } else if f.dkms_status.as_ref().is_some_and(|st| !installed(st)) {
                Some(Lack::NotInstalled)
            } else {
                None
            };
            if let Some(lack) = lack {
                lacks.entry(lack).or_default().push(m.to_string());
            }
        }
        out.extend(
            lacks
                .into_iter()
                .map(|(lack, missing)| (k.to_owned(), lack, missing)),
        );
    }
    out
}

/// `dkms status` lines that claim an install /var/lib/dkms holds no build for.
fn dkms_disagreements(f: &Facts) -> Vec<String> {
    let Some(status) = &f.dkms_status else {
        return Vec::new();
    };
    status
        .iter()
        .filter(|s| s.state == "installed")
        .filter_map(|s| {
            let k = s.kernel.as_deref()?;
            let built = f
                .dkms
                .get(&s.module)
                .and_then(|v| v.get(&s.version))
                .is_some_and(|ks| ks.contains(k));
            (!built).then(|| {
                format!(
                    "dkms status says {}/{} is installed for {k}, but /var/lib/dkms holds no such build",
                    s.module, s.version
                )
            })
        })
        .collect()
}

pub fn check_dkms(f: &Facts, cfg: &KernelConfig) -> Check {
    let Some(release) = &f.release else {
        return Check::new(
            DKMS,
            Status::Unknown,
            "no /proc/sys/kernel/osrelease under this root",
        );
    };
    if f.dkms.is_empty() && cfg.dkms_modules.is_empty() {
        return Check::new(
            DKMS,
            Status::Ok,
            "no DKMS modules registered (in-tree RDMA stack)",
        );
    }
    let disagreements = dkms_disagreements(f);
    let details = json!({
        "release": release,
        "newer_installed": kernels_to_cover(f, release).into_iter().skip(1).collect::<Vec<_>>(),
        "dkms": f.dkms,
        "dkms_status": f.dkms_status,
        "disagreements": disagreements,
    });
    let gaps = dkms_gaps(f, cfg);
    if gaps.is_empty() {
        let covered = kernels_to_cover(f, release).join(", ");
        let checked = if f.dkms_status.is_some() {
            ", installed by dkms status"
        } else {
            ""
        };
        let mut message = format!("DKMS builds present for {covered}{checked}");
        let status = if disagreements.is_empty() {
            Status::Ok
        } else {
            message = format!("{message}; {}", disagreements.join("; "));
            Status::Warn
        };
        return Check::new(DKMS, status, message).with_details(details);
    }
    let msgs: Vec<String> = gaps
        .iter()
        .map(|(k, lack, missing)| {
            if k == release {
                format!(
                    "{} for the running kernel {k}: {}",
                    missing.join(", "),
                    lack.why()
                )
            } else {
                lost_on_reboot(k, *lack, missing)
            }
        })
        .chain(disagreements)
        .collect();
    Check::new(DKMS, Status::Fail, msgs.join("; ")).with_details(details)
}

/// Records the kernel and boot the agent last ran on (atomic; the agent's own state).
pub fn record(host: &Host, state: &KernelState) -> Result<(), HostError> {
    let mut bytes = serde_json::to_vec_pretty(state).expect("state serializes");
    bytes.push(b'\n');
    host.state_write(&state_path(), &bytes, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_compare_numerically() {
        assert_eq!(
            compare_releases("6.8.0-51-generic", "6.8.0-9-generic"),
            Ordering::Greater
        );
        assert_eq!(
            compare_releases("6.1.0-27-amd64", "6.1.0-27-amd64"),
            Ordering::Equal
        );
        assert_eq!(compare_releases("5.15.0-100", "6.1.0-1"), Ordering::Less);
        assert_eq!(compare_releases("6.10.1", "6.9.12"), Ordering::Greater);
    }

    /// mlnx-ofed-kernel 24.10 built for one more kernel.
    fn add_build(f: &mut Facts, kernel: &str) {
        f.dkms
            .get_mut("mlnx-ofed-kernel")
            .and_then(|v| v.get_mut("24.10"))
            .expect("the fixture's build")
            .insert(kernel.into());
    }

    fn facts() -> Facts {
        let mut dkms = BTreeMap::new();
        dkms.insert(
            "mlnx-ofed-kernel".to_owned(),
            BTreeMap::from([(
                "24.10".to_owned(),
                BTreeSet::from(["6.8.0-40-generic".to_owned()]),
            )]),
        );
        Facts {
            release: Some("6.8.0-40-generic".into()),
            boot_id: Some("b1".into()),
            installed: vec![
                "6.8.0-40-generic".into(),
                "6.8.0-51-generic".into(),
                "6.8.0-31-generic".into(),
            ],
            dkms,
            ..Facts::default()
        }
    }

    #[test]
    fn a_newer_kernel_without_the_dkms_build_fails_before_the_reboot() {
        let cfg = KernelConfig::default();
        let mut f = facts();
        let c = check_dkms(&f, &cfg);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.message,
            "rebooting into 6.8.0-51-generic would lose mlnx-ofed-kernel: not built by DKMS"
        );
        assert_eq!(hold_back_reasons(&f, &cfg).len(), 1);
        add_build(&mut f, "6.8.0-51-generic");
        assert_eq!(check_dkms(&f, &cfg).status, Status::Ok);
        assert!(hold_back_reasons(&f, &cfg).is_empty());
    }

    #[test]
    fn dkms_status_lines_of_dkms_2_and_3() {
        let text = "mlnx-ofed-kernel/24.10, 6.8.0-51-generic, x86_64: installed\n\
            nvidia-peermem/535.183.01, 6.8.0-40-generic, x86_64: installed (WARNING! Diff between built and installed module!)\n\
            gdrdrv/2.4: added\n\
            iser, 24.10, 6.8.0-40-generic, x86_64: built\n\
            Error! Could not locate dkms.conf file.\n\
            \n";
        let st = parse_dkms_status(text);
        let short: Vec<(&str, &str, Option<&str>, &str)> = st
            .iter()
            .map(|s| {
                (
                    s.module.as_str(),
                    s.version.as_str(),
                    s.kernel.as_deref(),
                    s.state.as_str(),
                )
            })
            .collect();
        assert_eq!(
            short,
            vec![
                (
                    "mlnx-ofed-kernel",
                    "24.10",
                    Some("6.8.0-51-generic"),
                    "installed"
                ),
                (
                    "nvidia-peermem",
                    "535.183.01",
                    Some("6.8.0-40-generic"),
                    "installed"
                ),
                ("gdrdrv", "2.4", None, "added"),
                ("iser", "24.10", Some("6.8.0-40-generic"), "built"),
            ]
        );
    }

    fn status_line(kernel: &str, state: &str) -> DkmsStatus {
        DkmsStatus {
            module: "mlnx-ofed-kernel".into(),
            version: "24.10".into(),
            kernel: Some(kernel.into()),
            state: state.into(),
        }
    }

    #[test]
    fn dkms_status_cross_checks_the_tree() {
        let cfg = KernelConfig::default();
        let mut f = facts();
        f.installed.retain(|k| k != "6.8.0-51-generic");
        // The tree holds the build and dkms status agrees it is installed.
        f.dkms_status = Some(vec![status_line("6.8.0-40-generic", "installed")]);
        let c = check_dkms(&f, &cfg);
        assert_eq!(c.status, Status::Ok, "{}", c.message);
        assert!(
            c.message.ends_with("installed by dkms status"),
            "{}",
            c.message
        );

        // Built, not installed: its files are not under /lib/modules.
        f.dkms_status = Some(vec![status_line("6.8.0-40-generic", "built")]);
        let c = check_dkms(&f, &cfg);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.message,
            "mlnx-ofed-kernel for the running kernel 6.8.0-40-generic: built by DKMS but not installed (dkms status): run `dkms install`"
        );

        // dkms status claims what the tree does not hold: a warning, not a failure.
        f.dkms_status = Some(vec![
            status_line("6.8.0-40-generic", "installed"),
            status_line("6.8.0-31-generic", "installed"),
        ]);
        let c = check_dkms(&f, &cfg);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message.contains(
                "dkms status says mlnx-ofed-kernel/24.10 is installed for 6.8.0-31-generic, but /var/lib/dkms holds no such build"
            ),
            "{}",
            c.message
        );

        // A newer kernel built but not installed holds the reboot back.
        f.installed.push("6.8.0-51-generic".into());
        add_build(&mut f, "6.8.0-51-generic");
        f.dkms_status = Some(vec![
            status_line("6.8.0-40-generic", "installed"),
            status_line("6.8.0-51-generic", "built"),
        ]);
        assert_eq!(
            hold_back_reasons(&f, &cfg),
            [
                "rebooting into 6.8.0-51-generic would lose mlnx-ofed-kernel: built by DKMS but not installed (dkms status): run `dkms install`"
            ]
        );
    }

    #[test]
    fn kernel_change_is_reported_then_recorded() {
        let mut f = facts();
        f.state = Some(KernelState {
            release: "6.8.0-31-generic".into(),
            boot_id: "b0".into(),
            previous: None,
        });
        let c = check_change(&f);
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message
                .starts_with("kernel changed from 6.8.0-31-generic to 6.8.0-40-generic")
        );
        let s = next_state(&f).unwrap();
        assert_eq!(s.previous.as_deref(), Some("6.8.0-31-generic"));
        f.state = Some(s);
        assert!(next_state(&f).is_none());
        assert!(check_change(&f).message.contains("at this boot"));
        // The next boot of the same kernel no longer mentions it.
        f.boot_id = Some("b2".into());
        let s = next_state(&f).unwrap();
        assert!(s.previous.is_none());
        f.state = Some(s);
        assert_eq!(
            check_change(&f).message,
            "kernel 6.8.0-40-generic, unchanged"
        );
    }
}
