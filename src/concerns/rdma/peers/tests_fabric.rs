//! `rdma.peers` on a node with more ACTIVE ports than the fleet's peer list
//! gives it: the multi-node Soft-RoCE tier (tests/vm_fabric.rs) runs four
//! daemons on one kernel, each seeing all eight rxe ports, as a real node sees
//! its storage NIC beside its rails. Records hand-made (labelled so), in the
//! shape tests.rs builds.

use super::tests::{all, facts, healthy, record, says};
use super::*;
use crate::host::probe::record::{Inbound, Stage};

fn two_ports(rec: PeersRecord) -> Check {
    let mut f = facts(Some(rec), Some(0));
    if let Ok(ports) = &mut f.ports {
        ports.push(LocalPort {
            device: "rxe7".into(),
            port: 1,
            rail: None,
        });
    }
    evaluate(&f, &PeersConfig::default()).0
}

#[test]
fn an_active_port_the_peer_list_does_not_give_this_node_is_not_judged() {
    // rxe0/1 is this node's (its responder runs, it probes); rxe7/1 is not
    // in the list under this node's name: no responder, no probe from it.
    let c = two_ports(record(vec![healthy(), healthy()]));
    says(
        &c,
        Status::Ok,
        None,
        &[
            "rxe0/1: 3 of 3 peers answered both ways",
            "not probed, not judged (the peer list does not name them for this node): rxe7/1",
        ],
    );
    assert_eq!(c.details["not_judged"], serde_json::json!(["rxe7/1"]));
    let ports = c.details["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0]["port"], "rxe0/1");
}

#[test]
fn a_listed_port_that_lost_its_address_is_still_judged() {
    // No responder (it needs the address) but probes from it, stage `source`.
    let mut rec = record(vec![all(Stage::Source), all(Stage::Source)]);
    rec.responders.clear();
    let c = two_ports(rec);
    says(&c, Status::Fail, Some(reasons::GID_MISSING), &["rxe0/1"]);
    assert!(!c.message.contains("rxe7/1"), "{}", c.message);
}

#[test]
fn a_node_the_peer_list_gives_no_port_is_unknown_never_ok() {
    let mut rec = record(vec![healthy(), healthy()]);
    rec.responders.clear();
    for r in &mut rec.rounds {
        r.probes.clear();
    }
    let c = two_ports(rec);
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["the peer list names none of this node's ACTIVE RDMA ports (rxe0/1, rxe7/1)"],
    );
}

/// The hung responder and the port whose routes went with its address, as
/// the fabric tier found them: the port probes its peers fine, its peers'
/// probes never reach it. Without inbound proof it was `ok`.
#[test]
fn a_port_no_peer_reaches_while_it_listens_fails_not_reached() {
    let now = 1_795_678_855;
    let listening = |since: u64, inbound: Vec<Inbound>| {
        let mut rec = record(vec![healthy(), healthy()]);
        rec.responders[0].ready_since_unix = Some(since);
        rec.inbound = inbound;
        evaluate(&facts(Some(rec), Some(0)), &PeersConfig::default()).0
    };
    let window = 3 * PeersConfig::default().interval_secs;
    let c = listening(now - 1000, Vec::new());
    says(
        &c,
        Status::Fail,
        Some(reasons::NOT_REACHED),
        &["rxe0/1: its probes reach its peers, but no peer's probe reached its responder"],
    );
    let from = |answered: Option<u64>, refused: Option<u64>| Inbound {
        device: "rxe0".into(),
        port: 1,
        from: "10.0.0.2".into(),
        from_node: Some("node2".into()),
        answered_total: u64::from(answered.is_some()),
        refused_total: u64::from(refused.is_some()),
        last_answered_unix: answered,
        last_refused_unix: refused,
        last_refused_why: refused.map(|_| "rate_limited".into()),
    };
    // An answer within the window, or a refusal (the way in works): ok.
    let c = listening(now - 1000, vec![from(Some(now - 30), None)]);
    says(&c, Status::Ok, None, &["rxe0/1: 3 of 3 peers answered"]);
    let c = listening(now - 1000, vec![from(None, Some(now - 30))]);
    says(&c, Status::Ok, None, &["rxe0/1"]);
    // Only answers from before the window: not reached.
    let c = listening(now - 1000, vec![from(Some(now - window - 1), None)]);
    says(&c, Status::Fail, Some(reasons::NOT_REACHED), &["rxe0/1"]);
    // Listening for less than the window: peers had no time to probe it yet.
    let c = listening(now - window + 1, Vec::new());
    says(&c, Status::Ok, None, &["rxe0/1"]);
    // A responder that never said ready proves nothing either way (no claim).
    let mut rec = record(vec![healthy(), healthy()]);
    rec.responders[0].ready_since_unix = None;
    let c = evaluate(&facts(Some(rec), Some(0)), &PeersConfig::default()).0;
    says(&c, Status::Ok, None, &["rxe0/1"]);
}
