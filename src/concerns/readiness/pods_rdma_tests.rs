use super::*;
use crate::config::Severity;
use crate::engine::check::Status;
use crate::host::procfs;
use serde_json::json;

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// CapEff of a root shell (every capability) and of containerd's default set
/// for a container (no CAP_IPC_LOCK), as /proc/<pid>/status shows them.
const ALL_CAPS: u64 = 0x0000_01ff_ffff_ffff;
const CONTAINER_CAPS: u64 = 0xa804_25fb;

/// A root process of the initial user namespace.
fn proc(pid: u32, opened: &[&str], cap_eff: u64, soft: Limit) -> Process {
    Process {
        pid,
        comm: "ib_write_bw".into(),
        opened: opened.iter().map(|s| s.to_string()).collect(),
        uid: Some(0),
        initial_user_ns: Some(true),
        cap_eff: Some(cap_eff),
        memlock_soft: Some(soft),
        memlock_hard: Some(soft),
        ..Process::default()
    }
}

fn container(processes: Vec<Process>) -> Container {
    Container {
        pod_uid: Some("uid".into()),
        container_id: Some(ID.into()),
        processes,
        ..Container::default()
    }
}

#[test]
fn parsers_read_the_kernel_formats() {
    assert!(is_rdma_path("/dev/infiniband/uverbs0"));
    assert!(is_rdma_path("/dev/infiniband/uverbs12"));
    assert!(is_rdma_path("/dev/infiniband/rdma_cm"));
    assert!(!is_rdma_path("/dev/infiniband/umad0"));
    assert!(!is_rdma_path("/dev/infiniband/uverbs"));
    assert!(!is_rdma_path("/tmp/dev/infiniband/uverbs0"));
    assert!(!is_rdma_path("socket:[1234]"));
    let status = "Name:\tsleep\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n";
    assert_eq!(parse_cap_eff(status), Some(CONTAINER_CAPS));
    assert_eq!(parse_cap_eff("Name: x\n"), None);
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
Max locked memory         65536                unlimited            bytes     \n";
    assert_eq!(
        parse_limit_pair(limits, procfs::MEMLOCK_ROW),
        Some((Limit(65536), Limit::UNLIMITED))
    );
    // devices.list of a container given uverbs0 by a device plugin, and of a
    // privileged one (allows everything: no evidence).
    let list = "c 1:5 rwm\nc 136:* rwm\nc 231:192 rw\nc 231:64 rw\nc 10:229 rwm\n";
    assert_eq!(parse_devices_list(list), vec!["c 231:192"]);
    assert!(parse_devices_list("a *:* rwm\n").is_empty());
    assert_eq!(
        devices_cgroup("12:devices:/kubepods/pod1/abc\n0::/\n"),
        Some("/kubepods/pod1/abc")
    );
}

#[test]
fn ipc_lock_missing_is_named_with_the_fix() {
    let c = container(vec![proc(
        7,
        &["/dev/infiniband/uverbs0"],
        CONTAINER_CAPS,
        Limit::UNLIMITED,
    )]);
    let c = check(&[c], Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.status, Status::Warn);
    assert_eq!(
        c.message,
        "1 of 1 RDMA pod container(s) cannot register memory: pod uid container 0123456789ab \
         (ib_write_bw, pid 7) opens /dev/infiniband/uverbs0 but lacks CAP_IPC_LOCK: NCCL will \
         crash registering memory; add IPC_LOCK to securityContext.capabilities.add"
    );
    assert_eq!(
        c.details["containers"][0]["problems"],
        json!(["no_ipc_lock"])
    );
}

