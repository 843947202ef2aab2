//! The bundled sample node that `scripts/sample.sh` (the README's first command)
//! shows: nothing in it is `unknown` because a file is missing from the sample.

mod support;

use support::*;

#[test]
fn the_v100_sample_has_no_unknown_check() {
    let t = node("v100");
    let o = agent(t.path(), &["check", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let unknown: Vec<String> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "unknown")
        .map(|c| format!("{}: {}", c["id"], c["message"]))
        .collect();
    assert!(unknown.is_empty(), "{unknown:#?}");
    let c = check_in(&v, "kernel.modules");
    assert_eq!(
        c["message"],
        "ib_core, ib_uverbs, mlx5_core, mlx5_ib, rdma_ucm loaded, files match 6.1.0-49-amd64"
    );
}
