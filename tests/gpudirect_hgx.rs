//! The 8-GPU, 8-NIC two-level-switch tree the bench measures
//! (`support::pcie::hgx_tree`, built here, not read from a machine): every GPU
//! pairs with the NIC on its level-2 switch, ready, and rdma.devices sees the
//! same eight NICs.

mod support;

use support::*;

#[test]
fn the_bench_tree_has_eight_ready_pix_pairs() {
    let t = tempfile::tempdir().unwrap();
    support::pcie::hgx_tree(t.path());
    let v = json(&agent(
        t.path(),
        &[
            "check",
            "--json",
            "--only",
            "rdma.devices",
            "--only",
            "gpudirect.path",
        ],
    ));
    let c = check_in(&v, "gpudirect.path");
    assert_eq!(c["status"], "ok", "{c}");
    let pairs = c["details"]["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 8, "{c}");
    for (i, p) in pairs.iter().enumerate() {
        assert_eq!(p["distance"], "PIX", "{p}");
        assert_eq!(p["nic"], format!("mlx5_{i}"), "{p}");
        assert_eq!(p["ready"], true, "{p}");
    }
    let r = check_in(&v, "rdma.devices");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .starts_with("8 RDMA device(s), 8/8 port(s) ACTIVE; 8 NVIDIA GPU(s)"),
        "{r}"
    );
}