#[test]
fn low_memlock_counts_only_without_ipc_lock() {
    let low = Limit(65536);
    // Without the capability, both problems.
    let c = container(vec![proc(
        7,
        &["/dev/infiniband/uverbs0"],
        CONTAINER_CAPS,
        low,
    )]);
    let (f, _) = findings(&[c], Limit::UNLIMITED);
    assert_eq!(
        f[0].problems,
        vec![RdmaProblem::NoIpcLock, RdmaProblem::LowMemlock]
    );
    assert!(
        explain(&f[0], Limit::UNLIMITED).contains(
            "but lacks CAP_IPC_LOCK and its memlock 64KiB (hard 64KiB) is below unlimited: \
             ibv_reg_mr fails (\"Couldn't allocate MR\") past it; either remedy works, as it runs as root"
        ),
        "{}",
        explain(&f[0], Limit::UNLIMITED)
    );
    // With it, the kernel bypasses the limit: no problem.
    let c = container(vec![proc(7, &["/dev/infiniband/rdma_cm"], ALL_CAPS, low)]);
    let c = check(&[c], Limit::UNLIMITED, Severity::Fail);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(
        c.message,
        "1 RDMA pod container(s), each with CAP_IPC_LOCK or memlock at unlimited"
    );
}

#[test]
fn the_holder_is_judged_not_the_first_process() {
    // The entrypoint shell has no device open; its child does and lacks the capability.
    let shell = Process {
        comm: "sh".into(),
        ..proc(5, &[], ALL_CAPS, Limit::UNLIMITED)
    };
    let c = container(vec![
        shell,
        proc(
            9,
            &["/dev/infiniband/uverbs1"],
            CONTAINER_CAPS,
            Limit::UNLIMITED,
        ),
    ]);
    let (f, _) = findings(&[c], Limit::UNLIMITED);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].process.pid, 9);
    assert_eq!(f[0].problems, vec![RdmaProblem::NoIpcLock]);
}

#[test]
fn device_nodes_and_cgroup_are_evidence_too() {
    let mut c = container(vec![proc(5, &[], CONTAINER_CAPS, Limit::UNLIMITED)]);
    c.dev_nodes = vec!["/dev/infiniband/uverbs0".into()];
    let (f, _) = findings(&[c.clone()], Limit::UNLIMITED);
    assert_eq!(f[0].evidence, "has /dev/infiniband/uverbs0 in its /dev");
    c.dev_nodes.clear();
    c.cgroup_devices = vec!["c 231:192".into()];
    let (f, _) = findings(&[c.clone()], Limit::UNLIMITED);
    assert_eq!(
        f[0].evidence,
        "its devices cgroup allows uverbs (c 231:192)"
    );
    c.cgroup_devices.clear();
    let c = check(&[c], Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.message, "no running pod container has RDMA devices");
}

