//! The opt-in fix `[gpudirect] acs = "disable"`: write 0 to the ACS control
//! register (ECAP_ACS+6) of the bridges on each GPU↔NIC path where a redirect
//! or egress-control bit is set, as NVIDIA's guidance does with
//! `setpci -s BDF ECAP_ACS+6.w=0000` (NCCL troubleshooting, "PCI Access
//! Control Services (ACS)"). Only pairs at PIX, PXB or PHB distance: further
//! away NCCL does not use GPUDirect RDMA by default, and ACS isolation would be
//! given up for nothing.
//!
//! ACS comes back at every reset, so every cycle that finds it set plans the
//! clear again (the daemon re-applies after a reboot). Before writing, the
//! value found is recorded in the agent's state (`gpudirect-acs.json`, with the
//! boot it was found in): the first value of a boot is the one the firmware
//! set, and `revert` writes it back where the register still holds what the
//! agent wrote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::decide::{Pair, View};
use super::pcie::{self, Acs};
use super::topo::Distance;
use crate::engine::effect::{Effect, EffectKey, LiveCtx};
use crate::engine::outcome::ActionStatus;
use crate::host::Host;
use crate::host::read::ReadHost;
use crate::host::snapshot::BOOT_ID;
use crate::host::state::STATE_DIR;

/// The agent's record of what it changed, under its state directory.
pub fn record_path() -> PathBuf {
    Path::new(STATE_DIR).join("gpudirect-acs.json")
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The boot of the last write.
    pub boot_id: String,
    pub ports: BTreeMap<String, Port>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Port {
    /// The ACS capability's offset in config space.
    pub offset: u16,
    /// ACSCtl as the agent first found it in `boot_id`.
    pub original: u16,
    /// What the agent wrote.
    pub written: u16,
    /// The boot `original` was read in.
    #[serde(default)]
    pub boot_id: String,
}

/// A bridge whose ACS control register the fix clears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub bdf: String,
    pub offset: u16,
    pub ctl: u16,
    /// The pairs whose path crosses it (`GPU 0000:1b:00.0 ↔ mlx5_0`).
    pub pairs: Vec<String>,
}

/// The bridges to clear: on the path of a pair at PIX, PXB or PHB distance,
/// with an ACS bit set that redirects or blocks peer-to-peer. Pure.
pub fn targets(view: &View, pairs: &[Pair]) -> Vec<Target> {
    let mut out: BTreeMap<&str, Target> = BTreeMap::new();
    for p in pairs.iter().filter(|p| p.distance <= Distance::Phb) {
        for br in &p.bridges {
            let Some(acs @ Acs::Present { offset, ctl, .. }) = view.acs(br) else {
                continue;
            };
            if acs.blocking() == 0 {
                continue;
            }
            let t = out.entry(br).or_insert_with(|| Target {
                bdf: br.clone(),
                offset,
                ctl,
                pairs: Vec::new(),
            });
            t.pairs.push(format!("GPU {} ↔ {}", p.gpu, p.nic));
        }
    }
    out.into_values().collect()
}

