//! Which containerd runs here: the unit that runs it, the config file that unit
//! really passes it, and its process. One typed fact, found once per cycle
//! (`Snapshot::containerd`), that every concern follows: the containerd concern
//! edits that config and restarts that unit, the systemd concern gives that unit
//! its LimitMEMLOCK drop-in and reads that process's limits.
//!
//! Found from the unit files (`ExecStart=` with its environment expanded, drop-ins
//! included), else from the running process's command line, never assumed: a
//! Flatcar unit passes `--config ${CONTAINERD_CONFIG}`, k3s, rke2 and microk8s run
//! their own containerd with their own config.

use std::path::{Path, PathBuf};

use super::procfs;
use super::service::ServiceManager;
use super::snapshot::Snapshot;
use super::units::{UnitFile, config_arg};

/// The path containerd reads without `--config`.
pub const DEFAULT_CONFIG: &str = "/etc/containerd/config.toml";
pub const PLAIN_UNIT: &str = "containerd.service";
pub const MICROK8S_UNIT: &str = "snap.microk8s.daemon-containerd.service";
pub const MICROK8S_CONFIG: &str = "/var/snap/microk8s/current/args/containerd.toml";

/// Who runs containerd: decides what is edited and what is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distro {
    /// A distribution's or installer's containerd.service.
    Plain,
    /// k3s or rke2 run containerd as a child and regenerate its config at start.
    Rancher(&'static str),
    /// microk8s regenerates args/containerd.toml from containerd-template.toml.
    Microk8s,
}

pub struct Rancher {
    pub distro: &'static str,
    pub config: &'static str,
    pub units: [&'static str; 2],
    pub socket: &'static str,
    pub binary: &'static str,
}

pub const RANCHERS: [Rancher; 2] = [
    Rancher {
        distro: "k3s",
        config: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        units: ["k3s.service", "k3s-agent.service"],
        socket: "/run/k3s/containerd/containerd.sock",
        binary: "/var/lib/rancher/k3s/data/current/bin/containerd",
    },
    Rancher {
        distro: "rke2",
        config: "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        units: ["rke2-server.service", "rke2-agent.service"],
        socket: "/run/k3s/containerd/containerd.sock",
        binary: "/var/lib/rancher/rke2/bin/containerd",
    },
];

/// Where a containerd binary is installed, when no unit or config names one.
const BINARIES: &[&str] = &[
    "/usr/bin/containerd",
    "/usr/local/bin/containerd",
    "/usr/sbin/containerd",
    "/bin/containerd",
    "/snap/microk8s/current/bin/containerd",
];

/// The containerd that runs here (or would run after a restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Containerd {
    pub distro: Distro,
    /// The unit restarted to apply a change, and given the LimitMEMLOCK drop-in.
    pub unit: String,
    /// The unit's file and drop-ins, when installed under the root.
    pub unit_sources: Vec<PathBuf>,
    /// The config file containerd reads.
    pub config: PathBuf,
    /// How the agent knows that path, for messages.
    pub config_source: String,
    /// The running containerd's PID (its unit's MainPID, or found by its name).
    pub pid: Option<u32>,
    /// Disagreements worth a warning (an explicit config_path unlike the unit's,
    /// a running process started with another config).
    pub warnings: Vec<String>,
}

/// The answer to "which containerd runs here".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    Found(Containerd),
    /// No binary, unit, package or config of any supported layout.
    Absent {
        looked_for: String,
    },
    /// Something is there, but which one runs pods cannot be told.
    Unknown(String),
}

/// What the agent's config says about containerd's whereabouts.
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// `containerd.config_path` when it is not the default.
    pub config_path: Option<PathBuf>,
    /// `containerd.unit`.
    pub unit: Option<String>,
}

fn is_active(m: &dyn ServiceManager, unit: &str) -> bool {
    m.status(unit)
        .is_ok_and(|s| s.active_state == "active" || s.active_state == "activating")
}

fn distro_of(unit: &str) -> Distro {
    if unit == MICROK8S_UNIT {
        return Distro::Microk8s;
    }
    RANCHERS
        .iter()
        .find(|r| r.units.contains(&unit))
        .map_or(Distro::Plain, |r| Distro::Rancher(r.distro))
}

fn known_units() -> Vec<&'static str> {
    let mut v = vec![PLAIN_UNIT];
    for r in &RANCHERS {
        v.extend(r.units);
    }
    v.push(MICROK8S_UNIT);
    v
}

