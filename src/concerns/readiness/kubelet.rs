//! `kubelet.devices`: what the kubelet advertises, from its device-plugin
//! checkpoint and the plugins' sockets, against the host's RDMA ports (the
//! `rdma.devices` observations). Both directions: ports up but no RDMA
//! resource (the device plugin is not running: RDMA jobs stop scheduling while
//! the data plane is fine), and an RDMA resource advertised while every port
//! is down or missing (pods get scheduled here and fail). No kubelet: skipped.

use crate::concerns::readiness::reasons;
use crate::engine::check::CheckId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::checkpoint::Checkpoint;
use super::config::KubeletConfig;
use crate::config::{Config, Severity};
use crate::engine::check::{Check, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, ObservationKind};
use crate::reason::Reason;

pub const CHECK_ID: CheckId = CheckId::new("kubelet.devices");
pub const CHECKPOINT: &str = "kubelet_internal_checkpoint";
pub const KUBELET_SOCKET: &str = "kubelet.sock";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub dir: PathBuf,
    /// The directory is there at all.
    pub dir_exists: bool,
    pub kubelet_socket: bool,
    /// The checkpoint's text; `None` when absent.
    pub checkpoint: Option<String>,
    /// Plugin sockets (`*.sock` other than kubelet's own), by file name.
    pub sockets: Vec<String>,
}

pub fn gather(snap: &Snapshot, cfg: &KubeletConfig) -> crate::host::Result<Facts> {
    let dir = cfg.device_plugins_dir.clone();
    let names = snap.list_dir(&dir)?;
    Ok(Facts {
        dir_exists: snap.is_dir(&dir),
        kubelet_socket: names.iter().any(|n| n == KUBELET_SOCKET),
        checkpoint: snap.read_string(&dir.join(CHECKPOINT))?,
        sockets: names
            .into_iter()
            .filter(|n| n.ends_with(".sock") && n != KUBELET_SOCKET)
            .collect(),
        dir,
    })
}

fn matches(globs: &[String], name: &str) -> bool {
    globs
        .iter()
        .any(|g| glob::Pattern::new(g).is_ok_and(|p| p.matches(name)))
}

/// The host's RDMA ports, from `rdma.devices`' observations.
struct Ports {
    total: usize,
    active: usize,
    unknown: usize,
    down: Vec<String>,
}

fn ports(observations: &[Observation]) -> Ports {
    let mut p = Ports {
        total: 0,
        active: 0,
        unknown: 0,
        down: Vec::new(),
    };
    for o in observations {
        if let Observation::Port(port) = o {
            p.total += 1;
            match port.active {
                Some(true) => p.active += 1,
                Some(false) => p.down.push(format!("{}/{}", port.device, port.port)),
                None => p.unknown += 1,
            }
        }
    }
    p
}

fn severity(s: Severity) -> Status {
    match s {
        Severity::Warn => Status::Warn,
        Severity::Fail => Status::Fail,
    }
}

/// A problem the check reports: its status, reason and message.
type Problem = (Status, Reason, String);

