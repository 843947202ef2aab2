//! The kernel-first route on --root fixture trees, with the restrack answer
//! given (no RDMA device here to give one).

use super::*;
use crate::concerns::readiness::pods_rdma::{Route, check_facts};
use crate::config::Severity;
use crate::engine::check::Status;
use crate::host::limit::Limit;

/// A --root tree with pod processes: `fds` are symlinks in /proc/<pid>/fd,
/// `dev` the names in its /proc/<pid>/root/dev/infiniband.
fn pod_process(root: &std::path::Path, pid: u32, n: u32, fds: &[&str], dev: &[&str], uid: u32) {
    let id = format!("{n:064x}");
    let dir = root.join(format!("proc/{pid}"));
    std::fs::create_dir_all(dir.join("fd")).unwrap();
    std::fs::write(
        dir.join("cgroup"),
        format!("0::/kubepods/besteffort/pod{n}/{id}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("comm"), "worker\n").unwrap();
    std::fs::write(
        dir.join("status"),
        format!("Name:\tworker\nTgid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t0000000000000000\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("limits"),
        "Limit                     Soft Limit           Hard Limit           Units     \n\
         Max locked memory         65536                65536                bytes     \n",
    )
    .unwrap();
    std::fs::write(dir.join("uid_map"), "         0          0 4294967295\n").unwrap();
    for (i, t) in fds.iter().enumerate() {
        std::os::unix::fs::symlink(t, dir.join(format!("fd/{i}"))).unwrap();
        // A process holds a uverbs file only where the kernel has the device.
        if let Some(name) = t
            .strip_prefix("/dev/infiniband/")
            .filter(|n| n.starts_with("uverbs"))
        {
            std::fs::create_dir_all(root.join("sys/class/infiniband_verbs").join(name)).unwrap();
        }
    }
    for d in dev {
        let p = dir.join("root/dev/infiniband");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join(d), "").unwrap();
    }
}

fn holders(pids: &[u32]) -> crate::host::netlink::restrack::Holders {
    let mut h = crate::host::netlink::restrack::Holders {
        devices: vec!["mlx5_0".into()],
        ..Default::default()
    };
    for &pid in pids {
        h.add(pid, "mlx5_0", crate::host::netlink::restrack::PD);
    }
    h
}

/// Restrack answered: fds are read only for the holders it names and for
/// containers whose /dev has RDMA nodes (one that opened uverbs but holds no
/// resource yet is found by it); every other pod process's fds are left unread.
#[test]
fn restrack_first_then_the_device_route() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // 10: a holder the kernel names; its fds show uverbs0 too.
    pod_process(
        root,
        10,
        1,
        &["/dev/infiniband/uverbs0"],
        &["uverbs0"],
        1000,
    );
    // 20: opened uverbs0, no resource yet; its /dev has the node.
    pod_process(root, 20, 2, &["/dev/infiniband/uverbs0"], &["uverbs0"], 0);
    // 30: an ordinary pod process with a stray fd named like uverbs but no node
    // in its /dev and no resource: not read, so not seen (restrack answered).
    pod_process(root, 30, 3, &["/dev/infiniband/uverbs9"], &[], 0);
    // 40: a holder whose /dev cannot show a node (host-network tooling): found by restrack alone.
    pod_process(root, 40, 4, &["/dev/null"], &[], 1000);
    let snap =
        Snapshot::new(crate::host::Host::new(root)).with_restrack(Ok(holders(&[10, 40, 999])));
    let f = gather(&snap).unwrap();
    assert_eq!(
        f.route,
        Route::Restrack {
            devices: vec!["mlx5_0".into()],
            holders: 2,
            missing: vec![]
        }
    );
    let by_pid = |pid: u32| {
        f.containers
            .iter()
            .flat_map(|c| &c.processes)
            .find(|p| p.pid == pid)
            .unwrap()
            .clone()
    };
    assert_eq!(by_pid(10).holds, vec!["mlx5_0 pd"]);
    assert_eq!(by_pid(10).opened, vec!["/dev/infiniband/uverbs0"]);
    assert_eq!(by_pid(20).opened, vec!["/dev/infiniband/uverbs0"]);
    assert!(by_pid(30).fds_skipped && by_pid(30).opened.is_empty());
    assert!(!by_pid(40).fds_skipped);
    let c = check_facts(&f, Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(c.details["found_by"]["by"], "restrack");
    let found: Vec<(u64, String)> = c.details["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["process"]["pid"].as_u64().unwrap(),
                f["evidence"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (10, "opens /dev/infiniband/uverbs0".into()),
            (20, "opens /dev/infiniband/uverbs0".into()),
            (
                40,
                "holds RDMA resources (mlx5_0 pd, by the kernel's resource tracking)".into()
            ),
        ]
    );
    // The non-root holders get the memlock advice, root 20 either remedy.
    assert_eq!(
        c.details["containers"][0]["remedy"],
        "node_memlock_non_root"
    );
    assert_eq!(c.details["containers"][1]["remedy"], "either");
    assert_eq!(
        c.details["containers"][2]["remedy"],
        "node_memlock_non_root"
    );

    // Restrack unavailable on a node with devices: every pod process's fds are
    // read (30's stray fd is seen), and the message says the scan stood in.
    let why = crate::host::netlink::restrack::Unavailable::Netlink(
        crate::host::netlink::NetlinkError::Timeout,
    );
    let snap = Snapshot::new(crate::host::Host::new(root)).with_restrack(Err(why));
    let f = gather(&snap).unwrap();
    assert!(
        f.containers
            .iter()
            .flat_map(|c| &c.processes)
            .all(|p| !p.fds_skipped)
    );
    let c = check_facts(&f, Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.details["found_by"]["by"], "fd_scan");
    assert!(
        c.message.ends_with(
            "(every pod process's open files were read: the kernel's RDMA resource tracking could \
             not be asked: no answer from the kernel on the RDMA netlink socket within 5 seconds)"
        ),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("pid 30) opens /dev/infiniband/uverbs9"),
        "{}",
        c.message
    );
    // Under --root nothing is asked: the scan is the route, noted in details only.
    let snap = Snapshot::new(crate::host::Host::new(root));
    let c = check_facts(&gather(&snap).unwrap(), Limit::UNLIMITED, Severity::Warn);
    assert_eq!(c.details["found_by"]["by"], "fd_scan");
    assert!(
        c.details["found_by"]["why"]
            .as_str()
            .unwrap()
            .starts_with("not asked"),
        "{}",
        c.details
    );
    assert!(!c.message.contains("could not be asked"), "{}", c.message);
}

/// The kernel names the task that created a resource: a thread's id (NCCL's
/// proxy threads), which /proc does not list; it counts for its process.
#[test]
fn a_thread_holder_counts_for_its_process() {
    let t = tempfile::tempdir().unwrap();
    pod_process(t.path(), 10, 1, &[], &[], 0);
    // /proc/11 answers (threads do, by id): its Tgid is the process.
    std::fs::create_dir_all(t.path().join("proc/11")).unwrap();
    std::fs::write(
        t.path().join("proc/11/status"),
        "Name:\tproxy\nTgid:\t10\nPid:\t11\n",
    )
    .unwrap();
    let snap =
        Snapshot::new(crate::host::Host::new(t.path())).with_restrack(Ok(holders(&[11, 12])));
    let by = holders_by_process(&snap).unwrap();
    assert_eq!(by.keys().copied().collect::<Vec<_>>(), vec![10]);
    assert_eq!(by[&10], vec!["mlx5_0 pd"]);
}

/// The kubelet's tree under a cgroup root of its own (kind's `kubelet.slice`),
/// with an empty tree where the kubelet puts it by default: found from the
/// newest pod process; a container running its own init keeps its processes
/// in a sub-cgroup (init.scope), and they are its.
#[test]
fn the_tree_is_found_where_the_pods_are() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let id = format!("{:064x}", 7);
    // Relative: joined onto the test's root.
    let cg = "sys/fs/cgroup";
    std::fs::create_dir_all(root.join(format!("{cg}/kubepods.slice"))).unwrap();
    std::fs::write(root.join(format!("{cg}/kubepods.slice/cgroup.procs")), "").unwrap();
    std::fs::write(
        root.join(format!("{cg}/cgroup.controllers")),
        "cpu memory pids\n",
    )
    .unwrap();
    let prefix = "/kubelet.slice/kubelet-kubepods.slice";
    let scope = format!(
        "{prefix}/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod7.slice/cri-containerd-{id}.scope"
    );
    let dir = root.join(format!("{cg}{scope}"));
    std::fs::create_dir_all(dir.join("init.scope")).unwrap();
    std::fs::write(dir.join("cgroup.procs"), "").unwrap();
    std::fs::write(dir.join("init.scope/cgroup.procs"), "10\n").unwrap();
    pod_process(root, 10, 7, &["/dev/infiniband/uverbs0"], &[], 0);
    std::fs::write(
        root.join("proc/10/cgroup"),
        format!("0::{scope}/init.scope\n"),
    )
    .unwrap();
    let snap = Snapshot::new(crate::host::Host::new(root));
    let f = gather(&snap).unwrap();
    assert_eq!(
        f.pods_from,
        PodsFrom::CgroupTree {
            at: format!("/{cg}{prefix}")
        }
    );
    assert_eq!(f.containers.len(), 1, "{:?}", f.containers);
    let c = &f.containers[0];
    assert_eq!(
        (c.pod_uid.as_deref(), c.container_id.as_deref()),
        (Some("7"), Some(id.as_str()))
    );
    assert_eq!(c.processes[0].pid, 10);
    assert_eq!(c.processes[0].opened, vec!["/dev/infiniband/uverbs0"]);
}

/// CRI-O with `conmon_cgroup = "pod"` (OpenShift): conmon's scope beside the
/// container's, whose processes are in its `container` sub-cgroup. conmon is
/// no container process, and the container is judged by its own.
#[test]
fn crio_s_conmon_is_not_the_container() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let id = format!("{:064x}", 9);
    let pod =
        "sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice";
    let scope = root.join(format!("{pod}/crio-{id}.scope"));
    let conmon = root.join(format!("{pod}/crio-conmon-{id}.scope"));
    std::fs::create_dir_all(scope.join("container")).unwrap();
    std::fs::write(root.join("sys/fs/cgroup/cgroup.controllers"), "cpu\n").unwrap();
    std::fs::create_dir_all(&conmon).unwrap();
    std::fs::write(scope.join("cgroup.procs"), "").unwrap();
    std::fs::write(scope.join("container/cgroup.procs"), "21\n").unwrap();
    std::fs::write(conmon.join("cgroup.procs"), "20\n").unwrap();
    pod_process(root, 20, 9, &[], &[], 0);
    pod_process(root, 21, 9, &["/dev/infiniband/uverbs0"], &[], 0);
    std::fs::write(
        root.join("proc/20/cgroup"),
        format!(
            "0::/{}/crio-conmon-{id}.scope\n",
            &pod["sys/fs/cgroup/".len()..]
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("proc/21/cgroup"),
        format!(
            "0::/{}/crio-{id}.scope/container\n",
            &pod["sys/fs/cgroup/".len()..]
        ),
    )
    .unwrap();
    for tree in [true, false] {
        if !tree {
            // Each process's own cgroup: the same answer.
            std::fs::remove_file(scope.join("container/cgroup.procs")).unwrap();
        }
        let f = gather(&Snapshot::new(crate::host::Host::new(root))).unwrap();
        assert_eq!(matches!(f.pods_from, PodsFrom::CgroupTree { .. }), tree);
        assert_eq!(f.containers.len(), 1, "{:?}", f.containers);
        let pids: Vec<u32> = f.containers[0].processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![21], "tree: {tree}");
    }
}

