//! `serve` with `[peers] enabled` through the real binary, on the Soft-RoCE
//! node tree (tests/fixtures/nodes/rxe, a real recording) with one hand-added
//! RoCE v2 IPv4 GID (the recording's veth had no address) and a STAND-IN probe
//! helper (a shell script at the installed path under the root: the real
//! helper needs RDMA devices; tests/vm_peers.rs runs it on a real kernel).
//! What this proves is the wiring: the daemon starts the prober, takes
//! `[peers]` and the peers file, runs a responder for this node's port only,
//! writes peers.json, `rdma.peers` judges it, SIGHUP reads the source again,
//! a peer source that fails makes it `unknown` with why, and SIGTERM leaves no
//! responder behind.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::serve::Serve;
use support::*;

const HELPER: &str = "/usr/libexec/rdma-node-agent/rdma-node-agent-probe";
const RECORD: &str = "var/lib/rdma-node-agent/peers.json";

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn record(root: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(root.join(RECORD)).ok()?).ok()
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

fn peers_check(status: &serde_json::Value) -> serde_json::Value {
    status["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "rdma.peers"))
        .cloned()
        .unwrap_or_else(|| panic!("no rdma.peers check in {status}"))
}

/// The rxe tree with [peers] on, this node n1 at 10.77.0.1 and three peers,
/// the stand-in helper at the installed path.
fn peers_node() -> tempfile::TempDir {
    let t = node("rxe");
    let root = t.path();
    // Hand-added (labelled above): the IPv4 GID 10.77.0.1 that `ip addr add`
    // gives rxe0's netdev.
    let port = "/sys/class/infiniband/rxe0/ports/1";
    write(
        root,
        &format!("{port}/gids/1"),
        "0000:0000:0000:0000:0000:ffff:0a4d:0001\n",
    );
    write(root, &format!("{port}/gid_attrs/types/1"), "RoCE v2\n");
    write(root, "/proc/sys/kernel/hostname", "gpu-a\n");
    write(
        root,
        "/proc/sys/kernel/random/boot_id",
        "3e7c1c56-5a57-4bd6-9d0a-6f8b8e3a2c11\n",
    );
    // The stand-in: ping answers done both ways; respond notes its pid and idles.
    write(
        root,
        HELPER,
        &format!(
            "#!/bin/sh\n[ \"$1\" = respond ] && {{ echo $$ >> {}/responders; exec sleep 120; }}\n\
             echo '{{\"stage\":\"done\",\"rtt_us\":40,\"path_mtu\":1024,\"gid_index\":1,\"gid_type\":\"RoCE v2\"}}'\n",
            root.display()
        ),
    );
    std::fs::set_permissions(
        root.join(HELPER.trim_start_matches('/')),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[peers]\nenabled = true\ninterval = \"60s\"\nnode = \"n1\"\n",
    );
    let entry = |node: &str, addr: &str| {
        format!(
            "[[peer]]\nnode = \"{node}\"\naddr = \"{addr}\"\nfabric = \"roce:10.77.0.0/24\"\nrail = 0\n"
        )
    };
    // n1 is this agent (by [peers] node, not the hostname); n2..n4 its peers.
    let list: String = [
        entry("n1", "10.77.0.1"),
        entry("n2", "10.77.0.2"),
        entry("n3", "10.77.0.3"),
        entry("n4", "10.77.0.4"),
    ]
    .concat();
    write(root, "/etc/rdma-node-agent/peers.toml", &list);

    t
}

fn responder_pid(root: &Path) -> u32 {
    wait_for("the responder", Duration::from_secs(20), || {
        std::fs::read_to_string(root.join("responders"))
            .ok()?
            .lines()
            .next()?
            .parse()
            .ok()
    })
}

/// A daemon killed outright (SIGKILL, the OOM killer) leaves no responder
/// holding the service port: it dies with the prober's thread.
#[test]
fn a_killed_daemon_leaves_no_responder() {
    let t = peers_node();
    let root = t.path();
    let mut d = Serve::start(root);
    let pid = responder_pid(root);
    assert!(alive(pid));
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    wait_for(
        "the responder to die with the daemon",
        Duration::from_secs(5),
        || (!alive(pid)).then_some(()),
    );
}

#[test]
fn serve_runs_the_prober_from_peers_config_and_stops_its_responders() {
    let t = peers_node();
    let root = t.path();
    let d = Serve::start(root);
    let rec = wait_for("the first round", Duration::from_secs(20), || {
        record(root).filter(|r| r["rounds"].as_array().is_some_and(|a| !a.is_empty()))
    });
    let probes = rec["rounds"][0]["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 3, "k = 3: {rec}");
    for p in probes {
        assert_eq!(p["device"], "rxe0", "{p}");
        assert_eq!(p["src"], "10.77.0.1", "{p}");
        assert_eq!(p["stage"], "done", "{p}");
        assert_ne!(p["peer"]["node"], "n1", "itself: {p}");
    }
    let responders = rec["responders"].as_array().unwrap();
    assert_eq!(responders.len(), 1, "{rec}");
    assert_eq!(responders[0]["addr"], "10.77.0.1");
    let pid = responder_pid(root);
    assert!(alive(pid));
    let c = peers_check(&d.reconcile());
    assert_eq!(c["status"], "ok", "{c}");

    // The source fails: `systemctl reload` (SIGHUP) reads it again and runs a
    // round now (the interval is 60 s); the record says why, the check unknown.
    std::fs::remove_file(root.join("etc/rdma-node-agent/peers.toml")).unwrap();
    d.reconcile();
    wait_for(
        "the source error in the record",
        Duration::from_secs(25),
        || record(root).filter(|r| r["source_error"].is_string()),
    );
    let c = peers_check(&d.reconcile());
    assert_eq!(c["status"], "unknown", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(m.contains("peer source") && m.contains("peers.toml"), "{m}");

    // SIGTERM: the daemon exits and its responder with it.
    let ok = Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let start = Instant::now();
    let mut d = d;
    wait_for("the daemon to exit", Duration::from_secs(5), || {
        d.child.try_wait().unwrap()
    });
    eprintln!("serve stopped in {:?}", start.elapsed());
    wait_for("the responder to end", Duration::from_secs(5), || {
        (!alive(pid)).then_some(())
    });
}
