//! gather: everything `decide` needs, read once from the host snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::effective::Effective;
use super::layout::{
    Layout, binary, daemon_major, load_microk8s_template, load_rancher_template, load_set,
};
use super::spec::{self, SpecError};
use super::{ContainerdError, Facts, Started, validate, view};
use crate::config::ContainerdConfig;
use crate::host::procfs;
use crate::host::runtime::{Discovery, RANCHERS};
use crate::host::service::{ServiceManager, UnitState};
use crate::host::snapshot::Snapshot;

/// `owned_specs`: spec files the agent created earlier (from its ledger): a handler
/// pointing at one of them follows `base_spec_path` when that setting changes.
pub fn gather(
    host: &Snapshot,
    cfg: &ContainerdConfig,
    manager: Option<&dyn ServiceManager>,
    owned_specs: &BTreeSet<PathBuf>,
) -> Result<Facts, ContainerdError> {
    let found = match host.containerd(&cfg.hints()) {
        Discovery::Found(c) => c.clone(),
        Discovery::Absent { looked_for } => {
            return Err(ContainerdError::Absent(looked_for.clone()));
        }
        Discovery::Unknown(why) => return Err(ContainerdError::Unknown(why.clone())),
    };
    let layout = Layout::of(found.distro);
    let main_path = found.config.clone();
    if layout == Layout::K0s {
        super::k0s::refuse(host, &main_path)?;
    }
    let set = load_set(host, &main_path)?;
    let set = match layout {
        Layout::K0s => super::k0s::with_dropin(host, set)?,
        _ => set,
    };
    // CRI off in the file containerd reads: it serves no pods, nothing to edit.
    let disabled: Vec<String> = set
        .files
        .iter()
        .filter_map(|f| f.get(&["disabled_plugins"])?.as_array().cloned())
        .flat_map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    // The short id `cri` only means the CRI plugin in a version 1 file (containerd
    // 1.6 refuses it in a version 2 one: "invalid disabled plugin URI").
    let cri_disabled = view::cri_disabled_by(
        disabled
            .iter()
            .map(String::as_str)
            .filter(|d| *d != "cri" || set.version == super::toml::Version::V1),
    );
    let spec_path = layout.spec_path(&cfg.base_spec_path, &main_path);
    let binary = binary(host, cfg, &layout);
    let ctr = layout
        .bundled_ctr()
        .map(PathBuf::from)
        .filter(|p| host.exists(p));
    let daemon_major = daemon_major(host, cfg, &layout);
    // k3s/rke2 whose config.toml imports their drop-in directory: the agent's
    // own drop-in there, no template edited.
    let rancher_dropin = match &layout {
        Layout::Rancher { .. } => super::rancher::dropin_dir(&set, daemon_major),
        _ => None,
    };
    let (set, template): (super::ConfigSet, Option<super::ConfigSet>) = match &layout {
        Layout::Plain | Layout::K0s => (set, None),
        Layout::Rancher { .. } => match &rancher_dropin {
            Some(dir) => (super::rancher::with_dropin(host, set, dir)?, None),
            None => {
                let t = load_rancher_template(host, &set, &spec_path)?;
                (set, t)
            }
        },
        Layout::Microk8s => (set, Some(load_microk8s_template(host)?)),
    };
    let unit = found.unit.clone();
    // containerd 2.x reads its own plugin names even in a `version = 2` file
    // (AKS renders such files), and then ignores the 1.x names' runtimes there.
    let (set, template) = (
        two_x_names(set, daemon_major, &host.path(&main_path))?,
        template
            .map(|t| two_x_names(t, daemon_major, &host.path(&main_path)))
            .transpose()?,
    );

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
    // containerd's own view of the files as they are now (the judge of `ok`).
    let dump_view = if set.files[0].original.is_none() || cri_disabled.is_some() {
        None
    } else {
        let texts: Vec<String> = set
            .files
            .iter()
            .map(|f| f.original.clone().unwrap_or_default())
            .collect();
        Some(validate::view(host, &binary, &texts))
    };
    if let Some(Ok(v)) = &dump_view {
        spec_paths_from_view(v, &mut referenced);
    }
    let mut spec_paths = referenced.clone();
    spec_paths.insert(spec_path.clone());
    spec_paths.extend(owned_specs.iter().cloned());
    let mut specs = BTreeMap::new();
    // Only what containerd reads can make a restart due; a time that cannot be
    // read leaves the question open.
    let mut newest: Result<Option<(std::time::SystemTime, PathBuf)>, String> = Ok(None);
    let saw = |newest: &mut Result<Option<(std::time::SystemTime, PathBuf)>, String>,
               at: Option<std::time::SystemTime>,
               path: &std::path::Path| {
        if let (Ok(n), Some(at)) = (newest, at) {
            if n.as_ref().is_none_or(|(t, _)| at > *t) {
                *n = Some((at, path.to_owned()));
            }
        }
    };
    // The times of the bytes read above: a second read could see a later edit
    // and owe a restart for bytes not yet judged (one restart too many).
    for f in set.files.iter().filter(|f| f.original.is_some()) {
        match f.modified {
            Some(at) => saw(&mut newest, Some(at), &f.path),
            None => {
                newest = Err(format!(
                    "{}: no modification time",
                    host.path(&f.path).display()
                ))
            }
        }
    }
    for p in spec_paths {
        let data = host.read_trusted(&p, "a base runtime spec")?;
        if let Some(d) = data.as_ref().filter(|_| referenced.contains(&p)) {
            saw(&mut newest, d.modified, &p);
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

    let ctr_program = ctr
        .as_ref()
        .map_or("ctr".into(), |p| p.display().to_string());
    let (template_spec, template_source) = match host.query(&ctr_program, &["oci", "spec"]) {
        Some(Ok(out)) if out.status.success() => match spec::template_from_ctr(&out.stdout) {
            Some(t) => (t, "ctr oci spec".to_owned()),
            None => builtin_template(),
        },
        _ => builtin_template(),
    };

    // When the running containerd started: systemd's exact time for its unit,
    // else its process's start from /proc. Unknown is said, never "not running".
    let containerd_started: Result<Option<Started>, String> = match manager.map(|m| m.status(&unit))
    {
        Some(Ok(st)) if st.active_state == UnitState::Active => match st.started {
            Some(at) => Ok(Some(Started { at, exact: true })),
            None => Err(format!("systemd gives {unit} no start time")),
        },
        Some(Ok(_)) => Ok(None),
        Some(Err(e)) => Err(format!("cannot ask systemd about {unit}: {e}")),
        None => match found.pid {
            Some(pid) => procfs::start_time(host, pid)
                .map(|at| Some(Started { at, exact: false }))
                .ok_or_else(|| {
                    format!(
                        "cannot read the start time of containerd (pid {pid}) in /proc/{pid}/stat"
                    )
                }),
            None => Ok(None),
        },
    };
    let default_socket = match &layout {
        Layout::Plain => "/run/containerd/containerd.sock",
        Layout::Rancher { distro } => RANCHERS
            .iter()
            .find(|r| r.distro == *distro)
            .map_or("/run/k3s/containerd/containerd.sock", |r| r.socket),
        Layout::Microk8s => "/var/snap/microk8s/common/run/containerd.sock",
        Layout::K0s => crate::host::runtime::K0S_SOCKET,
    };
    // containerd's `--address` wins over the config's [grpc] address.
    let grpc_address: PathBuf = found.address.clone().unwrap_or_else(|| {
        set.files[0]
            .get_str(&["grpc", "address"])
            .unwrap_or(default_socket)
            .into()
    });

    // The running containerd's own view, over CRI (live and running; with or
    // without systemd to tell when it started).
    let cri_view = match (&containerd_started, host.is_live()) {
        (Ok(Some(_)), true) => Some(
            host.cri_config(&grpc_address)
                .and_then(|c| view::from_cri_status(&c)),
        ),
        _ => None,
    };
    Ok(Facts {
        cri_view,
        kubelet_endpoint: crate::host::runtime::cri::kubelet_endpoint(host),
        config_source: found.config_source.clone(),
        warnings: found.warnings.clone(),
        cri_disabled,
        dump_view,
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
        spec_path,
        binary,
        ctr,
    })
}

fn builtin_template() -> (String, String) {
    (
        spec::BUILTIN_DEFAULT.to_owned(),
        "built-in default (containerd 1.6)".to_owned(),
    )
}

/// The base specs containerd's own view names: read too, so the check can
/// judge their memlock even where the agent's model of the files missed them.
fn spec_paths_from_view(v: &view::View, into: &mut BTreeSet<PathBuf>) {
    into.extend(
        v.handlers
            .iter()
            .filter(|h| !h.base_spec.is_empty())
            .map(|h| PathBuf::from(&h.base_spec)),
    );
}

/// A `version = 2` set that uses containerd 2.x's plugin names is read by 2.x
/// as 2.x reads version 3 (verified with containerd 2.1's `config dump`: the
/// `io.containerd.cri.v1.runtime` handlers win, the 1.x-named ones are ignored);
/// 1.x ignores those names. Which one reads it must then be known.
fn two_x_names(
    mut set: super::ConfigSet,
    daemon_major: Option<u32>,
    shown: &std::path::Path,
) -> Result<super::ConfigSet, ContainerdError> {
    use super::toml::Version;
    let v3 = Version::V3.runtime_plugin();
    if set.version != Version::V2 || !set.files.iter().any(|f| f.get(&v3).is_some()) {
        return Ok(set);
    }
    match daemon_major {
        Some(m) if m >= 2 => {
            set.version = Version::V3;
            Ok(set)
        }
        Some(_) => Ok(set),
        None => Err(ContainerdError::Unknown(format!(
            "{} is a `version = 2` file with containerd 2.x plugin names ([plugins.\"io.containerd.cri.v1.runtime\"]), which containerd 2.x reads and 1.x ignores, and the installed containerd's version is not known: set `daemon_version` under [containerd] in the agent config",
            shown.display()
        ))),
    }
}
