//! `rdma.counters` through the real binary on trees whose ports carry real
//! counter sets (tests/fixtures/counters, PROVENANCE): the daemon (`serve`)
//! takes a baseline, says "no rate yet" first, then judges the rises between
//! reconciles (SIGHUP), keeps its baselines in its state file, and survives a
//! reset, a reboot, a renamed device and an unreadable counter as the check's
//! page says; the management NIC is reported apart. `check` reads the same
//! history and writes nothing.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::serve::Serve;
use support::*;

const CLASS: &str = "sys/class/infiniband";
const BOOT_ID: &str = "proc/sys/kernel/random/boot_id";
const HISTORY: &str = "/var/lib/rdma-node-agent/counters-history.json";

fn set(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn counters(set_name: &str) -> PathBuf {
    fixtures().join("counters").join(set_name)
}

/// A device `dev` with one port carrying the fixture counter set `set_name`.
fn plant(root: &Path, dev: &str, set_name: &str, guid: &str, netdev: &str) {
    let port = root.join(CLASS).join(dev).join("ports/1");
    std::fs::create_dir_all(&port).unwrap();
    copy_tree(&counters(set_name), &port);
    set(
        root,
        &format!("{CLASS}/{dev}/node_guid"),
        &format!("{guid}\n"),
    );
    set(root, &format!("{CLASS}/{dev}/ports/1/state"), "4: ACTIVE\n");
    set(
        root,
        &format!("{CLASS}/{dev}/ports/1/gid_attrs/ndevs/0"),
        &format!("{netdev}\n"),
    );
}

/// Two fabric ports (mlx5_0, mlx5_1), the management NIC's (mlx5_9 on eno1,
/// which holds the default route), an iWARP device without a PMA and an
/// Omni-Path one whose counters no class knows.
fn tree() -> tempfile::TempDir {
    let t = node("roce");
    let root = t.path();
    let _ = std::fs::remove_dir_all(root.join(CLASS));
    plant(
        root,
        "mlx5_0",
        "procfs-mlx5",
        "0c42:a103:0065:6a30",
        "ens1f0np0",
    );
    plant(
        root,
        "mlx5_1",
        "procfs-mlx5",
        "0c42:a103:0065:6a31",
        "ens1f1np1",
    );
    plant(root, "mlx5_9", "procfs-mlx5", "0c42:a103:0065:6a39", "eno1");
    plant(
        root,
        "i40iw0",
        "i40iw-no-pma",
        "a4bf:0100:0d3a:0000",
        "eno2",
    );
    plant(
        root,
        "hfi1_0",
        "hfi1-omnipath",
        "0011:7501:0179:e5a4",
        "ib0",
    );
    // Hand-written in the kernel's format: the default route on eno1.
    set(
        root,
        "proc/net/route",
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
         eno1\t00000000\t0102000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
         eno1\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n",
    );
    set(root, BOOT_ID, "9d3f0c1e-0000-4000-8000-000000000001\n");
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[daemon]\ninterval_secs = 3600\n[containerd]\nenabled = false\n[systemd]\nenabled = false\n[gpudirect]\nenabled = false\n",
    );
    t
}

fn serve(root: &Path) -> Serve {
    let s = Serve::start(root);
    s.wait_reconciles(1);
    s
}

/// SIGHUP, then rdma.counters as that reconcile's /status has it.
fn reconcile(s: &Serve) -> Value {
    check_in(&s.reconcile(), "rdma.counters")
}

fn message(c: &Value) -> &str {
    c["message"].as_str().unwrap_or_default()
}

