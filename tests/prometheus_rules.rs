//! The exposition and the shipped alert rules against Prometheus' own tools
//! (Debian's `prometheus` package): `promtool check metrics` accepts what
//! `serve` exports, and `promtool test rules` runs the rules on series taken
//! from a real scrape: they fire on a down port, a failed check and a stale
//! report, and stay silent on a healthy node.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus/rdma-node-agent-rules.yml")
}

fn promtool(args: &[&str], stdin: &str) -> std::process::Output {
    let mut p = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package): run scripts/test.sh");
    p.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    p.wait_with_output().unwrap()
}

/// A healthy node: every check ok, warn or skipped, every port ACTIVE.
fn healthy() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("sysfs/procfs"), t.path());
    let phys = t
        .path()
        .join("sys/class/infiniband/mlx5_0/ports/1/phys_state");
    std::fs::write(phys, "5: LinkUp\n").unwrap();
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n[kernel]\nenabled = false\n",
    );
    t
}

/// The A100 node with its down port declared: rdma.devices fails, mlx5_0/1 is down.
fn broken() -> tempfile::TempDir {
    let t = node("a100");
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n[kernel]\nenabled = false\n\
         [[rdma.expect_port]]\ndevice = \"mlx5_0\"\nport = 1\n",
    );
    t
}

#[test]
fn promtool_check_metrics_is_clean() {
    for t in [healthy(), broken(), node("v100")] {
        let text = scrape_metrics(t.path());
        let o = promtool(&["check", "metrics"], &text);
        assert!(
            o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The scrape's samples as promtool input series of one instance, constant
/// over the test; the report's timestamp advances with time (a live agent) or
/// stays at 0 (a stuck one).
fn series(text: &str, instance: &str, stuck: bool) -> Vec<Value> {
    series_with(text, instance, stuck, &[])
}

/// `series`, with some samples' values replaced (`name` → value).
fn series_with(text: &str, instance: &str, stuck: bool, set: &[(&str, &str)]) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            let labels = format!("instance=\"{instance}\",job=\"rdma-node-agent\"");
            let series = match name.split_once('{') {
                Some((n, rest)) => format!("{n}{{{labels},{rest}"),
                None => format!("{name}{{{labels}}}"),
            };
            let value = set
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(value, |(_, v)| *v);
            let values = if name == "rdma_node_agent_last_reconcile_timestamp_seconds" {
                if stuck { "0+0x120" } else { "0+60x120" }.to_owned()
            } else {
                format!("{value}+0x120")
            };
            json!({"series": series, "values": values})
        })
        .collect()
}

/// The rule's annotations with `{{ $labels.x }}` filled in, as Prometheus does.
fn annotations(rule: &Value, labels: &[(&str, &str)]) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in rule["annotations"].as_object().unwrap() {
        let mut s = v.as_str().unwrap().to_owned();
        for (name, value) in labels {
            s = s.replace(&format!("{{{{ $labels.{name} }}}}"), value);
        }
        out.insert(k.clone(), Value::String(s));
    }
    Value::Object(out)
}