/// No uverbs device on the node (restrack: no devices): no process can hold
/// one, so no descriptor is read (cost follows RDMA work), but a container
/// whose own /dev has RDMA nodes is still looked at; the route says why.
#[test]
fn no_uverbs_device_reads_no_descriptor() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // A stray fd that only a descriptor read would see, and a container with a node.
    pod_process(root, 10, 1, &["/dev/null"], &[], 1000);
    pod_process(root, 20, 2, &["/dev/infiniband/rdma_cm"], &["rdma_cm"], 0);
    std::fs::create_dir_all(root.join("sys/class/infiniband_verbs")).unwrap();
    let none = crate::host::netlink::restrack::Unavailable::NoDevices;
    let snap = Snapshot::new(crate::host::Host::new(root)).with_restrack(Err(none));
    let f = gather(&snap).unwrap();
    assert_eq!(f.route, Route::NoUverbs);
    let p = |pid| {
        f.containers
            .iter()
            .flat_map(|c| &c.processes)
            .find(|p| p.pid == pid)
            .unwrap()
    };
    assert!(p(10).fds_skipped, "{:?}", p(10));
    assert!(!p(20).fds_skipped);
    assert_eq!(p(20).opened, vec!["/dev/infiniband/rdma_cm"]);
    // A uverbs device in another network namespace (exclusive mode): the
    // verbs class still lists it, so every descriptor is read.
    std::fs::create_dir_all(root.join("sys/class/infiniband_verbs/uverbs0")).unwrap();
    let none = crate::host::netlink::restrack::Unavailable::NoDevices;
    let snap = Snapshot::new(crate::host::Host::new(root)).with_restrack(Err(none));
    let f = gather(&snap).unwrap();
    assert!(matches!(f.route, Route::FdScan { .. }), "{:?}", f.route);
    assert!(
        f.containers
            .iter()
            .flat_map(|c| &c.processes)
            .all(|p| !p.fds_skipped)
    );
}
