//! `rdma.gate`: the return-to-service gate as a check (`[peers] gate = true`).
//! Closed (`fail`, `gate_closed`) it makes `/readyz` answer 503, the NFD label
//! `rdma-node-agent.ready` false and `rdma-node-agent.gate` `closed`; open it
//! is `ok`. The decision is `gate::decide`; this gathers its inputs through
//! the snapshot (the gate's own state, the selftest's record, the operator's
//! reset request, the peer-probe record) and asks the daemon to keep the next
//! state (`fleet::Fact::Persist`, written whatever the mode).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::gate::{self, GateState, Identity, Inputs, ResetRequest};
use super::reasons;
use super::selftest_record::{FILE as SELFTEST_FILE, SelftestRecord};
use crate::config::Config;
use crate::engine::check::{Check, CheckId, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::probe::record::{FILE as PEERS_FILE, PeersRecord};
use crate::host::snapshot::Snapshot;
use crate::host::state::{Record, STATE_DIR};
use crate::observe::Observation;
use crate::reason::Reason;

pub const GATE_ID: CheckId = CheckId::new("rdma.gate");

pub struct Facts {
    /// `Err`: the boot, kernel or driver cannot be told (the gate cannot say
    /// whether it holds: `unknown`).
    pub identity: Result<Identity, String>,
    /// The kept state; `None` when there is none or it does not parse (then
    /// the gate closes: a state it cannot read proves nothing).
    pub prev: Option<GateState>,
    pub selftest: Option<SelftestRecord>,
    pub reset: Option<ResetRequest>,
    /// When the newest probe round of this boot finished.
    pub round_finished_unix: Option<u64>,
    pub now: u64,
}

pub struct Gate;

impl Concern for Gate {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::GATE
    }

    fn ids(&self) -> &'static [CheckId] {
        &[GATE_ID]
    }

    // No `needs`: the engine would turn the gate `unknown` whenever
    // `rdma.peers` is (after every boot), where the gate is plainly closed.
    // It reads `rdma.peers` only to open, as registered before it.

    fn enabled(&self, cfg: &Config) -> bool {
        let p = cfg.section::<super::config::PeersConfig>();
        p.enabled && p.gate
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Facts, GatherError> {
        let boot_id = snap.boot_id();
        let peers: Option<PeersRecord> = read(snap, &format!("{STATE_DIR}/{PEERS_FILE}"));
        let round_finished_unix = peers
            .filter(|r| boot_id.is_some() && r.boot_id == boot_id.clone().unwrap_or_default())
            .and_then(|r| r.rounds.last().map(|x| x.finished_unix));
        Ok(Facts {
            identity: identity(snap, boot_id),
            prev: read(snap, gate::FILE),
            selftest: read(snap, SELFTEST_FILE),
            reset: read(snap, gate::RESET_FILE),
            round_finished_unix,
            now: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let peers_ok = ctx
            .checks
            .iter()
            .any(|c| c.id == super::CHECK_ID && c.status == Status::Ok);
        let (check, keep) = evaluate(f, peers_ok);
        Decision {
            checks: vec![check],
            observations: keep
                .map(|record| {
                    Observation::Fleet(Fact::Persist {
                        record,
                        check: GATE_ID.as_str(),
                    })
                })
                .into_iter()
                .collect(),
            watch: vec![
                PathBuf::from(gate::RESET_FILE),
                PathBuf::from(SELFTEST_FILE),
            ],
            ..Decision::default()
        }
    }
}

/// The check, and the state to keep when it changed; pure.
pub fn evaluate(f: &Facts, peers_ok: bool) -> (Check, Option<Record>) {
    let identity = match &f.identity {
        Ok(i) => i.clone(),
        Err(e) => {
            return (
                Check::new(
                    GATE_ID,
                    Status::Unknown,
                    format!("the gate cannot tell whether the node changed: {e}"),
                )
                .with_reason(Reason::FACT_UNREADABLE),
                None,
            );
        }
    };
    let inputs = Inputs {
        selftest_passed_unix: f
            .selftest
            .as_ref()
            .and_then(|s| s.passed_on(Some(identity.boot_id.as_str()))),
        peers_passed_unix: f.round_finished_unix.filter(|_| peers_ok),
        reset_unix: f.reset.as_ref().map(|r| r.requested_unix),
        identity,
        now: f.now,
    };
    let (status, message, next) = gate::decide(f.prev.as_ref(), &inputs);
    let details = json!({
        "open": next.opened_unix.is_some(),
        "opened_unix": next.opened_unix,
        "closed_since_unix": next.closed_since_unix,
        "closed_why": next.closed_why,
        "identity": {
            "boot_id": next.identity.boot_id,
            "kernel": next.identity.kernel,
            "driver": next.identity.driver,
        },
    });
    let mut check = Check::new(GATE_ID, status, message).with_details(details);
    if status != Status::Ok {
        check = check.with_reason(reasons::GATE_CLOSED);
    }
    let keep = (f.prev.as_ref() != Some(&next)).then(|| {
        let mut bytes = serde_json::to_vec_pretty(&next).expect("state serializes");
        bytes.push(b'\n');
        Record {
            path: gate::FILE.into(),
            bytes,
            note: None,
        }
    });
    (check, keep)
}

/// An agent-state JSON file; `None` when absent, unreadable or not parsing
/// (each of which the gate treats as "nothing proven").
fn read<T: DeserializeOwned>(snap: &Snapshot, path: &str) -> Option<T> {
    let bytes = snap.state_read(Path::new(path)).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// The boot, the kernel, and the RDMA drivers of the physical devices with
/// their module versions (out-of-tree modules carry one; in-tree ones change
/// with the kernel), sorted: what a gate opening holds for.
fn identity(snap: &Snapshot, boot_id: Option<String>) -> Result<Identity, String> {
    let boot_id = boot_id.ok_or("the boot id cannot be read (/proc/sys/kernel/random/boot_id)")?;
    let kernel = snap
        .kernel_release()
        .ok_or("the kernel release cannot be read (/proc/sys/kernel/osrelease)")?;
    let inv = snap
        .rdma_inventory()
        .map_err(|e| format!("the RDMA devices cannot be read: {e}"))?;
    let mut drivers: Vec<String> = inv
        .physical()
        .filter_map(|d| d.driver.clone())
        .map(|d| {
            let module = Path::new("/sys/module").join(&d);
            let text = |name: &str| {
                snap.read_string(&module.join(name))
                    .ok()
                    .flatten()
                    .map(|t| t.trim().to_owned())
                    .filter(|t| !t.is_empty())
            };
            [Some(d.clone()), text("version"), text("srcversion")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    drivers.sort();
    drivers.dedup();
    Ok(Identity {
        boot_id,
        kernel,
        driver: drivers.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_795_678_000;

    fn facts(prev: Option<GateState>) -> Facts {
        Facts {
            identity: Ok(Identity {
                boot_id: "b1".into(),
                kernel: "6.8.0".into(),
                driver: "mlx5_core".into(),
            }),
            prev,
            selftest: Some(SelftestRecord {
                boot_id: "b1".into(),
                finished_unix: T0 + 10,
                passed: true,
                summary: String::new(),
            }),
            reset: None,
            round_finished_unix: Some(T0 + 20),
            now: T0 + 30,
        }
    }

    #[test]
    fn unreadable_identity_is_unknown_and_keeps_nothing() {
        let mut f = facts(None);
        f.identity = Err("the boot id cannot be read".into());
        let (c, keep) = evaluate(&f, true);
        assert_eq!(c.status, Status::Unknown);
        assert_eq!(c.reason, Some(Reason::FACT_UNREADABLE));
        assert!(keep.is_none());
    }

    #[test]
    fn opens_only_on_a_passing_peers_check_and_keeps_the_state_only_when_it_changes() {
        // The first reading closes it (at `now`): earlier passes do not count.
        let (c, keep) = evaluate(&facts(None), true);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.reason, Some(reasons::GATE_CLOSED));
        let state: GateState = serde_json::from_slice(&keep.unwrap().bytes).unwrap();
        let mut f = facts(Some(state.clone()));
        f.now = T0 + 100;
        f.selftest.as_mut().unwrap().finished_unix = T0 + 60;
        f.round_finished_unix = Some(T0 + 90);
        // rdma.peers not ok: the round does not count.
        let (c, keep) = evaluate(&f, false);
        assert_eq!(c.status, Status::Fail);
        assert!(keep.is_none(), "nothing changed, nothing written");
        // A selftest of another boot does not count either.
        f.selftest.as_mut().unwrap().boot_id = "b0".into();
        assert_eq!(evaluate(&f, true).0.status, Status::Fail);
        f.selftest.as_mut().unwrap().boot_id = "b1".into();
        let (c, keep) = evaluate(&f, true);
        assert_eq!(c.status, Status::Ok, "{}", c.message);
        let open: GateState = serde_json::from_slice(&keep.unwrap().bytes).unwrap();
        assert_eq!(open.opened_unix, Some(T0 + 100));
        assert_eq!(open.closed_since_unix, state.closed_since_unix);
    }
}