#[test]
fn promtool_test_rules_fire_on_trouble_and_stay_silent_when_healthy() {
    // Debian's python3-yaml reads the rules (to fill the expected annotations).
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
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rule = |alert: &str| {
        doc["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"] == alert)
            .unwrap_or_else(|| panic!("no rule {alert}"))
            .clone()
    };
    let (ok, bad) = (healthy(), broken());
    let mut input = series(&scrape_metrics(ok.path()), "ok-node", false);
    input.extend(series(&scrape_metrics(bad.path()), "bad-node", false));
    input.extend(series(&scrape_metrics(ok.path()), "stuck-node", true));
    // A healthy node whose next kernel lacks its DKMS install (the one value changed).
    input.extend(series_with(
        &scrape_metrics(ok.path()),
        "held-node",
        false,
        &[("rdma_node_agent_reboot_held_back", "1")],
    ));
    // pcie.aer's counters (series only for functions with errors): a fatal
    // one, correctable errors rising 10 a minute, and a few that do not rise.
    // The alert's own `severity` label replaces the series' (its error class).
    let aer = |function: &str, severity: &str, values: &str| json!({"series": format!("rdma_node_agent_pcie_aer_errors_total{{instance=\"aer-node\",job=\"rdma-node-agent\",function=\"{function}\",severity=\"{severity}\"}}"), "values": values});
    input.push(aer("0000:05:00.0", "fatal", "1+0x120"));
    input.push(aer("0000:03:00.0", "correctable", "0+10x120"));
    input.push(aer("0000:00:10.0", "correctable", "7+0x120"));
    input.push(aer("0000:00:10.0", "fatal", "0+0x120"));

    let alert = |name: &str, extra: &[(&str, &str)]| {
        let r = rule(name);
        let mut labels: Vec<(&str, &str)> = vec![("job", "rdma-node-agent")];
        labels.extend_from_slice(extra);
        labels.push(("alertname", name));
        labels.push(("severity", r["labels"]["severity"].as_str().unwrap()));
        let map: serde_json::Map<String, Value> = labels
            .iter()
            .filter(|(k, _)| *k != "alertname")
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect();
        json!({"exp_labels": map, "exp_annotations": annotations(&r, &labels)})
    };
    let at = "60m";
    let tests = json!([{
        "interval": "1m",
        "input_series": input,
        "alert_rule_test": [
            {"eval_time": at, "alertname": "RDMAPortNotActive", "exp_alerts": [
                alert("RDMAPortNotActive", &[("instance", "bad-node"), ("device", "mlx5_0"), ("port", "1"), ("link_layer", "InfiniBand")]),
            ]},
            {"eval_time": at, "alertname": "RDMACheckFailing", "exp_alerts": [
                alert("RDMACheckFailing", &[("instance", "bad-node"), ("check", "rdma.devices"), ("status", "fail")]),
            ]},
            {"eval_time": at, "alertname": "RDMAHostNotReady", "exp_alerts": [
                alert("RDMAHostNotReady", &[("instance", "bad-node")]),
            ]},
            {"eval_time": at, "alertname": "RDMANodeAgentStale", "exp_alerts": [
                alert("RDMANodeAgentStale", &[("instance", "stuck-node")]),
            ]},
            // Nothing fires before the rules' `for:` has passed.
            {"eval_time": "4m", "alertname": "RDMACheckFailing", "exp_alerts": []},
            {"eval_time": at, "alertname": "RDMANodeRebootHeldBack", "exp_alerts": [
                alert("RDMANodeRebootHeldBack", &[("instance", "held-node")]),
            ]},
            {"eval_time": at, "alertname": "RDMANodeRebootRequired", "exp_alerts": []},
            {"eval_time": at, "alertname": "RDMANodeAgentReconcileErrors", "exp_alerts": []},
            {"eval_time": at, "alertname": "PCIeAERFatalError", "exp_alerts": [
                alert("PCIeAERFatalError", &[("instance", "aer-node"), ("function", "0000:05:00.0")]),
            ]},
            {"eval_time": at, "alertname": "PCIeAERCorrectableRising", "exp_alerts": [
                alert("PCIeAERCorrectableRising", &[("instance", "aer-node"), ("function", "0000:03:00.0")]),
            ]},
        ],
    }]);
    support::prometheus::promtool_test(&rules_file(), tests);
}

#[test]
fn rules_use_only_exported_metrics() {
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules_file())
        .output()
        .expect("promtool");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let metrics = scrape_metrics(node("v100").path());
    let mut alerts = 0;
    for line in rules
        .lines()
        .filter(|l| l.trim_start().starts_with("expr:"))
    {
        alerts += 1;
        for name in line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("rdma_node_agent_"))
        {
            assert!(
                metrics.contains(&format!("# TYPE {name} ")),
                "a rule uses {name}, which /metrics does not export"
            );
        }
    }
    assert!(alerts >= 7);
}
