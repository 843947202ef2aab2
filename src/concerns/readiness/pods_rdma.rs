//! `pods.rdma`: every running pod container that has RDMA devices must be able
//! to register memory. The kernel (`ib_umem_get`) pins memory past
//! RLIMIT_MEMLOCK only for a process with CAP_IPC_LOCK in the initial user
//! namespace (`capable()`), so a low limit is no problem for a container that
//! has the capability, and the only problem for one that cannot have it.
//!
//! Which remedy can work depends on who the process is (capabilities(7),
//! "Transformation of capabilities during execve()"): a root process keeps the
//! capabilities of its spec across the runtime's exec, so IPC_LOCK in
//! `securityContext.capabilities.add` reaches it; a non-root process gets, with
//! no file capabilities, only its ambient set, which Kubernetes never fills, so
//! the same IPC_LOCK leaves CapEff without it (NVIDIA/nvidia-container-toolkit
//! #2037 measured CapEff=0). For it only the node's memlock helps.
//!
//! RDMA users are found from the kernel first: the PIDs that hold RDMA
//! resources (restrack, `host::netlink::restrack`), and containers whose
//! devices include RDMA nodes (their /dev, their cgroup-v1 devices.list); only
//! their descriptors are read. Without restrack every pod process's
//! descriptors are read, and the check says so.

use serde::Serialize;

use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::limit::Limit;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, RdmaProblem};
use crate::reason::Reason;

pub const CHECK_ID: CheckId = CheckId::new("pods.rdma");

/// CAP_IPC_LOCK's bit in /proc/<pid>/status `CapEff` (linux/capability.h).
pub const CAP_IPC_LOCK: u32 = 14;
/// The char major of the kernel's first 32 uverbs devices (`IB_UVERBS_MAJOR` in
/// drivers/infiniband/core/uverbs_main.c, minors from 192); later ones get a
/// dynamic major, and `rdma_cm` is a misc device (major 10, dynamic minor):
/// those are found through /dev instead.
pub const UVERBS_MAJOR: u32 = 231;
pub const UVERBS_MINOR_BASE: u32 = 192;

/// One process of a pod container, as far as RDMA goes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    /// RDMA device files it holds open.
    pub opened: Vec<String>,
    /// Its fds could not be read (the reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fds_unreadable: Option<String>,
    /// Its fds were not read: restrack answered and neither it nor its
    /// container had any sign of RDMA.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fds_skipped: bool,
    /// RDMA resources the kernel says it holds (`rxe0 pd`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// Effective uid (`Uid` of /proc/<pid>/status, as the host sees it).
    pub uid: Option<u32>,
    /// Whether it runs in the initial user namespace (/proc/<pid>/uid_map);
    /// `None` when not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_user_ns: Option<bool>,
    /// `CapEff` of /proc/<pid>/status (shown as there, in hex); `None` when unreadable.
    #[serde(serialize_with = "opt_hex")]
    pub cap_eff: Option<u64>,
    #[serde(serialize_with = "opt_display")]
    pub memlock_soft: Option<Limit>,
    #[serde(serialize_with = "opt_display")]
    pub memlock_hard: Option<Limit>,
    /// Why /proc/<pid>/status, limits or uid_map could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

impl Process {
    pub fn has_ipc_lock(&self) -> Option<bool> {
        self.cap_eff.map(|c| c & (1 << CAP_IPC_LOCK) != 0)
    }

    /// Whether it holds RDMA: a device open, or resources the kernel names.
    pub fn uses_rdma(&self) -> bool {
        !self.opened.is_empty() || !self.holds.is_empty()
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

impl Container {
    /// Its devices include RDMA nodes, or its /dev could not be told.
    pub fn has_rdma_devices(&self) -> bool {
        !self.dev_nodes.is_empty()
            || !self.cgroup_devices.is_empty()
            || self.dev_unreadable.is_some()
    }
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

/// The effective uid (second of real, effective, saved, fs) of a /proc/<pid>/status text.
pub fn parse_euid(status: &str) -> Option<u32> {
    let v = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    v.split_whitespace().nth(1)?.parse().ok()
}

/// The thread group (process) of a /proc/<tid>/status text.
pub fn parse_tgid(status: &str) -> Option<u32> {
    let v = status.lines().find_map(|l| l.strip_prefix("Tgid:"))?;
    v.trim().parse().ok()
}

/// Whether a /proc/<pid>/uid_map (read from the initial namespace) is the
/// initial user namespace's: the identity map of every uid.
pub fn is_initial_uid_map(uid_map: &str) -> bool {
    let rows: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| !r.is_empty())
        .collect();
    rows == [vec!["0", "0", "4294967295"]]
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
/// cgroup v2 has no such file: its device filter is an eBPF program attached
/// to the cgroup, readable only as instructions through bpf(2), so it is not
/// read; the container's /dev stands for it.
fn devices_cgroup(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == "devices").then_some(path)
    })
}

/// How the RDMA users were found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Route {
    /// The kernel's resource tracking named the holders; fds were read only for
    /// them and for containers whose devices include RDMA nodes.
    Restrack {
        devices: Vec<String>,
        /// Pod processes the kernel names as holders.
        holders: usize,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        missing: Vec<String>,
    },
    /// The node has no uverbs device (in any network namespace): no process
    /// can hold one, so no descriptor was read but a container's own RDMA
    /// device nodes'.
    NoUverbs,
    /// Every pod process's fds were read: restrack could not be asked (why).
    FdScan {
        why: String,
        /// Nothing to ask (no RDMA device, or a tree under --root), rather
        /// than a kernel that did not answer.
        #[serde(skip)]
        expected: bool,
    },
}

