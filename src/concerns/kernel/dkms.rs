//! `kernel.dkms`: DKMS built *and installed* the RDMA stack for the running
//! kernel and every newer installed kernel. The tree is the truth; `dkms
//! status` (every state it prints, warnings included) is a cross-check.

use crate::concerns::kernel::reasons;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use super::config::KernelConfig;
use super::{DKMS, Facts, compare_releases};
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

/// A build under /var/lib/dkms/<module>/<version>/<kernel>/<arch>/module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DkmsBuild {
    pub module: String,
    pub version: String,
    pub kernel: String,
    pub arch: String,
    pub files: Vec<String>,
    pub state: BuildState,
}

/// A build's state as the tree shows it (dkms's own definitions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "files")]
pub enum BuildState {
    /// Built, and no `kernel-<k>-<arch>` link to it: not in /lib/modules.
    Built,
    /// Linked, and every file is in /lib/modules/<k>/<dest> byte for byte.
    Installed,
    /// Linked, but the kernel's copies differ ("Diff between built and installed module").
    InstalledDiffers(Vec<String>),
    /// Linked, but these files are not in /lib/modules/<k> at all.
    InstalledMissing(Vec<String>),
}

/// One line of `dkms status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DkmsLine {
    pub module: String,
    pub version: String,
    pub kernel: Option<String>,
    pub arch: Option<String>,
    pub state: DkmsState,
    /// The notes dkms appends: `WARNING! Diff between built and installed
    /// module!`, `WARNING! Missing some built modules!`, `original_module exists`.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DkmsState {
    Added,
    Built,
    Installed,
    /// `installed-weak from <kernel built for>` (RHEL weak-updates).
    InstalledWeak(String),
    /// A line this parser does not know: the whole output is then not trusted.
    Unknown(String),
}

impl DkmsLine {
    fn unknown(line: &str) -> DkmsLine {
        DkmsLine {
            module: String::new(),
            version: String::new(),
            kernel: None,
            arch: None,
            state: DkmsState::Unknown(line.to_owned()),
            notes: Vec::new(),
        }
    }

    pub fn warns_diff(&self) -> bool {
        self.notes
            .iter()
            .any(|n| n.contains("Diff between built and installed"))
    }
}

/// `dkms status` in dkms 3's `module/version, kernel, arch: state (notes)`
/// and dkms 2's `module, version, kernel, arch: state` forms, `module/version:
/// added` before a build, `m, v, k, a: installed-weak from k2`. A line of any
/// other shape is kept as `Unknown`.
pub fn parse_dkms_status(text: &str) -> Vec<DkmsLine> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .map(|line| parse_line(line).unwrap_or_else(|| DkmsLine::unknown(line)))
        .collect()
}

fn parse_line(line: &str) -> Option<DkmsLine> {
    let (left, right) = line.split_once(": ")?;
    // Notes are parenthesised and appended after the state.
    let mut rest = right.trim();
    let mut notes = Vec::new();
    while let Some(open) = rest.strip_suffix(')').and_then(|r| r.rfind(" (")) {
        notes.insert(0, rest[open + 2..rest.len() - 1].to_owned());
        rest = rest[..open].trim_end();
    }
    let state = match rest {
        "added" => DkmsState::Added,
        "built" => DkmsState::Built,
        "installed" => DkmsState::Installed,
        r => DkmsState::InstalledWeak(r.strip_prefix("installed-weak from ")?.to_owned()),
    };
    let parts: Vec<&str> = left.split(", ").map(str::trim).collect();
    let (module, version, rest) = match parts[0].split_once('/') {
        Some((m, v)) => (m, v, &parts[1..]),
        None if parts.len() >= 2 => (parts[0], parts[1], &parts[2..]),
        None => return None,
    };
    let ok = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
    if !ok(module) || !ok(version) || rest.len() > 2 || !rest.iter().all(|s| ok(s)) {
        return None;
    }
    // Added lines have no kernel; built/installed lines need one.
    if (state == DkmsState::Added) != rest.is_empty() {
        return None;
    }
    Some(DkmsLine {
        module: module.to_owned(),
        version: version.to_owned(),
        kernel: rest.first().map(|k| (*k).to_owned()),
        arch: rest.get(1).map(|a| (*a).to_owned()),
        state,
        notes,
    })
}

/// Why `dkms status` gave nothing to cross-check the tree with. Neither is a
/// disagreement: the tool did not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// It did not answer within its time (a loaded machine, a held lock).
    TimedOut(String),
    /// It could not be run, or exited non-zero.
    Failed(String),
}

impl ToolError {
    pub fn message(&self) -> &str {
        match self {
            ToolError::TimedOut(m) | ToolError::Failed(m) => m,
        }
    }

    fn reason(&self) -> Reason {
        match self {
            ToolError::TimedOut(_) => reasons::DKMS_STATUS_TIMEOUT,
            ToolError::Failed(_) => reasons::DKMS_STATUS_FAILED,
        }
    }
}

