//! The verdict, pure: each ACTIVE port judged from the last two probe rounds.
//!
//! The quorum: a port is `ok` when, in the newest round, a strict majority of
//! the peers it probed (refusals for load — `rate_limited`, `busy` — not
//! counted) answered both ways, and none of them from an unexpected rail.
//! Whose fault a failure is follows from how many peers share it: when (almost)
//! every peer fails the same way the port is at fault and says so (`fail`);
//! when a majority answered, the few that did not are named (`warn`): a
//! healthy node is never the one blamed for a bad peer. A port-level fault
//! the newest round shows while the round before showed the port healthy is
//! `warn` until the next round confirms it.

use super::config::PeersConfig;
use crate::engine::check::Status;
use crate::host::probe::record::{PeersRecord, Probe, Responder, Round, Stage, VERSION};
use crate::reason::Reason;

use super::failures::{dominant, peer_list};
use super::inbound;
use super::reasons;

/// An ACTIVE local port, as the inventory and `[peers.rails]` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    pub device: String,
    pub port: u32,
    pub rail: Option<u32>,
}

impl LocalPort {
    pub fn name(&self) -> String {
        format!("{}/{}", self.device, self.port)
    }
}

/// What one port's verdict says.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub port: String,
    pub status: Status,
    pub reason: Option<Reason>,
    pub text: String,
}

impl Verdict {
    pub(super) fn new(
        port: &LocalPort,
        status: Status,
        reason: Option<Reason>,
        text: String,
    ) -> Self {
        Verdict {
            port: port.name(),
            status,
            reason,
            text: format!("{}: {text}", port.name()),
        }
    }
}

/// Why the record proves nothing about this boot now, if it does not.
pub fn unproven(
    record: &PeersRecord,
    boot_id: Option<&str>,
    now: u64,
    cfg: &PeersConfig,
) -> Option<String> {
    if record.version != VERSION {
        return Some(format!(
            "the probe record is of version {} (this agent reads {VERSION})",
            record.version
        ));
    }
    match boot_id {
        None => return Some("this boot's id cannot be read".into()),
        Some(b) if b != record.boot_id => {
            return Some(
                "the probe record is from before this boot: no round has run since".into(),
            );
        }
        Some(_) => {}
    }
    if let Some(e) = &record.source_error {
        return Some(format!(
            "the peer source failed for the newest round, which ran on the last list read (if any): {e}"
        ));
    }
    let Some(last) = record.rounds.last() else {
        return Some("no probe round has finished yet".into());
    };
    let age = now.saturating_sub(last.finished_unix);
    if age > cfg.stale_after_secs() {
        return Some(format!(
            "the newest probe round finished {age}s ago, more than three intervals ({}s): the prober is not running",
            cfg.stale_after_secs()
        ));
    }
    None
}

/// Is this ACTIVE port one the peer list gives this node? The prober runs a
/// responder (or tried to) or probes from exactly those ports, so the newest
/// round says: a listed port that lost its address still probes (`source`).
pub fn assigned(rec: &PeersRecord, p: &LocalPort) -> bool {
    rec.responders
        .iter()
        .any(|r| r.device == p.device && r.port == p.port)
        || !of_port(rec.rounds.last(), p).is_empty()
}

fn of_port<'a>(round: Option<&'a Round>, p: &LocalPort) -> Vec<&'a Probe> {
    round
        .map(|r| {
            r.probes
                .iter()
                .filter(|x| x.device == p.device && x.port == p.port)
                .collect()
        })
        .unwrap_or_default()
}

/// A refusal for load says nothing about the path.
fn counted(p: &&Probe) -> bool {
    let load = p.stage == Stage::Rejected
        && matches!(p.reject_why.as_deref(), Some("rate_limited" | "busy"));
    !load && !matches!(p.stage, Stage::Helper | Stage::Stuck)
}

