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
/// Several, none of them started with `config`: which one is this unit's
/// cannot be told (`Err`, why), which is not "none runs".
pub(super) fn running_pid(
    snap: &Snapshot,
    unit: &str,
    distro: Distro,
    config: &Path,
) -> Result<Option<u32>, String> {
    if let Some(m) = snap.manager() {
        if let (Ok(s), Distro::Plain) = (m.status(unit), distro) {
            return Ok((s.main_pid > 0).then_some(s.main_pid));
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
        Some(w) => Ok(procs.into_iter().find(|(_, c)| *c == w).map(|(p, _)| p)),
        None => match procs.as_slice() {
            [] => Ok(None),
            [(p, _)] => Ok(Some(*p)),
            // Several (a CI host running containerds side by side, say): the
            // one started with this config, as written or under --root.
            _ => {
                let under_root = snap.path(config);
                let mine = procs
                    .iter()
                    .filter(|(_, c)| c == config || *c == under_root)
                    .min_by_key(|(p, _)| procfs::start_time(snap, *p))
                    .map(|(p, _)| *p);
                mine.map(Some).ok_or_else(|| ambiguous(&procs, config))
            }
        },
    }
}

/// Why no process of several is this config's: each one and what it reads.
fn ambiguous(procs: &[(u32, PathBuf)], config: &Path) -> String {
    let each: Vec<String> = procs
        .iter()
        .map(|(p, c)| format!("pid {p} reads {}", c.display()))
        .collect();
    format!(
        "{} containerd processes run ({}) and none was started with {}: which one serves this node cannot be told without systemd; set containerd.config_path to the one the kubelet uses",
        procs.len(),
        each.join(", "),
        config.display()
    )
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::{Distro, running_pid};
    use crate::host::Host;
    use crate::host::snapshot::Snapshot;

    /// Two containerds (hand-made /proc entries), no systemd to ask.
    fn two_containerds() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (pid, config) in [(100, "/etc/a.toml"), (200, "/etc/b.toml")] {
            let d = t.path().join(format!("proc/{pid}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("comm"), "containerd\n").unwrap();
            fs::write(
                d.join("cmdline"),
                format!("/usr/bin/containerd\0--config\0{config}\0"),
            )
            .unwrap();
        }
        t
    }

    #[test]
    fn of_several_containerds_the_one_started_with_the_config_is_the_units() {
        let t = two_containerds();
        let snap = Snapshot::new(Host::new(t.path()));
        let pid = running_pid(
            &snap,
            "containerd.service",
            Distro::Plain,
            Path::new("/etc/b.toml"),
        );
        assert_eq!(pid, Ok(Some(200)));
    }

    /// Several run and none reads this config: that is not "containerd is not
    /// running" (which would make the memlock checks judge a stopped daemon).
    #[test]
    fn several_containerds_none_with_the_config_is_unknown_not_absent() {
        let t = two_containerds();
        let snap = Snapshot::new(Host::new(t.path()));
        let why = running_pid(
            &snap,
            "containerd.service",
            Distro::Plain,
            Path::new("/etc/containerd/config.toml"),
        )
        .unwrap_err();
        assert!(
            why.contains("pid 100 reads /etc/a.toml")
                && why.contains("pid 200 reads /etc/b.toml")
                && why.contains("none was started with /etc/containerd/config.toml"),
            "{why}"
        );
    }
}