/// The record as the state directory holds it; an unreadable or garbled one
/// reads as empty (the next clear writes a fresh one; nothing to put back).
fn load(host: &ReadHost) -> Record {
    host.state_read(&record_path())
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn save(host: &Host, r: &Record) -> Result<(), String> {
    if r.ports.is_empty() {
        return host.state_remove(&record_path()).map_err(|e| e.to_string());
    }
    let bytes = serde_json::to_vec_pretty(r).map_err(|e| e.to_string())?;
    host.state_write(&record_path(), &bytes, 0o644)
        .map_err(|e| e.to_string())
}

fn boot_id(host: &Host) -> String {
    host.read_string(Path::new(BOOT_ID))
        .ok()
        .flatten()
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Clears ACSCtl of one bridge (one effect per bridge: a failing one is held
/// back alone).
#[derive(Debug)]
pub struct ClearAcs {
    pub target: Target,
}

impl Effect for ClearAcs {
    fn key(&self) -> EffectKey {
        EffectKey::new("clear_acs", self.target.bdf.clone())
    }

    fn describe(&self) -> String {
        let t = &self.target;
        format!(
            "clear ACS on {}: ACSCtl {} → none (config 0x{:03x} = ECAP_ACS+6, as setpci -s {} ECAP_ACS+6.w=0000)",
            t.bdf,
            pcie::acs_ctl_text(t.ctl),
            t.offset + 6,
            t.bdf,
        )
    }

    fn run(&self, cx: &LiveCtx) -> (ActionStatus, String) {
        let host = cx.host.host();
        let t = &self.target;
        let now = match host.acs_ctl(&t.bdf, t.offset) {
            Ok(v) => v,
            Err(e) => return (ActionStatus::Failed, e.to_string()),
        };
        // Recorded before the write: revert can always put back what was found.
        // The first value found in a boot is the firmware's (ACS is reset at boot).
        let boot = boot_id(host);
        let mut rec = load(&host.reader());
        let before = rec.ports.get(&t.bdf).filter(|p| p.offset == t.offset);
        let came_back = before.is_some_and(|p| p.boot_id != boot);
        let original = match before {
            Some(p) if p.boot_id == boot => p.original,
            _ => now,
        };
        rec.boot_id = boot.clone();
        rec.ports.insert(
            t.bdf.clone(),
            Port {
                offset: t.offset,
                original,
                written: 0,
                boot_id: boot,
            },
        );
        if let Err(e) = save(host, &rec) {
            return (
                ActionStatus::Failed,
                format!(
                    "{}: cannot record ACSCtl {now:#06x} for revert in {}: {e}; nothing written",
                    t.bdf,
                    record_path().display()
                ),
            );
        }
        match host.write_acs_ctl(&t.bdf, t.offset, 0) {
            Ok(w) => (
                ActionStatus::Done,
                format!(
                    "{}: ACSCtl {:#06x} → 0x0000 (recorded for revert){}",
                    t.bdf,
                    w.old,
                    if came_back {
                        "; ACS had come back with the reboot"
                    } else {
                        ""
                    }
                ),
            ),
            Err(e) => (ActionStatus::Failed, e.to_string()),
        }
    }
}

/// Writes a recorded ACSCtl back (`revert`).
#[derive(Debug)]
pub struct RestoreAcs {
    pub bdf: String,
    pub port: Port,
}

impl Effect for RestoreAcs {
    fn key(&self) -> EffectKey {
        EffectKey::new("restore_acs", self.bdf.clone())
    }

    fn describe(&self) -> String {
        format!(
            "write ACSCtl {:#06x} back to {}",
            self.port.original, self.bdf
        )
    }

    fn run(&self, cx: &LiveCtx) -> (ActionStatus, String) {
        let host = cx.host.host();
        let p = &self.port;
        let result = match host.acs_ctl(&self.bdf, p.offset) {
            Err(e) => (ActionStatus::Failed, e.to_string()),
            Ok(now) if now == p.original => (
                ActionStatus::Done,
                format!("{}: ACSCtl is {now:#06x} already", self.bdf),
            ),
            Ok(now) if now != p.written => (
                ActionStatus::Skipped,
                format!(
                    "{}: ACSCtl is {now:#06x}, not the {:#06x} the agent wrote: changed since, left as it is",
                    self.bdf, p.written
                ),
            ),
            Ok(_) => match host.write_acs_ctl(&self.bdf, p.offset, p.original) {
                Ok(w) => (
                    ActionStatus::Done,
                    format!("{}: ACSCtl {:#06x} → {:#06x}", self.bdf, w.old, w.new),
                ),
                Err(e) => return (ActionStatus::Failed, e.to_string()),
            },
        };
        if result.0 != ActionStatus::Failed {
            let mut rec = load(&host.reader());
            rec.ports.remove(&self.bdf);
            if let Err(e) = save(host, &rec) {
                return (
                    ActionStatus::Failed,
                    format!(
                        "{}; cannot update {}: {e}",
                        result.1,
                        record_path().display()
                    ),
                );
            }
        }
        result
    }
}

/// The effects that put back what the record says the agent changed.
pub fn undo(host: &ReadHost) -> Vec<Arc<dyn Effect>> {
    load(host)
        .ports
        .into_iter()
        .map(|(bdf, port)| Arc::new(RestoreAcs { bdf, port }) as Arc<dyn Effect>)
        .collect()
}
