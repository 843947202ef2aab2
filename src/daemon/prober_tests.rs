//! The prober thread's wiring, on a node tree with a stand-in helper (a shell
//! script: the real helper needs RDMA devices; tests/vm_peers.rs runs it).

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use super::*;
use crate::host::probe::record::{PeersRecord, Stage};

struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let n = Node {
            dir: tempfile::tempdir().unwrap(),
        };
        n.put("/proc/sys/kernel/random/boot_id", "boot-1\n");
        n.put("/proc/sys/kernel/hostname", "gpu-a\n");
        // ping: done for every peer; respond: notes its pid and idles.
        let helper = n.dir.path().join("probe");
        std::fs::write(
            &helper,
            format!(
                "#!/bin/sh\n[ \"$1\" = respond ] && {{ echo $$ >> {}/responders; exec sleep 60; }}\n\
                 echo '{{\"stage\":\"done\",\"rtt_us\":9,\"path_mtu\":4096}}'\n",
                n.dir.path().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
        n
    }

    fn put(&self, p: &str, s: &str) {
        let f = self.dir.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    }

    /// An ACTIVE RoCE port whose RoCE v2 GID carries 10.0.0.<last>, or none.
    fn port(&self, dev: &str, last: Option<u8>) {
        let dir = format!("/sys/class/infiniband/{dev}/ports/1");
        self.put(&format!("{dir}/state"), "4: ACTIVE\n");
        self.put(&format!("{dir}/link_layer"), "Ethernet\n");
        self.put(&format!("{dir}/gid_attrs/types/1"), "RoCE v2\n");
        let gid = match last {
            Some(l) => format!("0000:0000:0000:0000:0000:ffff:0a00:00{l:02x}\n"),
            None => "0000:0000:0000:0000:0000:0000:0000:0000\n".into(),
        };
        self.put(&format!("{dir}/gids/1"), &gid);
    }

    fn host(&self) -> Host {
        Host::new(self.dir.path())
    }

    fn config(&self, node: &str) -> PeersConfig {
        PeersConfig {
            enabled: true,
            node: node.into(),
            k: 2,
            interval_secs: 10,
            source: PeerSource::File {
                path: "/etc/rdma-node-agent/peers.toml".into(),
            },
            ..PeersConfig::default()
        }
    }

    /// gpu-a owns 10.0.0.1, gpu-b (another agent on this host) 10.0.0.9.
    fn peers_file(&self) {
        let entry = |node: &str, addr: &str| {
            format!(
                "[[peer]]\nnode = \"{node}\"\naddr = \"{addr}\"\nfabric = \"roce:10.0.0.0/24\"\nrail = 0\n"
            )
        };
        self.put(
            "/etc/rdma-node-agent/peers.toml",
            &[
                entry("gpu-a", "10.0.0.1"),
                entry("gpu-b", "10.0.0.9"),
                entry("gpu-c", "10.0.0.3"),
                entry("gpu-d", "10.0.0.4"),
            ]
            .concat(),
        );
    }

    fn record(&self) -> Option<PeersRecord> {
        let f = self.dir.path().join("var/lib/rdma-node-agent/peers.json");
        Some(serde_json::from_slice(&std::fs::read(f).ok()?).unwrap())
    }

    fn responder_pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.path().join("responders"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }
}

fn settings(n: &Node, cfg: &PeersConfig) -> ProberSettings {
    let mut s = cfg.settings();
    s.helper = n.dir.path().join("probe");
    s
}

fn settings_helper(n: &Node, prober: &mut Prober, cfg: &PeersConfig) -> PeersRecord {
    round(&n.host(), prober, cfg, &settings(n, cfg), &mut None);
    n.record().expect("the round wrote its record")
}

