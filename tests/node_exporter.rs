//! Side by side with node_exporter: Debian's prometheus-node-exporter, with
//! only its infiniband collector, reads the same sysfs trees as the agent, and
//! every field both report must agree: devices, ports, state and physical
//! state, rate in bytes per second, firmware, HCA type and board id. The one
//! field where they differ by design is named and asserted: a phys_state text
//! no kernel prints, which node_exporter reads by its number and the agent
//! reports as unknown.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdma_node_agent::host::inventory::port::{PhysState, PortState};
use serde_json::Value;
use support::*;

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_get(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    // HTTP/1.0: node_exporter would answer a 1.1 request in chunks.
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    (b.starts_with("HTTP/1.0 200") || b.starts_with("HTTP/1.1 200"))
        .then(|| b.split_once("\r\n\r\n").unwrap().1.to_owned())
}

/// node_exporter's samples of `node_infiniband_*`: name → labels → value.
type Samples = BTreeMap<String, BTreeMap<BTreeMap<String, String>, f64>>;

fn node_exporter(root: &Path) -> Option<Samples> {
    let addr = free_addr();
    let log = tempfile::NamedTempFile::new().unwrap();
    let _e = Exporter(
        Command::new("prometheus-node-exporter")
            .arg(format!("--path.sysfs={}", root.join("sys").display()))
            .args(["--collector.disable-defaults", "--collector.infiniband"])
            .arg("--log.level=debug")
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("prometheus-node-exporter (Debian's package): run scripts/test.sh"),
    );
    let start = Instant::now();
    let text = loop {
        if let Some(t) = http_get(&addr) {
            break t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "node_exporter did not answer"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    if text.contains("node_scrape_collector_success{collector=\"infiniband\"} 0") {
        eprintln!(
            "node_exporter on {}: {}",
            root.display(),
            std::fs::read_to_string(log.path()).unwrap_or_default()
        );
        return None;
    }
    assert!(
        text.contains("node_scrape_collector_success{collector=\"infiniband\"} 1"),
        "node_exporter's collector did not run on {}:\n{text}",
        root.display()
    );
    let mut out = Samples::new();
    for line in text.lines().filter(|l| l.starts_with("node_infiniband_")) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = series.split_once('{').unwrap();
        let labels = labels
            .trim_end_matches('}')
            .split("\",")
            .map(|kv| {
                let (k, v) = kv.split_once("=\"").unwrap();
                (k.to_owned(), v.trim_end_matches('"').to_owned())
            })
            .collect();
        out.entry(name.to_owned())
            .or_default()
            .insert(labels, value.parse().unwrap());
    }
    Some(out)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The agent's inventory and its /metrics port rates, read from a copy of the
/// tree (serve converges what it finds: never on a checked-in fixture).
fn agent_view(tree: &Path) -> (Vec<Value>, String) {
    let copy = tempfile::tempdir().unwrap();
    copy_tree(tree, copy.path());
    let root = copy.path();
    let o = agent(root, &["check", "--json", "--only", "rdma.devices"]);
    let devices = json(&o)["checks"][0]["details"]["devices"]
        .as_array()
        .unwrap()
        .clone();
    let agent = support::serve::Serve::start(root);
    let start = Instant::now();
    let metrics = loop {
        if let Some(t) = support::http_get::get(&agent.addr, "/metrics") {
            break t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "agent did not answer"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (devices, metrics)
}

fn id_of(names: &[&str], name: &str) -> f64 {
    names.iter().position(|n| *n == name).unwrap() as f64
}

/// Compares every field; returns how many were compared.
fn compare(root: &Path) -> usize {
    let ne = node_exporter(root).expect("node_exporter's infiniband collector succeeds");
    let (devices, metrics) = agent_view(root);
    let mut compared = 0;
    let info = &ne["node_infiniband_info"];
    assert_eq!(
        info.len(),
        devices.len(),
        "device count on {}",
        root.display()
    );
    for d in &devices {
        let name = d["name"].as_str().unwrap();
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        let key = labels(&[
            ("board_id", &text(&d["board_id"])),
            ("device", name),
            ("firmware_version", &text(&d["fw_ver"])),
            ("hca_type", &text(&d["hca_type"])),
        ]);
        assert!(
            info.contains_key(&key),
            "{name}: node_exporter has {info:?}, agent {key:?}"
        );
        compared += 3;
        for p in d["ports"].as_array().unwrap() {
            let port = p["port"].to_string();
            let at = labels(&[("device", name), ("port", &port)]);
            let state = ne["node_infiniband_state_id"][&at];
            assert_eq!(
                id_of(&PortState::NAMES, p["state"].as_str().unwrap()),
                state,
                "{name}/{port} state"
            );
            match p["phys_state"].as_str() {
                Some(s) => {
                    assert_eq!(
                        id_of(&PhysState::NAMES, s),
                        ne["node_infiniband_physical_state_id"][&at],
                        "{name}/{port} phys_state"
                    );
                    compared += 1;
                }
                None => {
                    // The recorded "4: ACTIVE": node_exporter trusts the number.
                    assert_eq!(ne["node_infiniband_physical_state_id"][&at], 4.0);
                    let file = std::fs::read_to_string(root.join(format!(
                        "sys/class/infiniband/{name}/ports/{port}/phys_state"
                    )))
                    .unwrap();
                    assert_eq!(
                        file, "4: ACTIVE\n",
                        "the only phys_state the agent may not read"
                    );
                }
            }
            let rate = ne["node_infiniband_rate_bytes_per_second"][&at];
            let ours = format!(
                "rdma_node_agent_port_rate_bytes_per_second{{device=\"{name}\",port=\"{port}\",link_layer=\"{}\"}} {}\n",
                p["link_layer"].as_str().unwrap(),
                rate as u64
            );
            assert!(
                metrics.contains(&ours),
                "{name}/{port}: node_exporter rate {rate}, agent:\n{metrics}"
            );
            compared += 2;
        }
    }
    let ports: usize = devices
        .iter()
        .map(|d| d["ports"].as_array().unwrap().len())
        .sum();
    assert_eq!(ne["node_infiniband_state_id"].len(), ports);
    compared
}

#[test]
fn every_field_agrees_with_node_exporter() {
    // prometheus/procfs's real recordings, and a generated SR-IOV tree laid
    // out as mlx5 lays it out (links into /sys/devices, VFs, RoCE netdevs).
    let generated = tempfile::tempdir().unwrap();
    sysfs::sriov_tree(generated.path(), 2, 7);
    for (name, root) in [
        ("procfs", fixtures().join("sysfs/procfs")),
        ("generated 2 PF x 7 VF", generated.path().to_owned()),
    ] {
        let n = compare(&root);
        println!("{name}: {n} fields agree");
        assert!(n >= 20, "{name}: {n}");
    }
}

/// node_exporter 1.5 (procfs 0.8) drops every InfiniBand metric of the node
/// when one device has no board_id or a port has no counters/ directory
/// (Soft-RoCE's rxe has neither): the agent still inventories them. Shown on
/// the V100 sample node, whose ports have no counters/.
#[test]
fn ports_without_counters_are_invisible_to_node_exporter_not_to_the_agent() {
    let root = fixtures().join("nodes/v100");
    assert!(node_exporter(&root).is_none());
    let (devices, _) = agent_view(&root);
    assert_eq!(devices.len(), 2);
}
