//! The peer-probe rules (packaging/prometheus/rdma-node-agent-peers-rules.yml)
//! under `promtool test rules`, on synthetic fleets (hand-written series in the
//! shape `rdma.peers`'s metrics give: `rdma_node_agent_peer_probe_ok` per
//! probing port and probed peer): each node probes the next three on a ring,
//! as the prober's rotation does over rounds. One bad node is the culprit and
//! its probers are not; a bad rail is the rail's, not its nodes'; a healthy
//! fleet is silent.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/prometheus/rdma-node-agent-peers-rules.yml")
}

/// Input series for `nodes` × `rails`, k = 3, `ok(from, to, rail)` per probe.
fn fleet(nodes: usize, rails: usize, ok: impl Fn(usize, usize, usize) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    for r in 0..rails {
        for n in 0..nodes {
            for d in 1..=3 {
                let to = (n + d) % nodes;
                let good = ok(n, to, r);
                out.push(json!({
                    "series": format!(
                        "rdma_node_agent_peer_probe_ok{{job=\"rdma-node-agent\",instance=\"n{n}:9470\",node=\"n{n}\",device=\"mlx5_{r}\",port=\"1\",rail=\"{r}\",peer=\"n{to}\",peer_rail=\"{r}\",stage=\"{}\"}}",
                        if good { "done" } else { "connect" }
                    ),
                    "values": format!("{}+0x20", u8::from(good)),
                }));
            }
        }
    }
    out
}

fn culprit(peer: &str, rail: &str) -> Value {
    json!({
        "exp_labels": {"alertname": "RDMAPeerCulprit", "peer": peer, "peer_rail": rail, "severity": "warning"},
        "exp_annotations": {
            "summary": format!("{peer} (rail {rail}) is not reached by its RDMA peers"),
            "description": format!("3 in 4 or more of the peer probes to {peer} on rail {rail} fail, from several peers: the fault is that node's port, link or switch port (its own rdma.peers names the reason). The peers that failed to reach it are not at fault."),
        },
    })
}

#[test]
fn a_bad_node_is_the_culprit_a_bad_rail_is_the_rails_and_a_healthy_fleet_is_silent() {
    let bad_node = fleet(8, 2, |a, b, _| a != 5 && b != 5);
    let bad_port = fleet(8, 2, |a, b, r| r != 1 || (a != 2 && b != 2));
    let bad_rail = fleet(8, 2, |_, _, r| r != 1);
    let healthy = fleet(8, 2, |_, _, _| true);
    let tests = json!([
        {
            "interval": "1m",
            "input_series": bad_node,
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "RDMAPeerCulprit", "exp_alerts": [culprit("n5", "0"), culprit("n5", "1")]},
                {"eval_time": "3m", "alertname": "RDMAPeerCulprit", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RDMAPeerRailDown", "exp_alerts": []},
            ],
            "promql_expr_test": [
                {"expr": "rdma:peer_probe:in_failed_ratio{peer=\"n5\"}", "eval_time": "1m", "exp_samples": [
                    {"labels": "rdma:peer_probe:in_failed_ratio{peer=\"n5\",peer_rail=\"0\"}", "value": 1},
                    {"labels": "rdma:peer_probe:in_failed_ratio{peer=\"n5\",peer_rail=\"1\"}", "value": 1},
                ]},
            ],
        },
        {
            "interval": "1m",
            "input_series": bad_port,
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "RDMAPeerCulprit", "exp_alerts": [culprit("n2", "1")]},
            ],
        },
        {
            "interval": "1m",
            "input_series": bad_rail,
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "RDMAPeerCulprit", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RDMAPeerRailDown", "exp_alerts": [{
                    "exp_labels": {"alertname": "RDMAPeerRailDown", "rail": "1", "severity": "critical"},
                    "exp_annotations": {
                        "summary": "RDMA rail 1: most peer probes on it fail",
                        "description": "3 in 4 or more of the peer probes between nodes on rail 1 fail: the rail's switch or its configuration (MTU, PFC, VLAN), not one node. `rdma-node-agent fleet` shows the matrix.",
                    },
                }]},
            ],
        },
        {
            "interval": "1m",
            "input_series": healthy,
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "RDMAPeerCulprit", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RDMAPeerRailDown", "exp_alerts": []},
            ],
        },
    ]);
    support::prometheus::promtool_test(&rules_file(), tests);
}
