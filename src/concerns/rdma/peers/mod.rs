//! `rdma.peers`: does the fabric carry RDMA between this node and its peers?
//! The daemon's prober (`host::probe`) runs real RDMA exchanges from each
//! ACTIVE port to `[peers] k` peers every interval and writes the results to
//! the agent's state (`host::probe::record`, peers.json); this concern reads
//! that record through the snapshot and judges each ACTIVE port from the last
//! two rounds (`decide`). A record that proves nothing about now — none, too
//! old, from before this boot — is `unknown`, never `ok`. See docs/peers.md.

pub mod config;
pub mod decide;
mod failures;
pub mod gate;
pub mod gate_check;
pub mod gate_reset;
mod inbound;
pub mod metrics;
pub mod reasons;
pub mod selftest_record;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_clock;
#[cfg(test)]
mod tests_fabric;
#[cfg(test)]
mod tests_identity;
#[cfg(test)]
mod tests_stuck;

use std::time::SystemTime;

use serde_json::json;

use crate::config::Config;
use crate::engine::check::{Check, CheckId, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::probe::record::{FILE, PeersRecord};
use crate::host::snapshot::Snapshot;
use crate::host::state::STATE_DIR;
use crate::observe::Observation;
use crate::reason::Reason;
use config::PeersConfig;
use decide::{LocalPort, Verdict};

pub const CHECK_ID: CheckId = CheckId::new("rdma.peers");

pub struct Facts {
    /// The record; `Ok(None)` when there is none yet, `Err` when it cannot be
    /// read or parsed (the state read is bounded).
    pub record: Result<Option<PeersRecord>, String>,
    pub boot_id: Option<String>,
    pub now: u64,
    /// The ACTIVE physical ports; `Err` when the inventory cannot be read.
    pub ports: Result<Vec<LocalPort>, String>,
}

pub struct Peers;

impl Concern for Peers {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<PeersConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        let path = format!("{STATE_DIR}/{FILE}");
        let record = match snap.state_read(std::path::Path::new(&path)) {
            Ok(None) => Ok(None),
            Ok(Some(b)) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("{path} does not parse ({e})")),
            Err(e) => Err(e.to_string()),
        };
        let ports = snap
            .rdma_inventory()
            .map(|inv| {
                inv.physical()
                    .flat_map(|dev| {
                        let netdev = dev.parent_text().map(|n| n.trim().to_owned());
                        dev.ports
                            .iter()
                            .filter(|p| p.state_value().is_some_and(|s| s.is_active()))
                            .filter_map(move |p| {
                                let ndev = p
                                    .ndev
                                    .as_ref()
                                    .ok()
                                    .and_then(Option::as_deref)
                                    .map(|n| n.trim().to_owned())
                                    .or(netdev.clone());
                                Some(LocalPort {
                                    device: dev.name.clone(),
                                    port: p.name.parse().ok()?,
                                    rail: cfg
                                        .section::<PeersConfig>()
                                        .rail(&dev.name, ndev.as_deref()),
                                })
                            })
                    })
                    .collect()
            })
            .map_err(|e| e.to_string());
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Facts {
            record,
            boot_id: snap.boot_id(),
            now,
            ports,
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let (check, observations) = evaluate(f, ctx.config.section::<PeersConfig>());
        Decision {
            checks: vec![check],
            observations,
            // Each round's record reconciles at once (not at the next timer,
            // five minutes by default): a fault is named within two rounds.
            watch: vec![std::path::PathBuf::from(format!("{STATE_DIR}/{FILE}"))],
            ..Decision::default()
        }
    }
}

/// The check and the observations the metrics render, pure.
pub fn evaluate(f: &Facts, cfg: &PeersConfig) -> (Check, Vec<Observation>) {
    let unknown = |reason: Reason, why: String| {
        (
            Check::new(CHECK_ID, Status::Unknown, why).with_reason(reason),
            Vec::new(),
        )
    };
    let ports = match &f.ports {
        Ok(p) => p,
        Err(e) => {
            return unknown(
                Reason::FACT_UNREADABLE,
                format!("the RDMA ports cannot be read: {e}"),
            );
        }
    };
    if ports.is_empty() {
        return (
            Check::new(
                CHECK_ID,
                Status::Skipped,
                "no ACTIVE RDMA port to probe from",
            ),
            Vec::new(),
        );
    }
    let rec = match &f.record {
        Err(e) => {
            return unknown(
                Reason::FACT_UNREADABLE,
                format!("the peer-probe record cannot be read: {e}"),
            );
        }
        Ok(None) => {
            return unknown(
                reasons::PEERS_UNPROVEN,
                "no peer-probe record yet: the daemon's prober has not finished a round (or is not running)".into(),
            );
        }
        Ok(Some(r)) => r,
    };
    if let Some(why) = decide::unproven(rec, f.boot_id.as_deref(), f.now, cfg) {
        return unknown(reasons::PEERS_UNPROVEN, why);
    }
    // Only the ports the fleet's peer list gives this node are probed, and
    // only they are judged: another ACTIVE port (a storage NIC, another
    // agent's port on a test rig) proves nothing either way.
    let (mine, unlisted): (Vec<&LocalPort>, Vec<&LocalPort>) =
        ports.iter().partition(|p| decide::assigned(rec, p));
    if mine.is_empty() {
        return unknown(
            reasons::PEERS_UNPROVEN,
            format!(
                "the peer list names none of this node's ACTIVE RDMA ports ({}) under its name ([peers] node, else the hostname): nothing is probed",
                names(&unlisted)
            ),
        );
    }
    let mut verdicts: Vec<Verdict> = mine
        .iter()
        .map(|p| decide::judge_port(rec, p, f.now, cfg))
        .collect();
    verdicts.extend(inbound::refused_senders(rec, f.now, cfg));
    let observations = metrics::observations(rec, ports);
    (summarize(&verdicts, &unlisted), observations)
}

fn names(ports: &[&LocalPort]) -> String {
    ports
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One check from the ports' verdicts: the worst status, its reason, and every
/// port that is not ok named in the message; the ports the peer list does not
/// give this node are named as not judged.
fn summarize(verdicts: &[Verdict], unlisted: &[&LocalPort]) -> Check {
    let worst = verdicts
        .iter()
        .map(|v| v.status)
        .max()
        .unwrap_or(Status::Ok);
    let details = json!({
        "ports": verdicts.iter().map(|v| json!({
            "port": v.port,
            "status": v.status,
            "reason": v.reason.map(|r| r.as_str()),
            "message": v.text,
        })).collect::<Vec<_>>(),
        "not_judged": unlisted.iter().map(|p| p.name()).collect::<Vec<_>>(),
    });
    let message = if worst == Status::Ok {
        let mut parts: Vec<String> = verdicts.iter().map(|v| v.text.clone()).collect();
        if !unlisted.is_empty() {
            parts.push(format!(
                "not probed, not judged (the peer list does not name them for this node): {}",
                names(unlisted)
            ));
        }
        parts.join("; ")
    } else {
        let mut bad: Vec<&Verdict> = verdicts.iter().filter(|v| v.status != Status::Ok).collect();
        bad.sort_by_key(|v| std::cmp::Reverse(v.status));
        bad.iter()
            .map(|v| v.text.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let reason = verdicts
        .iter()
        .filter(|v| v.status == worst)
        .find_map(|v| v.reason);
    let mut c = Check::new(CHECK_ID, worst, message).with_details(details);
    if let Some(r) = reason {
        c = c.with_reason(r);
    }
    c
}