#[test]
fn unreadable_is_unknown_never_ok() {
    let mut p = proc(5, &[], CONTAINER_CAPS, Limit::UNLIMITED);
    p.fds_unreadable = Some("permission denied".into());
    // Its /dev was read and holds no RDMA node: it cannot have one open.
    let c = check(
        &[container(vec![p.clone()])],
        Limit::UNLIMITED,
        Severity::Warn,
    );
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    // Its /dev could not be read either: unknown.
    let mut blind = container(vec![p]);
    blind.dev_unreadable = Some("permission denied".into());
    let c = check(&[blind], Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(c.message.contains("could not be read"), "{}", c.message);
    // Capabilities that cannot be read leave the finding unknown.
    let mut p = proc(5, &["/dev/infiniband/uverbs0"], 0, Limit::UNLIMITED);
    p.cap_eff = None;
    let c = check(&[container(vec![p])], Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
}

/// A process whose /proc/PID/cgroup cannot be read, or a container whose
/// devices.list cannot, is named and makes the check unknown: it is not skipped.
#[test]
fn unreadable_cgroup_and_devices_list_are_named() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // pid 10: its cgroup is a directory (unreadable as a file).
    std::fs::create_dir_all(root.join("proc/10/cgroup")).unwrap();
    // pid 11: a pod container whose devices.list is unreadable.
    std::fs::create_dir_all(root.join("proc/11")).unwrap();
    let cg = format!("12:devices:/kubepods/podabc/{ID}\n0::/kubepods/podabc/{ID}\n");
    std::fs::write(root.join("proc/11/cgroup"), &cg).unwrap();
    std::fs::write(root.join("proc/11/comm"), "sleep\n").unwrap();
    let container = root.join(format!("sys/fs/cgroup/devices/kubepods/podabc/{ID}"));
    std::fs::create_dir_all(container.join("devices.list")).unwrap();
    let check_of = |f: &Facts| {
        check_with(
            &f.containers,
            &f.unreadable,
            Limit::UNLIMITED,
            Severity::Warn,
        )
    };

    // Found by the kubelet's tree (its cgroup.procs): no process's own cgroup
    // is needed, so pid 10's is never read; the devices.list is named.
    std::fs::write(container.join("cgroup.procs"), "11\n").unwrap();
    let f = gather(&Snapshot::new(crate::host::Host::new(root))).unwrap();
    assert_eq!(f.unreadable.len(), 1, "{:?}", f.unreadable);
    assert!(
        f.unreadable[0].contains("devices.list"),
        "{:?}",
        f.unreadable
    );
    assert_eq!(f.containers[0].processes[0].pid, 11);
    let c = check_of(&f);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);

    // A tree that is no cgroup filesystem (no cgroup.procs): each process's
    // own cgroup instead, and both are named.
    std::fs::remove_file(container.join("cgroup.procs")).unwrap();
    let f = gather(&Snapshot::new(crate::host::Host::new(root))).unwrap();
    assert_eq!(f.unreadable.len(), 2, "{:?}", f.unreadable);
    assert!(
        f.unreadable[0].contains("/proc/10/cgroup"),
        "{:?}",
        f.unreadable
    );
    assert!(
        f.unreadable[1].contains("devices.list"),
        "{:?}",
        f.unreadable
    );
    let c = check_of(&f);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message.contains("2 process file(s) could not be read"),
        "{}",
        c.message
    );
    assert!(c.message.contains("pid 10"), "{}", c.message);
}

/// uid 1000 as a non-root pod runs: containerd's default set in its spec with
/// IPC_LOCK added, yet CapEff 0 after exec (NVIDIA/nvidia-container-toolkit#2037).
fn non_root(pid: u32, cap_eff: u64, soft: Limit) -> Process {
    Process {
        uid: Some(1000),
        ..proc(pid, &["/dev/infiniband/uverbs0"], cap_eff, soft)
    }
}

/// The advice matrix: uid (root, not root, a user namespace's root) × CapEff
/// (with, without CAP_IPC_LOCK) × memlock (below, at the target).
#[test]
fn advice_matrix() {
    let low = Limit(65536);
    let target = Limit::UNLIMITED;
    let ipc = ALL_CAPS;
    let judged = |p: Process| judge(&p, target);
    use RdmaProblem::*;
    // Root with CAP_IPC_LOCK: fine whatever its memlock.
    for soft in [low, target] {
        assert_eq!(judged(proc(1, &[], ipc, soft)), (vec![], None, vec![]));
    }
    // Root without it: the capability alone, or either remedy once memlock is low too.
    assert_eq!(
        judged(proc(1, &[], CONTAINER_CAPS, target)),
        (vec![NoIpcLock], Some(Remedy::IpcLock), vec![])
    );
    assert_eq!(
        judged(proc(1, &[], CONTAINER_CAPS, low)),
        (vec![NoIpcLock, LowMemlock], Some(Remedy::Either), vec![])
    );
    // Not root, without the capability: memlock is all that counts, and only
    // the node's memlock can raise it.
    assert_eq!(
        judged(non_root(1, 0, low)),
        (vec![LowMemlock], Some(Remedy::NodeMemlockNonRoot), vec![])
    );
    assert_eq!(judged(non_root(1, 0, target)), (vec![], None, vec![]));
    // Not root but with CAP_IPC_LOCK effective (ambient or file capabilities): fine.
    assert_eq!(
        judged(non_root(1, 1 << CAP_IPC_LOCK, low)),
        (vec![], None, vec![])
    );
    // A user namespace's root: its CAP_IPC_LOCK is not the initial namespace's.
    let userns = |soft| Process {
        uid: Some(100_000),
        initial_user_ns: Some(false),
        ..proc(1, &[], ipc, soft)
    };
    assert_eq!(
        judged(userns(low)),
        (vec![LowMemlock], Some(Remedy::NodeMemlockUserNs), vec![])
    );
    assert_eq!(judged(userns(target)), (vec![], None, vec![]));
}