#[test]
fn only_the_ports_the_source_assigns_to_this_node_respond_and_probe() {
    let n = Node::new();
    n.port("rxe0", Some(1));
    n.port("rxe1", Some(9));
    n.peers_file();
    let cfg = n.config("");
    assert_eq!(node_name(&n.host(), &cfg).as_deref(), Some("gpu-a"));
    let mut prober = Prober::default();
    let rec = settings_helper(&n, &mut prober, &cfg);
    let devices: Vec<&str> = rec.responders.iter().map(|r| r.device.as_str()).collect();
    assert_eq!(devices, ["rxe0"], "gpu-b's address is not this agent's");
    let probes = &rec.rounds[0].probes;
    assert_eq!(probes.len(), 2, "{probes:?}");
    assert!(
        probes
            .iter()
            .all(|p| p.device == "rxe0" && p.src == "10.0.0.1")
    );
    assert!(probes.iter().all(|p| p.peer.node != "gpu-a"));
    // The other agent, named by [peers] node, takes the other port only.
    let cfg_b = n.config("gpu-b");
    let rec = settings_helper(&n, &mut Prober::default(), &cfg_b);
    let devices: Vec<&str> = rec.responders.iter().map(|r| r.device.as_str()).collect();
    assert_eq!(devices, ["rxe1"]);
    // A source of running responders (Prometheus) lists none before they run:
    // then every addressed port responds, and probes once it is listed.
    let mut s = settings(&n, &cfg);
    s.serve_unlisted = true;
    let rec = Prober::default()
        .tick(&n.host(), &s, "gpu-new", &[], None)
        .unwrap();
    let devices: Vec<&str> = rec.responders.iter().map(|r| r.device.as_str()).collect();
    assert_eq!(devices, ["rxe0", "rxe1"]);
    assert!(rec.rounds.last().unwrap().probes.is_empty());
}

#[test]
fn a_port_that_loses_its_address_still_probes_and_says_source() {
    let n = Node::new();
    n.port("rxe0", Some(1));
    n.peers_file();
    let cfg = n.config("");
    let mut prober = Prober::default();
    settings_helper(&n, &mut prober, &cfg);
    n.port("rxe0", None);
    let rec = settings_helper(&n, &mut prober, &cfg);
    let newest = &rec.rounds.last().unwrap().probes;
    assert_eq!(newest.len(), 2, "{newest:?}");
    assert!(
        newest.iter().all(|p| p.stage == Stage::Source),
        "{newest:?}"
    );
    // A new daemon (restart) knows the port's entry from the record.
    let mut fresh = Prober::default();
    let rec = settings_helper(&n, &mut fresh, &cfg);
    let newest = &rec.rounds.last().unwrap().probes;
    assert!(
        !newest.is_empty() && newest.iter().all(|p| p.stage == Stage::Source),
        "{newest:?}"
    );
}

/// The Prometheus source lists running responders only: a port that lost its
/// address (its responder stopped) drops out of the list, and still probes
/// from its remembered entry, as `source`.
#[test]
fn with_a_source_of_responders_a_port_without_address_still_says_source() {
    let n = Node::new();
    n.port("rxe0", Some(1));
    n.peers_file();
    let cfg = n.config("");
    let mut s = settings(&n, &cfg);
    s.serve_unlisted = true;
    let mut prober = Prober::default();
    let all = load_peers(&n.host(), &cfg).unwrap();
    prober.tick(&n.host(), &s, "gpu-a", &all, None).unwrap();
    n.port("rxe0", None);
    let without: Vec<Peer> = all.into_iter().filter(|p| p.node != "gpu-a").collect();
    let rec = prober.tick(&n.host(), &s, "gpu-a", &without, None).unwrap();
    let newest = &rec.rounds.last().unwrap().probes;
    assert_eq!(newest.len(), 2, "{newest:?}");
    assert!(
        newest.iter().all(|p| p.stage == Stage::Source),
        "{newest:?}"
    );
    // A file the operator edited to drop the port: it is not this agent's any more.
    s.serve_unlisted = false;
    let rec = prober.tick(&n.host(), &s, "gpu-a", &without, None).unwrap();
    assert!(rec.rounds.last().unwrap().probes.is_empty());
}