/// The rail a peer should answer from: this port's when it has one (rails are
/// separate fabrics), else the one the source gave.
fn expected_rail(local: &LocalPort, p: &Probe) -> Option<u32> {
    local.rail.or(p.peer.rail)
}

fn wrong_rail(local: &LocalPort, p: &Probe) -> bool {
    p.answered()
        && matches!((expected_rail(local, p), p.answered_rail), (Some(e), Some(a)) if e != a)
}

/// One port's verdict from the record (already known to be this boot's and fresh).
pub fn judge_port(rec: &PeersRecord, local: &LocalPort, now: u64, cfg: &PeersConfig) -> Verdict {
    let n = rec.rounds.len();
    let newest = of_port(rec.rounds.last(), local);
    let before = of_port(n.checked_sub(2).and_then(|i| rec.rounds.get(i)), local);
    // A responder down because the port lost its address is that address's
    // fault (`gid_missing`, below); otherwise it is the verdict.
    let no_source = !newest.is_empty() && newest.iter().all(|p| p.stage == Stage::Source);
    if let Some(v) = responder(&rec.responders, local).filter(|_| !no_source) {
        return v;
    }
    let v = judge_counted(rec, local, &newest, &before, now, cfg);
    // A helper that cannot die is this node's own RDMA stack not finishing a
    // probe: the answers of the others do not prove the port, so never `ok`;
    // a fault the counted probes show stands.
    match newest.iter().find(|p| p.stage == Stage::Stuck) {
        Some(h) if v.status == Status::Ok => {
            let why = format!("a probe from it did not finish: {}", h.error);
            Verdict::new(local, Status::Unknown, Some(reasons::PEERS_UNPROVEN), why)
        }
        _ => v,
    }
}

/// The verdict from the probes that count (refusals for load and the
/// helper's own failures left out).
fn judge_counted(
    rec: &PeersRecord,
    local: &LocalPort,
    newest: &[&Probe],
    before: &[&Probe],
    now: u64,
    cfg: &PeersConfig,
) -> Verdict {
    let counted_now: Vec<&Probe> = newest.iter().copied().filter(counted).collect();
    if counted_now.is_empty() {
        return nothing_counted(newest, local);
    }
    let r = Judged::new(local, counted_now, before);
    if r.done.len() < r.quorum {
        return r.below_quorum(inbound::answered_lately(&rec.inbound, local, now, cfg));
    }
    if let Some(v) = r.rail_mismatch() {
        return v;
    }
    if !r.failed.is_empty() {
        return r.some_failed();
    }
    if let Some(v) = inbound::not_reached(rec, local, now, cfg) {
        return v;
    }
    r.lost_before()
        .unwrap_or_else(|| Verdict::new(local, Status::Ok, None, ok_text(&r.done, r.total)))
}

/// No probe of the newest round counts: why nothing is proven.
fn nothing_counted(newest: &[&Probe], local: &LocalPort) -> Verdict {
    let helper = newest
        .iter()
        .find(|p| p.stage == Stage::Stuck)
        .or_else(|| newest.iter().find(|p| p.stage == Stage::Helper));
    let why = match helper {
        Some(h) => format!("the probe helper could not run: {}", h.error),
        None if newest.is_empty() => {
            "the last round probed no peer from it (no peer on its fabric in the peer source?)"
                .into()
        }
        None => "every peer it probed refused for load (rate_limited, busy)".into(),
    };
    Verdict::new(local, Status::Unknown, Some(reasons::PEERS_UNPROVEN), why)
}

/// One port's counted probes of the newest round, and the round before.
struct Judged<'a> {
    local: &'a LocalPort,
    done: Vec<&'a Probe>,
    failed: Vec<&'a Probe>,
    total: usize,
    quorum: usize,
    before_counted: Vec<&'a Probe>,
    /// The round before, as one fact: did this port fail everywhere then too?
    failed_all_before: bool,
}

