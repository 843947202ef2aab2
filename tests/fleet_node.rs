//! What a node exports for a fleet, through the real binary's `serve`:
//! `rdma.link` on a sample node whose port state (and `link_downed` counter) is
//! edited between reconciles counts the flaps in /metrics, /status and `check
//! --json`, keeps them across a daemon restart without a false flap, and takes
//! a reboot's counter reset as a reset; and the series a node with 8 ports
//! exports stay within the budget of 150.

mod support;

use std::path::Path;

use support::serve::Serve;
use support::*;

const STATE: &str = "sys/class/infiniband/mlx5_0/ports/1/state";
const DOWNED: &str = "sys/class/infiniband/mlx5_0/ports/1/counters/link_downed";
const BOOT_ID: &str = "proc/sys/kernel/random/boot_id";

/// `serve` on the tree, once its first reconcile is published.
fn serve(root: &Path) -> Serve {
    let s = Serve::start(root);
    s.wait_reconciles(1);
    s
}

/// The flaps of mlx5_0/1 in /metrics.
fn flaps(s: &Serve) -> u64 {
    sample(
        &s.get("/metrics"),
        "rdma_node_agent_port_flaps_total{device=\"mlx5_0\",port=\"1\"} ",
    )
    .expect("a flaps series for mlx5_0/1")
}

/// The value of the sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
}

fn set(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn flaps_are_counted_kept_across_restarts_and_reboots() {
    let t = node("roce");
    let root = t.path();
    // Report only (nothing else in the tree changes), no timer reconcile:
    // each reconcile is one SIGHUP. Warn above one flap per hour.
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[daemon]\ninterval_secs = 3600\n[rdma]\nflap_threshold = 1\nflap_window = \"1h\"\n",
    );
    set(root, BOOT_ID, "1b5a3c0e-0000-4000-8000-000000000001\n");
    set(root, DOWNED, "5\n");
    let s = serve(root);
    // The first reading is the baseline: a counter already at 5 is no flap.
    assert_eq!(flaps(&s), 0);
    let m = s.get("/metrics");
    assert!(
        m.contains("rdma_node_agent_port_link_downed_total{device=\"mlx5_0\",port=\"1\"} 0\n"),
        "{m}"
    );
    assert!(!m.contains("port_last_flap_timestamp_seconds{device=\"mlx5_0\""));

    // Down: one flap. Up again: none. Down with the counter up by one: the
    // same flap seen twice, counted once.
    set(root, STATE, "1: DOWN\n");
    s.reconcile();
    assert_eq!(flaps(&s), 1);
    set(root, STATE, "4: ACTIVE\n");
    s.reconcile();
    assert_eq!(flaps(&s), 1);
    set(root, STATE, "1: DOWN\n");
    set(root, DOWNED, "6\n");
    s.reconcile();
    assert_eq!(flaps(&s), 2);
    // ACTIVE at both reconciles, yet the kernel counted two more downs between them.
    set(root, STATE, "4: ACTIVE\n");
    set(root, DOWNED, "8\n");
    s.reconcile();
    assert_eq!(flaps(&s), 4);
    let m = s.get("/metrics");
    assert!(
        m.contains("rdma_node_agent_port_link_downed_total{device=\"mlx5_0\",port=\"1\"} 3\n"),
        "{m}"
    );
    assert!(m.contains(
        "rdma_node_agent_port_last_flap_timestamp_seconds{device=\"mlx5_0\",port=\"1\"} "
    ));
    assert!(
        m.contains(
            "rdma_node_agent_check_reason{check=\"rdma.link\",reason=\"link_flapping\"} 1\n"
        ),
        "{m}"
    );
    let status: serde_json::Value = serde_json::from_str(&s.get("/status")).unwrap();
    let link = check_in(&status, "rdma.link");
    assert_eq!(link["status"], "warn", "{link}");
    assert_eq!(link["reason"], "link_flapping");
    assert!(
        link["message"]
            .as_str()
            .unwrap()
            .starts_with("mlx5_0/1 flapped 4 times in the last 1h, last at "),
        "{link}"
    );

    // A restarted daemon reads the history: no flap at its first poll.
    drop(s);
    let s = serve(root);
    assert_eq!(flaps(&s), 4);
    // `check` reads the same history (and writes nothing).
    let history = read(root, "/var/lib/rdma-node-agent/link-history.json");
    let c = check_in(&json(&agent(root, &["check", "--json"])), "rdma.link");
    assert_eq!(c["details"]["ports"][0]["flaps_total"], 4, "{c}");
    assert_eq!(
        read(root, "/var/lib/rdma-node-agent/link-history.json"),
        history
    );

    // A reboot: a new boot id, the counter restarted below its last value.
    drop(s);
    set(root, BOOT_ID, "1b5a3c0e-0000-4000-8000-000000000002\n");
    set(root, DOWNED, "1\n");
    let s = serve(root);
    assert_eq!(flaps(&s), 4);
    // The new boot's counter counts from its own baseline.
    set(root, DOWNED, "2\n");
    s.reconcile();
    assert_eq!(flaps(&s), 5);
    assert!(
        s.get("/metrics")
            .contains("rdma_node_agent_port_link_downed_total{device=\"mlx5_0\",port=\"1\"} 4\n")
    );
}

