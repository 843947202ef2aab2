//! `rdma.counters`: every RDMA port's error and congestion counters
//! (`ports/<n>/counters/` and `ports/<n>/hw_counters/` in sysfs) read once a
//! reconcile and turned into counts over a window, against thresholds per
//! class (`[counters]`). The baselines persist (`history`), keyed by the
//! port's stable identity; a reset, a reboot and a wrap are handled as the
//! flap history handles them. The management NIC (the one carrying the
//! default route) is reported apart and never warns or fails the node.
//!
//! The concern only reads: the next history goes out as a `Persist` fact
//! that the daemon writes after the reconcile (`check` never writes).

pub mod classes;
pub mod config;
pub mod decide;
pub mod gather;
pub mod history;
pub mod metrics;
pub mod reasons;

use std::collections::BTreeSet;
use std::time::SystemTime;

use serde_json::json;

use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::check::{Check, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::snapshot::Snapshot;
use crate::host::state::Record;
use crate::observe::Observation;
use crate::reason::Reason;
use config::CountersConfig;
use decide::{Finding, Summary};
use gather::Gathered;
use history::{History, PortReading, Readings};

pub const CHECK_ID: CheckId = CheckId::new("rdma.counters");
pub const HISTORY_PATH: &str = "/var/lib/rdma-node-agent/counters-history.json";

pub struct Facts {
    /// The persisted history; `Err` when it cannot be read or parsed.
    pub history: Result<History, String>,
    pub gathered: Gathered,
    pub now: u64,
    pub boot_id: Option<String>,
}

pub struct Counters;

impl Concern for Counters {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.rdma.enabled && cfg.section::<CountersConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Facts, GatherError> {
        let history = snap.state_json::<History>(HISTORY_PATH);
        let gathered = gather::gather(snap).map_err(GatherError::unknown)?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Facts {
            history,
            gathered,
            now,
            boot_id: snap.boot_id(),
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let (check, next, observations) = evaluate(f, ctx.config.section::<CountersConfig>());
        let mut observations = observations;
        // Written only when it changed: an idle port's baselines stay put.
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
            checks: vec![check],
            observations,
            ..Decision::default()
        }
    }
}

/// The check, the next history and the per-class observations.
pub fn evaluate(f: &Facts, cfg: &CountersConfig) -> (Check, History, Vec<Observation>) {
    let shown_window = shown(cfg.window_secs);
    let (old, history_error) = decide::old_history(&f.history);
    let readings = Readings {
        now: f.now,
        boot_id: f.boot_id.clone(),
        ports: f
            .gathered
            .ports
            .iter()
            .map(|p| {
                let r = PortReading {
                    name: p.name(),
                    values: p.rated.clone(),
                };
                (p.identity.clone(), r)
            })
            .collect(),
    };
    let next = history::update(&old, &readings, cfg.window_secs);
    let routes: BTreeSet<String> = f.gathered.default_route.clone().unwrap_or_default();
    let mut all = Judged::default();
    for p in &f.gathered.ports {
        let ctx = PortCtx {
            management: p.netdevs.iter().any(|n| routes.contains(n)),
            new: history_error.is_some() || !old.ports.contains_key(&p.identity),
            history: next.ports.get(&p.identity),
        };
        judge_port(p, &ctx, f.now, cfg, &shown_window, &mut all);
    }
    all.findings
        .extend(f.gathered.devices_unreadable.iter().map(|d| Finding {
            port: d.clone(),
            status: Status::Unknown,
            reason: reasons::COUNTERS_UNREADABLE,
            text: format!("cannot read device {d}"),
        }));
    let v = decide::verdict(&Summary {
        findings: &all.findings,
        management: &all.management,
        pending: &all.pending,
        unrated: &all.unrated,
        ports: f.gathered.ports.len(),
        history_error,
        shown_window: &shown_window,
    });
    let details = json!({
        "window_seconds": cfg.window_secs,
        "default_route_netdevs": match &f.gathered.default_route {
            Ok(r) => json!(r),
            Err(e) => json!({"error": e}),
        },
        "ports": all.details,
        "devices_unreadable": f.gathered.devices_unreadable,
    });
    let mut check = Check::new(CHECK_ID, v.status, v.message).with_details(details);
    if let Some(r) = v.reason {
        check = check.with_reason(r);
    }
    (check, next, all.observations)
}

/// What one port is to the verdict.
struct PortCtx<'a> {
    /// It carries the default route: reported, never counted against the node.
    management: bool,
    /// No baseline before this reading (or the history is unreadable).
    new: bool,
    history: Option<&'a history::PortHistory>,
}

/// Every port's part of the verdict, gathered.
#[derive(Default)]
struct Judged {
    findings: Vec<Finding>,
    management: Vec<Finding>,
    pending: Vec<String>,
    /// Ports with no counter a class knows (i40iw without a PMA, Omni-Path):
    /// their counters are shown, and they are not called within thresholds.
    unrated: Vec<String>,
    observations: Vec<Observation>,
    details: Vec<serde_json::Value>,
}

fn judge_port(
    p: &gather::PortRead,
    ctx: &PortCtx,
    now: u64,
    cfg: &CountersConfig,
    shown_window: &str,
    all: &mut Judged,
) {
    let rated = ctx
        .history
        .map(|h| decide::rate(h, now, cfg.window_secs))
        .unwrap_or_default();
    let mut mine: Vec<Finding> = p
        .unreadable
        .iter()
        .map(|u| Finding {
            port: p.name(),
            status: Status::Unknown,
            reason: reasons::COUNTERS_UNREADABLE,
            text: format!("{} {u}", p.name()),
        })
        .collect();
    if p.rated.is_empty() && p.unreadable.is_empty() {
        all.unrated.push(p.name());
    } else if ctx.new {
        all.pending.push(p.name());
    } else {
        mine.extend(decide::judge(p, &rated, cfg, shown_window));
    }
    for r in rated.iter().filter(|r| r.total > 0 || r.in_window > 0) {
        all.observations.push(Observation::PortErrors {
            device: p.device.clone(),
            port: p.port.clone(),
            class: r.class.as_str(),
            total: r.total,
            per_second: if ctx.new { None } else { r.per_second },
        });
    }
    all.details.push(decide::port_details(
        p,
        ctx.history,
        &rated,
        ctx.management,
        ctx.new,
    ));
    if ctx.management {
        all.management.extend(mine);
    } else {
        all.findings.extend(mine);
    }
}

/// `1h`, `90s`, `2d`: the window as configured.
fn shown(secs: u64) -> String {
    match secs {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests;
