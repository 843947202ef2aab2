//! What failed probes stand for: the reason code of one failed probe, the
//! reason most of a port's failures share, and the named list of them a
//! verdict's message carries.

use std::collections::BTreeMap;

use super::reasons;
use crate::host::probe::record::{Probe, Stage};
use crate::reason::Reason;

fn refused(p: &Probe, why: &str) -> bool {
    p.stage == Stage::Rejected && p.reject_why.as_deref() == Some(why)
}

/// The reason a failed probe stands for. The responder checks the key before
/// the time: `stale` is a right key with a clock more than the ±60 s window
/// apart (probe/respond.c).
pub(super) fn stage_reason(p: &Probe) -> Reason {
    if p.answered_by_another() {
        return reasons::WRONG_PEER;
    }
    match p.stage {
        Stage::Source => reasons::GID_MISSING,
        Stage::Full => reasons::MTU_MISMATCH,
        Stage::Rejected if refused(p, "bad_key") => reasons::KEY_REJECTED,
        Stage::Rejected if refused(p, "stale") => reasons::CLOCK_SKEW,
        _ => reasons::PEER_UNREACHABLE,
    }
}

/// The failed probes as `node addr (why)`, sorted.
pub(super) fn peer_list(ps: &[&Probe]) -> String {
    let mut names: Vec<String> = ps
        .iter()
        .map(|p| {
            let why = match (p.stage, &p.reject_why) {
                _ if p.answered_by_another() => format!(
                    "answered by {}",
                    p.answered_node.as_deref().unwrap_or_default()
                ),
                (Stage::Rejected, Some(w)) => format!("refused: {w}"),
                _ if p.error.is_empty() => format!("{:?}", p.stage).to_lowercase(),
                _ => format!("{:?}: {}", p.stage, p.error).to_lowercase(),
            };
            format!("{} {} ({why})", p.peer.node, p.peer.addr)
        })
        .collect();
    names.sort();
    names.dedup();
    names.join(", ")
}

/// The reason most failed probes stand for (ties: the order below, the local
/// cause first); `full_confirmed` says whether a probe that failed at full
/// size failed so the round before too.
pub(super) fn dominant(failed: &[&Probe], full_confirmed: impl Fn(&Probe) -> bool) -> Reason {
    let mut count: BTreeMap<&'static str, (usize, Reason)> = BTreeMap::new();
    for p in failed {
        // A path's MTU does not come and go: one round's full-size timeout
        // on a path that carried full size the round before is loss (a busy
        // peer, a dropped packet), not an MTU fault.
        let r = match stage_reason(p) {
            r if r == reasons::MTU_MISMATCH && !full_confirmed(p) => reasons::LOSS,
            r => r,
        };
        count.entry(r.as_str()).or_insert((0, r)).0 += 1;
    }
    let order = [
        reasons::GID_MISSING,
        reasons::KEY_REJECTED,
        reasons::CLOCK_SKEW,
        reasons::WRONG_PEER,
        reasons::MTU_MISMATCH,
        reasons::PEER_UNREACHABLE,
        reasons::LOSS,
    ];
    let best = count.values().map(|(n, _)| *n).max().unwrap_or(0);
    order
        .into_iter()
        .find(|r| count.get(r.as_str()).is_some_and(|(n, _)| *n == best))
        .unwrap_or(reasons::PEER_UNREACHABLE)
}
