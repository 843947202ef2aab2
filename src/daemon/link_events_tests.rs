use super::*;
use std::fs;

fn down(n: &str) -> Change {
    Change::Down(n.into())
}

fn gone(n: &str) -> Change {
    Change::Gone(n.into())
}

/// Pod veths going down and away count nothing, cost at most one sysfs read a
/// second, and leave no entry; a down of a netdev that backs an RDMA port counts.
#[test]
fn only_netdevs_that_back_rdma_ports_are_counted() {
    let mut t = Tally::new("1-1".into());
    let reads = std::cell::Cell::new(0);
    let mut refresh = || {
        reads.set(reads.get() + 1);
        BTreeSet::from(["ens1f0".to_owned()])
    };
    let t0 = Instant::now();
    let churn: Vec<Change> = (0..1000)
        .flat_map(|i| [down(&format!("veth{i}")), gone(&format!("veth{i}"))])
        .collect();
    assert_eq!(t.fold(churn, t0, &mut refresh), Folded::default());
    assert_eq!(reads.get(), 1, "one read for a whole burst of veths");
    assert!(t.events.downs.is_empty());
    // Within the second: no new read for another veth.
    t.fold(
        vec![down("veth9999")],
        t0 + Duration::from_millis(500),
        &mut refresh,
    );
    assert_eq!(reads.get(), 1);
    let f = t.fold(
        vec![down("ens1f0"), down("ens1f0")],
        t0 + Duration::from_millis(600),
        &mut refresh,
    );
    assert_eq!(
        f,
        Folded {
            changed: true,
            downs: 2
        }
    );
    assert_eq!(t.events.downs, BTreeMap::from([("ens1f0".into(), 2)]));
    // Deleted: its entry goes, and that is no down.
    let f = t.fold(
        vec![gone("ens1f0")],
        t0 + Duration::from_secs(2),
        &mut refresh,
    );
    assert_eq!(
        f,
        Folded {
            changed: true,
            downs: 0
        }
    );
    assert!(t.events.downs.is_empty());
}

/// A netdev that starts backing a port (an rxe added on it) is counted once
/// the rate limit lets the set be read again.
#[test]
fn a_new_rdma_netdev_is_found_by_a_later_read() {
    let mut t = Tally::new("1-1".into());
    let mut set = BTreeSet::new();
    let t0 = Instant::now();
    t.fold(vec![down("eth1")], t0, &mut || set.clone());
    assert!(t.events.downs.is_empty());
    set.insert("eth1".to_owned());
    t.fold(vec![down("eth1")], t0 + REFRESH_MIN, &mut || set.clone());
    assert_eq!(t.events.downs.get("eth1"), Some(&1));
}

#[test]
fn a_burst_is_written_once_and_never_sooner_than_the_interval() {
    let t0 = Instant::now();
    // Long after the last write: at once.
    let later = t0 + MIN_INTERVAL * 3;
    assert_eq!(due(later, t0), later);
    // Just after a write: not before MIN_INTERVAL.
    assert_eq!(due(t0, t0), t0 + MIN_INTERVAL);
}

#[test]
fn rdma_netdevs_are_read_from_ports_and_parents() {
    let t = tempfile::tempdir().unwrap();
    let ib = t.path().join("sys/class/infiniband");
    fs::create_dir_all(ib.join("mlx5_0/ports/1/gid_attrs/ndevs")).unwrap();
    fs::write(ib.join("mlx5_0/ports/1/gid_attrs/ndevs/0"), "ens1f0\n").unwrap();
    fs::create_dir_all(ib.join("mlx5_1/ports/1")).unwrap();
    fs::create_dir_all(ib.join("rxe0/ports/1")).unwrap();
    fs::write(ib.join("rxe0/parent"), "eth0\n").unwrap();
    assert_eq!(
        rdma_netdevs(&Host::new(t.path())),
        BTreeSet::from(["ens1f0".to_owned(), "eth0".to_owned()])
    );
}

/// How long the test lets the tally settle after a step.
const SETTLE: Duration = Duration::from_secs(3);

