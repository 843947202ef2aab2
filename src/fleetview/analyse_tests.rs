use std::time::Duration;

use super::*;

/// A sample of node `n` (its `node` label; the instance differs on purpose).
fn s(n: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    let mut m: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    m.insert("instance".into(), format!("10.0.0.{}:9470", n.len()));
    m.insert("node".into(), n.into());
    Sample { labels: m, value }
}

fn settings() -> Settings {
    Settings {
        node_label: "node".into(),
        flap_threshold: 3.0,
        flap_window: Duration::from_secs(3600),
    }
}

/// `nodes` healthy nodes n1..: ready, one device of board B with firmware 1.0,
/// two ACTIVE 200G InfiniBand ports on fabric f1 with port MTU 4096, the same
/// settings, the kubelet advertising 2 RDMA devices.
fn fleet(nodes: usize) -> Input {
    let mut i = Input::default();
    for k in 1..=nodes {
        let n = &format!("n{k}");
        i.ready.push(s(n, &[], 1.0));
        i.status
            .push(s(n, &[("check", "rdma.devices"), ("status", "ok")], 1.0));
        i.devices.push(s(
            n,
            &[("device", "mlx5_0"), ("board_id", "B"), ("fw_ver", "1.0")],
            1.0,
        ));
        for p in ["1", "2"] {
            let port = [
                ("device", "mlx5_0"),
                ("port", p),
                ("link_layer", "InfiniBand"),
            ];
            i.port_active.push(s(n, &port, 1.0));
            i.port_rate.push(s(n, &port, 25e9));
            let mut info = port.to_vec();
            info.extend([("fabric", "f1"), ("port_mtu", "4096"), ("netdev_mtu", "")]);
            i.port_info.push(s(n, &info, 1.0));
            i.flaps
                .push(s(n, &[("device", "mlx5_0"), ("port", p)], 0.0));
        }
        i.node_info.push(s(
            n,
            &[
                ("netns_mode", "shared"),
                ("memlock_target", "unlimited"),
                ("gpu_driver", "580.1"),
                ("kernel", "6.1"),
            ],
            1.0,
        ));
        i.kubelet
            .push(s(n, &[("resource", "rdma/hca"), ("rdma", "true")], 2.0));
        i.kubelet.push(s(
            n,
            &[("resource", "nvidia.com/gpu"), ("rdma", "false")],
            8.0,
        ));
    }
    i
}

/// Sets a label of node `n`'s samples in one vector.
fn set(v: &mut [Sample], n: &str, label: &str, value: &str) {
    for x in v.iter_mut().filter(|x| x.labels["node"] == n) {
        x.labels.insert(label.into(), value.into());
    }
}

#[test]
fn a_healthy_fleet_has_no_problem() {
    let r = analyse(&fleet(5), &settings());
    assert_eq!((r.nodes, r.ready), (5, 5));
    assert!(r.problem_nodes.is_empty(), "{r:#?}");
    assert_eq!(r.exit_code(), super::super::EXIT_FINE);
}

