//! `pcie.aer`: PCIe errors and link retraining on the functions RDMA traffic
//! crosses: each RDMA NIC's PCI function, each NVIDIA GPU, and every bridge
//! and port above them up to the root port. Each reconcile reads the kernel's
//! AER statistics (`aer_dev_*`, a root port's `aer_rootport_total_err_*`) and
//! link attributes, folds them into the persisted history of this boot
//! (`history`) and decides (`decide`): fatal fails, non-fatal warns, rising
//! correctable errors warn, a link that retrained down since boot is named.
//!
//! The concern only reads: the next history goes out as a `Persist` fact that
//! the daemon writes after the reconcile (`check` never writes).

pub mod config;
pub mod decide;
pub mod gather;
pub mod history;
pub mod metrics;
pub mod parse;
pub mod reasons;
#[cfg(test)]
mod tests;

use std::time::SystemTime;

use crate::config::Config;
use crate::engine::check::Check;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::Fact;
use crate::host::snapshot::{self, Snapshot};
use crate::host::state::Record;
use crate::observe::Observation;
use crate::reason::Reason;
use config::PcieConfig;
use gather::Watched;
use history::{History, Reading, Readings};

pub const CHECK_ID: CheckId = CheckId::new("pcie.aer");
pub const HISTORY_PATH: &str = "/var/lib/rdma-node-agent/pcie-aer-history.json";

pub struct Facts {
    /// The persisted history; `Err` when it cannot be read or parsed.
    pub history: Result<History, String>,
    pub watched: Watched,
    pub now: u64,
    pub boot_id: Option<String>,
    /// The kernel command line turns AER off (`pci=noaer`).
    pub noaer: bool,
}

pub struct Aer;

impl Concern for Aer {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.section::<PcieConfig>().enabled
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Facts, GatherError> {
        let history = snap.state_json::<History>(HISTORY_PATH);
        let noaer = snap.value(snapshot::CMDLINE).is_some_and(|c| {
            c.split_whitespace()
                .filter_map(|w| w.strip_prefix("pci="))
                .any(|v| v.split(',').any(|o| o == "noaer"))
        });
        Ok(Facts {
            history,
            watched: gather::gather(snap),
            now: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            boot_id: snap.boot_id(),
            noaer,
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let cfg = ctx.config.section::<PcieConfig>();
        let (old, history_error) = match &f.history {
            Ok(h) => (h.clone(), None),
            Err(e) => (History::default(), Some(e.as_str())),
        };
        let readings = readings(f);
        let next = history::update(&old, &readings, cfg.correctable_window_secs);
        let (status, reason, message) =
            decide::verdict(&f.watched, &next, history_error, cfg, f.now, f.noaer);
        let mut observations: Vec<Observation> = f
            .watched
            .functions
            .values()
            .map(|func| Observation::PcieAer {
                function: func.bdf.clone(),
                totals: func
                    .aer
                    .as_ref()
                    .ok()
                    .and_then(Option::as_ref)
                    .map(|c| [c[0].total, c[1].total, c[2].total]),
                retrained_down: decide::findings(func, next.functions.get(&func.bdf), cfg, f.now)
                    .iter()
                    .any(|x| x.reason == reasons::PCIE_LINK_RETRAINED_DOWN),
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
        let details = decide::details(&f.watched, &next, cfg, f.now);
        Decision {
            checks: vec![
                Check::new(CHECK_ID, status, message)
                    .with_reason(reason)
                    .with_details(details),
            ],
            observations,
            ..Decision::default()
        }
    }
}

/// What the history keeps of this reading.
fn readings(f: &Facts) -> Readings {
    let mut r = Readings {
        now: f.now,
        boot_id: f.boot_id.clone(),
        ..Readings::default()
    };
    for (bdf, func) in &f.watched.functions {
        match &func.aer {
            // The link is history too: read even where AER is not.
            Ok(c) => {
                r.functions.insert(
                    bdf.clone(),
                    Reading {
                        correctable: c.as_ref().map(|c| c[0].total),
                        speed: func.speed,
                        width: func.width,
                    },
                );
            }
            Err(_) => {
                r.unread.insert(bdf.clone());
            }
        }
    }
    r
}
