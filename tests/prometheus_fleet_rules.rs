//! The fleet rules (packaging/prometheus/rdma-node-agent-fleet-rules.yml) under
//! `promtool test rules` (Debian's prometheus package), on input series taken
//! from real scrapes of `serve` on the fleet trees (tests/support/fleet.rs):
//! healthy nodes and one node per fault. Every alert fires for exactly its
//! node, with its labels and annotations, and stays silent on a healthy fleet
//! and before its `for:` has passed. Written into the scraped series (the
//! agents ran once, not for an hour): a flapping port's counter rising once a
//! minute, and a stopped agent's series ending at 30 minutes.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::fleet::{Fault, plant, template};

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/prometheus/rdma-node-agent-fleet-rules.yml")
}

type Labels = Vec<(String, String)>;

/// `name{a="x",b="y"} 1` → (name, labels, value).
fn parse(line: &str) -> (String, Labels, String) {
    let (series, value) = line.rsplit_once(' ').unwrap();
    let Some((name, rest)) = series.split_once('{') else {
        return (series.to_owned(), Vec::new(), value.to_owned());
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}').unwrap();
    while let Some((k, after)) = rest.split_once("=\"") {
        // The agent's label values hold no quote or backslash.
        let (v, after) = after.split_once('"').unwrap();
        labels.push((k.to_owned(), v.to_owned()));
        rest = after.strip_prefix(',').unwrap_or(after);
    }
    (name.to_owned(), labels, value.to_owned())
}

struct Node {
    name: String,
    fault: Fault,
    samples: Vec<(String, Labels, String)>,
}

impl Node {
    fn target(&self) -> Labels {
        vec![
            ("job".into(), "rdma-node-agent".into()),
            ("instance".into(), format!("{}:9470", self.name)),
            ("node".into(), self.name.clone()),
        ]
    }

    /// The labels (target's included) of this node's sample of `metric` with `with` labels.
    fn labels(&self, metric: &str, with: &[(&str, &str)]) -> Labels {
        let (_, l, _) = self
            .samples
            .iter()
            .find(|(n, l, _)| {
                n == metric
                    && with
                        .iter()
                        .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
            })
            .unwrap_or_else(|| panic!("{}: no {metric} {with:?}", self.name));
        let mut out = self.target();
        out.extend(l.iter().cloned());
        out
    }
}

/// Each fault's tree, planted and served once.
fn nodes(faults: &[(&str, Fault)]) -> Vec<Node> {
    let dir = tempfile::tempdir().unwrap();
    let tpl = dir.path().join("template");
    template(&tpl);
    std::thread::scope(|s| {
        let handles: Vec<_> = faults
            .iter()
            .map(|(name, fault)| {
                let root = dir.path().join(name);
                support::copy_tree(&tpl, &root);
                plant(&root, *fault);
                s.spawn(move || support::scrape_metrics(&root))
            })
            .collect();
        faults
            .iter()
            .zip(handles)
            .map(|((name, fault), h)| Node {
                name: (*name).to_owned(),
                fault: *fault,
                samples: h
                    .join()
                    .unwrap()
                    .lines()
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(parse)
                    .collect(),
            })
            .collect()
    })
}

fn input(nodes: &[Node]) -> Vec<Value> {
    let mut out = Vec::new();
    for n in nodes {
        for (name, labels, value) in &n.samples {
            let mut all = n.target();
            all.extend(labels.iter().cloned());
            let text: Vec<String> = all.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            let flapping = n.fault == Fault::Flapping
                && name == "rdma_node_agent_port_flaps_total"
                && labels.contains(&("device".into(), "mlx5_0".into()));
            let erring = n.fault == Fault::PortErrors
                && name == "rdma_node_agent_port_errors_total"
                && labels.contains(&("class".into(), "symbol_errors".into()));
            let values = match n.fault {
                Fault::Gone => format!("{value}x30"),
                _ if flapping => "0+1x70".to_owned(),
                // Two symbol errors a minute.
                _ if erring => format!("{value}+2x70"),
                _ => format!("{value}+0x70"),
            };
            out.push(json!({"series": format!("{name}{{{}}}", text.join(",")), "values": values}));
        }
    }
    out
}

