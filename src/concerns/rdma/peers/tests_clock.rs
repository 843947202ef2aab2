//! `rdma.peers` when a clock is off: responders refuse probes whose signed
//! time is outside their ±60 s window (`stale`, checked after the key), so a
//! node whose time sync failed is named for its clock, not for its link.
//! Records hand-made (labelled so), in the shape tests.rs builds.

use super::tests::{NOW, all, facts, healthy, probe, record, says};
use super::*;
use crate::host::probe::record::{Inbound, Stage};

fn judge(rec: PeersRecord) -> Check {
    evaluate(&facts(Some(rec), Some(0)), &PeersConfig::default()).0
}

fn stale(node: &str) -> crate::host::probe::record::Probe {
    let mut p = probe(node, Stage::Rejected);
    p.reject_why = Some("stale".into());
    p
}

#[test]
fn a_node_every_peer_refuses_as_stale_fails_for_its_clock_not_its_link() {
    let refused: Vec<_> = all(Stage::Rejected)
        .into_iter()
        .map(|p| stale(&p.peer.node))
        .collect();
    let c = judge(record(vec![refused.clone(), refused]));
    says(
        &c,
        Status::Fail,
        Some(reasons::CLOCK_SKEW),
        &["this node's clock is off", "(refused: stale)"],
    );
    assert!(!c.message.contains("its link"), "{}", c.message);
}

#[test]
fn a_peer_with_its_clock_off_is_named_by_the_nodes_that_probe_it() {
    let mut p = healthy();
    p[1] = stale("node-late");
    let c = judge(record(vec![p.clone(), p]));
    says(
        &c,
        Status::Warn,
        Some(reasons::CLOCK_SKEW),
        &["node-late", "refused: stale", "the fault is theirs"],
    );
}

#[test]
fn a_responder_refusing_a_sender_as_stale_names_the_clock() {
    let mut rec = record(vec![healthy(), healthy()]);
    rec.inbound.push(Inbound {
        device: "rxe0".into(),
        port: 1,
        from: "10.0.0.7".into(),
        from_node: None,
        answered_total: 0,
        refused_total: 2,
        last_answered_unix: None,
        last_refused_unix: Some(NOW - 10),
        last_refused_why: Some("stale".into()),
    });
    let c = judge(rec);
    says(
        &c,
        Status::Warn,
        Some(reasons::CLOCK_SKEW),
        &["refused 2 probe(s) from 10.0.0.7 (stale)", "clock"],
    );
}
