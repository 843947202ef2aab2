//! The `rdma.peers` families of the exposition. Per port, the newest round's
//! probes by stage and the smallest path MTU; per probed peer (k a port, so
//! at most k × ports series: bounded) whether it answered both ways and its
//! round-trip time: the cells `rdma-node-agent fleet` and the recording rules
//! build the rail × node matrix from.

use std::collections::BTreeMap;

use super::decide::LocalPort;
use crate::exposition::{Families, Kind};
use crate::host::probe::record::{PeersRecord, Stage};
use crate::observe::{Observation, Own, owned};

/// One probe of the newest round: a cell of the fleet's rail × node matrix.
/// `stage` is the record's (`done`, `connect`, …), or `wrong_peer` when another
/// node answered at the peer's address.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerProbe {
    pub device: String,
    pub port: u32,
    pub rail: Option<u32>,
    pub peer_node: String,
    pub peer_rail: Option<u32>,
    pub stage: &'static str,
    pub rtt_us: Option<u64>,
    pub path_mtu: Option<u32>,
}

/// A running probe responder of an ACTIVE port: what the Prometheus peer
/// source reads to learn whom to probe.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerResponder {
    pub device: String,
    pub port: u32,
    pub addr: String,
    pub rail: Option<u32>,
}

pub fn stage_name(s: Stage) -> &'static str {
    match s {
        Stage::Source => "source",
        Stage::Resolve => "resolve",
        Stage::Connect => "connect",
        Stage::Rejected => "rejected",
        Stage::Small => "small",
        Stage::Full => "full",
        Stage::Helper => "helper",
        Stage::Stuck => "stuck",
        Stage::Done => "done",
    }
}

/// The running responders of ACTIVE ports and the newest round's probes from
/// them, as observations.
pub fn observations(rec: &PeersRecord, ports: &[LocalPort]) -> Vec<Observation> {
    let local =
        |device: &str, port: u32| ports.iter().find(|l| l.device == device && l.port == port);
    let mut out: Vec<Observation> = rec
        .responders
        .iter()
        .filter(|r| r.running)
        .filter_map(|r| {
            let l = local(&r.device, r.port)?;
            Some(Observation::Own(Own::new(PeerResponder {
                device: r.device.clone(),
                port: r.port,
                addr: r.addr.clone(),
                rail: l.rail,
            })))
        })
        .collect();
    let Some(round) = rec.rounds.last() else {
        return out;
    };
    out.extend(round.probes.iter().filter_map(|p| {
        let local = ports
            .iter()
            .find(|l| l.device == p.device && l.port == p.port)?;
        Some(Observation::Own(Own::new(PeerProbe {
            device: p.device.clone(),
            port: p.port,
            rail: local.rail,
            peer_node: p.peer.node.clone(),
            peer_rail: p.peer.rail,
            // Another node's answer is no answer from this peer.
            stage: if p.answered_by_another() {
                "wrong_peer"
            } else {
                stage_name(p.stage)
            },
            rtt_us: p.rtt_us.filter(|_| p.answered()),
            path_mtu: p.path_mtu,
        })))
    }));
    out
}

fn rail(r: &Option<u32>) -> String {
    r.map(|r| r.to_string()).unwrap_or_default()
}

pub fn families(m: &mut Families, seen: &[Observation]) {
    responders(m, seen);
    let rows: Vec<&PeerProbe> = owned::<PeerProbe>(seen).collect();
    cells(m, &rows);
    per_port(m, &rows);
}

/// One series per running responder.
fn responders(m: &mut Families, seen: &[Observation]) {
    let f = m.family(
        "peer_responder_info",
        Kind::Gauge,
        "1 per running peer-probe responder of an ACTIVE RDMA port; labels: device, port, addr (where peers probe it), rail (empty when unknown): what the Prometheus peer source reads, joined with port_info for the fabric",
    );
    for r in owned::<PeerResponder>(seen) {
        f.sample(
            vec![
                ("device", r.device.clone()),
                ("port", r.port.to_string()),
                ("addr", r.addr.clone()),
                ("rail", rail(&r.rail)),
            ],
            1.0,
        );
    }
}

/// Per probed peer: whether it answered both ways, and its round-trip time.
fn cells(m: &mut Families, rows: &[&PeerProbe]) {
    let f = m.family(
        "peer_probe_ok",
        Kind::Gauge,
        "1 when the newest round's probe from a local RDMA port to a peer answered both ways, else 0; labels: device, port, rail (the local port's, empty when unknown), peer (its node), peer_rail, stage (how far it got: done, source, resolve, connect, rejected, small, full; wrong_peer: another node answered at its address; helper: the probe helper could not run; stuck: it was killed and has not exited); k series per port",
    );
    for p in rows {
        f.sample(
            vec![
                ("device", p.device.clone()),
                ("port", p.port.to_string()),
                ("rail", rail(&p.rail)),
                ("peer", p.peer_node.clone()),
                ("peer_rail", rail(&p.peer_rail)),
                ("stage", p.stage.to_owned()),
            ],
            if p.stage == "done" { 1.0 } else { 0.0 },
        );
    }
    let f = m.family(
        "peer_probe_rtt_seconds",
        Kind::Gauge,
        "Round-trip time of the newest round's small exchange from a local RDMA port to a peer that answered both ways",
    );
    for p in rows {
        if let Some(us) = p.rtt_us {
            f.sample(
                vec![
                    ("device", p.device.clone()),
                    ("port", p.port.to_string()),
                    ("peer", p.peer_node.clone()),
                ],
                us as f64 / 1e6,
            );
        }
    }
}

/// Per local port: the probes by stage, and the smallest path MTU.
fn per_port(m: &mut Families, rows: &[&PeerProbe]) {
    let mut by_stage: BTreeMap<(String, u32, &'static str), u64> = BTreeMap::new();
    let mut mtu: BTreeMap<(String, u32), u32> = BTreeMap::new();
    for p in rows {
        *by_stage
            .entry((p.device.clone(), p.port, p.stage))
            .or_default() += 1;
        if let Some(m) = p.path_mtu {
            let e = mtu.entry((p.device.clone(), p.port)).or_insert(m);
            *e = (*e).min(m);
        }
    }
    let f = m.family(
        "peer_probes",
        Kind::Gauge,
        "The newest round's probes from a local RDMA port, by stage (done: answered both ways; else the stage that failed)",
    );
    for ((device, port, stage), n) in &by_stage {
        f.sample(
            vec![
                ("device", device.clone()),
                ("port", port.to_string()),
                ("stage", (*stage).to_owned()),
            ],
            *n as f64,
        );
    }
    let f = m.family(
        "peer_path_mtu_bytes",
        Kind::Gauge,
        "The smallest path MTU of the newest round's connected probes from a local RDMA port (bytes, 256..4096)",
    );
    for ((device, port), v) in &mtu {
        f.sample(
            vec![("device", device.clone()), ("port", port.to_string())],
            f64::from(*v),
        );
    }
}
