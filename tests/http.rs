//! The health endpoint of `serve` on fixture trees, through the real binary:
//! status codes and bodies, read-only methods, metrics that a real Prometheus
//! parser accepts, `status` equal to `check`, and probes that stay fast while
//! 1000 idle connections and a slow client hold the server.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::serve::Serve;
use support::*;

/// A plain HTTP/1.1 request; returns the status code and the body.
fn request(addr: &str, method: &str, path: &str) -> (u16, String) {
    let (code, _, body) = request_with(addr, method, path, "");
    (code, body)
}

/// A request with extra header lines; returns the code, the headers and the body.
fn request_with(addr: &str, method: &str, path: &str, headers: &str) -> (u16, String, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new(), String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (code, head.to_owned(), body.to_owned())
}

fn get(addr: &str, path: &str) -> (u16, String) {
    request(addr, "GET", path)
}

#[test]
fn endpoints_answer_from_the_last_reconcile() {
    let t = node("v100");
    let d = Serve::start(t.path());

    assert_eq!(get(&d.addr, "/healthz"), (200, "ok\n".into()));

    // The fixture's containerd predates the files the daemon just wrote.
    let (code, body) = get(&d.addr, "/readyz");
    assert_eq!(code, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], false);
    assert_eq!(v["failing"][0]["id"], "containerd.memlock");
    assert!(
        v["failing"][0]["message"]
            .as_str()
            .unwrap()
            .contains("restart pending")
    );

    let (code, body) = get(&d.addr, "/status");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["mode"], "enforce");
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"containerd.memlock") && ids.contains(&"pods.memlock"),
        "{ids:?}"
    );

    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        assert_eq!(request(&d.addr, method, "/readyz").0, 405, "{method}");
    }
    assert_eq!(get(&d.addr, "/nope").0, 404);
}

