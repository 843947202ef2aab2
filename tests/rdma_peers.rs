//! `rdma.peers` through the real binary (`check --root`) on the rxe node tree
//! (its rxe0/1 ACTIVE): the record is read from the agent's state directory
//! under the root, as the daemon's prober writes it, and judged against this
//! boot's id. The records are hand-made to host::probe::record's schema
//! (labelled so); the QEMU tier's real ones replace them as they come.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::peers::{BOOT, now, probe_json, write};
use support::*;

fn probe(peer: &str, stage: &str) -> Value {
    probe_json(peer, stage, 10)
}

fn record(boot: &str, rounds: &[&[(&str, &str)]], age: u64) -> String {
    let n = rounds.len() as u64;
    let rounds: Vec<Value> = rounds
        .iter()
        .enumerate()
        .map(|(i, probes)| {
            let at = now() - age - 60 * (n - 1 - i as u64);
            json!({
                "started_unix": at - 2,
                "finished_unix": at,
                "probes": probes.iter().map(|(p, s)| probe(p, s)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "version": 1, "boot_id": boot, "rounds": rounds, "inbound": [],
        "responders": [{"device": "rxe0", "port": 1, "addr": "10.0.0.1", "running": true, "error": null}],
    })
    .to_string()
}

fn peers_check(root: &Path) -> (Value, Option<i32>) {
    let o = agent(root, &["check", "--json", "--only", "rdma.peers"]);
    (check_in(&json(&o), "rdma.peers"), o.status.code())
}

#[test]
fn the_record_under_the_root_is_judged_for_this_boot() {
    let t = node("rxe");
    let root = t.path();
    // Off by default: skipped, whatever the state holds.
    let (c, _) = peers_check(root);
    assert_eq!(c["status"], "skipped", "{c}");
    write(
        root,
        "etc/rdma-node-agent/config.toml",
        "[peers]\nenabled = true\n",
    );
    write(root, "proc/sys/kernel/random/boot_id", &format!("{BOOT}\n"));
    let (c, code) = peers_check(root);
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("unknown"), Some("peers_unproven")),
        "{c}"
    );
    assert_ne!(code, Some(0));
    let state = "var/lib/rdma-node-agent/peers.json";
    let healthy: &[(&str, &str)] = &[("node-b", "done"), ("node-c", "done"), ("node-d", "done")];
    write(root, state, &record(BOOT, &[healthy, healthy], 5));
    let (c, code) = peers_check(root);
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(
        c["message"],
        "rxe0/1: 3 of 3 peers answered both ways, median rtt 35 µs, path MTU 1024"
    );
    assert_eq!(code, Some(0));
    // The same record from the boot before proves nothing now.
    write(root, state, &record("another-boot", &[healthy, healthy], 5));
    let (c, _) = peers_check(root);
    assert_eq!(c["status"], "unknown", "{c}");
    assert!(
        c["message"].as_str().unwrap().contains("before this boot"),
        "{c}"
    );
    // Stale: older than three intervals (3 × 60 s).
    write(root, state, &record(BOOT, &[healthy, healthy], 200));
    let (c, _) = peers_check(root);
    assert_eq!(c["status"], "unknown", "{c}");
    // No peer answers, two rounds running: this port fails, naming itself.
    let dead: &[(&str, &str)] = &[
        ("node-b", "connect"),
        ("node-c", "connect"),
        ("node-d", "connect"),
    ];
    write(root, state, &record(BOOT, &[dead, dead], 5));
    let (c, code) = peers_check(root);
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("fail"), Some("peer_unreachable")),
        "{c}"
    );
    assert_eq!(code, Some(1));
    // One bad peer among three: a warning naming it; the node stays ready.
    let one: &[(&str, &str)] = &[
        ("node-b", "done"),
        ("node-bad", "connect"),
        ("node-d", "done"),
    ];
    write(root, state, &record(BOOT, &[one, one], 5));
    let (c, code) = peers_check(root);
    assert_eq!(c["status"], "warn", "{c}");
    assert!(c["message"].as_str().unwrap().contains("node-bad"), "{c}");
    assert_eq!(code, Some(0));
    // A record that does not parse is unknown, naming the file.
    write(root, state, "{\"version\": 1, \"rounds\": [");
    let (c, _) = peers_check(root);
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("unknown"), Some("fact_unreadable")),
        "{c}"
    );
    assert!(c["message"].as_str().unwrap().contains("peers.json"), "{c}");
}
