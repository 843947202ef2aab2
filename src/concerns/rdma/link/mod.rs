//! `rdma.link`: link health that remembers. Each reconcile reads every RDMA
//! port's state and the kernel's `link_downed` / `link_error_recovery`
//! counters (`ports/<n>/counters/` in sysfs), plus the link-down events the
//! daemon counted from rtnetlink between reconciles, and folds them into the
//! persisted history (`history`): the check warns when a port flapped more
//! than `rdma.flap_threshold` times within `rdma.flap_window`.
//!
//! The concern only reads: the next history goes out as a `Persist` fact, and
//! the daemon writes it after the reconcile (`check` never writes, so it shows
//! the daemon's history and what this reading would add).

pub mod history;
mod judge;
pub mod metrics;
pub mod reasons;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::inventory::{Device, Port};
use crate::host::snapshot::Snapshot;
use crate::host::state::Record;
use crate::observe::Observation;
use crate::reason::Reason;
use history::{History, Reading, Readings};
use judge::check;

pub const CHECK_ID: CheckId = CheckId::new("rdma.link");
pub const HISTORY_PATH: &str = "/var/lib/rdma-node-agent/link-history.json";
/// The daemon's link-down event tally (rtnetlink), per netdev, since it started.
pub const EVENTS_PATH: &str = "/run/rdma-node-agent/link-events.json";

/// What the daemon counted from rtnetlink: link-down transitions per netdev.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events {
    /// This daemon process (its tallies start at 0 when it starts).
    pub instance: String,
    pub downs: BTreeMap<String, u64>,
}

pub struct Facts {
    /// The persisted history; `Err` when it cannot be read or parsed.
    history: Result<History, String>,
    readings: Readings,
    /// Ports whose files could not be read, with why.
    unreadable: Vec<String>,
}

pub struct Link;

