//! A fleet's /metrics, as scraped from its agents at one moment (one
//! `<node>.prom` file per node, e.g. saved by the QEMU fabric tier), served
//! again to a real Prometheus (Debian's package) with the shipped fleet and
//! peer rules loaded, and `rdma-node-agent fleet --json` asked about it: the
//! operator's path (agents → Prometheus → rules, alerts, `fleet`) on what real
//! agents said, without the agents still running.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::prometheus::{Credentials, Prometheus};

/// What the fleet's Prometheus and `fleet` made of one moment.
pub struct Replay {
    /// `fleet --json`'s whole report.
    pub fleet: Value,
    /// `fleet`'s exit code (0 fine, 1 a node is not, 2 could not ask).
    pub code: i32,
    /// Alerts firing (their `for:` cut to 0 s), each with the `node` or `peer`
    /// labels it names.
    pub alerts: BTreeMap<String, BTreeSet<String>>,
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// A rule file with every `for:` cut to 0 s, so alerts fire within the test
/// (their durations are promtool's to test).
pub fn rules_now(path: &str) -> String {
    std::fs::read_to_string(repo(path))
        .unwrap()
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for:") {
            Some(_) => format!("{}for: 0s", &l[..l.len() - l.trim_start().len()]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Serves `/<node>/metrics` from `bodies` on loopback until dropped.
struct Exposition {
    addr: String,
    stop: Arc<AtomicBool>,
}

impl Exposition {
    fn start(bodies: BTreeMap<String, String>) -> Exposition {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut s) = conn else { continue };
                let mut line = String::new();
                let mut r = BufReader::new(s.try_clone().unwrap());
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                // The rest of the request head: read to its blank line.
                let mut h = String::new();
                while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("");
                let node = path
                    .strip_prefix('/')
                    .and_then(|p| p.strip_suffix("/metrics"));
                let answer = match node.and_then(|n| bodies.get(n)) {
                    Some(b) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                        b.len()
                    ),
                    None => {
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_owned()
                    }
                };
                let _ = s.write_all(answer.as_bytes());
            }
        });
        Exposition { addr, stop }
    }
}

impl Drop for Exposition {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(&self.addr);
    }
}

/// Replays the `<node>.prom` files of `moment` through a real Prometheus
/// (its data under `work`) and asks `fleet`.
pub fn replay(moment: &Path, work: &Path) -> Replay {
    let mut bodies = BTreeMap::new();
    for e in std::fs::read_dir(moment).unwrap_or_else(|e| panic!("{}: {e}", moment.display())) {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "prom") {
            let node = p.file_stem().unwrap().to_string_lossy().into_owned();
            bodies.insert(node, std::fs::read_to_string(&p).unwrap());
        }
    }
    assert!(!bodies.is_empty(), "no <node>.prom in {}", moment.display());
    let nodes: Vec<String> = bodies.keys().cloned().collect();
    let served = Exposition::start(bodies);

    std::fs::create_dir_all(work).unwrap();
    let creds = Credentials::new(work);
    for (file, path) in [
        (
            "fleet-rules.yml",
            "packaging/prometheus/rdma-node-agent-fleet-rules.yml",
        ),
        (
            "peers-rules.yml",
            "packaging/prometheus/rdma-node-agent-peers-rules.yml",
        ),
    ] {
        std::fs::write(work.join(file), rules_now(path)).unwrap();
    }
    // One job per node (its own metrics path), labelled as docs/fleet.md
    // tells an operator to relabel: `node`.
    let mut config = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files: [fleet-rules.yml, peers-rules.yml]\nscrape_configs:\n",
    );
    for n in &nodes {
        config.push_str(&format!(
            "  - job_name: {n}\n    metrics_path: /{n}/metrics\n    static_configs:\n      - targets: ['{}']\n        labels: {{node: {n}}}\n",
            served.addr
        ));
    }
    let prom = Prometheus::start(work, &config, &creds);
    let start = Instant::now();
    // Every node scraped, then three rule evaluations on top.
    while prom.scalar("count(up == 1)") as usize != nodes.len() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus did not scrape every node: {}",
            std::fs::read_to_string(work.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(4));

    let o = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .args(["fleet", "--prometheus", &prom.url, "--json"])
        .args([
            "--basic-auth-user",
            &creds.user,
            "--basic-auth-password-file",
        ])
        .arg(&creds.password_file)
        .arg("--ca-file")
        .arg(&creds.ca)
        .output()
        .unwrap();
    let fleet: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "fleet --json: {e}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let mut alerts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in prom.api("/api/v1/alerts")["alerts"].as_array().unwrap() {
        if a["state"] == "firing" {
            let l = &a["labels"];
            let who = l["node"].as_str().or(l["peer"].as_str()).unwrap_or("?");
            let rail = l["peer_rail"].as_str().or(l["rail"].as_str());
            alerts
                .entry(l["alertname"].as_str().unwrap().into())
                .or_default()
                .insert(match rail {
                    Some(r) if l["node"].is_null() => format!("{who}/{r}"),
                    _ => who.to_owned(),
                });
        }
    }
    Replay {
        fleet,
        code: o.status.code().unwrap_or(-1),
        alerts,
    }
}