/// Why a kernel lacks a DKMS module.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Lack {
    NotBuilt,
    NotInstalled,
    Differs,
    Missing,
}

impl Lack {
    fn why(&self) -> &'static str {
        match self {
            Lack::NotBuilt => "not built by DKMS",
            Lack::NotInstalled => "built by DKMS but not installed: run `dkms install`",
            Lack::Differs => {
                "installed, but the kernel's copy differs from the DKMS build (dkms: \
                 Diff between built and installed module): run `dkms install --force`"
            }
            Lack::Missing => {
                "installed by DKMS, but its files are gone from /lib/modules: run `dkms install --force`"
            }
        }
    }
}

/// The running kernel and every newer *installed* one (image and modules),
/// oldest first; a leftover /lib/modules directory is not a kernel.
fn kernels_to_cover<'a>(f: &'a Facts, release: &'a str) -> Vec<&'a str> {
    let mut v: Vec<&str> = f
        .kernels
        .iter()
        .filter(|k| k.is_installed())
        .map(|k| k.release.as_str())
        .filter(|k| compare_releases(k, release) == Ordering::Greater)
        .collect();
    v.sort_by(|a, b| compare_releases(a, b));
    v.insert(0, release);
    v
}

/// (kernel, why, DKMS modules it lacks), one entry per kernel and reason.
fn gaps(f: &Facts, cfg: &KernelConfig) -> Vec<(String, Lack, Vec<String>)> {
    let Some(release) = &f.release else {
        return Vec::new();
    };
    let wanted: Vec<&String> = if cfg.dkms_modules.is_empty() {
        f.dkms_modules.keys().collect()
    } else {
        cfg.dkms_modules.iter().collect()
    };
    let mut out = Vec::new();
    for k in kernels_to_cover(f, release) {
        let mut lacks: BTreeMap<Lack, Vec<String>> = BTreeMap::new();
        for m in &wanted {
            let builds: Vec<&DkmsBuild> = f
                .dkms
                .iter()
                .filter(|b| &b.module == *m && b.kernel == k)
                .collect();
            // The best a module has for this kernel decides.
            let lack = if builds.iter().any(|b| b.state == BuildState::Installed) {
                None
            } else if builds
                .iter()
                .any(|b| matches!(b.state, BuildState::InstalledDiffers(_)))
            {
                Some(Lack::Differs)
            } else if builds
                .iter()
                .any(|b| matches!(b.state, BuildState::InstalledMissing(_)))
            {
                Some(Lack::Missing)
            } else if !builds.is_empty() {
                Some(Lack::NotInstalled)
            } else {
                Some(Lack::NotBuilt)
            };
            if let Some(lack) = lack {
                lacks.entry(lack).or_default().push(m.to_string());
            }
        }
        out.extend(lacks.into_iter().map(|(l, ms)| (k.to_owned(), l, ms)));
    }
    out
}

fn lost_on_reboot(kernel: &str, lack: &Lack, missing: &[String]) -> String {
    format!(
        "rebooting into {kernel} would lose {}: {}",
        missing.join(", "),
        lack.why()
    )
}

/// Why a reboot must wait: newer kernels that would boot without the RDMA stack.
pub fn hold_back_reasons(f: &Facts, cfg: &KernelConfig) -> Vec<String> {
    gaps(f, cfg)
        .into_iter()
        .filter(|(k, _, _)| Some(k.as_str()) != f.release.as_deref())
        .map(|(k, lack, missing)| lost_on_reboot(&k, &lack, &missing))
        .collect()
}

/// Where `dkms status` and the tree disagree, and lines it printed that we cannot read.
fn cross_check(f: &Facts, lines: &[DkmsLine]) -> (Vec<String>, Vec<String>) {
    let mut disagree = Vec::new();
    let mut unreadable = Vec::new();
    for l in lines {
        let (Some(k), Some(a)) = (&l.kernel, &l.arch) else {
            if let DkmsState::Unknown(line) = &l.state {
                unreadable.push(format!("{line:?}"));
            }
            continue;
        };
        let tree = f.dkms.iter().find(|b| {
            b.module == l.module && b.version == l.version && &b.kernel == k && &b.arch == a
        });
        let says = match (&l.state, l.warns_diff()) {
            (DkmsState::Installed, true) => "installed, differing from the build",
            (DkmsState::Installed, false) => "installed",
            (DkmsState::Built, _) => "built",
            // Weak installs and added-only lines have no build of their own to compare.
            _ => continue,
        };
        let tree_says = match tree.map(|b| &b.state) {
            None => "no such build",
            Some(BuildState::Built) => "built",
            Some(BuildState::Installed) => "installed",
            Some(BuildState::InstalledDiffers(_)) => "installed, differing from the build",
            Some(BuildState::InstalledMissing(_)) => "installed with files missing",
        };
        if says != tree_says {
            disagree.push(format!(
                "dkms status says {}/{} for {k} is {says}, /var/lib/dkms and /lib/modules say {tree_says}",
                l.module, l.version
            ));
        }
    }
    (disagree, unreadable)
}

