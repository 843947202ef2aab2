//! `pods.rdma`: every running pod container that has RDMA devices (a
//! `/dev/infiniband/uverbs*` or `rdma_cm` open, present in its /dev, or allowed
//! by its cgroup-v1 devices controller) must be able to register memory: it
//! needs CAP_IPC_LOCK (NCCL crashes without it) or, failing that, a
//! locked-memory limit at the target (ibv_reg_mr fails "Couldn't allocate MR").
//! The kernel (ib_umem_get) lets CAP_IPC_LOCK bypass RLIMIT_MEMLOCK, so a low
//! limit is no problem for a container that has the capability.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::config::Config;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::kubepods::{parse_cgroup, parse_shim_id};
use crate::host::limit::Limit;
use crate::host::procfs;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, RdmaProblem};

pub const CHECK_ID: &str = "pods.rdma";

/// CAP_IPC_LOCK's bit in /proc/<pid>/status `CapEff` (linux/capability.h).
pub const CAP_IPC_LOCK: u32 = 14;
/// The char major of the kernel's uverbs devices (`infiniband_verbs`, minors from 192).
pub const UVERBS_MAJOR: u32 = 231;
pub const UVERBS_MINOR_BASE: u32 = 192;

/// One process of a pod container, as far as RDMA goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    /// RDMA device files it holds open.
    pub opened: Vec<String>,
    /// `None`: its fds could not be read (the reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fds_unreadable: Option<String>,
    /// `CapEff` of /proc/<pid>/status (shown as there, in hex); `None` when unreadable.
    #[serde(serialize_with = "opt_hex")]
    pub cap_eff: Option<u64>,
    #[serde(serialize_with = "opt_display")]
    pub memlock_soft: Option<Limit>,
    #[serde(serialize_with = "opt_display")]
    pub memlock_hard: Option<Limit>,
}

impl Process {
    pub fn has_ipc_lock(&self) -> Option<bool> {
        self.cap_eff.map(|c| c & (1 << CAP_IPC_LOCK) != 0)
    }
}

fn opt_hex<S: serde::Serializer>(c: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.collect_str(&format_args!("{c:016x}")),
        None => s.serialize_none(),
    }
}

fn opt_display<S: serde::Serializer>(l: &Option<Limit>, s: S) -> Result<S::Ok, S::Error> {
    match l {
        Some(l) => s.collect_str(l),
        None => s.serialize_none(),
    }
}

/// A running pod container (its sandbox excluded) and its RDMA evidence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Container {
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// Its processes, lowest pid (the container's first) first.
    pub processes: Vec<Process>,
    /// RDMA device nodes in the container's /dev/infiniband.
    pub dev_nodes: Vec<String>,
    /// Why its /dev/infiniband could not be listed, if so.
    pub dev_unreadable: Option<String>,
    /// uverbs devices its devices cgroup (v1) allows, as `c 231:192`.
    pub cgroup_devices: Vec<String>,
}

/// An RDMA device file by the name a container sees it under.
pub fn is_rdma_path(path: &str) -> bool {
    let Some(name) = path.strip_prefix("/dev/infiniband/") else {
        return false;
    };
    name == "rdma_cm" || name.strip_prefix("uverbs").is_some_and(is_number)
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `CapEff` of a /proc/<pid>/status text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let v = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

/// Soft and hard limit of a /proc/<pid>/limits row.
pub fn parse_limit_pair(limits: &str, row: &str) -> Option<(Limit, Limit)> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    let mut v = line[row.len()..].split_whitespace().map(|s| {
        if s == "unlimited" {
            Some(Limit::UNLIMITED)
        } else {
            s.parse().ok().map(Limit)
        }
    });
    Some((v.next()??, v.next()??))
}

/// uverbs devices allowed by a cgroup-v1 `devices.list` (`c 231:192 rw`). The
/// `a *:* rwm` of a privileged container says nothing about RDMA use.
pub fn parse_devices_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (kind, nums) = (f.next()?, f.next()?);
            let (major, minor) = nums.split_once(':')?;
            let minor: u32 = minor.parse().ok()?;
            (kind == "c" && major.parse() == Ok(UVERBS_MAJOR) && minor >= UVERBS_MINOR_BASE)
                .then(|| format!("c {major}:{minor}"))
        })
        .collect()
}

