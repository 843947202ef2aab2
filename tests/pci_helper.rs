//! The PCI config helper through the real binary (`rdma-node-agent --root T
//! pci-config …`, as systemd runs it for the daemon under the unit, there on
//! `/`) and what `check` says when it is not there to help: on the 8-GPU
//! two-level-switch tree (`support::pcie::hgx_tree`, built here, not read from
//! a machine) cut to the 64 bytes a process without CAP_SYS_ADMIN reads, as
//! a process with the unit's capability set did on a real H100 cloud host
//! (recorded 2026-11-27: "config bytes as root: 4096, with the unit's
//! capability set: 64").

mod support;

use std::fs;
use std::path::Path;

use support::*;

fn config(root: &Path, bdf: &str) -> std::path::PathBuf {
    root.join("sys/bus/pci/devices").join(bdf).join("config")
}

/// Every bridge's config cut as the unit's daemon reads it.
fn cut_to_64(root: &Path) {
    for d in fs::read_dir(root.join("sys/bus/pci/devices")).unwrap() {
        let p = d.unwrap().path().join("config");
        let c = fs::read(&p).unwrap();
        if c[0x0e] & 0x7f == 1 {
            fs::write(&p, &c[..64]).unwrap();
        }
    }
}

#[test]
fn a_64_byte_view_is_unknown_and_names_the_cause_never_ok() {
    let t = tempfile::tempdir().unwrap();
    pcie::hgx_tree(t.path());
    let o = agent(t.path(), &["check", "--json", "--only", "gpudirect.path"]);
    assert_eq!(check_in(&json(&o), "gpudirect.path")["status"], "ok");
    cut_to_64(t.path());
    let o = agent(t.path(), &["check", "--json", "--only", "gpudirect.path"]);
    let c = check_in(&json(&o), "gpudirect.path");
    assert_eq!(c["status"], "unknown", "{c}");
    assert_eq!(c["reason"], "fact_unreadable", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("config space truncated to 64 bytes: the process lacks CAP_SYS_ADMIN"),
        "{c}"
    );
    assert_eq!(code(&o), 2, "{}", stdout(&o));
}

#[test]
fn a_bridge_reading_all_ones_is_unknown() {
    let t = tempfile::tempdir().unwrap();
    pcie::hgx_tree(t.path());
    // A switch port on GPU 0000:05:00.0's path to mlx5_0.
    fs::write(config(t.path(), "0000:04:00.0"), vec![0xff; 4096]).unwrap();
    let c = check_in(
        &json(&agent(
            t.path(),
            &["check", "--json", "--only", "gpudirect.path"],
        )),
        "gpudirect.path",
    );
    assert_eq!(c["status"], "unknown", "{c}");
    assert!(
        c["message"].as_str().unwrap().contains(
            "0000:04:00.0 unknown: its config space reads all ones (0xffffffff at 0x000)"
        ),
        "{c}"
    );
}

#[test]
fn the_helper_reads_bridges_whole_and_writes_only_where_told() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    pcie::hgx_tree(root);
    let whole = fs::read(config(root, "0000:00:01.0")).unwrap();
    let o = agent(
        root,
        &[
            "pci-config",
            "read",
            "--token",
            "c0ffee",
            "0000:00:01.0",
            "0000:05:00.0",
        ],
    );
    // 0000:05:00.0 is a GPU, not a bridge: refused, and the run says so.
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let answer: serde_json::Value = serde_json::from_slice(
        &fs::read(root.join("run/rdma-node-agent/pci-config/c0ffee.json")).unwrap(),
    )
    .unwrap();
    let hex: String = whole.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(answer["functions"]["0000:00:01.0"]["Ok"], hex.as_str());
    assert!(
        answer["functions"]["0000:05:00.0"]["Err"]
            .as_str()
            .unwrap()
            .contains("not a PCI bridge"),
        "{answer}"
    );
    // The root port's ACSCtl is 0x001d at 0x148 (+6); the identity the check read.
    let write = |device: &str, expect: &str| {
        agent(
            root,
            &[
                "pci-config",
                "write-acs",
                "--token",
                "beef",
                "0000:00:01.0",
                "--vendor=0x8086",
                &format!("--device={device}"),
                "--class=0x060400",
                "--port-type=4",
                "--offset=0x148",
                &format!("--expect={expect}"),
                "--value=0x0000",
            ],
        )
    };
    for (device, expect, why) in [
        ("0x352b", "0x001d", "another device at that address"),
        ("0x352a", "0x0005", "ACSCtl changed since"),
    ] {
        let o = write(device, expect);
        assert_eq!(code(&o), 1, "{why}: {}", stderr(&o));
        assert_eq!(
            fs::read(config(root, "0000:00:01.0")).unwrap(),
            whole,
            "{why}"
        );
    }
    let o = write("0x352a", "0x001d");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let after = fs::read(config(root, "0000:00:01.0")).unwrap();
    let differ: Vec<usize> = (0..4096).filter(|i| whole[*i] != after[*i]).collect();
    assert_eq!(differ, [0x14e], "only ACSCtl's low byte held bits");
}
