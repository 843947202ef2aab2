//! The prober: every interval, each ACTIVE local port with an address probes
//! k peers on its fabric through the probe helper, and the round is kept as
//! `peers.json` through the state writer. Probing changes nothing on the host,
//! so `report` mode probes too. Settings and peers come from the caller (the
//! `[peers]` section and its peer source).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::host::Host;
use crate::host::probe::local::{self, LocalPort};
use crate::host::probe::record::{self, Inbound, Peer, PeersRecord, Probe, Responder, Round};
use crate::host::probe::responder::Supervisor;
use crate::host::probe::{helper, settings::ProberSettings};
use crate::host::state::{Record, STATE_DIR};
use crate::host::state_writer::{Access, StateWriter};

/// Rounds kept: verdicts compare the last two; one more shows a trend.
pub const KEEP_ROUNDS: usize = 3;

/// The local port's own entry in the peer list: its fabric and rail as the
/// source names them (a port the source does not list probes nobody).
pub fn own_entry<'a>(node: &str, port: &LocalPort, peers: &'a [Peer]) -> Option<&'a Peer> {
    let addr = port.addr.as_deref()?;
    peers.iter().find(|p| p.node == node && p.addr == addr)
}

/// The k peers `me` probes in `round`. Every member of the fabric (sorted,
/// `me` included) probes the members at offsets 1 + (round·k + j) mod (n−1),
/// j < k: each offset is a bijection of the ring, so every member is probed by
/// exactly k others each round, and the offsets rotate across rounds.
pub fn pick(me: &Peer, peers: &[Peer], k: usize, same_rail: bool, round: u64) -> Vec<Peer> {
    let mut ring: Vec<&Peer> = peers
        .iter()
        .filter(|p| p.fabric == me.fabric)
        .filter(|p| !same_rail || p.rail.is_none() || me.rail.is_none() || p.rail == me.rail)
        .collect();
    ring.sort();
    ring.dedup();
    let Some(at) = ring.iter().position(|p| *p == me) else {
        return Vec::new();
    };
    let n = ring.len() as u64;
    if n < 2 {
        return Vec::new();
    }
    let k = (k as u64).min(n - 1);
    (0..k)
        .map(|j| {
            let offset = 1 + (round.wrapping_mul(k) + j) % (n - 1);
            ring[((at as u64 + offset) % n) as usize].clone()
        })
        .filter(|p| p.node != me.node)
        .collect()
}

/// `pick`, with `me` in the ring even where the list no longer names it (a
/// remembered entry of a port that lost its address).
fn pick_listed(me: &Peer, peers: &[Peer], k: usize, same_rail: bool, round: u64) -> Vec<Peer> {
    if peers.contains(me) {
        return pick(me, peers, k, same_rail, round);
    }
    let mut ring = peers.to_vec();
    ring.push(me.clone());
    pick(me, &ring, k, same_rail, round)
}

/// Runs `probe` on every (port, peer) with at most `parallel` at once; the
/// probes in the order given.
pub fn run_all<F>(work: &[(LocalPort, Peer)], parallel: usize, probe: F) -> Vec<Probe>
where
    F: Fn(&LocalPort, &Peer) -> Probe + Sync,
{
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Probe)>> = Mutex::new(Vec::with_capacity(work.len()));
    std::thread::scope(|s| {
        for _ in 0..parallel.clamp(1, work.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some((port, peer)) = work.get(i) else {
                        return;
                    };
                    let p = probe(port, peer);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((i, p));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, p)| p).collect()
}