/// The cgroup-v1 devices controller's path of a /proc/<pid>/cgroup text.
fn devices_cgroup(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == "devices").then_some(path)
    })
}

/// The running pod containers, and what could not be read on the way (a
/// process whose cgroup is unreadable may be a pod's).
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub containers: Vec<Container>,
    pub unreadable: Vec<String>,
}

pub fn gather(snap: &Snapshot) -> crate::host::Result<Facts> {
    let mut by_id: BTreeMap<(Option<String>, Option<String>), Container> = BTreeMap::new();
    let mut unreadable = Vec::new();
    for &pid in snap.pids()? {
        let cg = match snap.proc_read(pid, "cgroup") {
            Ok(Some(cg)) => cg,
            // Gone since /proc was listed.
            Ok(None) => continue,
            Err(e) => {
                unreadable.push(format!("pid {pid}: {e}"));
                continue;
            }
        };
        let Some((pod_uid, container_id)) = parse_cgroup(&cg) else {
            continue;
        };
        let comm = procfs::comm(snap, pid).unwrap_or_default();
        // The pod's sandbox never uses RDMA (see pods::PodProcess::is_sandbox).
        let shim = procfs::read(snap, pid, "stat")
            .as_deref()
            .and_then(procfs::parse_ppid)
            .and_then(|ppid| procfs::read(snap, ppid, "cmdline"))
            .and_then(|c| parse_shim_id(&c));
        if comm == "pause" || (shim.is_some() && shim == container_id) {
            continue;
        }
        let (opened, fds_unreadable) = match snap.fd_targets(pid) {
            Ok(t) => (
                t.iter().filter(|p| is_rdma_path(p)).cloned().collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        };
        let limits = procfs::read(snap, pid, "limits");
        let pair = limits
            .as_deref()
            .and_then(|l| parse_limit_pair(l, procfs::MEMLOCK_ROW));
        let process = Process {
            pid,
            comm,
            opened,
            fds_unreadable,
            cap_eff: procfs::read(snap, pid, "status")
                .as_deref()
                .and_then(parse_cap_eff),
            memlock_soft: pair.map(|p| p.0),
            memlock_hard: pair.map(|p| p.1),
        };
        let c = by_id
            .entry((pod_uid.clone(), container_id.clone()))
            .or_insert_with(|| {
                // Once per container, through its first process: what its /dev
                // holds and what its devices cgroup allows.
                let dev = format!("/proc/{pid}/root/dev/infiniband");
                let (dev_nodes, dev_unreadable) = match snap.list_dir(Path::new(&dev)) {
                    Ok(names) => (
                        names
                            .into_iter()
                            .map(|n| format!("/dev/infiniband/{n}"))
                            .filter(|p| is_rdma_path(p))
                            .collect(),
                        None,
                    ),
                    Err(e) => (Vec::new(), Some(e.to_string())),
                };
                let mut cgroup_devices = Vec::new();
                if let Some(p) = devices_cgroup(&cg) {
                    let list = format!("/sys/fs/cgroup/devices{p}/devices.list");
                    match snap.read_string(Path::new(&list)) {
                        Ok(t) => {
                            cgroup_devices = t.map(|t| parse_devices_list(&t)).unwrap_or_default()
                        }
                        Err(e) => unreadable.push(format!(
                            "pod {} container {}: {e}",
                            pod_uid.as_deref().unwrap_or("?"),
                            container_id
                                .as_deref()
                                .map_or("?", |c| &c[..c.len().min(12)])
                        )),
                    }
                }
                Container {
                    pod_uid,
                    container_id,
                    dev_nodes,
                    dev_unreadable,
                    cgroup_devices,
                    ..Container::default()
                }
            });
        c.processes.push(process);
    }
    Ok(Facts {
        containers: by_id.into_values().collect(),
        unreadable,
    })
}

/// What one container with RDMA devices lacks, judged on the processes that
/// hold them open (or, when none does yet, its first process).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// How the container was seen to have RDMA devices.
    pub evidence: String,
    pub process: Process,
    pub problems: Vec<RdmaProblem>,
    /// Facts that could not be read for this container (capabilities, limits).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

fn evidence(c: &Container, p: &Process) -> Option<String> {
    if !p.opened.is_empty() {
        return Some(format!("opens {}", p.opened.join(", ")));
    }
    if !c.dev_nodes.is_empty() {
        return Some(format!("has {} in its /dev", c.dev_nodes.join(", ")));
    }
    (!c.cgroup_devices.is_empty()).then(|| {
        format!(
            "its devices cgroup allows uverbs ({})",
            c.cgroup_devices.join(", ")
        )
    })
}

/// The findings for the containers that have RDMA devices, and the containers
/// whose open files could not be read (they may have some).
pub fn findings(containers: &[Container], target: Limit) -> (Vec<Finding>, Vec<&Container>) {
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for c in containers {
        let holders: Vec<&Process> = c
            .processes
            .iter()
            .filter(|p| !p.opened.is_empty())
            .collect();
        let subjects = if holders.is_empty() {
            c.processes.first().into_iter().collect()
        } else {
            holders
        };
        // One finding per container: the subject with the most problems.
        let mut best: Option<Finding> = None;
        for p in subjects {
            let Some(evidence) = evidence(c, p) else {
                continue;
            };
            let mut problems = Vec::new();
            let mut unknown = Vec::new();
            match p.has_ipc_lock() {
                Some(false) => problems.push(RdmaProblem::NoIpcLock),
                Some(true) => {}
                None => unknown.push(format!("capabilities of pid {}", p.pid)),
            }
            if p.has_ipc_lock() != Some(true) {
                match p.memlock_soft {
                    Some(soft) if soft < target => problems.push(RdmaProblem::LowMemlock),
                    Some(_) => {}
                    None => unknown.push(format!("memlock of pid {}", p.pid)),
                }
            }
            if best
                .as_ref()
                .is_none_or(|b| problems.len() > b.problems.len())
            {
                best = Some(Finding {
                    pod_uid: c.pod_uid.clone(),
                    container_id: c.container_id.clone(),
                    evidence,
                    process: p.clone(),
                    problems,
                    unknown,
                });
            }
        }
        let seen = best.is_some();
        out.extend(best);
        // A process can only open an RDMA device whose node its /dev holds
        // (a device plugin's DeviceSpec, or the host's /dev in a privileged pod):
        // unreadable descriptors (a non-root container, to a service without
        // CAP_DAC_READ_SEARCH) leave it unknown only when /dev could not be read either.
        if !seen
            && c.dev_unreadable.is_some()
            && c.processes.iter().any(|p| p.fds_unreadable.is_some())
        {
            unreadable.push(c);
        }
    }
    (out, unreadable)
}

/// `pods.rdma` as a concern.
pub struct PodsRdma;

impl Concern for PodsRdma {
    type Facts = Facts;

    fn ids(&self) -> &'static [&'static str] {
        &[CHECK_ID]
    }

    fn enabled(&self, _cfg: &Config) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Facts, GatherError> {
        gather(snap).map_err(GatherError::unknown)
    }

    fn decide(&self, facts: &Facts, ctx: &Ctx) -> Decision {
        let target = ctx.config.containerd.memlock;
        let (found, _) = findings(&facts.containers, target);
        let observations = found
            .into_iter()
            .map(|f| Observation::RdmaContainer {
                pod_uid: f.pod_uid,
                container_id: f.container_id,
                problems: f.problems,
            })
            .collect();
        Decision {
            checks: vec![check_with(
                &facts.containers,
                &facts.unreadable,
                target,
                ctx.config.pods.rdma,
            )],
            observations,
            ..Decision::default()
        }
    }
}

#[path = "pods_rdma_report.rs"]
mod report;
pub use report::{check, check_with, explain};

#[cfg(test)]
#[path = "pods_rdma_tests.rs"]
mod tests;
