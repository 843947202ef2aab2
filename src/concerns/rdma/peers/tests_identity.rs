//! `rdma.peers` when another node answers at a peer's address: the answer
//! proves the port's path, not the path to the listed peer (a stale peer list,
//! a node replaced under a reused address, two nodes holding one address).
//! Records hand-made (labelled so), in the shape tests.rs builds.

use super::tests::{facts, healthy, probe, record, says};
use super::*;
use crate::host::probe::record::Stage;

fn judge(rec: PeersRecord) -> (Check, Vec<crate::observe::Observation>) {
    evaluate(&facts(Some(rec), Some(0)), &PeersConfig::default())
}

fn impostor(listed: &str, answered_by: &str) -> crate::host::probe::record::Probe {
    let mut p = probe(listed, Stage::Done);
    p.answered_node = Some(answered_by.into());
    p
}

#[test]
fn another_node_answering_at_a_peers_address_is_named_never_ok() {
    let mut p = healthy();
    p[1] = impostor("node-c", "node-x");
    let (c, _) = judge(record(vec![p.clone(), p]));
    says(
        &c,
        Status::Warn,
        Some(reasons::WRONG_PEER),
        &[
            "2 of 3 peers answered both ways",
            "node-c",
            "answered by node-x",
        ],
    );
    assert!(!c.status.blocks_ready());
}

#[test]
fn every_answer_from_other_nodes_warns_and_never_fails_the_port() {
    let p: Vec<_> = ["node-b", "node-c", "node-d"]
        .iter()
        .map(|n| impostor(n, "node-x"))
        .collect();
    let (c, _) = judge(record(vec![p.clone(), p]));
    says(
        &c,
        Status::Warn,
        Some(reasons::WRONG_PEER),
        &["0 of 3 peers answered both ways", "the list is stale"],
    );
}

#[test]
fn an_answer_without_a_node_name_or_from_the_listed_node_is_an_answer() {
    let mut p = healthy();
    p[0].answered_node = None;
    let (c, _) = judge(record(vec![p.clone(), p]));
    says(&c, Status::Ok, None, &["3 of 3 peers answered both ways"]);
}

#[test]
fn the_fleet_sees_another_nodes_answer_as_a_failed_probe() {
    let mut p = healthy();
    p[2] = impostor("node-d", "node-x");
    let (_, obs) = judge(record(vec![p]));
    let mut m = crate::exposition::Families::new("rdma_node_agent");
    metrics::families(&mut m, &obs);
    let text = m.render(crate::exposition::Format::Text);
    assert!(
        text.contains("rdma_node_agent_peer_probe_ok{device=\"rxe0\",port=\"1\",rail=\"0\",peer=\"node-d\",peer_rail=\"0\",stage=\"wrong_peer\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("rdma_node_agent_peer_probes{device=\"rxe0\",port=\"1\",stage=\"done\"} 2"),
        "{text}"
    );
    // No round-trip time is said for a peer that did not answer.
    let rtt = |peer: &str| {
        text.lines().any(|l| {
            l.starts_with("rdma_node_agent_peer_probe_rtt_seconds{")
                && l.contains(&format!("peer=\"{peer}\""))
        })
    };
    assert!(rtt("node-b") && !rtt("node-d"), "{text}");
}
