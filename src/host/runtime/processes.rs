//! The containerd processes of the process table and the config each was
//! started with: for the unit's process, and where no unit file says.

use std::path::{Path, PathBuf};

use super::{DEFAULT_CONFIG, Distro, K0S_CONFIG, MICROK8S_CONFIG, RANCHERS};
use crate::host::procfs;
use crate::host::snapshot::Snapshot;
use crate::host::units::config_arg;

/// The config in a `/proc/PID/cmdline` (NUL-separated words).
pub(super) fn cmdline_config(cmdline: &str) -> PathBuf {
    let args: Vec<String> = cmdline
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    PathBuf::from(config_arg(&args).unwrap_or_else(|| DEFAULT_CONFIG.to_owned()))
}

/// The containerd process of this unit: its MainPID (a plain unit), else the
/// process named containerd whose config is the distribution's, or (a plain
/// containerd without systemd) the only one, or the one started with `config`.
pub(super) fn running_pid(
    snap: &Snapshot,
    unit: &str,
    distro: Distro,
    config: &Path,
) -> Option<u32> {
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
        Distro::K0s => Some(PathBuf::from(K0S_CONFIG)),
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
            // Several (a CI host running containerds side by side, say): the
            // one started with this config, as written or under --root.
            _ => {
                let under_root = snap.path(config);
                procs
                    .iter()
                    .filter(|(_, c)| c == config || *c == under_root)
                    .min_by_key(|(p, _)| procfs::start_time(snap, *p))
                    .map(|(p, _)| *p)
            }
        },
    }
}

/// Every process named containerd, with the config it was started with (its
/// default when the command line cannot be read: a process without one).
pub(super) fn containerd_processes(snap: &Snapshot) -> Vec<(u32, PathBuf)> {
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
pub(super) fn is_dockers(config: &Path) -> bool {
    config.starts_with("/var/run/docker") || config.starts_with("/run/docker")
}
