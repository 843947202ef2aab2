//! Repeat offenders over the last day: the ports and nodes whose error
//! counters rose most (`rdma_node_agent_port_errors_total`, rdma.counters; the
//! congestion class is load, not an error, and is left out), and the nodes
//! whose PCIe AER errors rose (`rdma_node_agent_pcie_aer_errors_total`, pcie.aer).

use std::collections::BTreeMap;

use serde::Serialize;

use super::Input;
use super::analyse::{Ctx, label};

/// What a day is to these sections: the rise over it is what they rank by.
pub const WINDOW: &str = "1d";

/// A counter's rise over the day: now less its lowest sample in the day, or
/// all of it for a series that appeared within the day (the agent exports a
/// class only once it counted something: its first errors made it appear).
fn rise(series: &str) -> String {
    format!(
        "(({series} - (min_over_time({series}[{WINDOW}]) and {series} offset {WINDOW})) or {series}) > 0"
    )
}

/// The port query: each class's rise over the day, errors only, only rises.
pub fn port_errors_query() -> String {
    rise("rdma_node_agent_port_errors_total{class!=\"congestion\"}")
}

/// The AER query: each function's and severity's rise over the day.
pub fn aer_query() -> String {
    rise("rdma_node_agent_pcie_aer_errors_total")
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortOffender {
    pub node: String,
    pub device: String,
    pub port: String,
    /// Errors over the day, all classes together.
    pub errors: f64,
    /// Per class, largest first.
    pub classes: Vec<(String, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeOffender {
    pub node: String,
    pub errors: f64,
    /// How many of its ports counted errors.
    pub ports: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AerRising {
    pub node: String,
    pub function: String,
    /// `correctable`, `nonfatal` or `fatal`.
    pub severity: String,
    pub rise: f64,
}

fn desc(a: f64, b: f64) -> std::cmp::Ordering {
    b.total_cmp(&a)
}

/// Ports by errors over the day, most first; and their nodes, summed.
pub(super) fn ports_and_nodes(input: &Input, c: &Ctx) -> (Vec<PortOffender>, Vec<NodeOffender>) {
    let mut ports: BTreeMap<(String, String, String), Vec<(String, f64)>> = BTreeMap::new();
    for s in input.port_errors.iter().filter(|s| s.value > 0.0) {
        ports
            .entry(c.port(s))
            .or_default()
            .push((label(s, "class").to_owned(), s.value));
    }
    let mut out: Vec<PortOffender> = ports
        .into_iter()
        .map(|((node, device, port), mut classes)| {
            classes.sort_by(|a, b| desc(a.1, b.1).then_with(|| a.0.cmp(&b.0)));
            PortOffender {
                errors: classes.iter().map(|c| c.1).sum(),
                node,
                device,
                port,
                classes,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        desc(a.errors, b.errors).then_with(|| {
            super::analyse::by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port))
        })
    });
    let mut nodes: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for p in &out {
        let e = nodes.entry(&p.node).or_default();
        e.0 += p.errors;
        e.1 += 1;
    }
    let mut nodes: Vec<NodeOffender> = nodes
        .into_iter()
        .map(|(n, (errors, ports))| NodeOffender {
            node: n.to_owned(),
            errors,
            ports,
        })
        .collect();
    nodes.sort_by(|a, b| desc(a.errors, b.errors).then_with(|| a.node.cmp(&b.node)));
    (out, nodes)
}

/// Nodes whose AER errors rose over the day, fatal first, then by rise.
pub(super) fn aer_rising(input: &Input, c: &Ctx) -> Vec<AerRising> {
    let rank = |s: &str| match s {
        "fatal" => 0,
        "nonfatal" => 1,
        _ => 2,
    };
    let mut out: Vec<AerRising> = input
        .aer
        .iter()
        .filter(|s| s.value > 0.0)
        .map(|s| AerRising {
            node: c.node(s),
            function: label(s, "function").to_owned(),
            severity: label(s, "severity").to_owned(),
            rise: s.value,
        })
        .collect();
    out.sort_by(|a, b| {
        rank(&a.severity)
            .cmp(&rank(&b.severity))
            .then_with(|| desc(a.rise, b.rise))
            .then_with(|| a.node.cmp(&b.node))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleetview::{Settings, analyse::analyse};
    use crate::host::prometheus::Sample;
    use std::time::Duration;

    fn s(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        }
    }

    fn settings() -> Settings {
        Settings {
            node_label: "node".into(),
            flap_threshold: 3.0,
            flap_window: Duration::from_secs(3600),
        }
    }

    #[test]
    fn ports_and_nodes_ranked_by_errors_over_the_day() {
        let input = Input {
            ready: ["n1", "n2", "n3"]
                .iter()
                .map(|n| s(&[("node", n)], 1.0))
                .collect(),
            port_errors: vec![
                s(
                    &[
                        ("node", "n1"),
                        ("device", "mlx5_0"),
                        ("port", "1"),
                        ("class", "symbol_errors"),
                    ],
                    40.0,
                ),
                s(
                    &[
                        ("node", "n2"),
                        ("device", "mlx5_3"),
                        ("port", "1"),
                        ("class", "symbol_errors"),
                    ],
                    900.0,
                ),
                s(
                    &[
                        ("node", "n2"),
                        ("device", "mlx5_3"),
                        ("port", "1"),
                        ("class", "rcv_errors"),
                    ],
                    100.0,
                ),
                s(
                    &[
                        ("node", "n1"),
                        ("device", "mlx5_1"),
                        ("port", "1"),
                        ("class", "retransmits"),
                    ],
                    30.0,
                ),
            ],
            aer: vec![
                s(
                    &[
                        ("node", "n3"),
                        ("function", "0000:1b:00.0"),
                        ("severity", "correctable"),
                    ],
                    12.0,
                ),
                s(
                    &[
                        ("node", "n1"),
                        ("function", "0000:9a:00.0"),
                        ("severity", "fatal"),
                    ],
                    1.0,
                ),
            ],
            ..Input::default()
        };
        let r = analyse(&input, &settings());
        let ports: Vec<(&str, &str, f64)> = r
            .port_error_offenders
            .iter()
            .map(|p| (p.node.as_str(), p.device.as_str(), p.errors))
            .collect();
        assert_eq!(
            ports,
            [
                ("n2", "mlx5_3", 1000.0),
                ("n1", "mlx5_0", 40.0),
                ("n1", "mlx5_1", 30.0)
            ]
        );
        assert_eq!(
            r.port_error_offenders[0].classes[0],
            ("symbol_errors".to_owned(), 900.0)
        );
        let nodes: Vec<(&str, f64, usize)> = r
            .node_error_offenders
            .iter()
            .map(|n| (n.node.as_str(), n.errors, n.ports))
            .collect();
        assert_eq!(nodes, [("n2", 1000.0, 1), ("n1", 70.0, 2)]);
        let aer: Vec<(&str, &str)> = r
            .aer_rising
            .iter()
            .map(|a| (a.node.as_str(), a.severity.as_str()))
            .collect();
        assert_eq!(aer, [("n1", "fatal"), ("n3", "correctable")]);
        // Shown, not counted as problems: the checks judge the thresholds.
        assert!(r.problem_nodes.is_empty(), "{:?}", r.problem_nodes);
    }

    #[test]
    fn the_queries_leave_congestion_out_and_take_the_rise_over_a_day() {
        assert_eq!(
            port_errors_query(),
            "((rdma_node_agent_port_errors_total{class!=\"congestion\"} - (min_over_time(rdma_node_agent_port_errors_total{class!=\"congestion\"}[1d]) and rdma_node_agent_port_errors_total{class!=\"congestion\"} offset 1d)) or rdma_node_agent_port_errors_total{class!=\"congestion\"}) > 0"
        );
        assert!(
            aer_query().starts_with("((rdma_node_agent_pcie_aer_errors_total - (min_over_time(")
        );
    }
}
