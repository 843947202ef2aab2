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

mod choose;
pub mod cri;
mod fallback;
mod processes;

use std::path::{Path, PathBuf};

use super::procfs;
use super::service::UnitReader;
use super::snapshot::Snapshot;
use super::units::{UnitFile, config_arg};
use fallback::without_unit;
use processes::{cmdline_config, running_pid};

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
    /// k0s runs containerd as a child of its worker (or controller+worker)
    /// process and rewrites /etc/k0s/containerd.toml at start while it is
    /// k0s-managed (see `K0S_CONFIG`).
    K0s,
}

/// k0s's containerd, from k0sproject/k0s: `pkg/component/worker/containerd`
/// (`defaultConfPath`, `DefaultImportsPath`, `Address(RunDir)` with RunDir
/// /run/k0s, the binary staged into BinDir /var/lib/k0s/bin) and
/// `pkg/install/service.go` (units `k0s` + role, written by `k0s install`).
pub const K0S_CONFIG: &str = "/etc/k0s/containerd.toml";
pub const K0S_DROPIN_DIR: &str = "/etc/k0s/containerd.d";
pub const K0S_SOCKET: &str = "/run/k0s/containerd.sock";
pub const K0S_BINARY: &str = "/var/lib/k0s/bin/containerd";
/// `k0s install worker`; `k0s install controller` runs containerd only with
/// `--enable-worker` or `--single` (controller+worker).
pub const K0S_UNITS: [&str; 2] = ["k0sworker.service", "k0scontroller.service"];

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
pub(super) const BINARIES: &[&str] = &[
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
    /// The socket the unit's ExecStart passes with `--address` (it wins over
    /// the config's `[grpc] address`).
    pub address: Option<PathBuf>,
    /// The running containerd's PID (its unit's MainPID, or found by its name).
    pub pid: Option<u32>,
    /// Why `pid` is `None` although containerd may run: several run and none
    /// is this config's. `None` with no pid: none runs.
    pub pid_unknown: Option<String>,
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

fn is_active(m: &dyn UnitReader, unit: &str) -> bool {
    m.status(unit).is_ok_and(|s| s.active_state.is_up())
}

fn distro_of(unit: &str) -> Distro {
    if unit == MICROK8S_UNIT {
        return Distro::Microk8s;
    }
    if K0S_UNITS.contains(&unit) {
        return Distro::K0s;
    }
    RANCHERS
        .iter()
        .find(|r| r.units.contains(&unit))
        .map_or(Distro::Plain, |r| Distro::Rancher(r.distro))
}

pub(super) fn known_units() -> Vec<&'static str> {
    let mut v = vec![PLAIN_UNIT];
    for r in &RANCHERS {
        v.extend(r.units);
    }
    v.push(MICROK8S_UNIT);
    v.extend(K0S_UNITS);
    v
}

/// A k0s controller's unit runs no containerd unless it is a worker too.
fn runs_no_containerd(unit: &UnitFile) -> bool {
    unit.name == K0S_UNITS[1]
        && !unit
            .command()
            .unwrap_or_default()
            .iter()
            .any(|w| w == "--enable-worker" || w == "--single" || w.starts_with("--enable-worker="))
}

/// Finds which containerd runs here. Reads unit files, the process table and
/// (live) systemd; never writes.
pub fn discover(snap: &Snapshot, hints: &Hints) -> Discovery {
    let chosen = choose::units(snap, hints).and_then(|(names, installed)| {
        let unit = choose::unit(snap, hints, &names, &installed)?;
        Ok((unit, installed))
    });
    let (chosen, installed) = match chosen {
        Ok(c) => c,
        Err(why) => return Discovery::Unknown(why),
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
    let (config, config_source) = unit_config(distro, &unit, file, hints, &mut warnings);
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
    let (pid, pid_unknown) = match running_pid(snap, &unit, distro, &config) {
        Ok(pid) => (pid, None),
        Err(why) => (None, Some(why)),
    };
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
        address: file.and_then(cri::unit_address),
        pid,
        pid_unknown,
        warnings,
    })
}

/// The config the unit gives containerd, and where that was read: the
/// distribution's own for k3s/rke2, MicroK8s and k0s; a plain unit's
/// `--config` (or the default) from its ExecStart.
fn unit_config(
    distro: Distro,
    unit: &str,
    file: Option<&UnitFile>,
    hints: &Hints,
    warnings: &mut Vec<String>,
) -> (PathBuf, String) {
    match distro {
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
        Distro::K0s => (
            PathBuf::from(K0S_CONFIG),
            format!("k0s ({unit}) runs containerd with --config={K0S_CONFIG}"),
        ),
        Distro::Plain => match file {
            Some(f) => {
                for u in &f.unreadable {
                    warnings.push(format!("{unit}: environment file {u}"));
                }
                let shown = f.sources[0].display();
                match f.command().as_deref().and_then(config_arg) {
                    // Lexically clean (`--config //etc/x.toml` is /etc/x.toml).
                    Some(c) => (
                        Path::new(&c).components().collect(),
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
    }
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

/// The installed containerd package (`containerd` or `containerd.io`) and its
/// version, from the dpkg database under the root.
pub fn dpkg_containerd(host: &super::read::ReadHost) -> Option<(String, String)> {
    let status = host.read_string(Path::new("/var/lib/dpkg/status")).ok()??;
    status.split("\n\n").find_map(|stanza| {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim))
        };
        let installed = field("Status:").is_some_and(|s| s.ends_with(" installed"));
        let package = field("Package:")?;
        (installed && matches!(package, "containerd" | "containerd.io")).then(|| {
            (
                package.to_owned(),
                field("Version:").unwrap_or("").to_owned(),
            )
        })
    })
}
