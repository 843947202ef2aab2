//! The prober: every interval, each ACTIVE local port with an address probes
//! k peers on its fabric through the probe helper, and the round is kept as
//! `peers.json` through the state writer. Probing changes nothing on the host,
//! so `report` mode probes too. Settings and peers come from the caller (the
//! `[peers]` section and its peer source).

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
use crate::host::stop::Stop;

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
}

impl Prober {
    /// One round: responders reconciled, probes run, the record written.
    pub fn tick(
        &mut self,
        host: &Host,
        s: &ProberSettings,
        node: &str,
        peers: &[Peer],
    ) -> crate::host::Result<PeersRecord> {
        let boot_id = read_trimmed(host, "/proc/sys/kernel/random/boot_id");
        let mut ports = local::active_roce_ports(host);
        for p in &mut ports {
            if let Some(own) = own_entry(node, p, peers) {
                p.fabric = Some(own.fabric.clone());
                p.rail = own.rail;
            }
        }
        let responders = self.responders.reconcile(s, node, &ports, Instant::now());
        let work: Vec<(LocalPort, Peer)> = ports
            .iter()
            .filter_map(|p| Some((p, own_entry(node, p, peers)?)))
            .flat_map(|(p, me)| {
                pick(me, peers, s.k, s.same_rail, self.round)
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
        let prev = self.last.take().or_else(|| {
            let bytes = host
                .state_read(&Path::new(STATE_DIR).join(record::FILE))
                .ok()
                .flatten()?;
            serde_json::from_slice(&bytes).ok()
        });
        let rec = next_record(prev, &boot_id, round, self.inbound.clone(), responders);
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

/// The prober's thread: a round every interval until `stop`. `peers` is asked
/// each round (the source may change); a failed write is logged, not fatal.
pub fn run(host: Host, s: ProberSettings, peers: impl Fn() -> Vec<Peer>, stop: Stop) {
    if !s.enabled || !host.is_live() {
        return;
    }
    let node = read_trimmed(&host, "/proc/sys/kernel/hostname");
    let mut prober = Prober::default();
    loop {
        if let Err(e) = prober.tick(&host, &s, &node, &peers()) {
            tracing::warn!(
                "peer probes: cannot write {}/{}: {e}",
                STATE_DIR,
                record::FILE
            );
        }
        if stop.sleep(s.interval) {
            return;
        }
    }
}

#[cfg(test)]
#[path = "probes_tests.rs"]
mod tests;