#[test]
fn a_failing_source_is_recorded_and_the_last_list_of_that_source_is_kept() {
    let n = Node::new();
    n.port("rxe0", Some(1));
    let cfg = n.config("");
    let s = settings(&n, &cfg);
    let mut prober = Prober::default();
    let mut last = None;
    round(&n.host(), &mut prober, &cfg, &s, &mut last);
    let rec = n.record().expect("a record even without a list");
    let why = rec.source_error.expect("the source error is recorded");
    assert!(why.contains("peers.toml"), "{why}");
    assert!(rec.rounds[0].probes.is_empty());
    n.peers_file();
    round(&n.host(), &mut prober, &cfg, &s, &mut last);
    let rec = n.record().unwrap();
    assert_eq!(rec.source_error, None);
    assert_eq!(rec.rounds.last().unwrap().probes.len(), 2);
    std::fs::remove_file(n.dir.path().join("etc/rdma-node-agent/peers.toml")).unwrap();
    round(&n.host(), &mut prober, &cfg, &s, &mut last);
    let rec = n.record().unwrap();
    assert!(rec.source_error.is_some());
    assert_eq!(rec.rounds.last().unwrap().probes.len(), 2, "the last list");
    // Another source's old list is not this source's.
    let other = PeersConfig {
        source: PeerSource::File {
            path: "/etc/other.toml".into(),
        },
        ..cfg.clone()
    };
    round(&n.host(), &mut prober, &other, &s, &mut last);
    let rec = n.record().unwrap();
    assert!(rec.source_error.unwrap().contains("other.toml"));
    assert!(rec.rounds.last().unwrap().probes.is_empty());
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The thread: idle while disabled or before a config loads, a round once
/// enabled, responders stopped when disabled again and when the thread ends.
#[test]
fn the_thread_follows_the_config_and_leaves_no_responder_behind() {
    let n = Node::new();
    n.port("rxe0", Some(1));
    n.peers_file();
    let config: Arc<Mutex<Option<Config>>> = Arc::default();
    let thread = spawn_with_helper(&n, config.clone());
    std::thread::sleep(Duration::from_millis(300));
    assert!(n.record().is_none(), "no config yet: no round");
    let mut c = Config::default();
    *c.section_mut::<PeersConfig>() = n.config("");
    *config.lock().unwrap() = Some(c.clone());
    wait_for("the first round", || n.record().is_some());
    wait_for("a responder", || !n.responder_pids().is_empty());
    let pid = n.responder_pids()[0];
    assert!(alive(pid));
    // A reload (SIGHUP) runs a round now, not after the 10 s interval.
    let rounds = || n.record().map_or(0, |r| r.rounds.len());
    assert_eq!(rounds(), 1);
    let nudged = Instant::now();
    thread.nudge();
    wait_for("a round after the nudge", || rounds() == 2);
    assert!(
        nudged.elapsed() < Duration::from_secs(5),
        "the round waited for the interval: {:?}",
        nudged.elapsed()
    );
    // Disabled by a reload: the responder stops at the thread's next look.
    c.section_mut::<PeersConfig>().enabled = false;
    *config.lock().unwrap() = Some(c.clone());
    wait_for("the responder to stop when disabled", || !alive(pid));
    c.section_mut::<PeersConfig>().enabled = true;
    *config.lock().unwrap() = Some(c);
    wait_for("a new responder", || n.responder_pids().len() == 2);
    let pid = n.responder_pids()[1];
    let stopped = Instant::now();
    drop(thread);
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "the stop waits too long"
    );
    wait_for("the responder to end with the thread", || !alive(pid));
}

/// `spawn`, with the stand-in helper: `run` with settings whose helper is the
/// script (the config cannot name one: the package installs it).
fn spawn_with_helper(n: &Node, config: Arc<Mutex<Option<Config>>>) -> ProberThread {
    let helper = n.dir.path().join("probe");
    let host = n.host();
    let stop = Stop::new();
    let nudged = Arc::new(AtomicU64::new(0));
    let (ended_tx, ended) = mpsc::channel::<()>();
    let (s, n) = (stop.clone(), nudged.clone());
    let handle = std::thread::spawn(move || {
        let _ended = ended_tx;
        run(&host, &config, &s, &n, Some(&helper), None);
    });
    ProberThread {
        stop,
        nudged,
        ended,
        handle: Some(handle),
    }
}