/// Finds which containerd runs here. Reads unit files, the process table and
/// (live) systemd; never writes.
pub fn discover(snap: &Snapshot, hints: &Hints) -> Discovery {
    let manager = snap.manager();
    let mut installed: Vec<UnitFile> = Vec::new();
    let names: Vec<String> = match &hints.unit {
        Some(u) => vec![u.clone()],
        None => known_units().into_iter().map(str::to_owned).collect(),
    };
    for name in &names {
        match snap.unit_file(name) {
            Ok(Some(u)) => installed.push(u),
            Ok(None) => {}
            Err(e) => return Discovery::Unknown(format!("cannot read the unit {name}: {e}")),
        }
    }
    // Which unit: the configured one; else the one systemd runs; else the one installed.
    let chosen: Option<String> = if let Some(u) = &hints.unit {
        Some(u.clone())
    } else {
        // k3s, rke2 and microk8s install their unit files on disk; a
        // distribution's containerd.service may also be generated or transient.
        let active: Vec<&str> = match manager {
            Some(m) => names
                .iter()
                .map(String::as_str)
                .filter(|u| *u == PLAIN_UNIT || installed.iter().any(|i| i.name == *u))
                .filter(|u| is_active(m, u))
                .collect(),
            None => Vec::new(),
        };
        // k3s/rke2/microk8s run the containerd that serves pods, even beside a
        // distribution's containerd.service (Docker's, say).
        let pick = |v: &[&str]| -> Option<String> {
            let k8s: Vec<&&str> = v.iter().filter(|u| **u != PLAIN_UNIT).collect();
            match (k8s.as_slice(), v) {
                ([one], _) => Some((**one).to_owned()),
                ([], [one]) => Some((*one).to_owned()),
                _ => None,
            }
        };
        let installed_names: Vec<&str> = installed.iter().map(|u| u.name.as_str()).collect();
        match pick(&active) {
            Some(u) => Some(u),
            None if active.len() > 1 => {
                return Discovery::Unknown(format!(
                    "several containerd units are active ({}): set `unit = \"…\"` under [containerd] in the agent config to the one that serves the kubelet",
                    active.join(", ")
                ));
            }
            None => match pick(&installed_names) {
                Some(u) => Some(u),
                None if installed_names.len() > 1 => {
                    let enabled: Vec<&str> = installed_names
                        .iter()
                        .copied()
                        .filter(|u| {
                            snap.exists(
                                &Path::new("/etc/systemd/system/multi-user.target.wants").join(u),
                            )
                        })
                        .collect();
                    match pick(&enabled) {
                        Some(u) => Some(u),
                        None => {
                            return Discovery::Unknown(format!(
                                "several containerd units are installed ({}) and none {}: set `unit = \"…\"` under [containerd] in the agent config",
                                installed_names.join(", "),
                                if manager.is_some() {
                                    "is active"
                                } else {
                                    "can be asked (no systemd)"
                                }
                            ));
                        }
                    }
                }
                None => None,
            },
        }
    };
    let unit_file = chosen
        .as_ref()
        .and_then(|c| installed.iter().find(|u| &u.name == c));
    match chosen {
        Some(unit) => found_unit(snap, hints, unit, unit_file),
        None => without_unit(snap, hints),
    }
}

