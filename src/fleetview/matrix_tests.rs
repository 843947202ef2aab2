//! The matrix on synthetic fleets, one per fault shape: each node probes k = 3
//! peers on its rail (the next three on a ring, as a rotating prober would over
//! rounds); a fault decides which probes fail.

use std::collections::BTreeMap;
use std::time::Instant;

use super::matrix::{Edge, PeerMatrix, Unit, analyse, edges};
use crate::host::prometheus::Sample;

fn unit(n: usize, r: usize) -> Unit {
    (format!("gpu-{n:04}"), r.to_string())
}

/// `ok(from, to)` for every probe of a fleet of `nodes` × `rails`, k = 3.
fn fleet(nodes: usize, rails: usize, ok: impl Fn(&Unit, &Unit) -> bool) -> Vec<Edge> {
    let mut out = Vec::with_capacity(nodes * rails * 3);
    for r in 0..rails {
        for n in 0..nodes {
            for d in 1..=3 {
                let (from, to) = (unit(n, r), unit((n + d) % nodes, r));
                let good = ok(&from, &to);
                out.push(Edge {
                    port: format!("mlx5_{r}/1"),
                    stage: if good { "done" } else { "connect" }.into(),
                    ok: good,
                    from,
                    to,
                });
            }
        }
    }
    out
}

fn culprits(m: &PeerMatrix) -> Vec<String> {
    m.culprits
        .iter()
        .map(|c| format!("{}/{}", c.node, c.rail))
        .collect()
}

#[test]
fn no_fault_names_no_culprit() {
    let m = analyse(&fleet(32, 4, |_, _| true));
    assert!(m.culprits.is_empty() && m.bad_rails.is_empty() && m.victims.is_empty());
    assert!(m.unexplained.is_empty());
    assert_eq!((m.nodes, m.probes, m.failed), (32, 32 * 4 * 3, 0));
    assert!(m.rows.iter().all(|(_, l)| l.chars().all(|c| c == '.')));
}

#[test]
fn one_bad_node_is_the_culprit_on_every_rail_and_its_peers_are_victims() {
    let bad = |u: &Unit| u.0 == "gpu-0005";
    let m = analyse(&fleet(32, 2, |a, b| !bad(a) && !bad(b)));
    assert_eq!(culprits(&m), ["gpu-0005/0", "gpu-0005/1"]);
    assert!(m.unexplained.is_empty(), "{:?}", m.unexplained);
    // Its three probers (2, 3, 4) and three probed (6, 7, 8), on each rail.
    let victims: Vec<&str> = m
        .victims
        .iter()
        .filter(|v| v.rail == "0")
        .map(|v| v.node.as_str())
        .collect();
    assert_eq!(
        victims,
        [
            "gpu-0002", "gpu-0003", "gpu-0004", "gpu-0006", "gpu-0007", "gpu-0008"
        ]
    );
    assert_eq!(m.victims[0].failed_with, ["gpu-0005/0"]);
    assert_eq!(m.culprits[0].ports, ["mlx5_0/1"]);
    assert_eq!(m.culprits[0].stages, ["connect"]);
    assert_eq!(&m.rows[0].1[..10], "..vvvXvvv.");
}

#[test]
fn one_bad_port_names_that_node_on_that_rail_only() {
    let bad = |u: &Unit| *u == unit(9, 3);
    let m = analyse(&fleet(64, 8, |a, b| !bad(a) && !bad(b)));
    assert_eq!(culprits(&m), ["gpu-0009/3"]);
    assert!(m.victims.iter().all(|v| v.rail == "3"));
    assert!(m.bad_rails.is_empty());
}

#[test]
fn a_bad_rail_is_the_switch_not_its_nodes() {
    let m = analyse(&fleet(16, 4, |a, _| a.1 != "2"));
    assert_eq!(m.bad_rails.len(), 1);
    assert_eq!(
        (m.bad_rails[0].rail.as_str(), m.bad_rails[0].units),
        ("2", 16)
    );
    assert!(m.culprits.is_empty(), "{:?}", culprits(&m));
    assert!(m.unexplained.is_empty());
    assert_eq!(m.rows[2].1, "R".repeat(16));
}

#[test]
fn two_bad_nodes_are_both_named_even_next_to_each_other() {
    let bad = |u: &Unit| u.0 == "gpu-0003" || u.0 == "gpu-0004" || u.0 == "gpu-0020";
    let m = analyse(&fleet(40, 1, |a, b| !bad(a) && !bad(b)));
    assert_eq!(culprits(&m), ["gpu-0003/0", "gpu-0004/0", "gpu-0020/0"]);
    assert!(m.unexplained.is_empty(), "{:?}", m.unexplained);
}

