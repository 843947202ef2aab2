//! What the peers' probes to a port say about it, from its responder's
//! tallies (`Inbound`): the way in, which the port's own probes cannot show.

use super::config::PeersConfig;
use super::decide::{LocalPort, Verdict};
use super::reasons;
use crate::engine::check::Status;
use crate::host::probe::record::{Inbound, PeersRecord};

/// Did this port's responder answer a peer within the last two intervals?
pub(super) fn answered_lately(
    inbound: &[Inbound],
    p: &LocalPort,
    now: u64,
    cfg: &PeersConfig,
) -> bool {
    inbound.iter().any(|i| {
        i.device == p.device
            && i.port == p.port
            && i.last_answered_unix
                .is_some_and(|t| now.saturating_sub(t) <= 2 * cfg.interval_secs)
    })
}

/// The port's probes reach its peers, but none of theirs reached it: its
/// responder has listened for three intervals (every peer that probes it had
/// two rounds or more) and answered or refused nobody since. Only the way in
/// is broken; without this the port would be `ok` while its peers name it.
pub(super) fn not_reached(
    rec: &PeersRecord,
    p: &LocalPort,
    now: u64,
    cfg: &PeersConfig,
) -> Option<Verdict> {
    let window = 3 * cfg.interval_secs;
    let since = rec
        .responders
        .iter()
        .find(|r| r.device == p.device && r.port == p.port && r.running)?
        .ready_since_unix?;
    if now.saturating_sub(since) < window {
        return None;
    }
    let from = now - window;
    let reached = rec.inbound.iter().any(|i| {
        i.device == p.device
            && i.port == p.port
            && i.last_answered_unix
                .max(i.last_refused_unix)
                .is_some_and(|t| t >= from)
    });
    (!reached).then(|| {
        Verdict::new(
            p,
            Status::Fail,
            Some(reasons::NOT_REACHED),
            format!(
                "its probes reach its peers, but no peer's probe reached its responder in the last {window}s (it listens since {}): the way in is broken; its peers name it",
                crate::concerns::rdma::link::utc(since)
            ),
        )
    })
}

/// Senders this node's responder refused over the key or the clock in the
/// last two intervals: a node with another key, a forged probe, a clock off.
pub(super) fn refused_senders(rec: &PeersRecord, now: u64, cfg: &PeersConfig) -> Vec<Verdict> {
    rec.inbound
        .iter()
        .filter(|i| {
            i.last_refused_unix
                .is_some_and(|t| now.saturating_sub(t) <= 2 * cfg.interval_secs)
                && matches!(
                    i.last_refused_why.as_deref(),
                    Some("bad_key" | "stale" | "replay")
                )
        })
        .map(|i| {
            let local = LocalPort {
                device: i.device.clone(),
                port: i.port,
                rail: None,
            };
            // The key is checked first: `stale` had the right one.
            let (reason, what) = match i.last_refused_why.as_deref() {
                Some("stale") => (
                    reasons::CLOCK_SKEW,
                    "outside the ±60 s window: that node's clock or this one's is off, or an old probe was replayed",
                ),
                _ => (
                    reasons::KEY_REJECTED,
                    "a node without the fleet key, or a forged or replayed probe",
                ),
            };
            Verdict::new(
                &local,
                Status::Warn,
                Some(reason),
                format!(
                    "its responder refused {} probe(s) from {}{} ({}): {what}",
                    i.refused_total,
                    i.from,
                    i.from_node
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default(),
                    i.last_refused_why.as_deref().unwrap_or("")
                ),
            )
        })
        .collect()
}
