//! `rdma.link` on a real kernel (boots 1 and 2 of the VM tier): the daemon
//! counts the flaps of Soft-RoCE's netdev (`ip link set veth0 down/up`), both
//! those a reconcile sees and those between reconciles (rtnetlink events: rxe
//! has no `link_downed` counter), keeps them across a daemon restart without a
//! false flap, and across the reboot into boot 2. The daemon is the installed
//! package's unit: started and restarted with systemctl, started at boot 2 by
//! systemd (the package enabled it), read over its /metrics and /status.

use std::path::Path;

use super::{check, step, vm};

const FLAPS: &str = "rdma_node_agent_port_flaps_total{device=\"rxe0\",port=\"1\"}";

/// The value of a series in a step's output (lines of `/metrics`; `""` for a
/// line that is only a number), the last when printed more than once.
fn value(d: &Path, name: &str, series: &str) -> u64 {
    let s = step(d, name);
    s.ok();
    s.out
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix(series))
        .find_map(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no {series}:\n{}", s.text()))
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn rdma_link_counts_each_flap_of_the_rxe_netdev_across_restart_and_reboot() {
    let Some(d) = vm() else { return };
    // Installed, enabled, not started until the steps start it.
    let install = step(d, "install");
    install.ok();
    assert!(
        install.out.contains("enabled: enabled active: inactive"),
        "{}",
        install.text()
    );
    // The daemon's first reading of rxe0 is its baseline.
    assert_eq!(value(d, "link-daemon", FLAPS), 0);
    // Three flaps, each seen by the reconcile the link event asked for.
    assert_eq!(value(d, "link-polled", ""), 3);
    // Two more, faster than the daemon's debounce: only the events saw them.
    let burst = step(d, "link-burst");
    burst.ok();
    assert_eq!(value(d, "link-burst", ""), 5, "{}", burst.text());
    // The reconcile after the burst was the one its first link event asked for.
    assert!(
        burst
            .out
            .lines()
            .any(|l| l.contains("\"trigger\"") && l.contains("\"link down\"")),
        "{}",
        burst.text()
    );
    // check reads the daemon's history: above rdma.flap_threshold = 2.
    let c = check(d, "link-check");
    assert_eq!(c["status"], "warn", "{c}");
    assert_eq!(c["reason"], "link_flapping", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("rxe0/1 flapped 5 times in the last 1h, last at "),
        "{c}"
    );
    // A restarted daemon adds no flap.
    assert_eq!(value(d, "link-restart", FLAPS), 5);
    let restart = step(d, "link-restart");
    assert!(
        restart.out.contains(
            "rdma_node_agent_check_reason{check=\"rdma.link\",reason=\"link_flapping\"} 1"
        ),
        "{}",
        restart.text()
    );
    // Rxe has no link_downed counter: the flaps are the state's and events'.
    assert!(
        restart
            .out
            .contains("rdma_node_agent_port_link_downed_total{device=\"rxe0\",port=\"1\"} 0"),
        "{}",
        restart.text()
    );
    // After the reboot: the unit started at boot, after rxe0 was created
    // again; the history kept, no flap for it.
    assert_eq!(
        step(d, "boot2-unit").ok().out,
        "enabled\nactive\n",
        "the unit did not start at boot"
    );
    assert_eq!(value(d, "boot2-link-daemon", FLAPS), 5);
    let c = check(d, "boot2-link-check");
    assert_eq!(c["details"]["ports"][0]["flaps_total"], 5, "{c}");
}