impl Concern for Link {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.rdma.enabled
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Facts, GatherError> {
        let host = snap;
        let history = host.state_json::<History>(HISTORY_PATH);
        // A tally that cannot be read counts nothing: polls still see flaps.
        let events: Option<Events> = host
            .state_read(Path::new(EVENTS_PATH))
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut readings = Readings {
            now,
            boot_id: snap.boot_id(),
            events_instance: events.as_ref().map(|e| e.instance.clone()),
            ports: BTreeMap::new(),
        };
        let mut unreadable = Vec::new();
        let inventory = snap.rdma_inventory().map_err(GatherError::unknown)?;
        // An SR-IOV VF's port follows its PF's link: its flaps are the PF's.
        for dev in inventory.physical() {
            if let Some(e) = dev.open_error.as_ref().or(dev.ports_error.as_ref()) {
                unreadable.push(format!("{}: {e}", dev.name));
                continue;
            }
            for port in &dev.ports {
                let (reading, why) = read_port(snap, dev, port, events.as_ref());
                let name = format!("{}/{}", dev.name, port.name);
                unreadable.extend(why.map(|w| format!("{name} state: {w}")));
                readings.ports.insert(name, reading);
            }
        }
        Ok(Facts {
            history,
            readings,
            unreadable,
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let cfg = &ctx.config.rdma;
        let (old, history_error) = match &f.history {
            Ok(h) => (h.clone(), None),
            Err(e) => (History::default(), Some(e.clone())),
        };
        let next = history::update(&old, &f.readings);
        let mut observations: Vec<Observation> = f
            .readings
            .ports
            .keys()
            .filter_map(|name| {
                let p = next.ports.get(name)?;
                let (device, port) = name.rsplit_once('/')?;
                Some(Observation::Fleet(Fact::Link {
                    device: device.to_owned(),
                    port: port.parse().ok()?,
                    flaps_total: p.flaps_total,
                    link_downed_total: p.link_downed_total,
                    link_error_recovery_total: p.link_error_recovery_total,
                    last_flap_unix: p.last_flap(),
                }))
            })
            .collect();
        // Written only when it changed: most reconciles see nothing new.
        if f.history.as_ref() != Ok(&next) {
            let mut bytes = serde_json::to_vec_pretty(&next).expect("history serializes");
            bytes.push(b'\n');
            observations.push(Observation::Fleet(Fact::Persist {
                record: Record {
                    path: HISTORY_PATH.into(),
                    bytes,
                    note: None,
                },
                check: CHECK_ID.as_str(),
            }));
        }
        Decision {
            checks: vec![check(
                &next,
                f,
                cfg.flap_threshold,
                cfg.flap_window_secs,
                history_error,
            )],
            observations,
            ..Decision::default()
        }
    }
}

/// One port's reading: its state (with why, when it cannot be named), the
/// kernel's counters, and the daemon's link-down events for its netdev.
fn read_port(
    snap: &Snapshot,
    dev: &Device,
    port: &Port,
    events: Option<&Events>,
) -> (Reading, Option<String>) {
    let state = &port.state;
    let active = port
        .state_value()
        .filter(|s| s.is_named())
        .map(|s| s.is_active());
    let unreadable = match (active, state) {
        (Some(_), _) => None,
        (None, Err(e)) => Some(e.clone()),
        (None, Ok(None)) => Some("absent".to_owned()),
        (None, Ok(Some(t))) => Some(format!("{:?}", t.trim())),
    };
    let netdev = port
        .ndev
        .as_ref()
        .ok()
        .and_then(Option::as_deref)
        .or_else(|| dev.parent_text())
        .map(|n| n.trim().to_owned());
    let events = match (events, &netdev) {
        (Some(e), Some(n)) => e.downs.get(n).copied().unwrap_or(0),
        _ => 0,
    };
    let counters = snap.port_counters(dev, port);
    let reading = Reading {
        active,
        link_downed: counters.counter("link_downed"),
        link_error_recovery: counters.counter("link_error_recovery"),
        events,
    };
    (reading, unreadable)
}

/// Seconds since the epoch as `2026-11-26T07:40:55Z` (UTC; the civil-from-days
/// algorithm of H. Hinnant's date library).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::check::Status;
    use crate::reason::Reason;

    #[test]
    fn utc_times() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_795_678_855), "2026-11-26T07:40:55Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn flapping_ports_are_named_with_count_and_last_time() {
        let port = |flaps: Vec<history::Flap>| history::PortHistory {
            active: Some(true),
            flaps_total: flaps.iter().map(|f| f.count).sum(),
            flaps,
            ..Default::default()
        };
        let now = 1_795_678_855;
        let flap = |ago: u64| history::Flap {
            at: now - ago,
            count: 1,
        };
        let next = History {
            ports: [
                (
                    "mlx5_0/1".to_owned(),
                    port((1..=4).rev().map(|i| flap(i * 60)).collect()),
                ),
                (
                    "mlx5_1/1".to_owned(),
                    port(vec![flap(7200), flap(60), flap(30)]),
                ),
            ]
            .into(),
            ..History::default()
        };
        let f = Facts {
            history: Ok(History::default()),
            readings: Readings {
                now,
                ports: next
                    .ports
                    .keys()
                    .map(|k| (k.clone(), Reading::default()))
                    .collect(),
                ..Readings::default()
            },
            unreadable: Vec::new(),
        };
        let c = check(&next, &f, 3, 3600, None);
        assert_eq!(c.status, Status::Warn, "{}", c.message);
        assert_eq!(c.reason, Some(reasons::LINK_FLAPPING));
        assert_eq!(
            c.message,
            "mlx5_0/1 flapped 4 times in the last 1h, last at 2026-11-26T07:39:55Z (more than rdma.flap_threshold = 3)"
        );
        let c = check(&next, &f, 4, 3600, None);
        assert_eq!(c.status, Status::Ok, "{}", c.message);
        assert_eq!(c.reason, None);
        let c = check(&next, &f, 3, 3600, Some("bad".into()));
        assert_eq!(c.status, Status::Unknown);
    }

    /// One unreadable port among readable ones: before, `ok`.
    #[test]
    fn one_unreadable_port_makes_it_unknown_naming_it() {
        let now = 1_795_678_855;
        let f = Facts {
            history: Ok(History::default()),
            readings: Readings {
                now,
                ports: [
                    (
                        "mlx5_0/1".to_owned(),
                        Reading {
                            active: Some(true),
                            ..Reading::default()
                        },
                    ),
                    ("mlx5_1/1".to_owned(), Reading::default()),
                ]
                .into(),
                ..Readings::default()
            },
            unreadable: vec!["mlx5_1/1 state".into()],
        };
        let next = history::update(&History::default(), &f.readings);
        let c = check(&next, &f, 3, 3600, None);
        assert_eq!(c.status, Status::Unknown, "{}", c.message);
        assert_eq!(c.reason, Some(Reason::FACT_UNREADABLE));
        assert_eq!(
            c.message,
            "1 RDMA port(s) or device(s) could not be read, so their flaps are not known: mlx5_1/1 state; 1 port(s) read, none flapping"
        );
        // A device whose ports cannot be listed adds no port: not `skipped`.
        let f = Facts {
            history: Ok(History::default()),
            readings: Readings {
                now,
                ..Readings::default()
            },
            unreadable: vec!["mlx5_2: permission denied".into()],
        };
        let c = check(&History::default(), &f, 3, 3600, None);
        assert_eq!(c.status, Status::Unknown, "{}", c.message);
        assert!(
            c.message.contains("mlx5_2: permission denied"),
            "{}",
            c.message
        );
    }
}
