//! The table `fleet` prints for people; `--json` prints the `Report` itself.

use std::fmt::Write;
use std::time::Duration;

use super::{Report, Settings, duration};

/// A value from Prometheus as the terminal may show it: control characters
/// (an escape sequence in a label value could rewrite the screen or the
/// title) and bidirectional overrides written as `\u{..}` escapes.
pub fn terminal_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Columns padded to their widest cell, two spaces apart, indented; every
/// cell made safe for the terminal.
fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| terminal_safe(c)).collect())
        .collect();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        let mut l = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<width$}  ", width = w[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(
        out,
        &head.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>(),
    );
    for r in &rows {
        line(out, r);
    }
}

pub(super) fn section(out: &mut String, title: &str, head: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(
        out,
        "\n{title}:{}",
        if rows.is_empty() { " none" } else { "" }
    );
    if !rows.is_empty() {
        table(out, head, &rows);
    }
}

fn gbps(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0} Gb/s")
    } else {
        format!("{v:.1} Gb/s")
    }
}

/// "12m ago" from Unix seconds.
fn ago(ts: f64, now: f64) -> String {
    let s = (now - ts).max(0.0) as u64;
    match s {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// At most `max` names, then how many more (the JSON has them all).
fn names(v: &[String], max: usize) -> String {
    if v.len() <= max {
        v.join(", ")
    } else {
        format!("{}, … {} more", v[..max].join(", "), v.len() - max)
    }
}

/// The whole report; `now` (Unix seconds) dates the last flaps.
pub fn text(r: &Report, url: &str, set: &Settings, took: Duration, now: f64) -> String {
    let mut out = String::new();
    let window = duration::show(set.flap_window);
    let _ = writeln!(
        out,
        "{} node(s) report to {url}: {} ready, {} not ready, {} not reporting ({:.2} s)",
        r.nodes,
        r.ready,
        r.nodes - r.ready,
        r.not_reporting.len(),
        took.as_secs_f64()
    );
    section(
        &mut out,
        "Not ready, by reason",
        &["REASON", "CHECKS", "NODES", "NAMES"],
        group_rows(&r.not_ready, usize::MAX),
    );
    section(
        &mut out,
        &format!("Not reporting (a sample within {window}, none now)"),
        &["NODE"],
        r.not_reporting.iter().map(|n| vec![n.clone()]).collect(),
    );
    consistency(&mut out, r);
    links(&mut out, r, set, now);
    offenders(&mut out, r);
    super::matrix::render(&mut out, &r.peer_matrix);
    if !r.warnings.is_empty() {
        section(
            &mut out,
            "Warnings on ready nodes (not counted as problems)",
            &["REASON", "CHECKS", "NODES", "NAMES"],
            group_rows(&r.warnings, 5),
        );
    }
    let _ = writeln!(
        out,
        "\n{}",
        if r.problem_nodes.is_empty() {
            format!("Every node is fine ({} node(s)).", r.nodes)
        } else {
            format!(
                "{} node(s) need attention: {}",
                r.problem_nodes.len(),
                terminal_safe(&r.problem_nodes.join(", "))
            )
        }
    );
    out
}

fn group_rows(groups: &[super::ReasonGroup], max: usize) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|g| {
            vec![
                g.reason.clone(),
                g.checks.join(","),
                g.count.to_string(),
                names(&g.nodes, max),
            ]
        })
        .collect()
}

/// Where nodes differ from their peers: firmware and port rates here, then
/// their configuration.
fn consistency(out: &mut String, r: &Report) {
    section(
        out,
        "Firmware minority, per board id",
        &["NODE", "DEVICE", "BOARD_ID", "FW_VER", "MAJORITY"],
        r.firmware_minority
            .iter()
            .map(|o| {
                vec![
                    o.node.clone(),
                    o.device.clone(),
                    o.board_id.clone(),
                    o.fw_ver.clone(),
                    o.majority.join(" | "),
                ]
            })
            .collect(),
    );
    section(
        out,
        "Ports below their cohort's rate (median of ACTIVE ports of the board id and link layer)",
        &[
            "NODE",
            "DEVICE",
            "PORT",
            "BOARD_ID",
            "LINK_LAYER",
            "RATE",
            "COHORT",
        ],
        r.ports_below_cohort_rate
            .iter()
            .map(|p| {
                vec![
                    p.node.clone(),
                    p.device.clone(),
                    p.port.clone(),
                    p.board_id.clone(),
                    p.link_layer.clone(),
                    gbps(p.rate_gbps),
                    gbps(p.cohort_gbps),
                ]
            })
            .collect(),
    );
    configuration(out, r);
}

