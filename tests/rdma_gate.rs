//! The return-to-service gate (`[peers] gate = true`, check `rdma.gate`)
//! through the real daemon on the rxe node tree (rxe0/1 ACTIVE): `/readyz`,
//! `/status`, `/metrics` and the NFD feature file follow it. The peer-probe
//! and selftest records are hand-made to their schemas (labelled so), written
//! where the prober and `rdma-node-agent selftest` keep them.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::peers::{BOOT, now, probe_json, write};
use support::serve::Serve;
use support::*;

const PEERS: &str = "var/lib/rdma-node-agent/peers.json";
const SELFTEST: &str = "var/lib/rdma-node-agent/selftest.json";
const NFD: &str = "etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent";

/// Two rounds from rxe0/1 to three peers, the newest finished now.
fn peers_record(stage: &str) -> String {
    let probe = |peer: &str| probe_json(peer, stage, 2);
    let round = |at: u64| {
        let probes = ["node-b", "node-c", "node-d"].map(probe);
        json!({
            "started_unix": at - 2, "finished_unix": at,
            "probes": probes,
        })
    };
    json!({
        "version": 1, "boot_id": BOOT, "rounds": [round(now() - 60), round(now())], "inbound": [],
        "responders": [{"device": "rxe0", "port": 1, "addr": "10.0.0.1", "running": true, "error": null}],
    })
    .to_string()
}

fn selftest_passed(root: &Path, passed: bool) {
    write(
        root,
        SELFTEST,
        &json!({"boot_id": BOOT, "finished_unix": now(), "passed": passed, "summary": "hand-made"})
            .to_string(),
    );
}

/// `rdma.gate` in the cycle's /status (`Null` when it is not there).
fn gate(status: &Value) -> Value {
    status["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "rdma.gate").cloned())
        .unwrap_or(Value::Null)
}

/// Whether /readyz lists rdma.gate as failing, and its HTTP status.
fn readyz(d: &Serve) -> (bool, Option<u16>) {
    let body = http_get::get_any(&d.addr, "/readyz").unwrap_or_default();
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let failing = v["failing"]
        .as_array()
        .is_some_and(|f| f.iter().any(|c| c["id"] == "rdma.gate"));
    (failing, http_get::status_code(&d.addr, "/readyz"))
}

fn gate_metric(d: &Serve, status: &str) -> bool {
    d.get("/metrics").lines().any(|l| {
        l == format!("rdma_node_agent_check_status{{check=\"rdma.gate\",status=\"{status}\"}} 1")
    })
}

fn nfd_label(root: &Path) -> String {
    std::fs::read_to_string(root.join(NFD))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("rdma-node-agent.gate=").map(str::to_owned))
        .unwrap_or_default()
}

fn assert_closed(d: &Serve, root: &Path, s: &Value, why: &str) {
    let g = gate(s);
    assert_eq!(
        (g["status"].as_str(), g["reason"].as_str()),
        (Some("fail"), Some("gate_closed")),
        "{g}"
    );
    assert!(g["message"].as_str().unwrap().contains(why), "{g}");
    let (failing, code) = readyz(d);
    assert!(failing, "/readyz does not name rdma.gate");
    assert_eq!(code, Some(503));
    assert!(gate_metric(d, "fail"));
    assert_eq!(nfd_label(root), "closed");
}

/// Until the daemon's own prober has written its round after the last
/// reconcile (it runs one when it starts and on each SIGHUP; without a peer
/// source here its round carries `source_error`): a hand-made record written
/// before that would be overwritten under the next reconcile's feet.
fn settled(root: &Path) {
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(root.join(PEERS)).is_ok_and(|t| t.contains("source_error")) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the prober wrote no round"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_open(d: &Serve, root: &Path, s: &Value) {
    let g = gate(s);
    assert_eq!(g["status"], "ok", "{g}");
    assert!(!readyz(d).0, "/readyz still names rdma.gate");
    assert!(gate_metric(d, "ok"));
    assert_eq!(nfd_label(root), "open");
}