/// The record after a round: the last rounds of this boot, the tallies and
/// the responders. A record of another boot proves nothing about this one.
pub fn next_record(
    prev: Option<PeersRecord>,
    boot_id: &str,
    round: Round,
    inbound: Vec<Inbound>,
    responders: Vec<Responder>,
) -> PeersRecord {
    let mut rounds = prev
        .filter(|r| r.boot_id == boot_id && r.version == record::VERSION)
        .map(|r| r.rounds)
        .unwrap_or_default();
    rounds.push(round);
    let excess = rounds.len().saturating_sub(KEEP_ROUNDS);
    rounds.drain(..excess);
    PeersRecord {
        version: record::VERSION,
        boot_id: boot_id.to_owned(),
        rounds,
        inbound,
        responders,
        source_error: None,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn read_trimmed(host: &Host, p: &str) -> String {
    host.read_string(Path::new(p))
        .ok()
        .flatten()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The prober's state across rounds.
#[derive(Default)]
pub struct Prober {
    round: u64,
    responders: Supervisor,
    inbound: Vec<Inbound>,
    last: Option<PeersRecord>,
    /// Each local port's own entry in the peer list when it last had an
    /// address: a port that loses it (and its RoCE v2 IPv4 GID) still probes
    /// from that entry, so the record says `Stage::Source` instead of nothing.
    owned: BTreeMap<(String, u32), Peer>,
}

impl Prober {
    /// The local ports the peer list assigns to `node`, with their entries:
    /// by address, or, for a port without one, by the entry it had before
    /// (this run, or the last record's probes from it) while the list still
    /// names it. Other ports are not this agent's: no responder, no probe
    /// (with `serve_unlisted`: a responder, no probe).
    fn assigned(
        &mut self,
        node: &str,
        ports: Vec<LocalPort>,
        peers: &[Peer],
        prev: Option<&PeersRecord>,
        serve_unlisted: bool,
    ) -> Vec<(LocalPort, Option<Peer>)> {
        if self.owned.is_empty()
            && let Some(prev) = prev
        {
            // Newest first: a port's latest address wins. After as many
            // rounds without one as are kept, the port is forgotten (no
            // probes: `unknown`, never ok).
            for p in prev.rounds.iter().rev().flat_map(|r| &r.probes) {
                let key = (p.device.clone(), p.port);
                if p.src.is_empty() || self.owned.contains_key(&key) {
                    continue;
                }
                if let Some(me) = peers.iter().find(|x| x.node == node && x.addr == p.src) {
                    self.owned.insert(key, me.clone());
                }
            }
        }
        let mut out = Vec::new();
        for mut p in ports {
            let key = (p.device.clone(), p.port);
            let me = match p.addr {
                Some(_) => own_entry(node, &p, peers).cloned(),
                // A source of running responders drops a port whose address
                // went (its responder stopped): the port still probes, as `source`.
                None => self
                    .owned
                    .get(&key)
                    .filter(|e| serve_unlisted || peers.contains(e))
                    .cloned(),
            };
            let Some(me) = me else {
                // Listed by nobody yet: a source that lists running responders
                // only (Prometheus) needs this one to run first; it probes
                // once the source names it.
                if serve_unlisted && p.addr.is_some() {
                    out.push((p, None));
                }
                continue;
            };
            self.owned.insert(key, me.clone());
            p.fabric = Some(me.fabric.clone());
            p.rail = me.rail;
            out.push((p, Some(me)));
        }
        out
    }

    fn previous(&mut self, host: &Host) -> Option<PeersRecord> {
        self.last.take().or_else(|| {
            let bytes = host
                .state_read(&Path::new(STATE_DIR).join(record::FILE))
                .ok()
                .flatten()?;
            serde_json::from_slice(&bytes).ok()
        })
    }

    /// One round: responders reconciled, probes run, the record written.
    /// `source_error`: why the peer source failed (then `peers` is the last
    /// list read); kept in the record so `rdma.peers` says `unknown`.
    pub fn tick(
        &mut self,
        host: &Host,
        s: &ProberSettings,
        node: &str,
        peers: &[Peer],
        source_error: Option<String>,
    ) -> crate::host::Result<PeersRecord> {
        let boot_id = read_trimmed(host, "/proc/sys/kernel/random/boot_id");
        let prev = self.previous(host);
        let ports = local::active_roce_ports(host);
        let mine = self.assigned(node, ports, peers, prev.as_ref(), s.serve_unlisted);
        let ports: Vec<LocalPort> = mine.iter().map(|(p, _)| p.clone()).collect();
        let responders = self.responders.reconcile(s, node, &ports, Instant::now());
        let work: Vec<(LocalPort, Peer)> = mine
            .iter()
            .filter_map(|(p, me)| Some((p, me.as_ref()?)))
            .flat_map(|(p, me)| {
                pick_listed(me, peers, s.k, s.same_rail, self.round)
                    .into_iter()
                    .map(|peer| (p.clone(), peer))
            })
            .collect();
        let started = unix_now();
        let probes = run_all(&work, s.parallel, |port, peer| {
            helper::ping(s, node, port, peer, unix_now())
        });
        let round = Round {
            started_unix: started,
            finished_unix: unix_now(),
            probes,
        };
        self.round = self.round.wrapping_add(1);
        self.responders.drain(&mut self.inbound);
        let mut rec = next_record(prev, &boot_id, round, self.inbound.clone(), responders);
        rec.source_error = source_error;
        let mut bytes = serde_json::to_vec_pretty(&rec).unwrap_or_default();
        bytes.push(b'\n');
        let file = Record {
            path: Path::new(STATE_DIR).join(record::FILE),
            bytes,
            note: None,
        };
        StateWriter::new(host).keep(&file, Access::Public)?;
        self.last = Some(rec.clone());
        Ok(rec)
    }
}

#[cfg(test)]
#[path = "probes_tests.rs"]
mod tests;
