//! Which containerd unit: the configured one; else the one systemd runs; else
//! the one installed (enabled, where several are). `Err` says why it cannot be
//! told, for `Discovery::Unknown`.

use std::path::Path;

use super::cri;
use super::{Distro, Hints, PLAIN_UNIT, distro_of, is_active, known_units, runs_no_containerd};
use crate::host::snapshot::Snapshot;
use crate::host::units::UnitFile;

/// The unit names to look at, and the unit files of those that run containerd.
pub(super) fn units(
    snap: &Snapshot,
    hints: &Hints,
) -> Result<(Vec<String>, Vec<UnitFile>), String> {
    let mut installed: Vec<UnitFile> = Vec::new();
    let mut names: Vec<String> = match &hints.unit {
        Some(u) => vec![u.clone()],
        None => known_units().into_iter().map(str::to_owned).collect(),
    };
    for name in &names {
        match snap.unit_file(name) {
            Ok(Some(u)) if hints.unit.is_none() && runs_no_containerd(&u) => {}
            Ok(Some(u)) => installed.push(u),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot read the unit {name}: {e}")),
        }
    }
    if hints.unit.is_none() {
        // Other units that run containerd (a `cri-containerd.service` beside
        // Docker's containerd.io): plain ones, told apart by `cri::choose`.
        for u in cri::containerd_units(snap, &known_units()) {
            names.push(u.name.clone());
            installed.push(u);
        }
    }
    Ok((names, installed))
}

/// The unit that runs the containerd serving the kubelet; `None` when no unit
/// runs one.
pub(super) fn unit(
    snap: &Snapshot,
    hints: &Hints,
    names: &[String],
    installed: &[UnitFile],
) -> Result<Option<String>, String> {
    if let Some(u) = &hints.unit {
        return Ok(Some(u.clone()));
    }
    let manager = snap.manager();
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
    let plain: Vec<&UnitFile> = installed
        .iter()
        .filter(|u| distro_of(&u.name) == Distro::Plain)
        .collect();
    match pick(snap, installed, &active) {
        Ok(Some(u)) if plain.len() > 1 && distro_of(&u) == Distro::Plain => {
            let cands: Vec<cri::Candidate> = plain
                .iter()
                .map(|f| cri::candidate(snap, &f.name, Some(f)))
                .collect();
            Ok(Some(cri::prefer_kubelets(
                u,
                &cands,
                cri::kubelet_endpoint(snap).as_deref(),
            )))
        }
        Ok(Some(u)) => Ok(Some(u)),
        Err(e) if active.len() > 1 => Err(format!(
            "several containerd units are active ({}){}: set `unit = \"…\"` under [containerd] in the agent config to the one that serves the kubelet",
            active.join(", "),
            why(e)
        )),
        _ => from_installed(snap, installed, manager.is_some()),
    }
}

/// None active: the one installed, else the one enabled among several.
fn from_installed(
    snap: &Snapshot,
    installed: &[UnitFile],
    has_manager: bool,
) -> Result<Option<String>, String> {
    let installed_names: Vec<&str> = installed.iter().map(|u| u.name.as_str()).collect();
    let first = match pick(snap, installed, &installed_names) {
        Ok(u) => return Ok(u),
        Err(first) => first,
    };
    let enabled: Vec<&str> = installed_names
        .iter()
        .copied()
        .filter(|u| snap.exists(&Path::new("/etc/systemd/system/multi-user.target.wants").join(u)))
        .collect();
    match pick(snap, installed, &enabled) {
        Ok(Some(u)) => Ok(Some(u)),
        _ => Err(format!(
            "several containerd units are installed ({}) and none {}{}: set `unit = \"…\"` under [containerd] in the agent config",
            installed_names.join(", "),
            if has_manager {
                "is active"
            } else {
                "can be asked (no systemd)"
            },
            why(first)
        )),
    }
}

/// k3s/rke2/microk8s run the containerd that serves pods, even beside a
/// distribution's containerd.service (Docker's, say); among plain units,
/// the one that serves the kubelet (`cri::choose`). `Err` when several
/// remain (with why, or empty).
fn pick(snap: &Snapshot, installed: &[UnitFile], v: &[&str]) -> Result<Option<String>, String> {
    let k8s: Vec<&&str> = v.iter().filter(|u| distro_of(u) != Distro::Plain).collect();
    match (k8s.as_slice(), v) {
        ([one], _) => Ok(Some((**one).to_owned())),
        ([], []) => Ok(None),
        ([], [one]) => Ok(Some((*one).to_owned())),
        ([], plain) => {
            let cands: Vec<cri::Candidate> = plain
                .iter()
                .map(|u| cri::candidate(snap, u, installed.iter().find(|i| i.name == *u)))
                .collect();
            cri::choose(&cands, cri::kubelet_endpoint(snap).as_deref()).map(Some)
        }
        _ => Err(String::new()),
    }
}

fn why(e: String) -> String {
    if e.is_empty() {
        String::new()
    } else {
        format!("; {e}")
    }
}