/// Where nodes are configured unlike their peers: MTUs, settings.
fn configuration(out: &mut String, r: &Report) {
    section(
        out,
        "MTU differing within a fabric",
        &[
            "NODE", "DEVICE", "PORT", "FABRIC", "MTU", "VALUE", "MAJORITY",
        ],
        r.mtu_mismatch
            .iter()
            .map(|o| {
                vec![
                    o.node.clone(),
                    o.device.clone(),
                    o.port.clone(),
                    o.fabric.clone(),
                    o.which.clone(),
                    o.mtu.clone(),
                    o.majority.join(" | "),
                ]
            })
            .collect(),
    );
    section(
        out,
        "Settings differing from the fleet's majority",
        &["NODE", "SETTING", "VALUE", "MAJORITY"],
        r.setting_minority
            .iter()
            .map(|o| {
                vec![
                    o.node.clone(),
                    o.setting.clone(),
                    o.value.clone(),
                    o.majority.join(" | "),
                ]
            })
            .collect(),
    );
}

/// Links the kubelet does not offer, and links that flap.
fn links(out: &mut String, r: &Report, set: &Settings, now: f64) {
    section(
        out,
        "Kubelet advertises no RDMA device while ports are ACTIVE",
        &["NODE", "ACTIVE_PORTS"],
        r.kubelet_rdma_zero
            .iter()
            .map(|k| vec![k.node.clone(), k.active_ports.to_string()])
            .collect(),
    );
    section(
        out,
        &format!(
            "Link flapping (more than {} flaps in {})",
            set.flap_threshold,
            duration::show(set.flap_window)
        ),
        &["NODE", "DEVICE", "PORT", "FLAPS", "LAST_FLAP"],
        r.link_flapping
            .iter()
            .map(|f| {
                vec![
                    f.node.clone(),
                    f.device.clone(),
                    f.port.clone(),
                    format!("{:.0}", f.flaps),
                    f.last_flap_timestamp_seconds
                        .map_or("-".into(), |t| ago(t, now)),
                ]
            })
            .collect(),
    );
}

