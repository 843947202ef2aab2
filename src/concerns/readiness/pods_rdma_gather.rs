//! How `pods.rdma` finds the RDMA pod containers: pod processes by their
//! cgroup, RDMA users from the kernel's resource tracking first, then the
//! containers whose devices include RDMA nodes; descriptors only where needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{
    Container, Facts, PodsFrom, Process, Route, devices_cgroup, is_initial_uid_map, is_rdma_path,
    parse_cap_eff, parse_devices_list, parse_euid, parse_limit_pair, parse_tgid, subjects,
};
use crate::host::kubepods::{self, Tree, parse_cgroup, parse_shim_id};
use crate::host::netlink::restrack::Unavailable;
use crate::host::procfs;
use crate::host::snapshot::Snapshot;

type Key = (Option<String>, Option<String>);

fn short(id: &Option<String>) -> &str {
    id.as_deref().map_or("?", |c| &c[..c.len().min(12)])
}

/// The processes the kernel names as RDMA resource holders, by process: an
/// entry's PID is the task that created it, which may be a thread (NCCL's
/// proxy threads), so each is mapped to its Tgid (a read per holder, where
/// listing /proc to tell threads apart costs a lookup per process).
fn holders_by_process(snap: &Snapshot) -> Result<BTreeMap<u32, Vec<String>>, &Unavailable> {
    let h = snap.restrack()?;
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for (&pid, what) in &h.pids {
        let tgid = procfs::read(snap, pid, "status")
            .as_deref()
            .and_then(parse_tgid);
        // Gone since the kernel answered: nothing to judge.
        if let Some(tgid) = tgid {
            out.entry(tgid).or_default().extend(what.iter().cloned());
        }
    }
    Ok(out
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect())
}

/// Whether a container's first process is its pod's sandbox (pause): it never
/// uses RDMA (see pods::PodProcess::is_sandbox).
fn is_sandbox(snap: &Snapshot, pid: u32, container_id: &Option<String>) -> bool {
    if procfs::comm(snap, pid).as_deref() == Some("pause") {
        return true;
    }
    let shim = procfs::read(snap, pid, "stat")
        .as_deref()
        .and_then(procfs::parse_ppid)
        .and_then(|ppid| procfs::read(snap, ppid, "cmdline"))
        .and_then(|c| parse_shim_id(&c));
    shim.is_some() && shim == *container_id
}

/// Its /dev/infiniband (through /proc/<pid>/root) and what its cgroup-v1
/// devices controller allows.
fn devices(
    snap: &Snapshot,
    pid: u32,
    devices_cg: Option<&str>,
    key: &Key,
    c: &mut Container,
    unreadable: &mut Vec<String>,
) {
    let dev = format!("/proc/{pid}/root/dev/infiniband");
    match snap.list_dir(Path::new(&dev)) {
        Ok(names) => {
            c.dev_nodes = names
                .into_iter()
                .map(|n| format!("/dev/infiniband/{n}"))
                .filter(|p| is_rdma_path(p))
                .collect()
        }
        Err(e) => c.dev_unreadable = Some(e.to_string()),
    }
    if let Some(p) = devices_cg {
        let list = format!("/sys/fs/cgroup/devices{p}/devices.list");
        match snap.read_string(Path::new(&list)) {
            Ok(t) => c.cgroup_devices = t.map(|t| parse_devices_list(&t)).unwrap_or_default(),
            Err(e) => unreadable.push(format!(
                "pod {} container {}: {e}",
                key.0.as_deref().unwrap_or("?"),
                short(&key.1)
            )),
        }
    }
}

/// Reads what the judgement needs of a subject: uid and capabilities,
/// memlock, user namespace, each with why when it cannot be read.
fn credentials(snap: &Snapshot, p: &mut Process) {
    let pid = p.pid;
    p.comm = procfs::comm(snap, pid).unwrap_or_default();
    match snap.proc_read(pid, "status") {
        Ok(Some(s)) => {
            p.cap_eff = parse_cap_eff(&s);
            p.uid = parse_euid(&s);
            if p.cap_eff.is_none() || p.uid.is_none() {
                p.unreadable.push(format!(
                    "capabilities and uid: /proc/{pid}/status has no CapEff or Uid line"
                ));
            }
        }
        Ok(None) => p
            .unreadable
            .push(format!("capabilities and uid: /proc/{pid}/status is gone")),
        Err(e) => p.unreadable.push(format!("capabilities and uid: {e}")),
    }
    match snap.proc_read(pid, "limits") {
        Ok(Some(l)) => match parse_limit_pair(&l, procfs::MEMLOCK_ROW) {
            Some((soft, hard)) => (p.memlock_soft, p.memlock_hard) = (Some(soft), Some(hard)),
            None => p.unreadable.push(format!(
                "memlock: /proc/{pid}/limits has no \"Max locked memory\" row"
            )),
        },
        Ok(None) => p
            .unreadable
            .push(format!("memlock: /proc/{pid}/limits is gone")),
        Err(e) => p.unreadable.push(format!("memlock: {e}")),
    }
    match snap.proc_read(pid, "uid_map") {
        Ok(Some(m)) => p.initial_user_ns = Some(is_initial_uid_map(&m)),
        Ok(None) => p
            .unreadable
            .push(format!("user namespace: /proc/{pid}/uid_map is gone")),
        Err(e) => p.unreadable.push(format!("user namespace: {e}")),
    }
}