#[test]
fn rises_are_judged_and_resets_reboots_renames_and_the_management_nic_are_not() {
    let t = tree();
    let root = t.path();
    let sym = |dev: &str| format!("{CLASS}/{dev}/ports/1/counters/symbol_error");
    // First reading (`check`, no history yet): baselines, no rate, not `ok`.
    let c = check_in(&json(&agent(root, &["check", "--json"])), "rdma.counters");
    assert_eq!(c["status"], "skipped", "{c}");
    assert!(
        message(&c).starts_with("3 port(s) read for the first time: baselines taken, no rate yet (rates from the next reconcile); no counter this check rates on hfi1_0/1, i40iw0/1"),
        "{c}"
    );
    // The real sets as read: unknown names kept, N/A counters absent, not unreadable.
    let ports = c["details"]["ports"].as_array().unwrap();
    let by = |name: &str| ports.iter().find(|p| p["port"] == name).unwrap().clone();
    assert_eq!(by("hfi1_0/1")["other"]["hw_counters/RcResend"], 2079, "{c}");
    assert_eq!(by("i40iw0/1")["unreadable"], serde_json::json!([]), "{c}");
    assert_eq!(
        by("mlx5_0/1")["rated"]["hw_counters/local_ack_timeout_err"],
        131
    );
    assert_eq!(
        by("mlx5_0/1")["other"]["counters/port_xmit_data"],
        2_880_761_508_848u64
    );
    assert_eq!(by("mlx5_9/1")["management"], true, "{c}");
    assert!(!root.join(HISTORY.trim_start_matches('/')).exists());

    let s = serve(root);
    // Nothing moved: ok.
    let c = reconcile(&s);
    assert_eq!(c["status"], "ok", "{c}");
    // A driver reload on mlx5_0 (its counters back to 0) and 5000 symbol errors on
    // the management NIC: still ok, the management NIC named apart.
    set(
        root,
        &format!("{CLASS}/mlx5_0/ports/1/hw_counters/local_ack_timeout_err"),
        "0\n",
    );
    set(
        root,
        &format!("{CLASS}/mlx5_0/ports/1/hw_counters/roce_adp_retrans"),
        "0\n",
    );
    set(root, &sym("mlx5_9"), "5000\n");
    let c = reconcile(&s);
    assert_eq!(c["status"], "ok", "{c}");
    assert!(
        message(&c).contains("management NIC (default route), reported, not counted against the node: mlx5_9/1 symbol_errors: 5000 in the last 1h"),
        "{c}"
    );
    // A reboot: a new boot id, every raw value lower or higher than before: no alarm.
    drop(s);
    set(root, BOOT_ID, "9d3f0c1e-0000-4000-8000-000000000002\n");
    set(root, &sym("mlx5_1"), "40000\n");
    let s = serve(root);
    let c = check_in(
        &serde_json::from_str(&s.get("/status")).unwrap(),
        "rdma.counters",
    );
    assert_eq!(c["status"], "ok", "{c}");

    // 200 symbol errors on mlx5_0 between two reconciles: fail, naming port and counter.
    set(root, &sym("mlx5_0"), "200\n");
    let c = reconcile(&s);
    assert_eq!(c["status"], "fail", "{c}");
    assert_eq!(c["reason"], "symbol_errors", "{c}");
    assert!(
        message(&c)
            .starts_with("mlx5_0/1 symbol_errors: 200 in the last 1h (counters/symbol_error +200;"),
        "{c}"
    );
    let m = s.get("/metrics");
    assert!(
        m.contains("rdma_node_agent_port_errors_total{device=\"mlx5_0\",port=\"1\",class=\"symbol_errors\"} 200\n"),
        "{m}"
    );
    // `check` judges against the daemon's history and writes nothing.
    let history = read(root, HISTORY);
    let cli = check_in(&json(&agent(root, &["check", "--json"])), "rdma.counters");
    assert_eq!(cli["status"], "fail", "{cli}");
    assert_eq!(read(root, HISTORY), history);

    // mlx5_0 re-enumerates as mlx5_4 (same GUID): the verdict follows it; no
    // verdict stays under the old name.
    std::fs::rename(
        root.join(CLASS).join("mlx5_0"),
        root.join(CLASS).join("mlx5_4"),
    )
    .unwrap();
    let c = reconcile(&s);
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        message(&c).starts_with("mlx5_4/1 symbol_errors: 200"),
        "{c}"
    );
    assert!(!message(&c).contains("mlx5_0"), "{c}");

    // One unreadable counter (a directory where the file was): that port is
    // named, the failing one still is.
    let oos = root
        .join(CLASS)
        .join("mlx5_1/ports/1/hw_counters/out_of_sequence");
    std::fs::remove_file(&oos).unwrap();
    std::fs::create_dir(&oos).unwrap();
    let c = reconcile(&s);
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        message(&c).contains("mlx5_1/1 hw_counters/out_of_sequence: "),
        "{c}"
    );
}

#[test]
fn an_unreadable_counter_alone_is_unknown_for_its_port_only() {
    let t = tree();
    let root = t.path();
    let s = serve(root);
    let oos = root
        .join(CLASS)
        .join("mlx5_1/ports/1/hw_counters/out_of_sequence");
    std::fs::remove_file(&oos).unwrap();
    std::fs::create_dir(&oos).unwrap();
    set(
        root,
        &format!("{CLASS}/mlx5_0/ports/1/counters/symbol_error"),
        "20\n",
    );
    let c = reconcile(&s);
    assert_eq!(c["status"], "unknown", "{c}");
    assert_eq!(c["reason"], "counters_unreadable", "{c}");
    // The readable port is still judged and named.
    assert!(
        message(&c).contains("mlx5_0/1 symbol_errors: 20 in the last 1h"),
        "{c}"
    );
}

/// Soft-RoCE as the kernel recorded it (tests/fixtures/nodes/rxe): its
/// hw_counters' retransmission names are rated, the rest kept; no `counters/`.
#[test]
fn the_recorded_rxe_counters_are_read_by_their_kernel_names() {
    let t = node("rxe");
    let c = check_in(
        &json(&agent(t.path(), &["check", "--json"])),
        "rdma.counters",
    );
    assert_eq!(c["status"], "skipped", "{c}");
    let port = &c["details"]["ports"][0];
    assert_eq!(port["port"], "rxe0/1", "{c}");
    let rated: Vec<&str> = port["rated"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        rated,
        [
            "hw_counters/completer_retry_err",
            "hw_counters/out_of_seq_request",
            "hw_counters/rcvd_seq_err",
            "hw_counters/retry_exceeded_err",
            "hw_counters/retry_rnr_exceeded_err"
        ],
        "{c}"
    );
    assert!(port["other"]["hw_counters/sent_pkts"].is_u64(), "{c}");
    assert!(port["other"].get("hw_counters/lifespan").is_none(), "{c}");
    assert_eq!(port["unreadable"], serde_json::json!([]), "{c}");
}
