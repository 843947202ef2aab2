//! What `fleet --json` must say about the 200 nodes of tests/fleet.rs: exactly
//! the planted nodes, under the planted reasons.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::support::fleet::Fault;
use super::{NODES, planted};

/// The `--json` report names exactly the planted nodes, under the planted reasons.
pub fn check(r: &Value) {
    let names = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| {
                x.as_str()
                    .map_or_else(|| x["node"].as_str().unwrap().to_owned(), str::to_owned)
            })
            .collect()
    };
    let groups = |v: &Value| -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["reason"].as_str().unwrap().to_owned(),
                    (names(&g["checks"]), names(&g["nodes"])),
                )
            })
            .collect()
    };
    let checks = |c: &[&str]| c.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(r["nodes"], NODES - 1, "{r:#}");
    assert_eq!(
        r["ready"],
        NODES - 1 - planted(&[Fault::PortDown]).len(),
        "{r:#}"
    );
    assert_eq!(
        groups(&r["not_ready"]),
        BTreeMap::from([(
            "port_down".to_owned(),
            (checks(&["rdma.devices"]), planted(&[Fault::PortDown]))
        )]),
        "{r:#}"
    );
    assert_eq!(
        groups(&r["warnings"]),
        BTreeMap::from([
            (
                "cri_disabled".to_owned(),
                (
                    checks(&["containerd.memlock"]),
                    // The mixed node is not ready: its warnings are not listed apart.
                    planted(&[Fault::CriDisabled])
                        .into_iter()
                        .filter(|n| !planted(&[Fault::PortDown]).contains(n))
                        .collect()
                )
            ),
            (
                "kubelet_resources_zero".to_owned(),
                (checks(&["kubelet.devices"]), planted(&[Fault::KubeletZero]))
            ),
            (
                "link_flapping".to_owned(),
                (checks(&["rdma.link"]), planted(&[Fault::Flapping]))
            ),
        ]),
        "{r:#}"
    );
    assert_eq!(names(&r["not_reporting"]), planted(&[Fault::Gone]));
    let outliers = |key: &str, want: &[Fault], field: &str, value: &str| {
        let v = r[key].as_array().unwrap();
        assert_eq!(names(&r[key]), planted(want), "{key}: {v:#?}");
        assert!(
            v.iter()
                .all(|o| o[field].to_string().trim_matches('"') == value),
            "{key}: {v:#?}"
        );
    };
    outliers(
        "firmware_minority",
        &[Fault::Firmware],
        "fw_ver",
        "12.27.1016",
    );
    outliers(
        "ports_below_cohort_rate",
        &[Fault::SlowPort],
        "rate_gbps",
        "56.0",
    );
    outliers("mtu_mismatch", &[Fault::Mtu], "mtu", "4092");
    let settings: BTreeSet<(String, String, String)> = r["setting_minority"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let f = |k: &str| o[k].as_str().unwrap().to_owned();
            (f("node"), f("setting"), f("value"))
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        (Fault::Netns, "netns_mode", "exclusive"),
        (Fault::Memlock, "memlock_target", "64GiB"),
        (Fault::GpuDriver, "gpu_driver", "570.86.15"),
    ]
    .into_iter()
    .flat_map(|(f, k, v)| {
        planted(&[f])
            .into_iter()
            .map(move |n| (n, k.to_owned(), v.to_owned()))
    })
    .collect();
    assert_eq!(settings, want);
    outliers(
        "kubelet_rdma_zero",
        &[Fault::KubeletZero],
        "active_ports",
        "2",
    );
    outliers("link_flapping", &[Fault::Flapping], "device", "mlx5_0");
    // Exactly the four flaps made, not an extrapolation of them.
    outliers("link_flapping", &[Fault::Flapping], "flaps", "4.0");
    let all: BTreeSet<String> = planted(&[
        Fault::PortDown,
        Fault::Firmware,
        Fault::Mtu,
        Fault::SlowPort,
        Fault::Flapping,
        Fault::Netns,
        Fault::Memlock,
        Fault::GpuDriver,
        Fault::KubeletZero,
        Fault::Gone,
    ]);
    assert_eq!(names(&r["problem_nodes"]), all, "{r:#}");
}