pub fn decide(
    f: &Facts,
    cfg: &KubeletConfig,
    observations: &[Observation],
    rdma_enabled: bool,
) -> (Check, Vec<Observation>) {
    let path = f.dir.join(CHECKPOINT);
    if !f.dir_exists || (f.checkpoint.is_none() && !f.kubelet_socket) {
        let c = Check::new(
            CHECK_ID,
            Status::Skipped,
            format!(
                "no kubelet on this node ({} holds neither {KUBELET_SOCKET} nor {CHECKPOINT})",
                f.dir.display()
            ),
        );
        return (c, Vec::new());
    }
    let cp = match f.checkpoint.as_deref().map(Checkpoint::parse).transpose() {
        Ok(cp) => cp,
        Err(e) => {
            let c = Check::new(
                CHECK_ID,
                Status::Unknown,
                format!(
                    "cannot tell what the kubelet advertises: {}: {e}",
                    path.display()
                ),
            )
            .with_reason(reasons::KUBELET_CHECKPOINT_INVALID);
            return (c, Vec::new());
        }
    };
    let registered = cp.as_ref().map(Checkpoint::registered).unwrap_or_default();
    let host = ports(observations);
    let mut problems = expected_missing(cfg, &registered);
    let mut notes: Vec<String> = Vec::new();
    compare_ports(
        f,
        cfg,
        &registered,
        &host,
        rdma_enabled,
        &mut problems,
        &mut notes,
    );
    let checksum = cp
        .as_ref()
        .map(|c| c.checksum_ok().map_err(|e| e.to_string()));
    problems.extend(checksum_problem(&checksum, &path));
    if !f.kubelet_socket {
        notes.push(format!(
            "no {KUBELET_SOCKET}: the kubelet is not running, this is what it last saw"
        ));
    }
    let summary = summary(f, cfg, &registered, &host);
    let allocations: Vec<_> = cp
        .iter()
        .flat_map(|c| c.data.entries.iter().flatten())
        .filter(|e| matches(&cfg.rdma_resources, &e.resource))
        .map(|e| json!({"pod_uid": e.pod_uid, "container": e.container, "resource": e.resource, "devices": e.device_ids.all()}))
        .collect();
    let check = verdict(problems, summary, notes).with_details(json!({
        "checkpoint": path,
        "checksum_ok": checksum.and_then(Result::ok),
        "registered": registered,
        "sockets": f.sockets,
        "rdma_allocations": allocations,
    }));
    let observations = resource_observations(cfg, &registered);
    (check, observations)
}

/// A checkpoint whose checksum does not verify (or cannot be computed): its
/// content may be wrong.
fn checksum_problem(checksum: &Option<Result<bool, String>>, path: &Path) -> Option<Problem> {
    match checksum {
        Some(Ok(false)) => Some((
            Status::Warn,
            reasons::KUBELET_CHECKPOINT_INVALID,
            format!(
                "{}: checksum does not verify (corrupt, or a kubelet layout this agent does not know): its content may be wrong",
                path.display()
            ),
        )),
        Some(Err(e)) => Some((
            Status::Warn,
            reasons::KUBELET_CHECKPOINT_INVALID,
            format!("{}: {e}", path.display()),
        )),
        _ => None,
    }
}

/// The RDMA and reported resources, for the metrics.
fn resource_observations(
    cfg: &KubeletConfig,
    registered: &BTreeMap<&str, usize>,
) -> Vec<Observation> {
    registered
        .iter()
        .filter(|(n, _)| matches(&cfg.rdma_resources, n) || matches(&cfg.report_resources, n))
        .map(|(n, d)| Observation::KubeletResource {
            name: (*n).to_owned(),
            devices: *d,
            rdma: matches(&cfg.rdma_resources, n),
        })
        .collect()
}

/// `kubelet.expected_resources` the kubelet has no healthy device of.
fn expected_missing(cfg: &KubeletConfig, registered: &BTreeMap<&str, usize>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for want in &cfg.expected_resources {
        let have: usize = registered
            .iter()
            .filter(|(n, _)| glob::Pattern::new(want).is_ok_and(|p| p.matches(n)))
            .map(|(_, d)| d)
            .sum();
        if have == 0 {
            problems.push((
                Status::Fail,
                reasons::KUBELET_RESOURCES_ZERO,
                format!("{want} is expected (kubelet.expected_resources) but the kubelet has no healthy device of it"),
            ));
        }
    }
    problems
}