/// The series of one exposition, by family (sample lines, not comments).
fn series_by_family(text: &str) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = l.split(['{', ' ']).next().unwrap().to_owned();
        *by.entry(name).or_default() += 1;
    }
    by
}

#[test]
fn a_gpu_node_with_eight_ports_exports_at_most_150_series() {
    // The A100 sample node (its driver, modules, kernel) with its PCI tree
    // replaced by an HGX-class one: 8 GPUs and 8 RDMA NICs of one port each
    // under two levels of switches, one GPU↔NIC pair per leaf switch
    // (support::pcie::hgx_tree, built here and labelled so).
    let t = node("a100");
    let root = t.path();
    for gone in ["sys/class/infiniband", "sys/bus/pci/devices", "sys/devices"] {
        std::fs::remove_dir_all(root.join(gone)).unwrap();
    }
    support::pcie::hgx_tree(root);
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[daemon]\ninterval_secs = 3600\n",
    );
    let s = serve(root);
    let text = s.get("/metrics");
    let by = series_by_family(&text);
    let total: usize = by.values().sum();
    let ports = by
        .get("rdma_node_agent_port_info")
        .copied()
        .unwrap_or_default();
    eprintln!("{total} series with {ports} ports:");
    for (name, n) in &by {
        eprintln!("  {n:4} {name}");
    }
    assert_eq!(ports, 8, "{text}");
    // The sample is not healthy everywhere: some checks are not ok and its
    // GPU-NIC pairs are not ready (no config space for ACS, no GPUDirect
    // mechanism). These families have series only for problems; a healthy
    // node has none of them, so it exports the rest.
    let problems_only = [
        "rdma_node_agent_check_reason",
        "rdma_node_agent_gpudirect_pair_problem",
        "rdma_node_agent_port_last_flap_timestamp_seconds",
        "rdma_node_agent_driver_health_reporter_in_error",
        "rdma_node_agent_driver_health_reporter_errors_total",
        "rdma_node_agent_driver_log_messages_total",
        "rdma_node_agent_port_errors_total",
        "rdma_node_agent_port_errors_per_second",
    ];
    let for_problems: usize = problems_only
        .iter()
        .map(|f| by.get(*f).copied().unwrap_or_default())
        .sum();
    let healthy = total - for_problems;
    eprintln!("{healthy} series when healthy ({for_problems} for this sample's problems)");
    assert!(by["rdma_node_agent_gpudirect_pair_ready"] == 8, "{text}");
    assert!(
        healthy <= 150,
        "{healthy} series on a healthy node (budget 150):\n{text}"
    );
}
