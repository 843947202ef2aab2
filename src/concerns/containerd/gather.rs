//! gather: everything `decide` needs, read once from the host snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::effective::Effective;
use super::layout::{
    Layout, binary, daemon_major, load_microk8s_template, load_rancher_template, load_set,
};
use super::spec::{self, SpecError};
use super::{ConfigSet, ContainerdError, Facts, Started, validate, view};
use crate::config::ContainerdConfig;
use crate::host::procfs;
use crate::host::runtime::{Containerd, Discovery, RANCHERS};
use crate::host::service::{UnitReader, UnitState};
use crate::host::snapshot::Snapshot;

/// When containerd last read a file it reads: the newest modification time
/// and its file; `Err` when a time cannot be read (the question stays open).
type Newest = Result<Option<(SystemTime, PathBuf)>, String>;

/// Spec files by path: their text and mode; `None` when absent.
type Specs = BTreeMap<PathBuf, Option<(String, u32)>>;

/// `owned_specs`: spec files the agent created earlier (from its ledger): a handler
/// pointing at one of them follows `base_spec_path` when that setting changes.
pub fn gather(
    host: &Snapshot,
    cfg: &ContainerdConfig,
    manager: Option<&dyn UnitReader>,
    owned_specs: &BTreeSet<PathBuf>,
) -> Result<Facts, ContainerdError> {
    let (found, layout, set) = found_set(host, cfg)?;
    let main_path = found.config.clone();
    let cri_disabled = cri_disabled(&set);
    let spec_path = layout.spec_path(&cfg.base_spec_path, &main_path);
    let binary = binary(host, cfg, &layout);
    let ctr = layout
        .bundled_ctr()
        .map(PathBuf::from)
        .filter(|p| host.exists(p));
    let daemon_major = daemon_major(host, cfg, &layout);
    let (set, template) = with_template(host, &layout, set, daemon_major, &spec_path)?;
    let unit = found.unit.clone();
    // containerd 2.x reads its own plugin names even in a `version = 2` file
    // (AKS renders such files), and then ignores the 1.x names' runtimes there.
    let (set, template) = (
        two_x_names(set, daemon_major, &host.path(&main_path))?,
        template
            .map(|t| two_x_names(t, daemon_major, &host.path(&main_path)))
            .transpose()?,
    );
    let mut referenced = referenced_specs(&set, template.as_ref());
    let dump_view = dump_view(host, &binary, &set, cri_disabled.is_some());
    if let Some(Ok(v)) = &dump_view {
        spec_paths_from_view(v, &mut referenced);
    }
    let (specs, newest) = specs(host, &set, &referenced, &spec_path, owned_specs)?;
    let (template_spec, template_source) = template_spec(host, ctr.as_deref());
    let containerd_started = started(host, manager, &unit, &found);
    // containerd's `--address` wins over the config's [grpc] address.
    let grpc_address: PathBuf = found.address.clone().unwrap_or_else(|| {
        set.files[0]
            .get_str(&["grpc", "address"])
            .unwrap_or(default_socket(&layout))
            .into()
    });
    let cri_view = cri_view(host, &containerd_started, &grpc_address);
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

/// The containerd that runs here, its layout, and the config set it reads.
fn found_set(
    host: &Snapshot,
    cfg: &ContainerdConfig,
) -> Result<(Containerd, Layout, ConfigSet), ContainerdError> {
    let found = match host.containerd(&cfg.hints()) {
        Discovery::Found(c) => c.clone(),
        Discovery::Absent { looked_for } => {
            return Err(ContainerdError::Absent(looked_for.clone()));
        }
        Discovery::Unknown(why) => return Err(ContainerdError::Unknown(why.clone())),
    };
    let layout = Layout::of(found.distro);
    if layout == Layout::K0s {
        super::k0s::refuse(host, &found.config)?;
    }
    let set = load_set(host, &found.config)?;
    let set = match layout {
        Layout::K0s => super::k0s::with_dropin(host, set)?,
        _ => set,
    };
    Ok((found, layout, set))
}

/// containerd's own view of the files as they are now (the judge of `ok`):
/// its `config dump` of them, unless there is no file or CRI is off.
fn dump_view(
    host: &Snapshot,
    binary: &Path,
    set: &ConfigSet,
    cri_disabled: bool,
) -> Option<Result<view::View, String>> {
    if set.files[0].original.is_none() || cri_disabled {
        return None;
    }
    let texts: Vec<String> = set
        .files
        .iter()
        .map(|f| f.original.clone().unwrap_or_default())
        .collect();
    Some(validate::view(host, binary, &texts))
}

/// The running containerd's own view, over CRI (live and running; with or
/// without systemd to tell when it started).
fn cri_view(
    host: &Snapshot,
    started: &Result<Option<Started>, String>,
    address: &Path,
) -> Option<Result<view::View, String>> {
    match (started, host.is_live()) {
        (Ok(Some(_)), true) => Some(
            host.cri_config(address)
                .map_err(|e| e.to_string())
                .and_then(|c| view::from_cri_status(&c)),
        ),
        _ => None,
    }
}

/// The CRI plugin's id when the file containerd reads disables it: then it
/// serves no pods, and there is nothing to edit.
fn cri_disabled(set: &ConfigSet) -> Option<String> {
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
    view::cri_disabled_by(
        disabled
            .iter()
            .map(String::as_str)
            .filter(|d| *d != "cri" || set.version == super::toml::Version::V1),
    )
}

/// The set as the layout has containerd read it, and the template it is
/// rendered from where one is edited instead (k3s/rke2 without a drop-in
/// directory, MicroK8s).
fn with_template(
    host: &Snapshot,
    layout: &Layout,
    set: ConfigSet,
    daemon_major: Option<u32>,
    spec_path: &Path,
) -> Result<(ConfigSet, Option<ConfigSet>), ContainerdError> {
    Ok(match layout {
        Layout::Plain | Layout::K0s => (set, None),
        // k3s/rke2 whose config.toml imports their drop-in directory: the
        // agent's own drop-in there, no template edited.
        Layout::Rancher { .. } => match super::rancher::dropin_dir(&set, daemon_major) {
            Some(dir) => (super::rancher::with_dropin(host, set, &dir)?, None),
            None => {
                let t = load_rancher_template(host, &set, spec_path)?;
                (set, t)
            }
        },
        Layout::Microk8s => (set, Some(load_microk8s_template(host)?)),
    })
}

/// The specs the handlers reference, under every merge containerd might
/// apply, so none is missed.
fn referenced_specs(set: &ConfigSet, template: Option<&ConfigSet>) -> BTreeSet<PathBuf> {
    let mut referenced: BTreeSet<PathBuf> = BTreeSet::new();
    for s in std::iter::once(set).chain(template) {
        for merge in super::Merge::ALL {
            let e = Effective::of(s, merge);
            referenced.extend(
                e.handlers
                    .into_iter()
                    .filter_map(|h| h.spec.map(PathBuf::from)),
            );
        }
    }
    referenced
}

/// Only what containerd reads can make a restart due; a time that cannot be
/// read leaves the question open.
fn saw(newest: &mut Newest, at: Option<SystemTime>, path: &Path) {
    if let (Ok(n), Some(at)) = (newest, at) {
        if n.as_ref().is_none_or(|(t, _)| at > *t) {
            *n = Some((at, path.to_owned()));
        }
    }
}

/// The times of the config bytes read: a second read could see a later edit
/// and owe a restart for bytes not yet judged (one restart too many).
fn config_times(host: &Snapshot, set: &ConfigSet) -> Newest {
    let mut newest = Ok(None);
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
    newest
}

/// The spec files read, and the newest change of what containerd reads: the
/// referenced specs, the agent's configured path and the specs it created.
fn specs(
    host: &Snapshot,
    set: &ConfigSet,
    referenced: &BTreeSet<PathBuf>,
    spec_path: &Path,
    owned_specs: &BTreeSet<PathBuf>,
) -> Result<(Specs, Newest), ContainerdError> {
    let mut spec_paths = referenced.clone();
    spec_paths.insert(spec_path.to_path_buf());
    spec_paths.extend(owned_specs.iter().cloned());
    let mut newest = config_times(host, set);
    let specs = read_specs(host, spec_paths, referenced, &mut newest)?;
    Ok((specs, newest))
}

/// The specs containerd reads (those the handlers reference), and the ones the
/// agent may write: its configured path and the spec files it created before.
/// A referenced one's time counts towards the newest change.
fn read_specs(
    host: &Snapshot,
    spec_paths: BTreeSet<PathBuf>,
    referenced: &BTreeSet<PathBuf>,
    newest: &mut Newest,
) -> Result<Specs, ContainerdError> {
    let mut specs = BTreeMap::new();
    for p in spec_paths {
        let data = host.read_trusted(&p, "a base runtime spec")?;
        if let Some(d) = data.as_ref().filter(|_| referenced.contains(&p)) {
            saw(newest, d.modified, &p);
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
    Ok(specs)
}

/// The spec a new base spec starts from, and where it came from: `ctr oci
/// spec` of the installed containerd, else the built-in default.
fn template_spec(host: &Snapshot, ctr: Option<&Path>) -> (String, String) {
    let ctr_program = ctr.map_or("ctr".into(), |p| p.display().to_string());
    match host.query(&ctr_program, &["oci", "spec"]) {
        Some(Ok(out)) if out.status.success() => match spec::template_from_ctr(&out.stdout) {
            Some(t) => (t, "ctr oci spec".to_owned()),
            None => builtin_template(),
        },
        _ => builtin_template(),
    }
}

/// When the running containerd started: systemd's exact time for its unit,
/// else its process's start from /proc. Unknown is said, never "not running".
fn started(
    host: &Snapshot,
    manager: Option<&dyn UnitReader>,
    unit: &str,
    found: &Containerd,
) -> Result<Option<Started>, String> {
    match manager.map(|m| m.status(unit)) {
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
            None => found.pid_unknown.clone().map_or(Ok(None), Err),
        },
    }
}

/// The layout's socket, where neither `--address` nor the config names one.
fn default_socket(layout: &Layout) -> &'static str {
    match layout {
        Layout::Plain => "/run/containerd/containerd.sock",
        Layout::Rancher { distro } => RANCHERS
            .iter()
            .find(|r| r.distro == *distro)
            .map_or("/run/k3s/containerd/containerd.sock", |r| r.socket),
        Layout::Microk8s => "/var/snap/microk8s/common/run/containerd.sock",
        Layout::K0s => crate::host::runtime::K0S_SOCKET,
    }
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
