//! `driver.health`: what the NIC drivers themselves say about their devices.
//! Two sources, both read-only: the devlink health reporters of each RDMA
//! NIC's devlink instance (`pci/<address>`, over generic netlink: state, error
//! and recover counts, last dump), and the kernel log since boot (`/dev/kmsg`)
//! for the mlx5 driver's documented fatal messages, counted per device and
//! pattern (`patterns`).
//!
//! Error counts and log counts are kept per boot (`state`): the next state
//! goes out as a `Persist` fact and the daemon writes it after the reconcile,
//! as `rdma.link` keeps its history.

pub mod config;
pub mod metrics;
pub mod patterns;
pub mod reasons;
pub mod state;
mod verdict;

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::devlink::{DevlinkError, Reporter};
use crate::host::inventory::{CLASS, DeviceLink};
use crate::host::kmsg::{Caps, KmsgError};
use crate::host::kmsg_helper;
use crate::host::snapshot::Snapshot;
use crate::host::state::Record;
use crate::observe::Observation;
use crate::reason::Reason;
use config::DriverHealthConfig;
use state::{LogReading, State};

pub const CHECK_ID: CheckId = CheckId::new("driver.health");
pub const STATE_PATH: &str = "/var/lib/rdma-node-agent/driver-health.json";

/// An RDMA device and the PCI function under it (`None`: a software device
/// such as rxe, or a link that could not be read: `why` says which).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    pub pci: Option<String>,
    pub why: Option<String>,
}

/// How the devlink answer came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devlink {
    Reporters(Vec<Reporter>),
    /// Not asked: a tree under `--root`.
    NotLive,
    /// The kernel has no devlink family.
    NoFamily,
    Error(String),
}

pub struct Facts {
    pub state: Result<State, String>,
    pub boot_id: Option<String>,
    pub nics: Vec<Nic>,
    pub devlink: Devlink,
    /// `None`: not read (`kernel_log = false`, or no /dev/kmsg in a tree under --root).
    pub log: Option<Result<LogReading, String>>,
}

pub struct Health;

impl Concern for Health {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<DriverHealthConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        let state = snap.state_json::<State>(STATE_PATH);
        let boot_id = snap.boot_id();
        let devlink = match snap.devlink_reporters() {
            Ok(r) => Devlink::Reporters(r.to_vec()),
            Err(DevlinkError::NotLive) => Devlink::NotLive,
            Err(DevlinkError::NoFamily) => Devlink::NoFamily,
            Err(e) => Devlink::Error(e.to_string()),
        };
        let nics = nics(snap);
        // The helper unit only where there is a NIC to watch: a node without
        // one starts no unit each cycle to read a log it has no use for.
        let watch = nics.iter().any(|n| n.pci.is_some())
            || !cfg.section::<DriverHealthConfig>().also_watch.is_empty();
        let log = cfg.section::<DriverHealthConfig>().kernel_log.then(|| {
            let after = state
                .as_ref()
                .ok()
                .filter(|s| s.boot_id.is_some() && s.boot_id == boot_id)
                .and_then(|s| s.kmsg_seq);
            read_log(snap, after, watch, cfg)
        });
        Ok(Facts {
            state,
            boot_id,
            nics,
            devlink,
            log: log.flatten(),
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let (old, state_error) = match &f.state {
            Ok(s) => (s.clone(), None),
            Err(e) => (State::default(), Some(e.clone())),
        };
        let reporters = match &f.devlink {
            Devlink::Reporters(r) => r.as_slice(),
            _ => &[],
        };
        let reading = f.log.as_ref().and_then(|l| l.as_ref().ok());
        let next = state::update(&old, f.boot_id.as_deref(), reporters, reading);
        let missed = reading.and_then(|l| state::missed(&old, f.boot_id.as_deref(), l));
        let v = verdict::judge(
            f,
            &next,
            missed,
            state_error,
            ctx.config.section::<DriverHealthConfig>(),
        );
        let mut observations = vec![Observation::DriverHealth {
            reporters: matches!(f.devlink, Devlink::Reporters(_)).then_some(v.watched as u64),
            kernel_log_read: f.log.as_ref().map(Result::is_ok),
            problems: v.problems.clone(),
        }];
        if f.state.as_ref() != Ok(&next) && f.devlink != Devlink::NotLive {
            let mut bytes = serde_json::to_vec_pretty(&next).expect("state serializes");
            bytes.push(b'\n');
            observations.push(Observation::Fleet(Fact::Persist {
                record: Record {
                    path: STATE_PATH.into(),
                    bytes,
                    note: None,
                },
                check: CHECK_ID.as_str(),
            }));
        }
        Decision {
            checks: vec![v.check],
            observations,
            ..Decision::default()
        }
    }
}

/// Each RDMA device and the PCI address its `device` link names (from the
/// cycle's RDMA inventory).
fn nics(snap: &Snapshot) -> Vec<Nic> {
    let Ok(inventory) = snap.rdma_inventory() else {
        return Vec::new();
    };
    inventory
        .devices
        .iter()
        .map(|d| {
            let name = d.name.clone();
            let (pci, why) = match &d.function {
                DeviceLink::Real(t) | DeviceLink::Dangling(t) => {
                    let last = t.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    if crate::host::pci_config::is_bdf(last) {
                        (Some(last.to_owned()), None)
                    } else {
                        (
                            None,
                            Some(format!("its device is not a PCI function ({last})")),
                        )
                    }
                }
                DeviceLink::None => (None, Some("no PCI device (a software RDMA device)".into())),
                DeviceLink::Error(e) => {
                    let link = Path::new(CLASS).join(&name).join("device");
                    (None, Some(format!("{}: {e}", link.display())))
                }
            };
            Nic { name, pci, why }
        })
        .collect()
}

/// This cycle's kernel-log counts, records after `after` only.
fn read_log(
    snap: &Snapshot,
    after: Option<u64>,
    helper: bool,
    cfg: &Config,
) -> Option<Result<LogReading, String>> {
    let caps = Caps {
        max_bytes: cfg.section::<DriverHealthConfig>().kernel_log_max_bytes,
        max_records: cfg.section::<DriverHealthConfig>().kernel_log_max_records,
    };
    let read = kmsg_helper::read(snap, helper, after, patterns::DRIVER_PREFIX, caps);
    let log = match read {
        Ok(l) => l,
        Err(KmsgError::Absent { .. }) => return None,
        Err(e) => return Some(Err(e.to_string())),
    };
    if log.truncated {
        return Some(Err(format!(
            "the kernel log holds more than [driver_health] kernel_log_max_bytes = {} or kernel_log_max_records = {}: the pass stopped before its end, so later messages are not known",
            caps.max_bytes, caps.max_records
        )));
    }
    let mut counts = BTreeMap::new();
    for r in &log.records {
        if let Some((device, pattern)) = patterns::classify(r) {
            *counts.entry(format!("{device}/{pattern}")).or_default() += 1;
        }
    }
    Some(Ok(LogReading {
        last_seq: log.last_seq,
        first_seq: log.first_seq,
        counts,
    }))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