/// The real kernel, in a network namespace of this test's own: 150 pods'
/// veth pairs created, brought up, down and deleted around two flaps of a
/// netdev an (fixture) rxe device sits on. The tally holds that netdev's two
/// downs and nothing else, the churn woke no extra reconcile, and the entry
/// goes when the netdev is deleted.
#[test]
#[ignore = "needs root (a network namespace and `ip link`)"]
fn pod_veth_churn_never_drives_the_tally_or_reconciles() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().to_owned();
    fs::create_dir_all(root.join("sys/class/infiniband/rxe0/ports/1")).unwrap();
    fs::write(root.join("sys/class/infiniband/rxe0/parent"), "rdmaA\n").unwrap();
    let file = root.join(EVENTS_PATH.trim_start_matches('/'));
    let read = move || -> Events { serde_json::from_slice(&fs::read(&file).unwrap()).unwrap() };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ip = |args: &str| {
        let out = std::process::Command::new("ip")
            .args(args.split(' '))
            .output()
            .expect("ip");
        assert!(out.status.success(), "ip {args}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let batch = |lines: String| {
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::write(f.path(), lines).unwrap();
        ip(&format!("-batch {}", f.path().display()));
    };
    let wait_up = |dev: &str| {
        let start = Instant::now();
        while !ip(&format!("-o link show {dev}")).contains("state UP") {
            assert!(start.elapsed().as_secs() < 5, "{dev} never UP");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (wakes_during_churn, after_flaps, after_delete) = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(2) with a flag only; it affects this thread alone
            // (and what it forks, `ip` and the link-event socket opened here).
            let rc = unsafe { nix::libc::unshare(nix::libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "unshare(CLONE_NEWNET) (root?)");
            ip("link add rdmaA type veth peer name rdmaB");
            ip("link set rdmaB up");
            ip("link set rdmaA up");
            wait_up("rdmaA");
            spawn(Host::new(&root), tx);
            let pods = 150;
            batch((0..pods).map(|i| format!("link add pa{i} type veth peer name pb{i}\nlink set pa{i} up\nlink set pb{i} up\n")).collect());
            wait_up(&format!("pa{}", pods - 1));
            std::thread::sleep(Duration::from_millis(300));
            batch((0..pods).map(|i| format!("link set pa{i} down\n")).collect());
            batch((0..pods).map(|i| format!("link del pa{i}\n")).collect());
            std::thread::sleep(SETTLE);
            let mut churn_wakes = 0;
            while rx.try_recv().is_ok() {
                churn_wakes += 1;
            }
            for _ in 0..2 {
                ip("link set rdmaA down");
                std::thread::sleep(Duration::from_millis(100));
                ip("link set rdmaA up");
                wait_up("rdmaA");
                std::thread::sleep(Duration::from_millis(100));
            }
            std::thread::sleep(SETTLE);
            let flaps = (read(), std::iter::from_fn(|| rx.try_recv().ok()).count());
            ip("link del rdmaA");
            std::thread::sleep(SETTLE);
            (churn_wakes, flaps, read())
        })
        .join()
        .unwrap()
    });
    assert_eq!(wakes_during_churn, 0, "pod churn woke a reconcile");
    let (events, wakes) = after_flaps;
    assert_eq!(
        events.downs,
        BTreeMap::from([("rdmaA".to_owned(), 2)]),
        "only the RDMA netdev is counted"
    );
    assert!(
        (1..=2).contains(&wakes),
        "two flaps woke {wakes} reconciles"
    );
    assert!(after_delete.downs.is_empty(), "{after_delete:?}");
}

/// The tally reaches the state directory only as the record `rdma.link`
/// reads: after downs are folded and written, the agent's run directory holds
/// that one file, byte for byte the record, readable by the check.
#[test]
fn the_tally_is_written_as_its_record_and_nothing_beside_it() {
    let t = tempfile::tempdir().unwrap();
    let host = Host::new(t.path());
    let mut tally = Tally::new("42-1".into());
    let rdma = || BTreeSet::from(["eth0".to_owned()]);
    let folded = tally.fold(
        vec![down("eth0"), down("veth1"), down("eth0")],
        Instant::now(),
        &mut || rdma(),
    );
    assert_eq!(folded.downs, 2);
    assert!(write(&host, &tally.events));
    let dir = t.path().join("run/rdma-node-agent");
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["link-events.json"]);
    let r = record(&tally.events);
    assert_eq!(fs::read(dir.join("link-events.json")).unwrap(), r.bytes);
    assert_eq!(
        host.reader().state_read(Path::new(EVENTS_PATH)).unwrap(),
        Some(r.bytes)
    );
    let back: Events =
        serde_json::from_slice(&fs::read(dir.join("link-events.json")).unwrap()).unwrap();
    assert_eq!(back.downs.get("eth0"), Some(&2));
}
