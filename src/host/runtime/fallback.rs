//! No unit file to say which containerd runs: the running process's command
//! line, else the config files of the known layouts, else a binary or package
//! on its defaults, else nothing is there.

use std::path::{Path, PathBuf};

use super::processes::{containerd_processes, is_dockers};
use super::{
    BINARIES, Containerd, DEFAULT_CONFIG, Discovery, Distro, Hints, MICROK8S_CONFIG, MICROK8S_UNIT,
    PLAIN_UNIT, RANCHERS, known_units,
};
use crate::host::snapshot::Snapshot;

/// No unit file: the running process's command line, else the config files of
/// the known layouts, else nothing is there.
pub(super) fn without_unit(snap: &Snapshot, hints: &Hints) -> Discovery {
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
    layout_file(snap)
        .or_else(|| installed(snap))
        .unwrap_or_else(absent)
}

/// The layout a config path belongs to, and its unit.
fn layout_config(p: &Path) -> Option<(Distro, &'static str)> {
    if let Some(r) = RANCHERS.iter().find(|r| Path::new(r.config) == p) {
        return Some((Distro::Rancher(r.distro), r.units[0]));
    }
    if p == Path::new(super::K0S_CONFIG) {
        return Some((Distro::K0s, super::K0S_UNITS[0]));
    }
    (p == Path::new(MICROK8S_CONFIG)).then_some((Distro::Microk8s, MICROK8S_UNIT))
}

fn found(
    distro: Distro,
    unit: &str,
    config: PathBuf,
    source: String,
    pid: Option<u32>,
) -> Discovery {
    Discovery::Found(Containerd {
        distro,
        unit: unit.to_owned(),
        unit_sources: Vec::new(),
        config,
        config_source: source,
        address: None,
        pid,
        pid_unknown: None,
        warnings: Vec::new(),
    })
}

/// The first config file of a known layout that is there: containerd's
/// default path, then k3s/rke2, k0s and MicroK8s.
fn layout_file(snap: &Snapshot) -> Option<Discovery> {
    if snap.exists(Path::new(DEFAULT_CONFIG)) {
        return Some(found(
            Distro::Plain,
            PLAIN_UNIT,
            DEFAULT_CONFIG.into(),
            "containerd's default path (no containerd unit file or process found)".to_owned(),
            None,
        ));
    }
    for r in &RANCHERS {
        if snap.exists(Path::new(r.config)) {
            return Some(found(
                Distro::Rancher(r.distro),
                r.units[0],
                r.config.into(),
                format!("{}'s containerd config (no unit file found)", r.distro),
                None,
            ));
        }
    }
    if snap.exists(Path::new(super::K0S_CONFIG)) {
        return Some(found(
            Distro::K0s,
            super::K0S_UNITS[0],
            super::K0S_CONFIG.into(),
            "k0s's containerd config (no unit file found)".to_owned(),
            None,
        ));
    }
    snap.exists(Path::new(MICROK8S_CONFIG)).then(|| {
        found(
            Distro::Microk8s,
            MICROK8S_UNIT,
            MICROK8S_CONFIG.into(),
            "microk8s's containerd config (no unit file found)".to_owned(),
            None,
        )
    })
}

/// A binary or package without any config: containerd runs on its defaults,
/// and the agent may create the default file.
fn installed(snap: &Snapshot) -> Option<Discovery> {
    let binary = BINARIES.iter().find(|b| snap.exists(Path::new(b)));
    let package = super::dpkg_containerd(snap).map(|(name, _)| name);
    if binary.is_none() && package.is_none() {
        return None;
    }
    let what = binary.map_or_else(
        || format!("the {} package", package.unwrap_or_default()),
        |b| (*b).to_owned(),
    );
    Some(found(
        Distro::Plain,
        PLAIN_UNIT,
        DEFAULT_CONFIG.into(),
        format!("containerd's default ({what} is installed, no config file yet)"),
        None,
    ))
}

/// Nothing of containerd is there: everything looked for.
fn absent() -> Discovery {
    Discovery::Absent {
        looked_for: format!(
            "no containerd process, no unit ({}) in {}, no binary ({}), no containerd package in the dpkg database, and no config ({DEFAULT_CONFIG}, {}, {MICROK8S_CONFIG}, {})",
            known_units().join(", "),
            crate::host::units::UNIT_DIRS.join(", "),
            BINARIES.join(", "),
            RANCHERS
                .iter()
                .map(|r| r.config)
                .collect::<Vec<_>>()
                .join(", "),
            super::K0S_CONFIG,
        ),
    }
}