impl Default for Route {
    fn default() -> Self {
        Route::FdScan {
            why: "not gathered".into(),
            expected: true,
        }
    }
}

/// How the pod processes were found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum PodsFrom {
    /// Each container's `cgroup.procs` in the kubelet's cgroup tree, `at`.
    CgroupTree { at: String },
    /// Each process's own `/proc/<pid>/cgroup`: no pod process, or no tree
    /// that could be walked.
    #[default]
    ProcessCgroups,
}

/// The running pod containers, and what could not be read on the way (a
/// process whose cgroup is unreadable may be a pod's).
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub containers: Vec<Container>,
    pub unreadable: Vec<String>,
    pub route: Route,
    pub pods_from: PodsFrom,
}

/// Which remedy can work for a finding, and why (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// Root with memlock at target but no CAP_IPC_LOCK: add the capability.
    IpcLock,
    /// Root without CAP_IPC_LOCK and with a low memlock: the capability (this
    /// pod only) or the node's memlock (every RDMA container) both work.
    Either,
    /// Not root: IPC_LOCK in the spec gives it no effective capability.
    NodeMemlockNonRoot,
    /// In a user namespace: its CAP_IPC_LOCK is not the initial namespace's,
    /// which the kernel asks for.
    NodeMemlockUserNs,
}

/// What one container with RDMA devices lacks, judged on the processes that
/// hold them (or, when none does yet, its first process).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    /// How the container was seen to have RDMA devices.
    pub evidence: String,
    pub process: Process,
    pub problems: Vec<RdmaProblem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<Remedy>,
    /// Facts that could not be read for this container (capabilities, limits), with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

fn evidence(c: &Container, p: &Process) -> Option<String> {
    if !p.opened.is_empty() {
        return Some(format!("opens {}", p.opened.join(", ")));
    }
    if !p.holds.is_empty() {
        return Some(format!(
            "holds RDMA resources ({}, by the kernel's resource tracking)",
            p.holds.join(", ")
        ));
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

/// The processes a container is judged on: those holding RDMA, or its first.
pub fn subjects(c: &Container) -> Vec<&Process> {
    let holders: Vec<&Process> = c.processes.iter().filter(|p| p.uses_rdma()).collect();
    if holders.is_empty() {
        c.processes.first().into_iter().collect()
    } else {
        holders
    }
}

/// The problems of one process, the remedy that can work, and what could not
/// be read to tell.
pub fn judge(p: &Process, target: Limit) -> (Vec<RdmaProblem>, Option<Remedy>, Vec<String>) {
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    let why = |what: &str| {
        let reason = p
            .unreadable
            .iter()
            .find(|r| r.contains(what))
            .map_or(String::new(), |r| format!(" ({r})"));
        format!("{what} of pid {}{reason}", p.pid)
    };
    let Some(ipc_lock) = p.has_ipc_lock() else {
        unknown.push(why("capabilities"));
        return (problems, None, unknown);
    };
    // The kernel asks for the capability in the initial user namespace.
    let user_ns = match p.initial_user_ns {
        Some(initial) => !initial,
        None if ipc_lock => {
            unknown.push(why("user namespace"));
            return (problems, None, unknown);
        }
        None => false,
    };
    if ipc_lock && !user_ns {
        return (problems, None, unknown);
    }
    let Some(uid) = p.uid else {
        unknown.push(why("uid"));
        return (problems, None, unknown);
    };
    let low = match p.memlock_soft {
        Some(soft) => soft < target,
        None => {
            unknown.push(why("memlock"));
            false
        }
    };
    let remedy = if user_ns {
        low.then_some(Remedy::NodeMemlockUserNs)
    } else if uid != 0 {
        low.then_some(Remedy::NodeMemlockNonRoot)
    } else {
        problems.push(RdmaProblem::NoIpcLock);
        Some(if low { Remedy::Either } else { Remedy::IpcLock })
    };
    if low {
        problems.push(RdmaProblem::LowMemlock);
    }
    (problems, remedy, unknown)
}

/// The findings for the containers that have RDMA devices, and the containers
/// whose open files could not be read (they may have some).
pub fn findings(containers: &[Container], target: Limit) -> (Vec<Finding>, Vec<&Container>) {
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for c in containers {
        // One finding per container: the subject with the most problems.
        let mut best: Option<Finding> = None;
        for p in subjects(c) {
            let Some(evidence) = evidence(c, p) else {
                continue;
            };
            let (problems, remedy, unknown) = judge(p, target);
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
                    remedy,
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

    fn reasons(&self) -> &'static [Reason] {
        crate::concerns::readiness::reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
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
            checks: vec![check_facts(facts, target, ctx.config.pods.rdma)],
            observations,
            ..Decision::default()
        }
    }
}

#[path = "pods_rdma_gather.rs"]
mod gather;
pub use gather::gather;

#[path = "pods_rdma_report.rs"]
mod report;
pub use report::{check, check_facts, check_with, explain};

#[cfg(test)]
#[path = "pods_rdma_tests.rs"]
mod tests;