#[test]
fn non_root_gets_the_memlock_advice_not_ipc_lock() {
    let c = container(vec![non_root(7, 0, Limit(65536))]);
    let c = check(&[c], Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.status, Status::Warn);
    assert_eq!(
        c.message,
        "1 of 1 RDMA pod container(s) cannot register memory: pod uid container 0123456789ab \
         (ib_write_bw, pid 7) opens /dev/infiniband/uverbs0 but its memlock 64KiB (hard 64KiB) is \
         below unlimited: ibv_reg_mr fails (\"Couldn't allocate MR\") past it; it runs as uid 1000, \
         not root, so IPC_LOCK in securityContext.capabilities.add gives it no effective capability \
         (execve drops every capability that is not ambient, capabilities(7), and Kubernetes sets \
         none): raise the node's memlock: `rdma-node-agent apply` (the base spec; then recreate the \
         pod), or `[containerd] memlock_via = \"nri\"` (set as each RDMA container is created, no \
         containerd restart)"
    );
    assert!(!c.message.contains("add IPC_LOCK"), "{}", c.message);
    let d = &c.details["containers"][0];
    assert_eq!(d["problems"], json!(["low_memlock"]));
    assert_eq!(d["remedy"], "node_memlock_non_root");
    assert_eq!(d["process"]["uid"], 1000);
}

/// What cannot be read is unknown for that container, with the reason; never ok.
#[test]
fn unreadable_credentials_are_unknown_with_the_reason() {
    let target = Limit::UNLIMITED;
    let mut p = non_root(7, 0, target);
    p.cap_eff = None;
    p.uid = None;
    p.unreadable = vec!["capabilities and uid: reading /proc/7/status: permission denied".into()];
    let c = check(&[container(vec![p])], target, Severity::Warn);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message.contains("cannot read its capabilities of pid 7 (capabilities and uid: reading /proc/7/status: permission denied)"),
        "{}",
        c.message
    );
    // Limits unreadable, no capability: memlock unknown.
    let mut p = non_root(7, 0, target);
    p.memlock_soft = None;
    p.unreadable = vec!["memlock: /proc/7/limits is gone".into()];
    let c = check(&[container(vec![p])], target, Severity::Warn);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message
            .contains("memlock of pid 7 (memlock: /proc/7/limits is gone)"),
        "{}",
        c.message
    );
    // A capability whose user namespace could not be told is not trusted.
    let mut p = non_root(7, ALL_CAPS, Limit(65536));
    p.initial_user_ns = None;
    let c = check(&[container(vec![p])], target, Severity::Warn);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
}

#[test]
fn parsers_of_credentials() {
    let status = "Name:\tsleep\nTgid:\t4301\nPid:\t4305\nUid:\t0\t1000\t1000\t1000\nCapEff:\t0000000000000000\n";
    assert_eq!(parse_euid(status), Some(1000));
    assert_eq!(parse_tgid(status), Some(4301));
    assert_eq!(parse_euid("Uid:\n"), None);
    assert!(is_initial_uid_map("         0          0 4294967295\n"));
    assert!(!is_initial_uid_map("         0     100000      65536\n"));
    assert!(!is_initial_uid_map(""));
}
