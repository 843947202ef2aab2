//! `rdma.peers` on records for each fault, seen from the faulty node and from
//! its healthy peers. The records are hand-made (labelled so): built to the
//! schema of host::probe::record, with the stages, errors and refusals the
//! probe helper reports; real ones from the QEMU tier replace them as they come.

use super::*;
use crate::host::probe::record::{Inbound, Peer, Probe, Responder, Round, Stage, VERSION};

pub(super) const NOW: u64 = 1_795_678_855;
const BOOT: &str = "boot-a";

pub(super) fn peer(node: &str, rail: u32) -> Peer {
    Peer {
        node: node.into(),
        addr: format!(
            "10.0.{rail}.{}",
            node.len() + node.as_bytes()[node.len() - 1] as usize
        ),
        fabric: format!("roce:10.0.{rail}.0/24"),
        rail: Some(rail),
    }
}

pub(super) fn probe(peer_node: &str, stage: Stage) -> Probe {
    let done = stage == Stage::Done;
    Probe {
        device: "rxe0".into(),
        port: 1,
        src: if stage == Stage::Source {
            String::new()
        } else {
            "10.0.0.1".into()
        },
        peer: peer(peer_node, 0),
        stage,
        error: match stage {
            Stage::Done => String::new(),
            Stage::Connect => "RDMA_CM_EVENT_UNREACHABLE (timeout)".into(),
            Stage::Full => "IBV_WC_RETRY_EXC_ERR on the 4096-byte send".into(),
            Stage::Source => "no IPv4 address on the port's netdev".into(),
            Stage::Helper => "rdma-node-agent-probe: not found".into(),
            _ => "failed".into(),
        },
        reject_why: None,
        rtt_us: done.then_some(42),
        path_mtu: (done || stage == Stage::Full).then_some(4096),
        gid_index: Some(1),
        gid_type: Some("RoCE v2".into()),
        answered_node: done.then(|| peer_node.to_owned()),
        answered_rail: done.then_some(0),
        started_unix: NOW - 5,
    }
}

fn round(at: u64, probes: Vec<Probe>) -> Round {
    Round {
        started_unix: at - 3,
        finished_unix: at,
        probes,
    }
}

pub(super) fn record(rounds: Vec<Vec<Probe>>) -> PeersRecord {
    let n = rounds.len() as u64;
    PeersRecord {
        version: VERSION,
        boot_id: BOOT.into(),
        rounds: rounds
            .into_iter()
            .enumerate()
            .map(|(i, p)| round(NOW - 60 * (n - 1 - i as u64) - 1, p))
            .collect(),
        inbound: Vec::new(),
        responders: vec![Responder {
            device: "rxe0".into(),
            port: 1,
            addr: "10.0.0.1".into(),
            running: true,
            error: None,
            ready_since_unix: None,
        }],
        source_error: None,
    }
}

pub(super) fn facts(rec: Option<PeersRecord>, rail: Option<u32>) -> Facts {
    Facts {
        record: Ok(rec),
        boot_id: Some(BOOT.into()),
        now: NOW,
        ports: Ok(vec![LocalPort {
            device: "rxe0".into(),
            port: 1,
            rail,
        }]),
    }
}

fn judge(rec: PeersRecord) -> Check {
    evaluate(&facts(Some(rec), Some(0)), &PeersConfig::default()).0
}

pub(super) fn all(stage: Stage) -> Vec<Probe> {
    ["node-b", "node-c", "node-d"]
        .iter()
        .map(|n| probe(n, stage))
        .collect()
}

pub(super) fn healthy() -> Vec<Probe> {
    all(Stage::Done)
}

#[track_caller]
pub(super) fn says(c: &Check, status: Status, reason: Option<Reason>, words: &[&str]) {
    assert_eq!(c.status, status, "{}", c.message);
    assert_eq!(c.reason, reason, "{}", c.message);
    for w in words {
        assert!(c.message.contains(w), "{w:?} not in {}", c.message);
    }
}

#[test]
fn healthy_rounds_are_ok_with_rtt_and_mtu() {
    let c = judge(record(vec![healthy(), healthy()]));
    says(
        &c,
        Status::Ok,
        None,
        &["rxe0/1: 3 of 3 peers answered both ways, median rtt 42 µs, path MTU 4096"],
    );
}