#[test]
fn closed_after_a_boot_opens_on_selftest_and_a_round_closes_on_reset() {
    let t = node("rxe");
    let root = t.path();
    write(
        root,
        "etc/rdma-node-agent/config.toml",
        "[peers]\nenabled = true\ngate = true\n[nfd]\nenabled = true\n",
    );
    write(root, "proc/sys/kernel/random/boot_id", &format!("{BOOT}\n"));
    // Results from before the gate closed (the agent's first reading) do not open it.
    selftest_passed(root, true);
    write(root, PEERS, &peers_record("done"));
    std::thread::sleep(Duration::from_millis(1100));
    let d = Serve::start(root);
    d.wait_reconciles(1);
    settled(root);
    let s = d.reconcile();
    settled(root);
    assert_closed(&d, root, &s, "the agent's first reading");
    assert!(
        root.join("var/lib/rdma-node-agent/peers-gate.json")
            .exists(),
        "the gate's state is kept"
    );

    // The selftest passes, but the newest round fails: still closed.
    std::thread::sleep(Duration::from_millis(1100));
    selftest_passed(root, true);
    write(root, PEERS, &peers_record("connect"));
    let s = d.reconcile();
    settled(root);
    assert_closed(&d, root, &s, "a round of peer probes");

    // A passing round after it: open.
    write(root, PEERS, &peers_record("done"));
    let s = d.reconcile();
    settled(root);
    assert_open(&d, root, &s);
    // Open stays open while later rounds fail (rdma.peers' to say).
    write(root, PEERS, &peers_record("connect"));
    let s = d.reconcile();
    settled(root);
    assert_eq!(gate(&s)["status"], "ok", "{}", gate(&s));
    write(root, PEERS, &peers_record("done"));

    // The operator's reset, through the daemon (its watched request file).
    std::thread::sleep(Duration::from_millis(1100));
    let o = agent(root, &["gate", "reset"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("the daemon closes the gate"));
    // No signal: the daemon's watch on the request file starts the reconcile.
    let start = std::time::Instant::now();
    let s = loop {
        let s: Value = serde_json::from_str(&d.get("/status")).unwrap_or_default();
        if gate(&s)["status"] == "fail" {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the reset was not acted on: {}",
            gate(&s)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(s["trigger"], "SIGHUP", "{}", s["trigger"]);
    assert_closed(&d, root, &s, "reset by the operator");
    std::thread::sleep(Duration::from_millis(1100));
    selftest_passed(root, true);
    write(root, PEERS, &peers_record("done"));
    let s = d.reconcile();
    assert_open(&d, root, &s);

    // A new boot closes it; the records of the boot before prove nothing.
    write(
        root,
        "proc/sys/kernel/random/boot_id",
        "b0b0b0b0-0000-4000-8000-000000000001\n",
    );
    let s = d.reconcile();
    assert_closed(&d, root, &s, "(a boot)");
}

#[test]
fn off_by_default_there_is_no_gate() {
    let t = node("rxe");
    let root = t.path();
    write(
        root,
        "etc/rdma-node-agent/config.toml",
        "[peers]\nenabled = true\n[nfd]\nenabled = true\n",
    );
    write(root, "proc/sys/kernel/random/boot_id", &format!("{BOOT}\n"));
    write(root, PEERS, &peers_record("done"));
    let d = Serve::start(root);
    d.wait_reconciles(1);
    let s = d.reconcile();
    // Listed as skipped (as every disabled check), blocking nothing.
    assert_eq!(gate(&s)["status"], "skipped", "{}", gate(&s));
    assert!(!readyz(&d).0);
    assert!(gate_metric(&d, "skipped"));
    assert_eq!(nfd_label(root), "");
    assert!(
        !root
            .join("var/lib/rdma-node-agent/peers-gate.json")
            .exists()
    );
    // A reset of a gate that is off is an error that says so, and leaves nothing.
    let o = agent(root, &["gate", "reset"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the return-to-service gate is off"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!root.join("run/rdma-node-agent/gate-reset.json").exists());
}

#[test]
fn the_selftest_keeps_its_verdict_for_the_gate() {
    let t = node("rxe");
    let root = t.path();
    write(root, "proc/sys/kernel/random/boot_id", &format!("{BOOT}\n"));
    // Whatever it finds here (no perftest, or no RDMA under the test's own
    // /sys), its verdict is kept with this boot's id; only a pass opens the gate.
    let o = agent(root, &["selftest", "--json"]);
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(SELFTEST)).unwrap()).unwrap();
    assert_eq!(kept["boot_id"], BOOT, "{kept}");
    assert_eq!(kept["passed"], o.status.code() == Some(0), "{kept}");
    assert!(
        kept["finished_unix"].as_u64().unwrap() >= now() - 60,
        "{kept}"
    );
}