/// The RDMA resources against the host's ports, both ways, and against the
/// device plugin sockets.
fn compare_ports(
    f: &Facts,
    cfg: &KubeletConfig,
    registered: &BTreeMap<&str, usize>,
    host: &Ports,
    rdma_enabled: bool,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    let rdma: Vec<(&str, usize)> = registered
        .iter()
        .filter(|(n, _)| matches(&cfg.rdma_resources, n))
        .map(|(n, d)| (*n, *d))
        .collect();
    let rdma_devices: usize = rdma.iter().map(|(_, d)| d).sum();
    if host.active > 0 && rdma_devices == 0 && !cfg.rdma_resources.is_empty() {
        let empty: Vec<&str> = rdma.iter().map(|(n, _)| *n).collect();
        let registered_empty = if empty.is_empty() {
            String::new()
        } else {
            format!(" ({} registered with 0 healthy devices)", empty.join(", "))
        };
        problems.push((
            severity(cfg.mismatch),
            reasons::KUBELET_RESOURCES_ZERO,
            format!(
                "the host has {} ACTIVE RDMA port(s) but the kubelet advertises no {} device{registered_empty}: \
                 the device plugin is not running: check its DaemonSet, tolerations and operator wait labels",
                host.active,
                cfg.rdma_resources.join(", ")
            ),
        ));
    }
    if rdma_devices > 0 && rdma_enabled && host.active == 0 && host.unknown == 0 {
        let named: Vec<String> = rdma
            .iter()
            .map(|(n, d)| format!("{n} ({d} devices)"))
            .collect();
        let why = if host.total == 0 {
            "the host has no RDMA device".to_owned()
        } else {
            format!(
                "every RDMA port of the host is down ({})",
                host.down.join(", ")
            )
        };
        problems.push((
            severity(cfg.mismatch),
            reasons::KUBELET_RESOURCES_MISMATCH,
            format!(
                "the kubelet advertises {} but {why}: RDMA pods will be scheduled here and fail",
                named.join(", ")
            ),
        ));
    }
    if rdma_devices > 0 && !rdma_enabled {
        notes.push("host ports not compared (rdma.enabled = false)".to_owned());
    }
    if rdma_devices > 0 && f.sockets.is_empty() {
        problems.push((
            Status::Warn,
            reasons::DEVICE_PLUGIN_GONE,
            format!(
                "no device plugin socket in {}: the plugin that registered {} is gone; the kubelet \
                 drops its devices after a grace period",
                f.dir.display(),
                rdma.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
}

/// What the kubelet advertises, the host's ports and the plugin sockets.
fn summary(
    f: &Facts,
    cfg: &KubeletConfig,
    registered: &BTreeMap<&str, usize>,
    host: &Ports,
) -> String {
    let shown: Vec<String> = registered
        .iter()
        .filter(|(n, _)| matches(&cfg.rdma_resources, n) || matches(&cfg.report_resources, n))
        .map(|(n, d)| format!("{n}: {d}"))
        .collect();
    format!(
        "kubelet advertises {}; host: {} of {} RDMA port(s) ACTIVE; plugin sockets: {}",
        if shown.is_empty() {
            format!("no {} resource", cfg.rdma_resources.join(", "))
        } else {
            shown.join(", ")
        },
        host.active,
        host.total,
        if f.sockets.is_empty() {
            "none".to_owned()
        } else {
            f.sockets.join(", ")
        }
    )
}

/// The check from its problems (the worst status wins; the first problem of
/// that status names the reason), then the summary and the notes.
fn verdict(problems: Vec<Problem>, summary: String, notes: Vec<String>) -> Check {
    let status = problems
        .iter()
        .map(|(s, _, _)| *s)
        .max()
        .unwrap_or(Status::Ok);
    let reason = problems
        .iter()
        .find(|(s, _, _)| *s == status)
        .map(|(_, r, _)| *r);
    let mut parts: Vec<String> = problems.into_iter().map(|(_, _, m)| m).collect();
    parts.push(summary);
    parts.extend(notes);
    let check = Check::new(CHECK_ID, status, parts.join("; "));
    match reason {
        Some(r) => check.with_reason(r),
        None => check,
    }
}

/// `kubelet.devices` as a concern; it reads `rdma.devices`' port observations.
pub struct Kubelet;

impl Concern for Kubelet {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    /// The RDMA ports: through the engine, by kind.
    fn needs(&self) -> &'static [ObservationKind] {
        &[ObservationKind::Port]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<KubeletConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        gather(snap, cfg.section::<KubeletConfig>()).map_err(GatherError::unknown)
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let (check, observations) = decide(
            f,
            ctx.config.section::<KubeletConfig>(),
            ctx.observations,
            ctx.config.rdma.enabled,
        );
        Decision {
            checks: vec![check],
            observations,
            ..Decision::default()
        }
    }
}

#[cfg(test)]
#[path = "kubelet_tests.rs"]
mod tests;
