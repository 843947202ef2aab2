//! Shared helpers for the integration tests: fixture trees copied into temp dirs,
//! the real binary run against them, and whole-tree snapshots for "nothing changed".

#![allow(dead_code)] // each test binary uses its own subset

pub mod abuse;
pub mod agents;
pub mod artefacts;
pub mod containerd;
pub mod cri;
pub mod fleet;
pub mod fleet_replay;
pub mod http_get;
pub mod nri_daemon;
pub mod nspawn;
pub mod pcie;
pub mod peers;
pub mod prometheus;
pub mod serve;
pub mod service;
pub mod sysfs;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Copies a directory tree, keeping symbolic links as links (sysfs fixtures need them).
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let ty = e.file_type().unwrap();
        if ty.is_symlink() {
            symlink(fs::read_link(e.path()).unwrap(), &target).unwrap();
        } else if ty.is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A private copy of `tests/fixtures/nodes/<name>`.
pub fn node(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("nodes").join(name), t.path());
    t
}

pub fn agent(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// One check of a `check --json` report, by id; panics naming the report when absent.
pub fn check_in(report: &serde_json::Value, id: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|x| x["id"] == id))
        .unwrap_or_else(|| panic!("no {id} check in: {report}"))
        .clone()
}

/// The agent's own state and runtime dirs: not host files it manages.
const AGENT_DIRS: &[&str] = &["var/lib/rdma-node-agent", "run/rdma-node-agent"];

/// Every host file under a root with its bytes (links as their target), for
/// before/after comparisons. The agent's own state (journal, lock) is left out,
/// with the parents it had to create for it.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = snapshot_all(root);
    all.retain(|p, _| {
        !AGENT_DIRS
            .iter()
            .any(|d| p.starts_with(d) || (Path::new(d).starts_with(p) && is_only_agent(root, p)))
    });
    all
}

/// A directory that holds nothing but the agent's own dirs (so the agent created it).
fn is_only_agent(root: &Path, rel: &Path) -> bool {
    fs::read_dir(root.join(rel)).unwrap().all(|e| {
        let child = rel.join(e.unwrap().file_name());
        AGENT_DIRS.iter().any(|d| {
            Path::new(d) == child
                || (Path::new(d).starts_with(&child) && is_only_agent(root, &child))
        })
    })
}

fn snapshot_all(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_owned();
            let ty = e.file_type().unwrap();
            if ty.is_symlink() {
                out.insert(
                    rel,
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if ty.is_dir() {
                out.insert(rel.clone(), Vec::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

pub fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

pub fn read(root: &Path, path: &str) -> String {
    fs::read_to_string(root.join(path.trim_start_matches('/'))).unwrap()
}

/// True when the containerd binary is installed, so edits are validated by it.
/// With RDMA_AGENT_REQUIRE_CONTAINERD=1 (set by scripts/test.sh) its absence fails.
pub fn have_containerd() -> bool {
    let present = Command::new("containerd").arg("--version").output().is_ok();
    if !present && std::env::var_os("RDMA_AGENT_REQUIRE_CONTAINERD").is_some() {
        panic!("containerd is required (RDMA_AGENT_REQUIRE_CONTAINERD is set) but not installed");
    }
    present
}

/// A free loopback address for a daemon's health endpoint, so tests running in
/// parallel never share the default port (a tiny race with other binders is accepted).
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// A finished process's exit code (tests never see one killed by a signal).
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

/// `serve` on a tree; the text exposition of its first reconcile.
pub fn scrape_metrics(root: &Path) -> String {
    let d = serve::Serve::start(root);
    let start = Instant::now();
    loop {
        if let Some(m) = http_get::get(&d.addr, "/metrics") {
            return m;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no /metrics");
        std::thread::sleep(Duration::from_millis(20));
    }
}