/// A unit runs containerd: its config, as the unit passes it.
fn found_unit(snap: &Snapshot, hints: &Hints, unit: String, file: Option<&UnitFile>) -> Discovery {
    let distro = distro_of(&unit);
    let mut warnings = Vec::new();
    let (config, config_source) = match distro {
        Distro::Rancher(d) => {
            let r = RANCHERS.iter().find(|r| r.distro == d).expect("known");
            (
                PathBuf::from(r.config),
                format!("{d} runs containerd with its own config"),
            )
        }
        Distro::Microk8s => (
            PathBuf::from(MICROK8S_CONFIG),
            "microk8s runs containerd with its own config".to_owned(),
        ),
        Distro::Plain => match file {
            Some(f) => {
                for u in &f.unreadable {
                    warnings.push(format!("{unit}: environment file {u}"));
                }
                let shown = f.sources[0].display();
                match f.command().as_deref().and_then(config_arg) {
                    Some(c) => (
                        PathBuf::from(c),
                        format!("`--config` in ExecStart of {unit} ({shown}{})", dropins(f)),
                    ),
                    None => (
                        PathBuf::from(DEFAULT_CONFIG),
                        format!(
                            "containerd's default: ExecStart of {unit} ({shown}{}) passes no --config",
                            dropins(f)
                        ),
                    ),
                }
            }
            None => match &hints.config_path {
                Some(p) => (
                    p.clone(),
                    "containerd.config_path in the agent config".to_owned(),
                ),
                None => (
                    PathBuf::from(DEFAULT_CONFIG),
                    format!("containerd's default ({unit} has no unit file under the root)"),
                ),
            },
        },
    };
    let config = match &hints.config_path {
        Some(p) if p != &config && file.is_some() => {
            warnings.push(format!(
                "containerd.config_path in the agent config is {}, but containerd reads {} ({config_source}): the agent follows containerd; remove config_path from the agent config",
                p.display(),
                config.display()
            ));
            config
        }
        // No unit file to contradict it (a tree under --root, a hand-run containerd).
        Some(p) => p.clone(),
        None => config,
    };
    let config_source = if hints.config_path.as_ref() == Some(&config) && file.is_none() {
        "containerd.config_path in the agent config".to_owned()
    } else {
        config_source
    };
    let pid = running_pid(snap, &unit, distro);
    if let (Some(pid), Distro::Plain) = (pid, distro) {
        if let Some(running) = procfs::read(snap, pid, "cmdline").map(|c| cmdline_config(&c)) {
            if running != config {
                warnings.push(format!(
                    "the running containerd (pid {pid}) reads {}, but {unit} now passes {}: it reads the new one at its next restart",
                    running.display(),
                    config.display()
                ));
            }
        }
    }
    Discovery::Found(Containerd {
        distro,
        unit,
        unit_sources: file.map(|f| f.sources.clone()).unwrap_or_default(),
        config,
        config_source,
        pid,
        warnings,
    })
}