/// The repeat offenders of the last day: shown, not counted as problems.
fn offenders(out: &mut String, r: &Report) {
    let top = |n: usize| n.min(20);
    section(
        out,
        "Ports by errors in the last 1d (rdma.counters; congestion left out)",
        &["NODE", "DEVICE", "PORT", "ERRORS", "CLASSES"],
        r.port_error_offenders[..top(r.port_error_offenders.len())]
            .iter()
            .map(|p| {
                let classes: Vec<String> = p
                    .classes
                    .iter()
                    .map(|(c, n)| format!("{c}={n:.0}"))
                    .collect();
                vec![
                    p.node.clone(),
                    p.device.clone(),
                    p.port.clone(),
                    format!("{:.0}", p.errors),
                    classes.join(","),
                ]
            })
            .collect(),
    );
    section(
        out,
        "Nodes by port errors in the last 1d",
        &["NODE", "ERRORS", "PORTS"],
        r.node_error_offenders[..top(r.node_error_offenders.len())]
            .iter()
            .map(|n| {
                vec![
                    n.node.clone(),
                    format!("{:.0}", n.errors),
                    n.ports.to_string(),
                ]
            })
            .collect(),
    );
    section(
        out,
        "PCIe AER errors rising in the last 1d (pcie.aer)",
        &["NODE", "FUNCTION", "SEVERITY", "RISE"],
        r.aer_rising
            .iter()
            .map(|a| {
                vec![
                    a.node.clone(),
                    a.function.clone(),
                    a.severity.clone(),
                    format!("{:.0}", a.rise),
                ]
            })
            .collect(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleetview::{Flapper, ReasonGroup};

    /// A label value with a terminal escape (a title change, a screen clear)
    /// and a bidi override is printed escaped, everywhere the table shows it.
    #[test]
    fn control_characters_in_label_values_are_escaped() {
        let evil = "gpu-1\x1b]0;owned\x07\x1b[2J\u{202e}x\n";
        let r = Report {
            nodes: 1,
            ready: 0,
            not_ready: vec![ReasonGroup {
                reason: "port_down\r".into(),
                checks: vec!["rdma.devices".into()],
                count: 1,
                nodes: vec![evil.into()],
            }],
            problem_nodes: vec![evil.into()],
            ..Report::default()
        };
        let set = Settings {
            node_label: "node".into(),
            flap_threshold: 3.0,
            flap_window: Duration::from_secs(3600),
        };
        let t = text(&r, "http://p:9090/", &set, Duration::ZERO, 0.0);
        assert!(
            !t.chars().any(|c| c.is_control() && c != '\n') && !t.contains('\u{202e}'),
            "{t:?}"
        );
        assert!(
            t.contains("gpu-1\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{202e}x\\u{a}"),
            "{t}"
        );
        assert!(t.contains("port_down\\u{d}"), "{t}");
        assert_eq!(terminal_safe("node-7 ümlaut"), "node-7 ümlaut");
    }

    #[test]
    fn the_table_names_every_problem_and_says_none_for_empty_sections() {
        let r = Report {
            nodes: 3,
            ready: 2,
            not_ready: vec![ReasonGroup {
                reason: "port_down".into(),
                checks: vec!["rdma.devices".into()],
                count: 1,
                nodes: vec!["node-7".into()],
            }],
            not_reporting: vec![],
            firmware_minority: vec![],
            ports_below_cohort_rate: vec![],
            mtu_mismatch: vec![],
            setting_minority: vec![],
            kubelet_rdma_zero: vec![],
            link_flapping: vec![Flapper {
                node: "node-12".into(),
                device: "mlx5_0".into(),
                port: "1".into(),
                flaps: 4.02,
                last_flap_timestamp_seconds: Some(1000.0),
            }],
            port_error_offenders: vec![crate::fleetview::offenders::PortOffender {
                node: "node-3".into(),
                device: "mlx5_2".into(),
                port: "1".into(),
                errors: 1000.0,
                classes: vec![
                    ("symbol_errors".into(), 900.0),
                    ("rcv_errors".into(), 100.0),
                ],
            }],
            node_error_offenders: vec![],
            aer_rising: vec![],
            warnings: vec![],
            peer_matrix: Default::default(),
            problem_nodes: vec!["node-7".into(), "node-12".into()],
        };
        let set = Settings {
            node_label: "node".into(),
            flap_threshold: 3.0,
            flap_window: Duration::from_secs(3600),
        };
        let t = text(
            &r,
            "http://p:9090/",
            &set,
            Duration::from_millis(120),
            1600.0,
        );
        assert!(t.starts_with(
            "3 node(s) report to http://p:9090/: 2 ready, 1 not ready, 0 not reporting (0.12 s)\n"
        ));
        assert!(t.contains(
            "Not ready, by reason:\n  REASON     CHECKS        NODES  NAMES\n  port_down  rdma.devices  1      node-7\n"
        ), "{t}");
        assert!(
            t.contains("\nFirmware minority, per board id: none\n"),
            "{t}"
        );
        assert!(
            t.contains("  node-3  mlx5_2  1     1000    symbol_errors=900,rcv_errors=100\n"),
            "{t}"
        );
        assert!(
            t.contains("\nPCIe AER errors rising in the last 1d (pcie.aer): none\n"),
            "{t}"
        );
        assert!(
            t.contains("Link flapping (more than 3 flaps in 1h):\n"),
            "{t}"
        );
        assert!(
            t.contains("  node-12  mlx5_0  1     4      10m ago\n"),
            "{t}"
        );
        assert!(
            t.ends_with("\n2 node(s) need attention: node-7, node-12\n"),
            "{t}"
        );
        assert!(!t.contains("Warnings"));
    }

    #[test]
    fn long_name_lists_are_cut_only_where_asked() {
        let v: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
        assert_eq!(names(&v, 5), "n1, n2, n3, n4, n5, … 2 more");
        assert_eq!(names(&v, usize::MAX), v.join(", "));
    }
}
