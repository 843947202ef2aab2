//! The node-problem-detector plugin config we ship, run the way NPD runs it: each
//! rule's command with the rule's timeout, its exit code read as OK (0),
//! NonOK (1) or Unknown (2), its output cut at max_output_length.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn npd_config() -> Value {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/npd/rdma-node-agent.json"),
    )
    .unwrap();
    serde_json::from_str(&text).expect("packaging/npd/rdma-node-agent.json is JSON")
}

fn seconds(s: &str) -> Duration {
    Duration::from_secs(
        s.trim_end_matches('s')
            .parse()
            .expect("a duration like 30s"),
    )
}

#[test]
fn every_check_has_a_rule_and_the_condition_is_declared() {
    let c = npd_config();
    assert_eq!(c["plugin"], "custom");
    let conditions: Vec<&str> = c["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["type"].as_str().unwrap())
        .collect();
    let rules = c["rules"].as_array().unwrap();
    for r in rules {
        if r["type"] == "permanent" {
            assert!(conditions.contains(&r["condition"].as_str().unwrap()));
        }
        assert_eq!(r["path"], "/usr/bin/rdma-node-agent");
    }
    let ruled: BTreeSet<String> = rules
        .iter()
        .filter_map(|r| {
            let args: Vec<&str> = r["args"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let i = args.iter().position(|a| *a == "--only")?;
            Some(args[i + 1].to_owned())
        })
        .collect();
    let t = node("v100");
    let report = json(&agent(t.path(), &["check", "--json"]));
    let checks: BTreeSet<String> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ruled, checks, "one NPD rule per check");
}

#[test]
fn rules_run_as_npd_runs_them() {
    let c = npd_config();
    let max = c["pluginConfig"]["max_output_length"].as_u64().unwrap() as usize;
    for fixture in ["v100", "a100", "kubespray"] {
        let t = node(fixture);
        for r in c["rules"].as_array().unwrap() {
            let args: Vec<&str> = r["args"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let limit = seconds(r["timeout"].as_str().unwrap());
            let start = Instant::now();
            let out = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
                .arg("--root")
                .arg(t.path())
                .args(&args)
                .output()
                .unwrap();
            let took = start.elapsed();
            assert!(took < limit, "{fixture} {args:?} took {took:?}");
            let code = out.status.code().unwrap();
            assert!((0..=2).contains(&code), "{fixture} {args:?}: exit {code}");
            let text = String::from_utf8_lossy(&out.stdout);
            let first = text.lines().next().unwrap_or_default();
            assert!(!first.is_empty(), "{fixture} {args:?}: no status line");
            assert!(
                first.chars().count() <= max,
                "{fixture} {args:?}: status line longer than NPD keeps: {first:?}"
            );
        }
    }
    let t = node("v100");
    let o = agent(t.path(), &["check", "--only", "no.such"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown check is NPD's Unknown"
    );
}