fn dropins(f: &UnitFile) -> String {
    if f.sources.len() > 1 {
        format!(
            " with drop-ins {}",
            f.sources[1..]
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    }
}

/// The config in a `/proc/PID/cmdline` (NUL-separated words).
fn cmdline_config(cmdline: &str) -> PathBuf {
    let args: Vec<String> = cmdline
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    PathBuf::from(config_arg(&args).unwrap_or_else(|| DEFAULT_CONFIG.to_owned()))
}

/// The containerd process of this unit: its MainPID (a plain unit), else the
/// process named containerd whose config is the distribution's.
fn running_pid(snap: &Snapshot, unit: &str, distro: Distro) -> Option<u32> {
    if let Some(m) = snap.manager() {
        if let (Ok(s), Distro::Plain) = (m.status(unit), distro) {
            return (s.main_pid > 0).then_some(s.main_pid);
        }
    }
    let want = match distro {
        Distro::Rancher(d) => RANCHERS
            .iter()
            .find(|r| r.distro == d)
            .map(|r| PathBuf::from(r.config)),
        Distro::Microk8s => Some(PathBuf::from(MICROK8S_CONFIG)),
        Distro::Plain => None,
    };
    let procs: Vec<(u32, PathBuf)> = containerd_processes(snap)
        .into_iter()
        .filter(|(_, c)| !is_dockers(c))
        .collect();
    match want {
        Some(w) => procs.into_iter().find(|(_, c)| *c == w).map(|(p, _)| p),
        None => match procs.as_slice() {
            [(p, _)] => Some(*p),
            _ => None,
        },
    }
}

/// Every process named containerd, with the config it was started with (its
/// default when the command line cannot be read: a process without one).
fn containerd_processes(snap: &Snapshot) -> Vec<(u32, PathBuf)> {
    let Ok(pids) = snap.pids() else {
        return Vec::new();
    };
    pids.iter()
        .copied()
        .filter(|p| procfs::comm(snap, *p).as_deref() == Some("containerd"))
        .filter_map(|p| {
            let cmdline = procfs::read(snap, p, "cmdline");
            // `containerd config dump` (the agent's own validation, say) and the
            // other subcommands are no daemon.
            if cmdline.as_deref().is_some_and(|c| {
                c.split('\0')
                    .any(|a| matches!(a, "config" | "publish" | "oci-hook" | "help" | "--version"))
            }) {
                return None;
            }
            let config =
                cmdline.map_or_else(|| PathBuf::from(DEFAULT_CONFIG), |c| cmdline_config(&c));
            Some((p, config))
        })
        .collect()
}

/// Docker's own containerd (dockerd's child, config under /var/run/docker)
/// serves no pods.
fn is_dockers(config: &Path) -> bool {
    config.starts_with("/var/run/docker") || config.starts_with("/run/docker")
}

/// No unit file: the running process's command line, else the config files of
/// the known layouts, else nothing is there.
fn without_unit(snap: &Snapshot, hints: &Hints) -> Discovery {
    // A process whose config is not a file of this root reads another tree (a
    // containerd in its own mount namespace beside a `--root` tree): not this one.
    let procs: Vec<(u32, PathBuf)> = containerd_processes(snap)
        .into_iter()
        .filter(|(_, c)| !is_dockers(c) && (snap.exists(c) || c == Path::new(DEFAULT_CONFIG)))
        .collect();
    let mut configs: Vec<&PathBuf> = procs.iter().map(|(_, c)| c).collect();
    configs.sort();
    configs.dedup();
    if configs.len() > 1 {
        return Discovery::Unknown(format!(
            "several containerd processes run with different configs ({}) and no unit file tells which serves the kubelet: set `unit = \"…\"` or `config_path = \"…\"` under [containerd] in the agent config",
            procs
                .iter()
                .map(|(p, c)| format!("pid {p}: {}", c.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let layout_config = |p: &Path| -> Option<(Distro, &'static str)> {
        if let Some(r) = RANCHERS.iter().find(|r| Path::new(r.config) == p) {
            return Some((Distro::Rancher(r.distro), r.units[0]));
        }
        (p == Path::new(MICROK8S_CONFIG)).then_some((Distro::Microk8s, MICROK8S_UNIT))
    };
    let found = |distro, unit: &str, config: PathBuf, source: String, pid| {
        Discovery::Found(Containerd {
            distro,
            unit: unit.to_owned(),
            unit_sources: Vec::new(),
            config,
            config_source: source,
            pid,
            warnings: Vec::new(),
        })
    };
    if let Some((pid, config)) = procs.first() {
        let (distro, unit) = layout_config(config).unwrap_or((Distro::Plain, PLAIN_UNIT));
        return found(
            distro,
            unit,
            config.clone(),
            format!("the command line of the running containerd (pid {pid})"),
            Some(*pid),
        );
    }
    if let Some(p) = &hints.config_path {
        let (distro, unit) = layout_config(p).unwrap_or((Distro::Plain, PLAIN_UNIT));
        return found(
            distro,
            unit,
            p.clone(),
            "containerd.config_path in the agent config".to_owned(),
            None,
        );
    }
    if snap.exists(Path::new(DEFAULT_CONFIG)) {
        return found(
            Distro::Plain,
            PLAIN_UNIT,
            DEFAULT_CONFIG.into(),
            "containerd's default path (no containerd unit file or process found)".to_owned(),
            None,
        );
    }
    for r in &RANCHERS {
        if snap.exists(Path::new(r.config)) {
            return found(
                Distro::Rancher(r.distro),
                r.units[0],
                r.config.into(),
                format!("{}'s containerd config (no unit file found)", r.distro),
                None,
            );
        }
    }
    if snap.exists(Path::new(MICROK8S_CONFIG)) {
        return found(
            Distro::Microk8s,
            MICROK8S_UNIT,
            MICROK8S_CONFIG.into(),
            "microk8s's containerd config (no unit file found)".to_owned(),
            None,
        );
    }
    // A binary or package without any config: containerd runs on its defaults,
    // and the agent may create the default file.
    let binary = BINARIES.iter().find(|b| snap.exists(Path::new(b)));
    let package = dpkg_installed(snap);
    if binary.is_some() || package.is_some() {
        let what = binary.map_or_else(
            || format!("the {} package", package.unwrap_or_default()),
            |b| (*b).to_owned(),
        );
        return found(
            Distro::Plain,
            PLAIN_UNIT,
            DEFAULT_CONFIG.into(),
            format!("containerd's default ({what} is installed, no config file yet)"),
            None,
        );
    }
    Discovery::Absent {
        looked_for: format!(
            "no containerd process, no unit ({}) in {}, no binary ({}), no containerd package in the dpkg database, and no config ({DEFAULT_CONFIG}, {}, {MICROK8S_CONFIG})",
            known_units().join(", "),
            super::units::UNIT_DIRS.join(", "),
            BINARIES.join(", "),
            RANCHERS
                .iter()
                .map(|r| r.config)
                .collect::<Vec<_>>()
                .join(", "),
        ),
    }
}

/// The installed containerd package's name, from the dpkg database.
fn dpkg_installed(snap: &Snapshot) -> Option<String> {
    let status = snap.read_string(Path::new("/var/lib/dpkg/status")).ok()??;
    status.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim))
        };
        let installed = field("Status:").is_some_and(|s| s.ends_with(" installed"));
        let package = field("Package:")?;
        (installed && matches!(package, "containerd" | "containerd.io")).then(|| package.to_owned())
    })
}
