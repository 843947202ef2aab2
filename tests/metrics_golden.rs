//! `/metrics` byte for byte on every sample node, as node_exporter keeps its
//! `e2e-output.txt`: the daemon (report mode, the first reconcile) on a copy of
//! each tree under tests/fixtures/nodes, its exposition compared with
//! tests/golden/metrics/<node>.prom. A refactor must leave these unchanged; a
//! new series is a reviewed change of the golden file
//! (`RDMA_AGENT_BLESS=1 cargo test --test metrics_golden` rewrites them).
//!
//! What moves from run to run is masked, and only that: the value of the
//! reconcile's duration, its timestamp, how many reconciles ran, and the
//! build's version.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::serve::Serve;
use support::*;

/// Families whose value is the run's, not the node's.
const MASKED: &[&str] = &[
    "rdma_node_agent_reconcile_duration_seconds",
    "rdma_node_agent_last_reconcile_timestamp_seconds",
    "rdma_node_agent_reconciles_total",
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/metrics")
}

fn nodes() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("nodes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mask(text: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    text.lines()
        .map(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            if !l.starts_with('#') && MASKED.contains(&name) {
                let (series, _) = l.rsplit_once(' ').unwrap();
                format!("{series} <run>")
            } else {
                l.replace(&format!("version=\"{version}\""), "version=\"<version>\"")
            }
        })
        .map(|l| l + "\n")
        .collect()
}

/// The exposition once the first reconcile is published.
fn metrics_of(node: &str) -> String {
    let t = self::node(node);
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[daemon]\ninterval_secs = 3600\n",
    );
    let s = Serve::start(root);
    let start = Instant::now();
    // Past the start's reconciles (the one that follows new watches): a check
    // that keeps a baseline (rdma.counters) says another thing on the second.
    let mut last = (String::new(), Instant::now());
    loop {
        let text = support::http_get::get(&s.addr, "/metrics").unwrap_or_default();
        let count = text
            .lines()
            .find(|l| l.starts_with("rdma_node_agent_reconciles_total "))
            .unwrap_or("")
            .to_owned();
        if count != last.0 {
            last = (count, Instant::now());
        } else if !count.ends_with(" 0")
            && !count.is_empty()
            && last.1.elapsed() > Duration::from_secs(2)
        {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{node}: no reconcile published"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_are_unchanged_on_every_sample_node() {
    let bless = std::env::var_os("RDMA_AGENT_BLESS").is_some();
    let mut differ = Vec::new();
    for node in nodes() {
        let got = mask(&metrics_of(&node));
        let path = golden_dir().join(format!("{node}.prom"));
        if bless {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (RDMA_AGENT_BLESS=1 writes it)", path.display()));
        if got != want {
            let diff: Vec<String> = diff_lines(&want, &got);
            differ.push(format!("{node} ({}):\n{}", path.display(), diff.join("\n")));
        }
    }
    assert!(
        differ.is_empty(),
        "/metrics changed (review, then RDMA_AGENT_BLESS=1 to accept):\n{}",
        differ.join("\n\n")
    );
}

/// Lines only in one side, marked `-` (golden) and `+` (now).
fn diff_lines(want: &str, got: &str) -> Vec<String> {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let mut out: Vec<String> = w
        .iter()
        .filter(|l| !g.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        g.iter()
            .filter(|l| !w.contains(l))
            .map(|l| format!("+ {l}")),
    );
    if out.is_empty() {
        out.push("  (same lines, another order)".into());
    }
    out
}

#[test]
fn the_mask_hides_only_the_run() {
    let text = "# HELP rdma_node_agent_reconciles_total x\nrdma_node_agent_reconciles_total 3\n\
                rdma_node_agent_ready 1\nrdma_node_agent_reconcile_duration_seconds 0.004\n";
    assert_eq!(
        mask(text),
        "# HELP rdma_node_agent_reconciles_total x\nrdma_node_agent_reconciles_total <run>\n\
         rdma_node_agent_ready 1\nrdma_node_agent_reconcile_duration_seconds <run>\n"
    );
}
