//! The bundled sample nodes (`scripts/sample.sh`, the README's first command,
//! shows v100): nothing in them is `unknown` because a file is missing from the
//! sample.

mod support;

use support::*;

fn report(name: &str) -> serde_json::Value {
    let t = node(name);
    let o = agent(t.path(), &["check", "--json"]);
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn the_gpu_node_samples_have_no_unknown_check() {
    for name in ["a100", "roce", "sriov"] {
        let v = report(name);
        let unknown: Vec<&serde_json::Value> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["status"] == "unknown")
            .collect();
        assert!(unknown.is_empty(), "{name}: {unknown:#?}");
        assert_eq!(check_in(&v, "kernel.modules")["status"], "ok", "{name}");
    }
}

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