/// Parses with Debian's python3-prometheus-client; returns "families samples".
fn python_parse(parser: &str, text: &str) -> String {
    let parse = format!(
        "import sys\nfrom {parser} import text_string_to_metric_families as p\n\
         fams = list(p(sys.stdin.read()))\nprint(len(fams), sum(len(f.samples) for f in fams))\n"
    );
    let mut py = Command::new("/usr/bin/python3")
        .args(["-c", &parse])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 with python3-prometheus-client is needed: run scripts/test.sh");
    py.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{parser} rejected the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn metrics_pass_a_real_prometheus_parser_in_both_formats() {
    let t = node("v100");
    let d = Serve::start(t.path());
    // Text 0.0.4 by default and for text/plain; OpenMetrics only when asked.
    let (code, head, text) = request_with(&d.addr, "GET", "/metrics", "");
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let (_, head_plain, plain) = request_with(&d.addr, "GET", "/metrics", "Accept: text/plain\r\n");
    assert!(head_plain.contains("version=0.0.4"), "{head_plain}");
    assert!(!plain.contains("# EOF"));
    let (_, head_om, om) = request_with(
        &d.addr,
        "GET",
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    assert!(
        head_om.contains("application/openmetrics-text; version=1.0.0"),
        "{head_om}"
    );
    assert!(om.ends_with("# EOF\n"));

    let a = python_parse("prometheus_client.parser", &text);
    let b = python_parse("prometheus_client.openmetrics.parser", &om);
    println!("parsed families and samples: text {a}, OpenMetrics {b}");
    assert_eq!(a, b, "both formats carry the same families and samples");
    assert!(
        text.contains(
            "rdma_node_agent_check_status{check=\"containerd.memlock\",status=\"fail\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("rdma_node_agent_ready 0"));
    assert!(text.contains("# HELP rdma_node_agent_reconciles_total "));
    assert!(text.contains("rdma_node_agent_reconciles_total "));
}

#[test]
fn status_prints_the_same_checks_as_check() {
    let t = node("v100");
    let d = Serve::start(t.path());
    let root = t.path();
    let status = agent(root, &["status", "--listen", &d.addr]);
    let check = agent(root, &["check"]);
    assert_eq!(status.status.code(), check.status.code());
    assert_eq!(stdout(&status), stdout(&check));
    drop(d);
    let o = agent(root, &["status", "--listen", "127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no rdma-node-agent daemon answers at 127.0.0.1:1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn idle_connections_and_a_slow_client_do_not_delay_probes() {
    // 1000 connections need more descriptors than the default soft limit.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        hard.min(8192),
        hard,
    )
    .unwrap();
    let t = node("v100");
    let d = Serve::start(t.path());

    let mut idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&d.addr).unwrap())
        .collect();
    // A slowloris: a request line, then a header byte now and then.
    let mut slow = TcpStream::connect(&d.addr).unwrap();
    slow.write_all(b"GET /readyz HTTP/1.1\r\nX-Slow: ").unwrap();
    let mut worst = Duration::ZERO;
    let mut total = Duration::ZERO;
    for _ in 0..50 {
        let _ = slow.write_all(b"a");
        let start = Instant::now();
        let (code, _) = get(&d.addr, "/readyz");
        let took = start.elapsed();
        assert_eq!(code, 503);
        worst = worst.max(took);
        total += took;
    }
    println!(
        "/readyz with 1000 idle connections and a slow client: mean {:?}, worst {:?}",
        total / 50,
        worst
    );
    // The target is 10 ms (checked by the benchmark script); this bound only
    // catches a probe that waits behind the idle connections.
    assert!(worst < Duration::from_millis(500), "worst {worst:?}");
    idle.clear();
}

#[test]
fn a100_with_its_down_port_expected_is_not_ready_and_metrics_show_ports() {
    let t = node("a100");
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[[rdma.expect_port]]\ndevice = \"mlx5_0\"\nport = 1\n\n[[rdma.expect_port]]\ndevice = \"mlx5_1\"\nport = 1\nmin_rate_gbps = 200\n",
    );
    let d = Serve::start(t.path());
    let (code, body) = get(&d.addr, "/readyz");
    assert_eq!(code, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let failing: Vec<&serde_json::Value> = v["failing"].as_array().unwrap().iter().collect();
    let devices = failing
        .iter()
        .find(|c| c["id"] == "rdma.devices")
        .expect("rdma.devices fails");
    assert!(
        devices["message"].as_str().unwrap().contains("mlx5_0/1"),
        "{devices}"
    );

    let (_, text) = get(&d.addr, "/metrics");
    assert!(
        text.contains(
            "rdma_node_agent_port_active{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} 0"
        ),
        "{text}"
    );
    assert!(text.contains(
        "rdma_node_agent_port_active{device=\"mlx5_1\",port=\"1\",link_layer=\"InfiniBand\"} 1"
    ));
    assert!(text.contains("rdma_node_agent_port_rate_bytes_per_second{device=\"mlx5_1\",port=\"1\",link_layer=\"InfiniBand\"} 25000000000\n"));
    assert!(text.contains("rdma_node_agent_netns_mode{mode=\"shared\"} 1"));
    assert!(text.contains("rdma_node_agent_reboot_required 0"));
}

/// README: `/readyz` is 200 when no check fails or is unknown; warn and
/// skipped are ready, and `ready` in /metrics says the same.
#[test]
fn readyz_counts_warn_and_skipped_as_ready() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("sysfs/procfs"), t.path());
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        // rdma.counters off: its first reconcile has no rate yet (skipped),
        // a later one does (ok), and /readyz may answer between them.
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n[kernel]\nenabled = false\n[counters]\nenabled = false\n",
    );
    // One port down beside ACTIVE ones: a warning.
    write(
        t.path(),
        "/sys/class/infiniband/mlx4_0/ports/2/state",
        "1: DOWN\n",
    );
    let d = Serve::start(t.path());
    let (code, body) = get(&d.addr, "/readyz");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["summary"], "RDMA host ready: 1 warn, 3 ok, 14 skipped");
    assert_eq!(v["failing"], serde_json::json!([]));
    assert!(
        get(&d.addr, "/metrics")
            .1
            .contains("\nrdma_node_agent_ready 1\n")
    );
}
