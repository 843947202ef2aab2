//! The shipped alert rules parse as YAML and refer only to metrics the agent
//! really exports (checked against a live /metrics of `serve`).

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[test]
fn rules_use_only_exported_metrics() {
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/prometheus/rdma-node-agent-rules.yml");
    // Debian's python3-yaml (installed by scripts/test.sh) turns the YAML into JSON.
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(&rules)
        .output()
        .expect("/usr/bin/python3 with python3-yaml: run scripts/test.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let t = node("v100");
    let addr = free_addr();
    let mut d = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(t.path())
        .args(["serve", "--listen", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let metrics = loop {
        let got = std::net::TcpStream::connect(&addr).ok().and_then(|mut s| {
            use std::io::{Read, Write};
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .ok()?;
            let mut b = String::new();
            s.read_to_string(&mut b).ok()?;
            b.starts_with("HTTP/1.1 200").then_some(b)
        });
        if let Some(m) = got {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no /metrics");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = d.kill();
    let _ = d.wait();

    let mut alerts = 0;
    for group in doc["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            alerts += 1;
            let expr = rule["expr"].as_str().unwrap();
            assert!(rule["alert"].is_string() && rule["annotations"]["summary"].is_string());
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("rdma_node_agent_"))
            {
                assert!(
                    metrics.contains(&format!("\n{name}"))
                        || metrics.contains(&format!("\n{name}{{")),
                    "rule {} uses {name}, which /metrics does not export",
                    rule["alert"]
                );
            }
        }
    }
    assert!(alerts >= 4);
}