/// Outbound broken only (its peers' probes to it answer): still its fault.
#[test]
fn a_one_way_node_is_the_culprit_not_the_peers_it_cannot_reach() {
    let m = analyse(&fleet(24, 1, |a, _| a.0 != "gpu-0011"));
    assert_eq!(culprits(&m), ["gpu-0011/0"]);
    assert_eq!(m.victims.len(), 3);
}

/// A single failed probe between two healthy nodes is nobody's fault yet:
/// shown as it is, no culprit.
#[test]
fn a_lone_failure_is_unexplained_not_a_culprit() {
    let m = analyse(&fleet(16, 1, |a, b| {
        !(a.0 == "gpu-0001" && b.0 == "gpu-0002")
    }));
    assert!(m.culprits.is_empty(), "{:?}", culprits(&m));
    assert_eq!(m.unexplained, ["gpu-0001/0 -> gpu-0002/0 (connect)"]);
}

#[test]
fn samples_become_edges_by_their_labels() {
    let s = |labels: &[(&str, &str)], v: f64| Sample {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        value: v,
    };
    let e = edges(
        &[
            s(
                &[
                    ("node", "a"),
                    ("device", "mlx5_0"),
                    ("port", "1"),
                    ("rail", "0"),
                    ("peer", "b"),
                    ("peer_rail", "1"),
                    ("stage", "done"),
                ],
                1.0,
            ),
            s(
                &[
                    ("instance", "c:9470"),
                    ("device", "rxe0"),
                    ("port", "1"),
                    ("rail", ""),
                    ("peer", "d"),
                    ("peer_rail", ""),
                    ("stage", "full"),
                ],
                0.0,
            ),
        ],
        "node",
    );
    assert_eq!(e[0].from, ("a".into(), "0".into()));
    assert_eq!(e[0].to, ("b".into(), "1".into()));
    assert!(e[0].ok);
    assert_eq!(
        (
            e[1].from.0.as_str(),
            e[1].port.as_str(),
            e[1].stage.as_str(),
            e[1].ok
        ),
        ("c", "rxe0/1", "full", false)
    );
}

/// The figure: 1,024 nodes × 8 rails × k = 3 in at most 1 s (release;
/// a debug build gets ten times that). Prints the time for docs/peers.md.
#[test]
fn bench_1024_nodes_8_rails_k3() {
    let bad = |u: &Unit| u.0 == "gpu-0100" || *u == unit(700, 5);
    let e = fleet(1024, 8, |a, b| !bad(a) && !bad(b));
    let start = Instant::now();
    let m = analyse(&e);
    let took = start.elapsed();
    println!(
        "peer matrix: 1024 nodes x 8 rails x k=3 ({} probes): {took:?}",
        e.len()
    );
    assert_eq!(culprits(&m).len(), 9, "{:?}", culprits(&m));
    let limit = if cfg!(debug_assertions) { 10.0 } else { 1.0 };
    assert!(took.as_secs_f64() <= limit, "{took:?}");
}

/// Through `fleet`'s whole analysis: the culprit is a problem node and the
/// text names it; the peers that failed to reach it are not problems.
#[test]
fn the_fleet_report_names_the_culprit_and_not_its_victims() {
    let bad = |u: &Unit| u.0 == "gpu-0005";
    let samples: Vec<Sample> = fleet(12, 1, |a, b| !bad(a) && !bad(b))
        .into_iter()
        .map(|e| Sample {
            labels: [
                ("node", e.from.0.as_str()),
                ("device", "mlx5_0"),
                ("port", "1"),
                ("rail", "0"),
                ("peer", e.to.0.as_str()),
                ("peer_rail", "0"),
                ("stage", e.stage.as_str()),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            value: if e.ok { 1.0 } else { 0.0 },
        })
        .collect();
    let input = super::Input {
        peer_probes: samples,
        ..super::Input::default()
    };
    let set = super::Settings {
        node_label: "node".into(),
        flap_threshold: 3.0,
        flap_window: std::time::Duration::from_secs(3600),
    };
    let r = super::analyse::analyse(&input, &set);
    assert_eq!(r.problem_nodes, ["gpu-0005"]);
    let text = super::render::text(&r, "http://prom", &set, std::time::Duration::ZERO, 0.0);
    assert!(text.contains("Culprits (failures common to all their peers):\n  NODE      RAIL  PORTS     FAILED  STAGES\n  gpu-0005  0     mlx5_0/1  6/6     connect\n"), "{text}");
    assert!(
        text.contains("6 node/rail(s) merely failed to reach them"),
        "{text}"
    );
}