/// A container's processes, ascending, and its path in the v1 devices hierarchy.
#[derive(Default)]
struct Members {
    pids: Vec<u32>,
    devices_cg: Option<String>,
}

/// Adds `pid` to its container, by its own cgroup.
fn place(
    snap: &Snapshot,
    pid: u32,
    by_id: &mut BTreeMap<Key, Members>,
    unreadable: &mut Vec<String>,
) {
    let cg = match snap.proc_read(pid, "cgroup") {
        Ok(Some(cg)) => cg,
        // Gone since /proc was listed.
        Ok(None) => return,
        Err(e) => return unreadable.push(format!("pid {pid}: {e}")),
    };
    if let Some(key) = parse_cgroup(&cg) {
        let m = by_id.entry(key).or_default();
        if m.pids.is_empty() {
            m.devices_cg = devices_cgroup(&cg).map(str::to_owned);
        }
        m.pids.push(pid);
    }
}

/// Pod processes by container from the kubelet's cgroup tree: where the
/// kubelet puts it by default when pods are there, else where the newest pod
/// process is (pods start after the node's daemons); `None` when there is no
/// pod process or the tree cannot be walked.
fn by_tree(
    snap: &Snapshot,
    unreadable: &mut Vec<String>,
) -> crate::host::Result<Option<(BTreeMap<Key, Members>, PodsFrom)>> {
    let known = Tree::known(snap);
    let mut found = known.as_ref().and_then(|t| {
        let c = kubepods::containers(snap, t)?;
        c.iter()
            .any(|c| c.procs.as_ref().map_or(true, |p| !p.is_empty()))
            .then_some((t.clone(), c))
    });
    if found.is_none() {
        let sample = snap.pids()?.iter().rev().find_map(|&pid| {
            snap.proc(pid, "cgroup")
                .filter(|cg| parse_cgroup(cg).is_some())
        });
        let unified_at_top = snap.exists(Path::new("/sys/fs/cgroup/cgroup.controllers"));
        found = sample
            .and_then(|s| Tree::locate(&s, unified_at_top))
            .filter(|t| Some(t) != known.as_ref())
            .and_then(|t| Some((t.clone(), kubepods::containers(snap, &t)?)));
    }
    let Some((tree, found)) = found else {
        return Ok(None);
    };
    let mut by_id: BTreeMap<Key, Members> = BTreeMap::new();
    for c in found {
        match c.procs {
            Ok(procs) if procs.is_empty() => {}
            Ok(procs) => {
                let m = by_id.entry((c.pod, Some(c.container))).or_default();
                m.pids = procs;
                m.devices_cg = tree.is_devices().then_some(c.path);
            }
            Err(e) => unreadable.push(format!(
                "pod {} container {}: {e}",
                c.pod.as_deref().unwrap_or("?"),
                &c.container[..c.container.len().min(12)]
            )),
        }
    }
    let at = format!("{}{}", tree.mount, tree.prefix);
    Ok(Some((by_id, PodsFrom::CgroupTree { at })))
}

/// Pod processes by container: from the kubelet's cgroup tree, a read per
/// container, where it can be walked; else from each process's own cgroup, a
/// read per process. The kernel's RDMA holders are placed by their own cgroup
/// either way, wherever the kubelet put them.
fn pod_containers(
    snap: &Snapshot,
    holders: Option<&BTreeMap<u32, Vec<String>>>,
    unreadable: &mut Vec<String>,
) -> crate::host::Result<(BTreeMap<Key, Members>, PodsFrom)> {
    let Some((mut by_id, from)) = by_tree(snap, unreadable)? else {
        let mut by_id = BTreeMap::new();
        for &pid in snap.pids()? {
            place(snap, pid, &mut by_id, unreadable);
        }
        return Ok((by_id, PodsFrom::ProcessCgroups));
    };
    let placed: BTreeSet<u32> = by_id
        .values()
        .flat_map(|m| m.pids.iter().copied())
        .collect();
    for &pid in holders.into_iter().flat_map(BTreeMap::keys) {
        if !placed.contains(&pid) {
            place(snap, pid, &mut by_id, unreadable);
        }
    }
    for m in by_id.values_mut() {
        m.pids.sort_unstable();
    }
    Ok((by_id, from))
}