/// The rules file as JSON (Debian's python3-yaml reads it).
fn rules() -> Value {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(rules_file())
        .output()
        .expect("/usr/bin/python3 with python3-yaml: run scripts/test.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The alert as promtool must see it: the series' labels and the rule's, and
/// its annotations filled as Prometheus fills them.
fn alert(doc: &Value, name: &str, labels: Labels, value: &str) -> Value {
    let rule = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("no alert {name}"));
    // Prometheus drops a label whose value is empty.
    let mut l: BTreeMap<String, String> =
        labels.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    l.insert(
        "severity".into(),
        rule["labels"]["severity"].as_str().unwrap().into(),
    );
    let mut ann = serde_json::Map::new();
    for (k, v) in rule["annotations"].as_object().unwrap() {
        let mut s = v
            .as_str()
            .unwrap()
            .replace("{{ $value | printf \"%.0f\" }}", value);
        for (name, value) in &l {
            s = s.replace(&format!("{{{{ $labels.{name} }}}}"), value);
        }
        ann.insert(k.clone(), Value::String(s));
    }
    json!({"exp_labels": l, "exp_annotations": ann})
}

fn promtool_test(tests: Value) {
    support::prometheus::promtool_test(&rules_file(), tests);
}

const ALERTS: [&str; 11] = [
    "RDMANotReadyReason",
    "RDMANodeNotReporting",
    "RDMAFirmwareMinority",
    "RDMAPortBelowCohortRate",
    "RDMAMtuMismatch",
    "RDMANetnsModeMismatch",
    "RDMAMemlockTargetMismatch",
    "RDMAGpuDriverMismatch",
    "RDMAKubeletResourcesZero",
    "RDMALinkFlapping",
    "RDMAPortErrorsRising",
];

#[test]
fn every_fleet_alert_fires_for_its_node_only_and_stays_silent_on_a_healthy_fleet() {
    let doc = rules();
    let defined: Vec<&str> = doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(defined, ALERTS, "an alert without a test here");

    let healthy = [
        ("h1", Fault::Healthy),
        ("h2", Fault::Healthy),
        ("h3", Fault::Healthy),
        ("h4", Fault::Healthy),
    ];
    let mut planted = healthy.to_vec();
    planted.extend([
        ("down", Fault::PortDown),
        ("fw", Fault::Firmware),
        ("mtu", Fault::Mtu),
        ("slow", Fault::SlowPort),
        ("netns", Fault::Netns),
        ("memlock", Fault::Memlock),
        ("gpu", Fault::GpuDriver),
        ("kubelet", Fault::KubeletZero),
        ("flap", Fault::Flapping),
        ("gone", Fault::Gone),
        ("errs", Fault::PortErrors),
    ]);
    let fleet = nodes(&planted);
    let by = |f: Fault| fleet.iter().find(|n| n.fault == f).unwrap();
    let slow = {
        let n = by(Fault::SlowPort);
        let mut l = n.labels(
            "rdma_node_agent_port_rate_bytes_per_second",
            &[("device", "mlx5_1")],
        );
        let board = n.labels("rdma_node_agent_device_info", &[("device", "mlx5_1")]);
        l.extend(board.into_iter().filter(|(k, _)| k == "board_id"));
        l
    };
    let expected: [(&str, Labels, &str); 11] = [
        (
            "RDMANotReadyReason",
            by(Fault::PortDown).labels("rdma_node_agent_check_reason", &[("reason", "port_down")]),
            "",
        ),
        ("RDMANodeNotReporting", by(Fault::Gone).target(), ""),
        (
            "RDMAFirmwareMinority",
            by(Fault::Firmware).labels("rdma_node_agent_device_info", &[("device", "mlx5_0")]),
            "",
        ),
        ("RDMAPortBelowCohortRate", slow, ""),
        (
            "RDMAMtuMismatch",
            by(Fault::Mtu).labels("rdma_node_agent_port_info", &[("device", "mlx5_0")]),
            "",
        ),
        (
            "RDMANetnsModeMismatch",
            by(Fault::Netns).labels("rdma_node_agent_node_info", &[]),
            "",
        ),
        (
            "RDMAMemlockTargetMismatch",
            by(Fault::Memlock).labels("rdma_node_agent_node_info", &[]),
            "",
        ),
        (
            "RDMAGpuDriverMismatch",
            by(Fault::GpuDriver).labels("rdma_node_agent_node_info", &[]),
            "",
        ),
        (
            "RDMAKubeletResourcesZero",
            by(Fault::KubeletZero).target(),
            "",
        ),
        // One flap a minute: 60 in the hour before 65m.
        (
            "RDMALinkFlapping",
            by(Fault::Flapping).labels("rdma_node_agent_port_flaps_total", &[("device", "mlx5_0")]),
            "60",
        ),
        // Two a minute: 120 in the hour before 65m, above 10 since 10m.
        (
            "RDMAPortErrorsRising",
            by(Fault::PortErrors).labels(
                "rdma_node_agent_port_errors_total",
                &[("device", "mlx5_0"), ("class", "symbol_errors")],
            ),
            "120",
        ),
    ];
    let at = "65m";
    let mut fires: Vec<Value> = expected
        .into_iter()
        .map(|(name, labels, value)| {
            let mut l = labels;
            l.push(("alertname".into(), name.into()));
            json!({"eval_time": at, "alertname": name, "exp_alerts": [alert(&doc, name, l, value)]})
        })
        .collect();
    // Not before `for:` has passed (1h for a firmware minority, 15m for errors).
    fires.push(json!({"eval_time": "30m", "alertname": "RDMAFirmwareMinority", "exp_alerts": []}));
    fires.push(json!({"eval_time": "12m", "alertname": "RDMAPortErrorsRising", "exp_alerts": []}));
    let calm = nodes(&healthy);
    let silent: Vec<Value> = ALERTS
        .iter()
        .map(|a| json!({"eval_time": at, "alertname": a, "exp_alerts": []}))
        .collect();
    // A class's series appears only once it counted something: its first
    // value is within the window's rise (5 at 0m, then 2 a minute: 9 at 2m).
    let rise = {
        let l = by(Fault::PortErrors).labels(
            "rdma_node_agent_port_errors_total",
            &[("device", "mlx5_0"), ("class", "symbol_errors")],
        );
        let text: Vec<String> = l.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("rdma:port_errors:rise1h{{{}}}", text.join(","))
    };
    let exprs = json!([
        {"expr": "rdma:port_errors:rise1h", "eval_time": "2m", "exp_samples": [{"labels": rise, "value": 9}]},
        {"expr": "rdma:port_errors:rise1h", "eval_time": "65m", "exp_samples": [{"labels": rise, "value": 120}]},
    ]);
    promtool_test(json!([
        {"interval": "1m", "input_series": input(&fleet), "alert_rule_test": fires, "promql_expr_test": exprs},
        {"interval": "1m", "input_series": input(&calm), "alert_rule_test": silent},
    ]));
}

#[test]
fn the_fleet_rules_use_only_exported_metrics() {
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules_file())
        .output()
        .expect("promtool");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let t = tempfile::tempdir().unwrap();
    template(t.path());
    plant(t.path(), Fault::Flapping);
    let metrics = support::scrape_metrics(t.path());
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    for name in rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("rdma_node_agent_"))
    {
        assert!(
            metrics.contains(&format!("# TYPE {name} ")),
            "a fleet rule uses {name}, which /metrics does not export"
        );
    }
}

/// Every `expr` of the Grafana dashboard parses as PromQL (promtool checks it as
/// a recording rule's); tests/fleet.rs runs each on a real Prometheus.
#[test]
fn the_dashboard_is_json_and_promtool_parses_its_every_expression() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/grafana/rdma-node-agent-fleet.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .expect("the dashboard is JSON");
    let all = support::fleet::dashboard_exprs(&dash);
    assert!(all.len() >= 14, "{all:?}");
    let rules: Vec<Value> = all
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("dashboard:expr{i}"), "expr": e}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.yml");
    std::fs::write(
        &file,
        json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string(),
    )
    .unwrap();
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Every recorded series it reads is one the fleet rules record.
    let recorded = std::fs::read_to_string(rules_file()).unwrap();
    for e in &all {
        for name in e
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .filter(|w| w.starts_with("rdma:"))
        {
            assert!(
                recorded.contains(&format!("record: {name}\n")),
                "the dashboard reads {name}, which no fleet rule records"
            );
        }
    }
}