#[test]
fn not_ready_nodes_are_grouped_by_the_reasons_of_their_failing_checks() {
    let mut i = fleet(6);
    for (n, check, status, reason) in [
        ("n2", "rdma.devices", "fail", "port_down"),
        ("n3", "rdma.devices", "fail", "port_down"),
        ("n3", "containerd.memlock", "unknown", "cri_disabled"),
        // A warn check of a not-ready node is not why it is not ready.
        ("n3", "pods.memlock", "warn", "memlock_below_target"),
        // A ready node's warning is shown apart, and is no problem.
        ("n4", "pods.memlock", "warn", "memlock_below_target"),
    ] {
        i.status
            .push(s(n, &[("check", check), ("status", status)], 1.0));
        i.reasons
            .push(s(n, &[("check", check), ("reason", reason)], 1.0));
    }
    // Not ready, and no reason exported (an older agent): unspecified, with its failing check.
    i.status.push(s(
        "n5",
        &[("check", "kernel.dkms"), ("status", "fail")],
        1.0,
    ));
    for n in ["n2", "n3", "n5"] {
        i.ready
            .iter_mut()
            .find(|x| x.labels["node"] == n)
            .unwrap()
            .value = 0.0;
    }
    let r = analyse(&i, &settings());
    assert_eq!((r.nodes, r.ready), (6, 3));
    let groups: Vec<(&str, Vec<&str>, Vec<&str>)> = r
        .not_ready
        .iter()
        .map(|g| {
            assert_eq!(g.count, g.nodes.len());
            (
                g.reason.as_str(),
                g.checks.iter().map(String::as_str).collect(),
                g.nodes.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("port_down", vec!["rdma.devices"], vec!["n2", "n3"]),
            ("cri_disabled", vec!["containerd.memlock"], vec!["n3"]),
            ("unspecified", vec!["kernel.dkms"], vec!["n5"]),
        ]
    );
    assert_eq!(r.warnings.len(), 1);
    assert_eq!(r.warnings[0].nodes, ["n4"]);
    assert_eq!(r.problem_nodes, ["n2", "n3", "n5"]);
    assert_eq!(r.exit_code(), super::super::EXIT_PROBLEM);
}

#[test]
fn a_node_without_status_series_gives_all_its_reasons_and_the_instance_names_it_without_the_label()
{
    let mut i = Input::default();
    let mut x = s("ignored", &[], 0.0);
    x.labels.remove("node");
    i.ready.push(x.clone());
    let mut reason = x.clone();
    reason.labels.extend([
        ("check".into(), "kernel.dkms".into()),
        (
            "reason".into(),
            "dkms_not_installed_for_pending_kernel".into(),
        ),
    ]);
    reason.value = 1.0;
    i.reasons.push(reason);
    let r = analyse(&i, &settings());
    assert_eq!(
        r.not_ready[0].reason,
        "dkms_not_installed_for_pending_kernel"
    );
    assert_eq!(r.not_ready[0].nodes, ["10.0.0.7:9470"]);
}

#[test]
fn nodes_seen_in_the_window_but_not_now_are_not_reporting() {
    let mut i = fleet(3);
    i.gone.push(s("n9", &[], 1.0));
    // Gone under one job, present under another: it reports.
    i.gone.push(s("n1", &[], 1.0));
    let r = analyse(&i, &settings());
    assert_eq!(r.not_reporting, ["n9"]);
    assert_eq!(r.problem_nodes, ["n9"]);
}

#[test]
fn a_firmware_minority_is_named_per_board_id_and_a_tie_flags_nobody() {
    let mut i = fleet(5);
    set(&mut i.devices, "n4", "fw_ver", "0.9");
    // Another board id, alone with its version: it is its own cohort's majority.
    set(&mut i.devices, "n5", "board_id", "C");
    set(&mut i.devices, "n5", "fw_ver", "2.0");
    let r = analyse(&i, &settings());
    assert_eq!(r.firmware_minority.len(), 1, "{:#?}", r.firmware_minority);
    let o = &r.firmware_minority[0];
    assert_eq!(
        (o.node.as_str(), o.fw_ver.as_str(), o.board_id.as_str()),
        ("n4", "0.9", "B")
    );
    assert_eq!(o.majority, ["1.0"]);

    let mut tie = fleet(4);
    set(&mut tie.devices, "n1", "fw_ver", "0.9");
    set(&mut tie.devices, "n2", "fw_ver", "0.9");
    assert!(analyse(&tie, &settings()).firmware_minority.is_empty());
}

#[test]
fn a_port_below_its_cohort_median_is_named_and_a_down_port_is_not_compared() {
    let mut i = fleet(4);
    i.port_rate[2].value = 12.5e9; // n2 port 1 at 100G
    // n3's port 1 is DOWN at a low rate: port_down's business, not a slow port.
    i.port_active[4].value = 0.0;
    i.port_rate[4].value = 1.0e9;
    // RoCE ports of the same board are another cohort.
    set(&mut i.port_rate, "n4", "link_layer", "Ethernet");
    i.port_rate[6].value = 12.5e9;
    i.port_rate[7].value = 12.5e9;
    let r = analyse(&i, &settings());
    let slow: Vec<(&str, &str, f64, f64)> = r
        .ports_below_cohort_rate
        .iter()
        .map(|p| (p.node.as_str(), p.port.as_str(), p.rate_gbps, p.cohort_gbps))
        .collect();
    assert_eq!(slow, [("n2", "1", 100.0, 200.0)]);
}

#[test]
fn mtus_are_compared_within_a_fabric_only_on_active_ports() {
    let mut i = fleet(4);
    i.port_info[2]
        .labels
        .insert("port_mtu".into(), "2048".into()); // n2 port 1
    // n3 is on another fabric with its own MTU; n4 has no fabric label.
    set(&mut i.port_info, "n3", "fabric", "f2");
    set(&mut i.port_info, "n3", "port_mtu", "1024");
    set(&mut i.port_info, "n4", "fabric", "");
    set(&mut i.port_info, "n4", "port_mtu", "256");
    // A RoCE netdev MTU differs on n1 within f1.
    set(&mut i.port_info, "n1", "netdev_mtu", "1500");
    i.port_info[1]
        .labels
        .insert("netdev_mtu".into(), "9000".into());
    i.port_info[2]
        .labels
        .insert("netdev_mtu".into(), "9000".into());
    i.port_info[3]
        .labels
        .insert("netdev_mtu".into(), "9000".into());
    let r = analyse(&i, &settings());
    let got: Vec<(&str, &str, &str, &str, &str)> = r
        .mtu_mismatch
        .iter()
        .map(|o| {
            (
                o.node.as_str(),
                o.port.as_str(),
                o.fabric.as_str(),
                o.which.as_str(),
                o.mtu.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("n1", "1", "f1", "netdev_mtu", "1500"),
            ("n2", "1", "f1", "port_mtu", "2048"),
        ],
        "{:#?}",
        r.mtu_mismatch
    );
    // A DOWN port's MTU is not compared.
    i.port_active[2].value = 0.0;
    let r = analyse(&i, &settings());
    assert!(
        !r.mtu_mismatch.iter().any(|o| o.which == "port_mtu"),
        "{r:#?}"
    );
}

#[test]
fn settings_differing_from_the_fleet_majority_are_named_and_unknown_ones_are_not() {
    let mut i = fleet(5);
    set(&mut i.node_info, "n2", "netns_mode", "exclusive");
    set(&mut i.node_info, "n3", "memlock_target", "64KiB");
    set(&mut i.node_info, "n4", "gpu_driver", "");
    set(&mut i.node_info, "n5", "kernel", "6.12");
    let r = analyse(&i, &settings());
    let got: Vec<(&str, &str, &str)> = r
        .setting_minority
        .iter()
        .map(|o| (o.node.as_str(), o.setting.as_str(), o.value.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("n2", "netns_mode", "exclusive"),
            ("n3", "memlock_target", "64KiB")
        ]
    );
    assert_eq!(r.setting_minority[0].majority, ["shared"]);
}

#[test]
fn a_kubelet_advertising_no_rdma_device_while_ports_are_up_is_named() {
    let mut i = fleet(5);
    // n1: resource registered with 0 healthy devices; n2: no RDMA resource at all.
    i.kubelet[0].value = 0.0;
    i.kubelet
        .retain(|x| !(x.labels["node"] == "n2" && x.labels["rdma"] == "true"));
    // n3: the same, but no ACTIVE port: nothing to advertise.
    i.kubelet[4].value = 0.0;
    for x in i
        .port_active
        .iter_mut()
        .filter(|x| x.labels["node"] == "n3")
    {
        x.value = 0.0;
    }
    // n4: no kubelet on the node (no checkpoint, no series): not judged.
    i.kubelet.retain(|x| x.labels["node"] != "n4");
    // n5: no checkpoint either, but the agent knows the kubelet (by its socket) and says so.
    i.kubelet.retain(|x| x.labels["node"] != "n5");
    i.reasons.push(s(
        "n5",
        &[
            ("check", "kubelet.devices"),
            ("reason", "kubelet_resources_zero"),
        ],
        1.0,
    ));
    let r = analyse(&i, &settings());
    let got: Vec<(&str, usize)> = r
        .kubelet_rdma_zero
        .iter()
        .map(|k| (k.node.as_str(), k.active_ports))
        .collect();
    assert_eq!(got, [("n1", 2), ("n2", 2), ("n5", 2)]);
}

#[test]
fn ports_flapping_more_than_the_threshold_in_the_window_are_named_with_their_last_flap() {
    let mut i = fleet(3);
    i.flaps[0].value = 3.1; // above, however little
    i.flaps[1].value = 3.0; // not more than the threshold
    i.flaps[4].value = 40.2;
    i.last_flap.push(s(
        "n1",
        &[("device", "mlx5_0"), ("port", "1")],
        1_700_000_000.0,
    ));
    let r = analyse(&i, &settings());
    let got: Vec<(&str, &str, f64, Option<f64>)> = r
        .link_flapping
        .iter()
        .map(|f| {
            (
                f.node.as_str(),
                f.port.as_str(),
                f.flaps,
                f.last_flap_timestamp_seconds,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("n1", "1", 3.1, Some(1_700_000_000.0)),
            ("n3", "1", 40.2, None)
        ]
    );
}

#[test]
fn a_node_scraped_twice_counts_once_at_its_worst() {
    let mut i = fleet(2);
    let mut again = s("n1", &[], 0.0);
    again.labels.insert("job".into(), "other".into());
    i.ready.push(again);
    let r = analyse(&i, &settings());
    assert_eq!((r.nodes, r.ready), (2, 1));
    assert_eq!(r.not_ready[0].reason, "unspecified");
    assert_eq!(r.problem_nodes, ["n1"]);
}