/// Whether the node has no uverbs device, so that no process anywhere can hold
/// one: `/sys/class/infiniband_verbs` is not tagged by network namespace (its
/// class has no `ns_type`, drivers/infiniband/core/uverbs_main.c), so it lists
/// every namespace's; `/sys/class/infiniband` (this namespace's devices) is
/// asked too (the cycle's one listing of it), so a tree without the verbs
/// class never counts as empty. `false` when either cannot be read.
fn no_uverbs_device(snap: &Snapshot) -> bool {
    snap.list_dir(Path::new("/sys/class/infiniband_verbs"))
        .is_ok_and(|l| l.is_empty())
        && snap.rdma_device_names().is_ok_and(<[String]>::is_empty)
}

pub fn gather(snap: &Snapshot) -> crate::host::Result<Facts> {
    let holders = holders_by_process(snap);
    // Cost follows RDMA work: with no uverbs device, no descriptor is read.
    let no_rdma = holders.is_err() && no_uverbs_device(snap);
    let mut unreadable = Vec::new();
    let (by_id, pods_from) = pod_containers(snap, holders.as_ref().ok(), &mut unreadable)?;
    let mut containers = Vec::new();
    let mut holding = 0;
    for (key, members) in by_id {
        let first = members.pids[0];
        let mut c = Container {
            pod_uid: key.0.clone(),
            container_id: key.1.clone(),
            ..Container::default()
        };
        devices(
            snap,
            first,
            members.devices_cg.as_deref(),
            &key,
            &mut c,
            &mut unreadable,
        );
        let held: Vec<Option<&Vec<String>>> = members
            .pids
            .iter()
            .map(|pid| holders.as_ref().ok().and_then(|h| h.get(pid)))
            .collect();
        let scan = (holders.is_err() && !no_rdma)
            || c.has_rdma_devices()
            || held.iter().any(Option::is_some);
        holding += add_processes(snap, &members.pids, held, scan, &mut c);
        // Credentials only where there is something to judge.
        let evidence = !c.dev_nodes.is_empty()
            || !c.cgroup_devices.is_empty()
            || c.processes.iter().any(Process::uses_rdma);
        // Whether it is the pod's sandbox only matters where it would be reported.
        if (evidence || c.dev_unreadable.is_some()) && is_sandbox(snap, first, &key.1) {
            continue;
        }
        let judged: BTreeSet<u32> = if evidence {
            subjects(&c).iter().map(|p| p.pid).collect()
        } else {
            BTreeSet::new()
        };
        for p in c.processes.iter_mut().filter(|p| judged.contains(&p.pid)) {
            credentials(snap, p);
        }
        containers.push(c);
    }
    let route = route(snap, no_rdma, holding);
    Ok(Facts {
        containers,
        unreadable,
        route,
        pods_from,
    })
}

/// A container's processes, each with the RDMA resources it holds
/// (restrack) and, where `scan`, the RDMA files it has open. Returns how
/// many hold one.
fn add_processes(
    snap: &Snapshot,
    pids: &[u32],
    held: Vec<Option<&Vec<String>>>,
    scan: bool,
    c: &mut Container,
) -> usize {
    let mut holding = 0;
    for (pid, held) in pids.iter().zip(held) {
        let mut p = Process {
            pid: *pid,
            holds: held.cloned().unwrap_or_default(),
            ..Process::default()
        };
        holding += usize::from(held.is_some());
        if scan {
            match snap.fd_targets(*pid) {
                Ok(t) => p.opened = t.iter().filter(|p| is_rdma_path(p)).cloned().collect(),
                Err(e) => p.fds_unreadable = Some(e),
            }
        } else {
            p.fds_skipped = true;
        }
        c.processes.push(p);
    }
    holding
}

/// How RDMA users were found: restrack, else a scan of open files (and why).
fn route(snap: &Snapshot, no_rdma: bool, holding: usize) -> Route {
    match snap.restrack() {
        Err(_) if no_rdma => Route::NoUverbs,
        Ok(h) => Route::Restrack {
            devices: h.devices.clone(),
            holders: holding,
            missing: h.missing.clone(),
        },
        Err(why) => Route::FdScan {
            why: why.to_string(),
            // No RDMA device, or not the running kernel: nothing was missed.
            expected: matches!(why, Unavailable::NotLive | Unavailable::NoDevices),
        },
    }
}

#[cfg(test)]
#[path = "pods_rdma_gather_tests.rs"]
mod tests;