impl<'a> Judged<'a> {
    fn new(local: &'a LocalPort, counted_now: Vec<&'a Probe>, before: &[&'a Probe]) -> Self {
        let done: Vec<&Probe> = counted_now
            .iter()
            .copied()
            .filter(|p| p.answered())
            .collect();
        let failed: Vec<&Probe> = counted_now
            .iter()
            .copied()
            .filter(|p| !p.answered())
            .collect();
        let total = counted_now.len();
        let before_counted: Vec<&Probe> = before.iter().copied().filter(counted).collect();
        let failed_all_before =
            !before_counted.is_empty() && before_counted.iter().all(|p| !p.answered());
        Judged {
            local,
            done,
            failed,
            total,
            quorum: total / 2 + 1,
            before_counted,
            failed_all_before,
        }
    }

    /// Whether `p`'s full-size failure was there the round before too (or
    /// there is no round before: nothing speaks against it).
    fn full_confirmed(&self, p: &Probe) -> bool {
        self.before_counted.is_empty()
            || self
                .before_counted
                .iter()
                .any(|b| b.peer.addr == p.peer.addr && b.stage == Stage::Full)
    }

    /// A port-level fault is `warn` while the round before still showed the
    /// port healthy (one bad round may pass); with no round before (just
    /// started) nothing speaks for it.
    fn confirmed(&self, s: Status) -> Status {
        if self.failed_all_before || self.before_counted.is_empty() {
            s
        } else {
            Status::Warn
        }
    }

    /// Too few answered: the port's fault (or its fabric's). Named by the
    /// stage most of its probes stopped at.
    fn below_quorum(&self, inbound_ok: bool) -> Verdict {
        let (local, done, failed, total, quorum) = (
            self.local,
            &self.done,
            &self.failed,
            self.total,
            self.quorum,
        );
        let reason = dominant(failed, |p| self.full_confirmed(p));
        let reason = if reason == reasons::PEER_UNREACHABLE && inbound_ok {
            reasons::ONE_WAY
        } else {
            reason
        };
        let what = match reason {
            r if r == reasons::GID_MISSING => {
                "it has no address to probe from (its netdev's IPv4 address, and so its RoCE v2 GID, is gone)".to_owned()
            }
            r if r == reasons::MTU_MISMATCH => {
                "small messages went both ways but none of the path MTU's size did: the path carries less than the ports negotiated".to_owned()
            }
            r if r == reasons::LOSS => {
                "full-size messages timed out on paths that carried them the round before (loss or load; an MTU fault shows again the next round)".to_owned()
            }
            r if r == reasons::KEY_REJECTED => {
                "peers refused its probes' key (bad_key): this node's key file is not the fleet's".to_owned()
            }
            r if r == reasons::WRONG_PEER => {
                "other nodes than the peer source names answered at its peers' addresses: the list is stale or addresses are held twice, not this port's fault".to_owned()
            }
            r if r == reasons::CLOCK_SKEW => {
                "peers refused its probes as outside their ±60 s window (stale): this node's clock is off (chrony, NTP, the RTC)".to_owned()
            }
            r if r == reasons::ONE_WAY => {
                "peers' probes reach it (its responder answered in the last two intervals) but its own reach no peer".to_owned()
            }
            _ => "its probes reach no peer: the port, its link or its switch port".to_owned(),
        };
        // Answers from other nodes prove the port's path works.
        let status = match reason {
            r if r == reasons::WRONG_PEER => Status::Warn,
            _ => self.confirmed(Status::Fail),
        };
        Verdict::new(
            local,
            status,
            Some(reason),
            format!(
                "{} of {total} peers answered both ways (quorum {quorum}); {what}; failed: {}",
                done.len(),
                peer_list(failed)
            ),
        )
    }

    /// A majority answered. Answers from another rail than expected.
    fn rail_mismatch(&self) -> Option<Verdict> {
        let (local, done) = (self.local, &self.done);
        let wrong: Vec<&Probe> = done
            .iter()
            .copied()
            .filter(|p| wrong_rail(local, p))
            .collect();
        if wrong.is_empty() {
            return None;
        }
        let rails: Vec<String> = wrong
            .iter()
            .map(|p| {
                format!(
                    "{} answered from rail {} (expected {})",
                    p.peer.node,
                    p.answered_rail.unwrap_or_default(),
                    expected_rail(local, p).unwrap_or_default()
                )
            })
            .collect();
        let (status, whose) = if wrong.len() == done.len() && local.rail.is_some() {
            (
                Status::Fail,
                "every answer: this port sits on another rail than [peers.rails] says",
            )
        } else {
            (
                Status::Warn,
                "the named peers sit on another rail than the peer source says",
            )
        };
        Some(Verdict::new(
            local,
            status,
            Some(reasons::RAIL_MISMATCH),
            format!("{}; {whose}", rails.join(", ")),
        ))
    }

    /// A majority answered and some did not.
    fn some_failed(&self) -> Verdict {
        let (local, done, failed, total, quorum) = (
            self.local,
            &self.done,
            &self.failed,
            self.total,
            self.quorum,
        );
        // A peer that failed in both rounds is the peer's fault; one that
        // answered in the other round is a lossy path.
        let answered_before = |p: &Probe| {
            self.before_counted
                .iter()
                .any(|b| b.peer.addr == p.peer.addr && b.answered())
        };
        let flaky: Vec<&Probe> = failed
            .iter()
            .copied()
            .filter(|p| answered_before(p))
            .collect();
        if !flaky.is_empty() && flaky.len() == failed.len() {
            return Verdict::new(
                local,
                Status::Warn,
                Some(reasons::LOSS),
                format!(
                    "{} of {total} peers answered both ways; answered the round before, not now: {}",
                    done.len(),
                    peer_list(&flaky)
                ),
            );
        }
        Verdict::new(
            local,
            Status::Warn,
            Some(dominant(failed, |p| self.full_confirmed(p))),
            format!(
                "{} of {total} peers answered both ways (quorum {quorum}); the fault is theirs, not this port's: {}",
                done.len(),
                peer_list(failed)
            ),
        )
    }

    /// Every counted probe answered now; a peer that failed the round before
    /// and answers now is a lossy path when this port failed to others too.
    fn lost_before(&self) -> Option<Verdict> {
        let lost_before: Vec<&Probe> = self
            .before_counted
            .iter()
            .copied()
            .filter(|b| !b.answered() && self.done.iter().any(|d| d.peer.addr == b.peer.addr))
            .collect();
        (!lost_before.is_empty() && !self.failed_all_before).then(|| {
            Verdict::new(
                self.local,
                Status::Warn,
                Some(reasons::LOSS),
                format!(
                    "every peer answered now; the round before these did not: {}",
                    peer_list(&lost_before)
                ),
            )
        })
    }
}

fn ok_text(done: &[&Probe], total: usize) -> String {
    let mut rtts: Vec<u64> = done.iter().filter_map(|p| p.rtt_us).collect();
    rtts.sort_unstable();
    let mtu = done.iter().filter_map(|p| p.path_mtu).min();
    let mut t = format!("{} of {total} peers answered both ways", done.len());
    if let Some(m) = rtts.get(rtts.len() / 2) {
        t.push_str(&format!(", median rtt {m} µs"));
    }
    if let Some(m) = mtu {
        t.push_str(&format!(", path MTU {m}"));
    }
    t
}

fn responder(rs: &[Responder], local: &LocalPort) -> Option<Verdict> {
    let r = rs
        .iter()
        .find(|r| r.device == local.device && r.port == local.port && !r.running)?;
    Some(Verdict::new(
        local,
        Status::Fail,
        Some(reasons::RESPONDER_DOWN),
        format!(
            "its probe responder on {} is not running ({}): no peer can prove it",
            r.addr,
            r.error.as_deref().unwrap_or("no error given")
        ),
    ))
}
