//! gather: everything `decide` needs, read once from the host snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::effective::Effective;
use super::layout::{
    Layout, RANCHERS, config_path, daemon_major, load_microk8s_template, load_rancher_template,
    load_set, unit_for,
};
use super::spec::{self, SpecError};
use super::{ContainerdError, Facts, Started};
use crate::config::ContainerdConfig;
use crate::host::snapshot::Snapshot;
use crate::procfs;
use crate::systemd::ServiceManager;

/// `owned_specs`: spec files the agent created earlier (from its ledger): a handler
/// pointing at one of them follows `base_spec_path` when that setting changes.
pub fn gather(
    host: &Snapshot,
    cfg: &ContainerdConfig,
    manager: Option<&dyn ServiceManager>,
    owned_specs: &BTreeSet<PathBuf>,
) -> Result<Facts, ContainerdError> {
    let (main_path, layout) = config_path(host, cfg);
    let set = load_set(host, &main_path)?;
    let template = match &layout {
        Layout::Plain => None,
        Layout::Rancher { .. } => load_rancher_template(host, &set, &cfg.base_spec_path)?,
        Layout::Microk8s => Some(load_microk8s_template(host)?),
    };
    let unit = unit_for(host, cfg, &layout, manager)?;
    let daemon_major = daemon_major(host, cfg, &layout);

    // The specs containerd reads (those the handlers reference), and the ones the
    // agent may write: its configured path and the spec files it created before.
    // Under every merge containerd might apply, so none is missed.
    let mut referenced: BTreeSet<PathBuf> = BTreeSet::new();
    for s in std::iter::once(&set).chain(template.as_ref()) {
        for merge in super::Merge::ALL {
            let e = Effective::of(s, merge);
            referenced.extend(
                e.handlers
                    .into_iter()
                    .filter_map(|h| h.spec.map(PathBuf::from)),
            );
        }
    }
    let mut spec_paths = referenced.clone();
    spec_paths.insert(cfg.base_spec_path.clone());
    spec_paths.extend(owned_specs.iter().cloned());
    let mut specs = BTreeMap::new();
    // Only what containerd reads can make a restart due.
    let mut newest = set
        .files
        .iter()
        .filter_map(|f| host.read(&f.path).ok().flatten()?.modified)
        .max();
    for p in spec_paths {
        let data = host.read_trusted(&p, "a base runtime spec")?;
        if let Some(d) = data.as_ref().filter(|_| referenced.contains(&p)) {
            newest = newest.max(d.modified);
        }
        let entry = match data {
            None => None,
            Some(d) => Some((
                String::from_utf8(d.bytes).map_err(|_| ContainerdError::Spec {
                    path: host.path(&p),
                    source: SpecError::Json("not UTF-8".into()),
                })?,
                d.mode,
            )),
        };
        specs.insert(p, entry);
    }

    let (template_spec, template_source) = match host.run("ctr", &["oci", "spec"]) {
        Some(Ok(out)) if out.status.success() => match spec::template_from_ctr(&out.stdout) {
            Some(t) => (t, "ctr oci spec".to_owned()),
            None => builtin_template(),
        },
        _ => builtin_template(),
    };

    let containerd_started = match manager.and_then(|m| m.status(&unit).ok()) {
        Some(st) if st.active_state == "active" => st.started.map(|at| Started { at, exact: true }),
        Some(_) => None,
        None => procfs::find_by_comm(host, "containerd")?
            .and_then(|pid| procfs::start_time(host, pid))
            .map(|at| Started { at, exact: false }),
    };
    let default_socket = match &layout {
        Layout::Plain => "/run/containerd/containerd.sock",
        Layout::Rancher { distro } => RANCHERS
            .iter()
            .find(|r| r.distro == *distro)
            .map_or("/run/k3s/containerd/containerd.sock", |r| r.socket),
        Layout::Microk8s => "/var/snap/microk8s/common/run/containerd.sock",
    };
    let grpc_address = set.files[0]
        .get_str(&["grpc", "address"])
        .unwrap_or(default_socket)
        .into();

    Ok(Facts {
        set,
        layout,
        template,
        daemon_major,
        unit,
        specs,
        template_spec,
        template_source,
        containerd_started,
        newest_change: newest,
        owned_specs: owned_specs.clone(),
        live: host.is_live(),
        grpc_address,
    })
}

fn builtin_template() -> (String, String) {
    (
        spec::BUILTIN_DEFAULT.to_owned(),
        "built-in default (containerd 1.6)".to_owned(),
    )
}