pub fn check_dkms(f: &Facts, cfg: &KernelConfig) -> Check {
    let Some(release) = &f.release else {
        return Check::new(
            DKMS,
            Status::Unknown,
            "no /proc/sys/kernel/osrelease under this root",
        )
        .with_reason(Reason::FACT_UNREADABLE);
    };
    let leftovers = leftovers(f, release);
    let (disagree, unreadable, tool_error) = match &f.dkms_status {
        Some(Ok(lines)) => {
            let (d, u) = cross_check(f, lines);
            (d, u, None)
        }
        Some(Err(e)) => (Vec::new(), Vec::new(), Some(e.clone())),
        None => (Vec::new(), Vec::new(), None),
    };
    let covered = kernels_to_cover(f, release);
    let details = json!({
        "release": release,
        "newer_installed": covered.iter().skip(1).collect::<Vec<_>>(),
        "kernels": f.kernels,
        "builds": f.dkms,
        "dkms_status": f.dkms_status.as_ref().map(|r| r.as_ref().map_err(ToolError::message)),
        "disagreements": disagree,
        "leftovers": leftovers,
    });
    let notes: Vec<String> = leftovers
        .iter()
        .cloned()
        .chain(tool_error.iter().map(|e| {
            format!(
                "dkms status gave no answer ({}); judged from /var/lib/dkms and /lib/modules alone",
                e.message()
            )
        }))
        .collect();
    let with_notes = |msg: String| {
        if notes.is_empty() {
            msg
        } else {
            format!("{msg}; {}", notes.join("; "))
        }
    };
    if f.dkms_modules.is_empty() && cfg.dkms_modules.is_empty() && unreadable.is_empty() {
        return Check::new(
            DKMS,
            Status::Ok,
            with_notes("no DKMS modules registered (in-tree RDMA stack)".into()),
        )
        .with_details(details);
    }
    let gaps = gaps(f, cfg);
    if !gaps.is_empty() {
        let (message, reason) = gaps_failure(&gaps, release, disagree);
        return Check::new(DKMS, Status::Fail, message)
            .with_reason(reason)
            .with_details(details);
    }
    if !unreadable.is_empty() {
        return Check::new(
            DKMS,
            Status::Unknown,
            format!(
                "dkms status printed what the agent cannot read: {}",
                unreadable.join(", ")
            ),
        )
        .with_reason(Reason::FACT_UNREADABLE)
        .with_details(details);
    }
    let (status, message, reason) = installed(f, &covered, tool_error.as_ref(), disagree);
    Check::new(DKMS, status, with_notes(message))
        .with_reason(reason)
        .with_details(details)
}

/// Module directories of removed kernels: said, and ignored.
fn leftovers(f: &Facts, release: &str) -> Vec<String> {
    f.kernels
        .iter()
        .filter(|k| !k.is_installed() && k.release != release)
        .map(|k| {
            format!(
                "/lib/modules/{} is left over from a removed kernel ({}): ignored",
                k.release,
                if k.image.is_none() {
                    "no image"
                } else {
                    "no modules"
                }
            )
        })
        .collect()
}

/// The failure for kernels that lack builds: what each lacks, then where dkms
/// status disagrees. The running kernel's gap names the reason: it is the one
/// that breaks RDMA now.
fn gaps_failure(
    gaps: &[(String, Lack, Vec<String>)],
    release: &str,
    disagree: Vec<String>,
) -> (String, Reason) {
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
                lost_on_reboot(k, lack, missing)
            }
        })
        .chain(disagree)
        .collect();
    let reason = if gaps.iter().any(|(k, _, _)| k == release) {
        reasons::DKMS_NOT_INSTALLED
    } else {
        reasons::DKMS_NOT_INSTALLED_FOR_PENDING_KERNEL
    };
    (msgs.join("; "), reason)
}

/// Every kernel to cover has its builds: the tree answered; `ok` also needs
/// dkms's own word, where it runs.
fn installed(
    f: &Facts,
    covered: &[&str],
    tool_error: Option<&ToolError>,
    disagree: Vec<String>,
) -> (Status, String, Reason) {
    let checked = match &f.dkms_status {
        Some(Ok(_)) => ", confirmed by dkms status",
        _ => "",
    };
    let message = format!("DKMS builds installed for {}{checked}", covered.join(", "));
    match tool_error {
        Some(e) => (
            Status::Warn,
            format!("{message}, not confirmed by dkms status"),
            e.reason(),
        ),
        None if disagree.is_empty() => (Status::Ok, message, reasons::DKMS_STATUS_DISAGREES),
        None => (
            Status::Warn,
            [message]
                .into_iter()
                .chain(disagree)
                .collect::<Vec<_>>()
                .join("; "),
            reasons::DKMS_STATUS_DISAGREES,
        ),
    }
}
