//! `rdma.counters` on a real kernel (boot 1 of the VM tier), as installed: the
//! unit's daemon (the .deb's, restarted with systemctl, driven by SIGHUP and
//! read over /status and /metrics) judges Soft-RoCE's own retransmission
//! counters. ib_write_bw runs from rxe0 (veth0) to rxe1 (vethc) by a detour
//! through another network namespace, so that RoCE crosses a real netdev
//! (6.1's rxe receives only in the initial namespace): clean, the verdict is
//! `ok`; with `tc netem` loss and corruption on veth0, rxe's retransmission
//! counters rise and the verdict is `warn`, reason `retransmits`, naming the
//! port and the counters. The guest side is tests/vm/counters-steps.sh.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;

use super::{step, vm};

/// The tier's payload (tests/vm/nri.rs's) and the counters steps beside guest.sh.
pub fn payload(dir: &Path) -> Result<(), String> {
    super::nri::payload(dir)?;
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/counters-steps.sh");
    fs::copy(&from, dir.join("counters-steps.sh"))
        .map(drop)
        .map_err(|e| format!("{}: {e}", from.display()))
}

/// rdma.counters in a step's /status.
fn verdict(d: &Path, name: &str) -> Value {
    let s = step(d, name);
    s.ok();
    let status: Value = serde_json::from_str(&s.out)
        .unwrap_or_else(|e| panic!("{name}: /status is not JSON ({e}):\n{}", s.text()));
    status["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "rdma.counters"))
        .unwrap_or_else(|| panic!("{name}: no rdma.counters in /status:\n{}", s.text()))
        .clone()
}

/// One rxe counter of one device in a step's `device name value` lines.
fn counter(d: &Path, name: &str, dev: &str, which: &str) -> u64 {
    let s = step(d, name);
    s.ok();
    s.out
        .lines()
        .find_map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                [d, n, v] if *d == dev && *n == which => v.parse().ok(),
                _ => None,
            },
        )
        .unwrap_or_else(|| panic!("{name}: no {dev} {which}:\n{}", s.text()))
}

/// rxe's retransmission counters (`device name value` lines), summed per device.
fn retransmissions(d: &Path, name: &str) -> BTreeMap<String, u64> {
    let s = step(d, name);
    s.ok();
    let mut out = BTreeMap::new();
    for l in s.out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let counted = matches!(
            f.get(1).copied(),
            Some(
                "out_of_seq_request"
                    | "rcvd_seq_err"
                    | "completer_retry_err"
                    | "retry_exceeded_err"
                    | "retry_rnr_exceeded_err"
            )
        );
        if let (true, [dev, _, v]) = (counted, f.as_slice()) {
            *out.entry((*dev).to_owned()).or_default() += v.parse::<u64>().unwrap();
        }
    }
    out
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn rdma_counters_is_ok_on_a_clean_link_and_warns_when_netem_makes_rxe_retransmit() {
    let Some(d) = vm() else { return };
    step(d, "counters-up").ok();
    step(d, "counters-daemon").ok();
    // A clean ib_write_bw across the veth pair: no alarm.
    step(d, "counters-clean-bw").ok();
    let c = verdict(d, "counters-clean");
    assert_eq!(c["status"], "ok", "{c}");
    let clean = retransmissions(d, "counters-clean-hw");
    // The clean run's packets reached rxe1 across veth0 (the detour works).
    assert!(counter(d, "counters-clean-hw", "rxe1", "rcvd_pkts") > 0);
    // Under netem (loss and corruption on veth0): rxe retransmits, and says so.
    // ib_write_bw may not finish its 20 MiB within its 120 s there (under TCG
    // each tail loss waits for the ~1 s QP timeout): what is asserted is that
    // it ran across veth0 (rxe1 received more) and what rxe and the agent said.
    step(d, "counters-netem-on").ok();
    let bw = step(d, "counters-netem-bw");
    assert!(
        bw.rc == 0 || bw.text().contains("(exit 124)"),
        "{}",
        bw.text()
    );
    assert!(
        counter(d, "counters-netem-hw", "rxe1", "rcvd_pkts")
            > counter(d, "counters-clean-hw", "rxe1", "rcvd_pkts")
    );
    let lossy = retransmissions(d, "counters-netem-hw");
    let rose: u64 = lossy.values().sum::<u64>() - clean.values().sum::<u64>();
    assert!(
        rose >= 20,
        "rxe's retransmission counters rose by {rose}: {clean:?} -> {lossy:?}"
    );
    let c = verdict(d, "counters-netem");
    assert_eq!(c["status"], "warn", "{c}");
    assert_eq!(c["reason"], "retransmits", "{c}");
    let message = c["message"].as_str().unwrap();
    assert!(
        (message.starts_with("rxe0/1 retransmits: ")
            || message.starts_with("rxe1/1 retransmits: "))
            && message.contains("hw_counters/"),
        "{c}"
    );
    let metrics = step(d, "counters-netem-metrics");
    metrics.ok();
    assert!(
        metrics
            .out
            .contains("rdma_node_agent_port_errors_total{device=\"rxe"),
        "{}",
        metrics.text()
    );
    step(d, "counters-down").ok();
}