#[test]
fn no_record_stale_other_boot_and_old_version_are_unknown_never_ok() {
    let cfg = PeersConfig::default();
    let c = evaluate(&facts(None, None), &cfg).0;
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["no peer-probe record yet"],
    );
    let mut other = record(vec![healthy(), healthy()]);
    other.boot_id = "boot-before".into();
    let c = evaluate(&facts(Some(other), None), &cfg).0;
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["before this boot"],
    );
    let mut stale = record(vec![healthy(), healthy()]);
    for r in &mut stale.rounds {
        r.finished_unix -= 181;
    }
    let c = evaluate(&facts(Some(stale), None), &cfg).0;
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["more than three intervals (180s)"],
    );
    // The peer source failed: the round ran on an old list (or none), so
    // healthy probes prove nothing about the fleet as it is now.
    let mut blind = record(vec![healthy(), healthy()]);
    blind.source_error = Some("cannot read the peers file /etc/p.toml: gone".into());
    let c = evaluate(&facts(Some(blind), None), &cfg).0;
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["peer source", "/etc/p.toml"],
    );
    let mut old = record(vec![healthy()]);
    old.version = VERSION + 1;
    let c = evaluate(&facts(Some(old), None), &cfg).0;
    assert_eq!(c.status, Status::Unknown);
    let bad = Facts {
        record: Err("/var/lib/rdma-node-agent/peers.json does not parse".into()),
        ..facts(None, None)
    };
    let c = evaluate(&bad, &cfg).0;
    says(
        &c,
        Status::Unknown,
        Some(Reason::FACT_UNREADABLE),
        &["peers.json"],
    );
}

#[test]
fn the_helper_not_running_or_only_load_refusals_are_unknown() {
    let c = judge(record(vec![healthy(), all(Stage::Helper)]));
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["the probe helper could not run: rdma-node-agent-probe: not found"],
    );
    let mut busy = all(Stage::Rejected);
    for p in &mut busy {
        p.reject_why = Some("rate_limited".into());
    }
    let c = judge(record(vec![healthy(), busy]));
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["refused for load"],
    );
    let c = judge(record(vec![healthy(), Vec::new()]));
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["probed no peer"],
    );
}

/// The bad node itself: no peer answers. Named `warn` after one round,
/// `fail` once the round before agrees.
#[test]
fn a_node_no_peer_reaches_names_itself_within_two_rounds() {
    let c = judge(record(vec![healthy(), all(Stage::Connect)]));
    says(
        &c,
        Status::Warn,
        Some(reasons::PEER_UNREACHABLE),
        &["0 of 3"],
    );
    // Just started: no round before speaks for the port.
    let c = judge(record(vec![all(Stage::Connect)]));
    says(
        &c,
        Status::Fail,
        Some(reasons::PEER_UNREACHABLE),
        &["0 of 3"],
    );
    let c = judge(record(vec![all(Stage::Connect), all(Stage::Connect)]));
    says(
        &c,
        Status::Fail,
        Some(reasons::PEER_UNREACHABLE),
        &[
            "rxe0/1: 0 of 3 peers answered both ways (quorum 2); its probes reach no peer",
            "node-b",
        ],
    );
}

/// A healthy peer of that bad node: 2 of 3 answered; it names the bad node,
/// low severity, and does not blame itself.
#[test]
fn a_healthy_peer_names_the_bad_node_with_low_severity() {
    let mut p = healthy();
    p[1] = probe("node-bad", Stage::Connect);
    let c = judge(record(vec![p.clone(), p]));
    says(
        &c,
        Status::Warn,
        Some(reasons::PEER_UNREACHABLE),
        &[
            "2 of 3 peers",
            "the fault is theirs, not this port's",
            "node-bad",
        ],
    );
    assert!(!c.status.blocks_ready());
}

#[test]
fn an_mtu_mismatch_on_the_port_fails_on_it_and_warns_on_its_peers() {
    let c = judge(record(vec![all(Stage::Full), all(Stage::Full)]));
    says(
        &c,
        Status::Fail,
        Some(reasons::MTU_MISMATCH),
        &["none of the path MTU's size"],
    );
    let mut p = healthy();
    p[2] = probe("node-mtu", Stage::Full);
    let c = judge(record(vec![p.clone(), p]));
    says(&c, Status::Warn, Some(reasons::MTU_MISMATCH), &["node-mtu"]);
}

#[test]
fn one_rounds_full_size_timeouts_after_a_healthy_round_are_loss_not_mtu() {
    // Recorded by the fabric tier's fault-free run on a loaded guest: one
    // round's full-size exchanges timed out to two of three peers.
    let mut p = healthy();
    p[0] = probe("node-a", Stage::Full);
    p[1] = probe("node-b", Stage::Full);
    let c = judge(record(vec![healthy(), p.clone()]));
    says(
        &c,
        Status::Warn,
        Some(reasons::LOSS),
        &[
            "1 of 3 peers",
            "carried them the round before",
            "node-a",
            "node-b",
        ],
    );
    // The same paths again the next round: their MTU it is (`warn` still:
    // one peer answered the round before).
    let c = judge(record(vec![p.clone(), p]));
    says(
        &c,
        Status::Warn,
        Some(reasons::MTU_MISMATCH),
        &["none of the path MTU's size"],
    );
}

#[test]
fn a_lost_ipv4_address_is_gid_missing() {
    let c = judge(record(vec![all(Stage::Source), all(Stage::Source)]));
    says(
        &c,
        Status::Fail,
        Some(reasons::GID_MISSING),
        &["no address to probe from"],
    );
    // Its responder stopped for the same cause: the cause is named.
    let mut rec = record(vec![all(Stage::Source), all(Stage::Source)]);
    rec.responders[0].running = false;
    rec.responders[0].error = Some("rdma_bind_addr: no address".into());
    let c = judge(rec);
    says(
        &c,
        Status::Fail,
        Some(reasons::GID_MISSING),
        &["no address to probe from"],
    );
}

