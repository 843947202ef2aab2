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

/// The lines `check` prints under gpudirect.path, one per GPU↔NIC pair.
fn pair_lines(name: &str) -> Vec<String> {
    let t = node(name);
    let text = stdout(&agent(t.path(), &["check", "--only", "gpudirect.path"]));
    text.lines()
        .filter(|l| l.trim_start().starts_with("GPU "))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The V100 sample's PCIe tree (DGX-1-like, see its PROVENANCE): two GPUs and
/// mlx5_0 on one PLX switch (PIX), ACS left on two of its ports as NVIDIA/nccl#304
/// found on PLX switches, and two GPUs on the other socket whose nearest NICs are
/// across the socket interconnect (SYS).
#[test]
fn the_v100_sample_shows_each_pair_with_its_path() {
    assert_eq!(
        pair_lines("v100"),
        [
            "GPU 0000:06:00.0 ↔ mlx5_0 (0000:05:00.0): PIX via 0000:04:08.0 → 0000:03:00.0 → 0000:04:00.0; mechanism none; IOMMU off; not ready: acs_redirect, no_mechanism",
            "GPU 0000:07:00.0 ↔ mlx5_0 (0000:05:00.0): PIX via 0000:04:10.0 → 0000:03:00.0 → 0000:04:00.0; mechanism none; IOMMU off; not ready: acs_redirect, no_mechanism",
            "GPU 0000:85:00.0 ↔ mlx5_0 (0000:05:00.0): SYS via 0000:84:08.0 → 0000:83:00.0 → 0000:80:02.0 → 0000:00:02.0 → 0000:03:00.0 → 0000:04:00.0; mechanism none; IOMMU off; not ready: acs_redirect, distance, no_mechanism",
            "GPU 0000:85:00.0 ↔ mlx5_1 (0000:08:00.0): SYS via 0000:84:08.0 → 0000:83:00.0 → 0000:80:02.0 → 0000:00:03.0; mechanism none; IOMMU off; not ready: distance, no_mechanism",
            "GPU 0000:86:00.0 ↔ mlx5_0 (0000:05:00.0): SYS via 0000:84:10.0 → 0000:83:00.0 → 0000:80:02.0 → 0000:00:02.0 → 0000:03:00.0 → 0000:04:00.0; mechanism none; IOMMU off; not ready: acs_redirect, distance, no_mechanism",
            "GPU 0000:86:00.0 ↔ mlx5_1 (0000:08:00.0): SYS via 0000:84:10.0 → 0000:83:00.0 → 0000:80:02.0 → 0000:00:03.0; mechanism none; IOMMU off; not ready: distance, no_mechanism",
        ]
    );
}

/// The A100 sample (DGX A100-like): GPU and mlx5_0 PXB through two levels of
/// PEX88096 switches with ACS off, and the root ports' ACS (on, as the firmware
/// leaves it) not on that path; a GPU on the other socket is SYS from every NIC.
#[test]
fn the_a100_sample_shows_each_pair_with_its_path() {
    let lines = pair_lines("a100");
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(
        lines[0],
        "GPU 0000:07:00.0 ↔ mlx5_0 (0000:0c:00.0): PXB via 0000:04:10.0 → 0000:03:00.0 → 0000:02:00.0 → 0000:01:00.0 → 0000:02:04.0 → 0000:0a:00.0 → 0000:0b:00.0; mechanism none; IOMMU off; not ready: no_mechanism"
    );
    for (l, nic) in lines[1..].iter().zip(["mlx5_0", "mlx5_1", "mlx5_bond_0"]) {
        assert!(
            l.starts_with(&format!("GPU 0000:b7:00.0 ↔ {nic} "))
                && l.contains(": SYS via 0000:b4:10.0 → ")
                && l.ends_with("not ready: acs_redirect, distance, no_mechanism"),
            "{l}"
        );
    }
}
