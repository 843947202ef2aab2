//! Every non-ok check result carries exactly one documented reason code, on
//! every sample node and fixture tree (as they are, and with their ports
//! taken down), through the real binary's `check --json`.

mod support;

use std::path::{Path, PathBuf};

use rdma_node_agent::reason::Reason;
use support::*;

/// Every tree `check` can run on: the sample nodes, the GPUDirect and sysfs
/// trees, the containerd layouts and the real-world containerd corpus.
fn trees() -> Vec<PathBuf> {
    let f = fixtures();
    let mut out = Vec::new();
    let dirs = |p: PathBuf| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        v.sort();
        v
    };
    out.extend(dirs(f.join("nodes")));
    out.extend(dirs(f.join("gpudirect")));
    out.extend(dirs(f.join("sysfs")));
    for d in dirs(f.join("layouts"))
        .into_iter()
        .chain(dirs(f.join("real-world")))
    {
        out.push(d.join("root"));
    }
    out
}

/// The checks of `check --json` that are neither ok nor skipped, each with
/// its reason (or what is wrong with it).
fn unexplained(root: &Path) -> (usize, Vec<String>) {
    unexplained_with(root, &["check", "--json"])
}

fn unexplained_with(root: &Path, args: &[&str]) -> (usize, Vec<String>) {
    let o = agent(root, args);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("{}: {e}: {}", root.display(), stderr(&o)));
    let mut non_ok = 0;
    let mut bad = Vec::new();
    for c in v["checks"].as_array().unwrap() {
        let status = c["status"].as_str().unwrap();
        let reason = &c["reason"];
        if matches!(status, "ok" | "skipped") {
            if !reason.is_null() {
                bad.push(format!("{} is {status} but has reason {reason}", c["id"]));
            }
            continue;
        }
        non_ok += 1;
        match serde_json::from_value::<Reason>(reason.clone()) {
            Ok(_) => {}
            Err(_) => bad.push(format!(
                "{} is {status} with reason {reason}: {}",
                c["id"], c["message"]
            )),
        }
    }
    (non_ok, bad)
}

#[test]
fn every_non_ok_check_on_every_fixture_tree_has_one_known_reason() {
    let mut bad = Vec::new();
    let mut non_ok = 0;
    let mut seen = 0;
    for tree in trees() {
        if !tree.is_dir() {
            continue;
        }
        seen += 1;
        let t = tempfile::tempdir().unwrap();
        copy_tree(&tree, t.path());
        let (n, b) = unexplained(t.path());
        non_ok += n;
        bad.extend(b.into_iter().map(|b| format!("{}: {b}", tree.display())));
        // The same tree with every RDMA port DOWN: the port reasons too.
        let class = t.path().join("sys/class/infiniband");
        let mut downed = 0;
        for dev in std::fs::read_dir(&class).into_iter().flatten().flatten() {
            let ports = dev.path().join("ports");
            for port in std::fs::read_dir(&ports).into_iter().flatten().flatten() {
                let state = port.path().join("state");
                if state.is_file() && std::fs::write(&state, "1: DOWN\n").is_ok() {
                    downed += 1;
                }
            }
        }
        if downed > 0 {
            let (n, b) = unexplained(t.path());
            non_ok += n;
            bad.extend(
                b.into_iter()
                    .map(|b| format!("{} (ports down): {b}", tree.display())),
            );
        }
    }
    eprintln!("{seen} trees, {non_ok} non-ok check results");
    assert!(seen >= 30, "only {seen} fixture trees found");
    // The trees hold real faults: the test judges something.
    assert!(non_ok >= 20, "only {non_ok} non-ok checks seen");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `containerd.nri` is skipped on every tree above (`memlock_via` defaults to
/// the base spec): with each NRI route, on every sample node (no NRI socket,
/// no daemon under `--root`), its non-ok results carry a reason too.
#[test]
fn containerd_nri_has_a_reason_on_every_route() {
    let mut bad = Vec::new();
    let mut non_ok = 0;
    let nodes: Vec<PathBuf> = std::fs::read_dir(fixtures().join("nodes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(!nodes.is_empty());
    for node in &nodes {
        for via in ["nri", "both"] {
            let t = tempfile::tempdir().unwrap();
            copy_tree(node, t.path());
            let config = t.path().join("etc/rdma-node-agent/config.toml");
            std::fs::create_dir_all(config.parent().unwrap()).unwrap();
            let old = std::fs::read_to_string(&config).unwrap_or_default();
            // The key goes into the file's [containerd] table, or a new one.
            let text = if old.contains("[containerd]\n") {
                old.replacen(
                    "[containerd]\n",
                    &format!("[containerd]\nmemlock_via = \"{via}\"\n"),
                    1,
                )
            } else {
                format!("[containerd]\nmemlock_via = \"{via}\"\n\n{old}")
            };
            std::fs::write(&config, text).unwrap();
            let (n, b) =
                unexplained_with(t.path(), &["check", "--only", "containerd.nri", "--json"]);
            assert!(
                n > 0,
                "{} memlock_via = {via}: containerd.nri was ok",
                node.display()
            );
            non_ok += n;
            bad.extend(
                b.into_iter()
                    .map(|b| format!("{} (memlock_via = {via}): {b}", node.display())),
            );
        }
    }
    eprintln!(
        "{} nodes, {non_ok} non-ok containerd.nri results",
        nodes.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