#[test]
fn outbound_failing_while_inbound_is_answered_is_one_way() {
    let mut rec = record(vec![all(Stage::Connect), all(Stage::Connect)]);
    rec.inbound.push(Inbound {
        device: "rxe0".into(),
        port: 1,
        from: "10.0.0.7".into(),
        from_node: Some("node-c".into()),
        answered_total: 12,
        refused_total: 0,
        last_answered_unix: Some(NOW - 30),
        last_refused_unix: None,
        last_refused_why: None,
    });
    let c = judge(rec);
    says(
        &c,
        Status::Fail,
        Some(reasons::ONE_WAY),
        &["its own reach no peer"],
    );
}

#[test]
fn a_port_on_the_wrong_rail_fails_and_a_peer_on_it_is_named() {
    let mut moved = healthy();
    for p in &mut moved {
        p.answered_rail = Some(1);
    }
    let c = judge(record(vec![moved.clone(), moved]));
    says(
        &c,
        Status::Fail,
        Some(reasons::RAIL_MISMATCH),
        &[
            "node-b answered from rail 1 (expected 0)",
            "this port sits on another rail",
        ],
    );
    let mut one = healthy();
    one[0].answered_rail = Some(1);
    let c = judge(record(vec![one.clone(), one]));
    says(
        &c,
        Status::Warn,
        Some(reasons::RAIL_MISMATCH),
        &["node-b answered from rail 1"],
    );
    // No rail known anywhere: no rail verdict.
    let mut none = healthy();
    for p in &mut none {
        p.peer.rail = None;
        p.answered_rail = Some(1);
    }
    let c = evaluate(
        &facts(Some(record(vec![none])), None),
        &PeersConfig::default(),
    )
    .0;
    assert_eq!(c.status, Status::Ok, "{}", c.message);
}

#[test]
fn a_peer_answering_one_round_and_not_the_other_is_loss() {
    let mut now = healthy();
    now[0] = probe("node-b", Stage::Small);
    let c = judge(record(vec![healthy(), now.clone()]));
    says(
        &c,
        Status::Warn,
        Some(reasons::LOSS),
        &["answered the round before, not now: node-b"],
    );
    let c = judge(record(vec![now, healthy()]));
    says(
        &c,
        Status::Warn,
        Some(reasons::LOSS),
        &["the round before these did not: node-b"],
    );
}

#[test]
fn a_key_every_peer_refuses_fails_and_a_forged_probe_is_named_by_the_responder() {
    let mut refused = all(Stage::Rejected);
    for p in &mut refused {
        p.reject_why = Some("bad_key".into());
    }
    let c = judge(record(vec![refused.clone(), refused]));
    says(
        &c,
        Status::Fail,
        Some(reasons::KEY_REJECTED),
        &["not the fleet's"],
    );
    let mut rec = record(vec![healthy(), healthy()]);
    rec.inbound.push(Inbound {
        device: "rxe0".into(),
        port: 1,
        from: "10.0.0.66".into(),
        from_node: None,
        answered_total: 0,
        refused_total: 1,
        last_answered_unix: None,
        last_refused_unix: Some(NOW - 10),
        last_refused_why: Some("bad_key".into()),
    });
    let c = judge(rec);
    says(
        &c,
        Status::Warn,
        Some(reasons::KEY_REJECTED),
        &["refused 1 probe(s) from 10.0.0.66 (bad_key)", "forged"],
    );
}

#[test]
fn a_stopped_responder_fails_on_its_node() {
    let mut rec = record(vec![healthy(), healthy()]);
    rec.responders[0].running = false;
    rec.responders[0].error = Some("exited: signal 9".into());
    let c = judge(rec);
    says(
        &c,
        Status::Fail,
        Some(reasons::RESPONDER_DOWN),
        &["not running (exited: signal 9)"],
    );
}

#[test]
fn metrics_carry_one_cell_per_probed_peer() {
    let mut p = healthy();
    p[1] = probe("node-bad", Stage::Connect);
    let (_, obs) = evaluate(
        &facts(Some(record(vec![p])), Some(0)),
        &PeersConfig::default(),
    );
    assert_eq!(obs.len(), 4);
    let mut m = crate::exposition::Families::new("rdma_node_agent");
    metrics::families(&mut m, &obs);
    let text = m.render(crate::exposition::Format::Text);
    assert!(
        text.contains("rdma_node_agent_peer_probe_ok{device=\"rxe0\",port=\"1\",rail=\"0\",peer=\"node-bad\",peer_rail=\"0\",stage=\"connect\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("rdma_node_agent_peer_probes{device=\"rxe0\",port=\"1\",stage=\"done\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("rdma_node_agent_peer_path_mtu_bytes{device=\"rxe0\",port=\"1\"} 4096"),
        "{text}"
    );
    assert!(
        text.contains("rdma_node_agent_peer_responder_info{device=\"rxe0\",port=\"1\",addr=\"10.0.0.1\",rail=\"0\"} 1"),
        "{text}"
    );
}
