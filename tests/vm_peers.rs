//! The peer-probe tier: the package's probe helper
//! (/usr/libexec/rdma-node-agent/rdma-node-agent-probe) on a real kernel with
//! Soft-RoCE (the QEMU image of tests/vm_rxe.rs, Debian's 6.1), driven by
//! tests/vm/peers-guest.sh: a real RC exchange both ways through RDMA-CM, and
//! the faults one device can show: a forged key, a world-readable key, a
//! destination nobody answers, the responder stopped, the source address
//! removed; plus whether rxe works from another network namespace on this
//! kernel (it does not: 6.1's rxe sends from the initial namespace's socket).
//! `RDMA_AGENT_VM=0` turns it off (it says so); it fails loudly when it cannot
//! run. `RDMA_AGENT_VM_RESULTS_PEERS=DIR` asserts on an earlier run's records.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[path = "vm/harness.rs"]
mod harness;

const TIER: harness::Tier = harness::Tier {
    name: "vm_peers",
    what: "the peer-probe tier",
    guest: "peers-guest.sh",
    results: "last-peers-results",
    results_env: "RDMA_AGENT_VM_RESULTS_PEERS",
    env: &[("VM_BOOTS", "1")],
    payload: |_| Ok(()),
};

fn vm() -> Option<&'static Path> {
    static RUN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    harness::results(&TIER, &RUN)
}

/// A step's one JSON line, its exit code 0.
fn line(dir: &Path, step: &str) -> serde_json::Value {
    let read =
        |ext: &str| fs::read_to_string(dir.join(format!("{step}.{ext}"))).unwrap_or_default();
    assert_eq!(
        read("rc").trim(),
        "0",
        "{step}: {}{}",
        read("out"),
        read("err")
    );
    let out = read("out");
    harness::say(&format!("vm_peers: {step}: {}", out.trim()));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{step}: {e}: {out:?}"))
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn a_real_probe_both_ways_over_soft_roce() {
    let Some(dir) = vm() else { return };
    for step in ["ping-ok", "ping-ok-2"] {
        let v = line(dir, step);
        assert_eq!(v["stage"], "done", "{step}: {v}");
        assert_eq!(v["answered_node"], "node0", "{step}");
        assert_eq!(v["answered_rail"], 0, "{step}");
        assert_eq!(v["device"], "rxe0", "{step}");
        // veth's 1500-byte MTU: RoCE's active MTU is 1024, the full-size echo carried it.
        assert_eq!(v["path_mtu"], 1024, "{step}");
        assert_eq!(v["gid_type"], "RoCE v2", "{step}");
        assert!(v["rtt_us"].as_u64().is_some_and(|r| r > 0), "{step}: {v}");
    }
    let ldd = fs::read_to_string(dir.join("ldd.out")).unwrap_or_default();
    assert!(
        ldd.contains("librdmacm.so.1 =>") && !ldd.contains("not found"),
        "{ldd}"
    );
}

/// The helper under the shipped unit's sandbox (its devices, address families,
/// system calls): a probe from it, and its responder answering one.
#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn the_helper_works_under_the_shipped_units_sandbox() {
    let Some(dir) = vm() else { return };
    let v = line(dir, "sandbox-ping");
    assert_eq!(v["stage"], "done", "{v}");
    let v = line(dir, "sandbox-respond");
    assert_eq!(v["stage"], "done", "{v}");
    assert_eq!(
        (&v["answered_node"], &v["answered_rail"]),
        (&"node2".into(), &1.into()),
        "{v}"
    );
    let events = fs::read_to_string(dir.join("sandbox-respond.err")).unwrap_or_default();
    assert!(events.contains("\"answered\""), "{events}");
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn each_fault_names_its_stage() {
    let Some(dir) = vm() else { return };
    let cases = [
        ("ping-forged", "rejected", "bad_key"),
        ("ping-key-world-readable", "helper", "mode 644"),
        ("ping-no-peer-address", "resolve", ""),
        ("ping-responder-stopped", "connect", "no responder"),
        ("ping-address-removed", "source", ""),
        ("ping-from-netns", "connect", ""),
    ];
    for (step, stage, error) in cases {
        let v = line(dir, step);
        assert_eq!(v["stage"], stage, "{step}: {v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains(error) && !e.is_empty()),
            "{step}: {v}"
        );
        assert!(v["rtt_us"].is_null(), "{step}: {v}");
    }
    assert_eq!(line(dir, "ping-forged")["reject_why"], "bad_key");
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn the_responder_reports_what_it_answered_and_refused() {
    let Some(dir) = vm() else { return };
    let events: Vec<serde_json::Value> = fs::read_to_string(dir.join("respond.out"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let count = |kind: &str| events.iter().filter(|e| e["event"] == kind).count();
    assert!(count("ready") >= 2, "{events:?}");
    // ping-ok, ping-ok-2, the 20 of bench-probes and sandbox-ping.
    assert_eq!(count("answered"), 23, "{events:?}");
    let refused: Vec<_> = events.iter().filter(|e| e["event"] == "refused").collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0]["why"], "bad_key");
    assert!(
        events
            .iter()
            .filter(|e| e["event"] == "answered")
            .all(|e| e["node"] == "node1")
    );
}

/// `rdma-node-agent selftest` with the real perftest on Soft-RoCE, by hand
/// and in a transient unit with the sandbox the daemon gives the gate's
/// selftest: the port passes with the pods' memlock (its rate not compared:
/// a software device), and the 64 KiB control fails to register its memory.
/// Its first run here found the selftest had never worked with the real
/// perftest (the server's "Waiting for client" line sat in its stdout buffer).
#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn the_selftest_passes_with_real_perftest_on_soft_roce() {
    let Some(dir) = vm() else { return };
    // systemd-run --wait --quiet prints nothing: the unit's output is in its file.
    let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
    assert_eq!(
        read("selftest-unit.rc").trim(),
        "0",
        "selftest-unit: {}",
        read("selftest-unit.err")
    );
    let unit = read("selftest-unit-json.out");
    for (how, report) in [
        ("by hand", line(dir, "selftest-hand")),
        (
            "in the gate's sandbox",
            serde_json::from_str(unit.trim()).unwrap_or_else(|e| panic!("{e}: {unit:?}")),
        ),
    ] {
        assert_eq!(report["ok"], true, "{how}: {report}");
        let port = &report["ports"][0];
        assert_eq!(port["device"], "rxe0", "{how}: {report}");
        assert_eq!(port["verdict"], "pass", "{how}: {report}");
        let message = port["message"].as_str().unwrap_or_default();
        assert!(message.contains("a software device"), "{how}: {message}");
        assert!(
            message
                .contains("control with memlock 64KiB: failed as expected (Couldn't allocate MR)"),
            "{how}: {message}"
        );
    }
}
