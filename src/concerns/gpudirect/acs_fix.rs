//! The opt-in fix `[gpudirect] acs = "disable"`: write 0 to the ACS control
//! register (ECAP_ACS+6) of the bridges on each GPU↔NIC path where a redirect
//! or egress-control bit is set, as NVIDIA's guidance does with
//! `setpci -s BDF ECAP_ACS+6.w=0000` (NCCL troubleshooting, "PCI Access
//! Control Services (ACS)"). Only pairs at PIX, PXB or PHB distance: further
//! away NCCL does not use GPUDirect RDMA by default, and ACS isolation would be
//! given up for nothing. Never on a bridge above a device bound to a
//! passthrough driver (vfio-pci, pci-stub, …), nor on one that is in an IOMMU
//! group with other devices: VFIO trusts the groups the kernel made from ACS
//! at boot, and would keep believing in an isolation that is gone.
//!
//! ACS comes back at every reset, so every cycle that finds it set plans the
//! clear again (the daemon re-applies after a reboot). Before writing, the
//! value found is recorded in the agent's state (`gpudirect-acs.json`, with the
//! bridge's identity and the boot it was found in): `revert` writes it back
//! only to the same device (vendor, device, class, port type) in the same
//! boot, where the register still holds what the agent wrote. Every write and
//! restore goes into the agent's journal. The register is written by this
//! process where it may (root with CAP_SYS_ADMIN), else by the agent's
//! privileged helper (`host::pci_helper`), which re-checks the same identity.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::acs_error::{AcsError, ParseError, RecordError, SaveError};
use super::decide::{Pair, View};
use super::pcie::{self, Acs};
use super::topo::Distance;
use crate::engine::effect::{Effect, EffectError, EffectKey, LiveCtx, Ran};
use crate::engine::ledger;
use crate::host::live_files::{LiveFiles, PciAccess};
use crate::host::pci_config::{AcsRequest, PciIdentity};
use crate::host::read::ReadHost;
use crate::host::snapshot::BOOT_ID;
use crate::host::state::STATE_DIR;
use crate::host::state_writer::Access;

/// Who the journal names as the writer.
const OWNER: &str = "gpudirect.path";

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
    /// Who the bridge was (`None` in a record of an older agent: never restored).
    #[serde(default)]
    pub identity: Option<PciIdentity>,
}

/// A bridge whose ACS control register the fix clears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub bdf: String,
    pub identity: PciIdentity,
    pub offset: u16,
    pub ctl: u16,
    /// The pairs whose path crosses it (`GPU 0000:1b:00.0 ↔ mlx5_0`).
    pub pairs: Vec<String>,
}

/// The bridges to clear: on the path of a pair at PIX, PXB or PHB distance,
/// with an ACS bit set that redirects or blocks peer-to-peer; and those it
/// must not clear, each with why. Pure.
pub fn targets(view: &View, pairs: &[Pair]) -> (Vec<Target>, Vec<String>) {
    let mut out: BTreeMap<&str, Target> = BTreeMap::new();
    let mut refused: BTreeMap<&str, String> = BTreeMap::new();
    for p in pairs.iter().filter(|p| p.distance <= Distance::Phb) {
        for br in &p.bridges {
            let Some(acs @ Acs::Present { offset, ctl, .. }) = view.acs(br) else {
                continue;
            };
            if acs.blocking() == 0 || refused.contains_key(br.as_str()) {
                continue;
            }
            let why = match (
                view.identity(br),
                view.function(br).and_then(|f| f.isolation.as_ref()),
            ) {
                (None, _) => Some("its identity (vendor, device, class) cannot be read".to_owned()),
                (_, None) => Some("what is below it was not read".to_owned()),
                (Some(_), Some(i)) => refusal(i),
            };
            if let Some(why) = why {
                out.remove(br.as_str());
                refused.insert(br, why);
                continue;
            }
            let identity = view.identity(br).expect("checked above");
            let t = out.entry(br).or_insert_with(|| Target {
                bdf: br.clone(),
                identity,
                offset,
                ctl,
                pairs: Vec::new(),
            });
            t.pairs.push(format!("GPU {} ↔ {}", p.gpu, p.nic));
        }
    }
    let refused = refused
        .into_iter()
        .map(|(br, why)| format!("apply does not clear ACS on {br}: {why}; leave acs = \"report\" there, or unbind those devices from passthrough first"))
        .collect();
    (out.into_values().collect(), refused)
}

/// Why clearing ACS above these functions would break an isolation someone relies on.
fn refusal(i: &super::gather::Isolation) -> Option<String> {
    if let Some((bdf, driver)) = i.passthrough.first() {
        return Some(format!(
            "{bdf} below it is bound to {driver}, a passthrough driver: VFIO trusts the IOMMU groups the kernel made from ACS at boot and would keep believing in an isolation that is gone"
        ));
    }
    if let Some((group, devs)) = i.shared_groups.first() {
        return Some(format!(
            "it is in IOMMU group {group} with {} devices ({}): the kernel found no ACS isolation around it at boot, and VFIO hands such a group over whole on the isolation it believes in",
            devs.len(),
            devs.join(", ")
        ));
    }
    i.unreadable.first().map(|e| {
        format!(
            "what is below it cannot all be read ({e}), so no passthrough device can be ruled out"
        )
    })
}

/// The record as the state directory holds it (none: empty). One that
/// cannot be read or parsed is an error: nothing is restored from it, and no
/// clear overwrites the other bridges' entries.
fn load(host: &ReadHost) -> Result<Record, RecordError> {
    let p = record_path();
    match host.state_read(&p) {
        Ok(None) => Ok(Record::default()),
        Ok(Some(b)) => parse_record(&b).map_err(|source| RecordError::Unparsable {
            path: host.path(&p),
            source,
        }),
        Err(e) => Err(RecordError::Unreadable(e)),
    }
}

/// The record's bytes (also the fuzz target's entry).
pub fn parse_record(bytes: &[u8]) -> Result<Record, ParseError> {
    let r: Record = serde_json::from_slice(bytes)?;
    if let Some(bdf) = r.ports.keys().find(|b| !crate::host::pci_config::is_bdf(b)) {
        return Err(ParseError::NotBdf(bdf.clone()));
    }
    Ok(r)
}

fn save(host: &LiveFiles, r: &Record) -> Result<(), SaveError> {
    if r.ports.is_empty() {
        return Ok(host.state().remove(&record_path())?);
    }
    let kept = crate::host::state::Record {
        path: record_path(),
        bytes: serde_json::to_vec_pretty(r)?,
        note: None,
    };
    Ok(host.state().keep(&kept, Access::Public)?)
}

fn boot_id(host: &ReadHost) -> String {
    host.read_string(Path::new(BOOT_ID))
        .ok()
        .flatten()
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn config_path(bdf: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(bdf).join("config")
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

    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError> {
        self.clear(cx).map_err(EffectError::new)
    }
}

impl ClearAcs {
    fn clear(&self, cx: &LiveCtx) -> Result<Ran, AcsError> {
        let files = cx.host.files();
        let t = &self.target;
        let bdf = || t.bdf.clone();
        let mut rec = load(&files.reader()).map_err(|source| AcsError::Record {
            bdf: bdf(),
            source: Box::new(source),
        })?;
        let access = files
            .pci(cx.manager)
            .map_err(|source| AcsError::Access { bdf: bdf(), source })?;
        // Recorded before the write: revert can always put back what was found.
        // The first value found in a boot is the firmware's (ACS is reset at boot).
        let boot = boot_id(&files.reader());
        let before = rec
            .ports
            .get(&t.bdf)
            .filter(|p| p.offset == t.offset && p.identity == Some(t.identity));
        let came_back = before.is_some_and(|p| p.boot_id != boot);
        let original = match before {
            Some(p) if p.boot_id == boot => p.original,
            _ => t.ctl,
        };
        rec.boot_id = boot.clone();
        rec.ports.insert(
            t.bdf.clone(),
            Port {
                offset: t.offset,
                original,
                written: 0,
                boot_id: boot,
                identity: Some(t.identity),
            },
        );
        save(&files, &rec).map_err(|source| AcsError::NotRecorded {
            bdf: bdf(),
            ctl: t.ctl,
            path: record_path(),
            source: Box::new(source),
        })?;
        let request = AcsRequest {
            bdf: t.bdf.clone(),
            identity: t.identity,
            offset: t.offset,
            expect: t.ctl,
            value: 0,
        };
        let w = access
            .write_acs(&request)
            .map_err(|source| AcsError::Write { bdf: bdf(), source })?;
        let what = format!(
            "ACSCtl {:#06x} → {:#06x} at 0x{:03x} ({})",
            w.old,
            w.new,
            t.offset + 6,
            t.identity.text()
        );
        ledger::journal(
            &files.state(),
            "acs_clear",
            &config_path(&t.bdf),
            OWNER,
            &what,
        );
        Ok(Ran::done(format!(
            "{}: ACSCtl {:#06x} → 0x0000 (recorded for revert){}",
            t.bdf,
            w.old,
            if came_back {
                "; ACS had come back with the reboot"
            } else {
                ""
            }
        )))
    }
}

/// Writes a recorded ACSCtl back (`revert`): only to the same device, in the
/// same boot, where the register still holds what the agent wrote.
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

    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError> {
        self.restore_recorded(cx).map_err(EffectError::new)
    }
}

impl RestoreAcs {
    /// Restores, then drops the bridge from the record.
    fn restore_recorded(&self, cx: &LiveCtx) -> Result<Ran, AcsError> {
        let files = cx.host.files();
        let access = files.pci(cx.manager).map_err(|source| AcsError::Access {
            bdf: self.bdf.clone(),
            source,
        })?;
        let ran = self.restore(&files, &access)?;
        let done = || ran.detail().to_owned();
        let mut rec = load(&files.reader()).map_err(|source| AcsError::RecordAfter {
            done: done(),
            source: Box::new(source),
        })?;
        rec.ports.remove(&self.bdf);
        save(&files, &rec).map_err(|source| AcsError::NotUpdated {
            done: done(),
            path: record_path(),
            source: Box::new(source),
        })?;
        Ok(ran)
    }

    fn restore(&self, files: &LiveFiles, access: &PciAccess) -> Result<Ran, AcsError> {
        let (bdf, p) = (&self.bdf, &self.port);
        let skipped = |m: String| Ok(Ran::skipped(format!("{bdf}: {m}")));
        let boot = boot_id(&files.reader());
        if p.boot_id != boot {
            return skipped(format!(
                "ACS was reset by a reboot since the agent cleared it (recorded in boot {}, this is {boot}): nothing to restore",
                p.boot_id
            ));
        }
        let Some(recorded) = p.identity else {
            return skipped(
                "the record does not say which device it was (an older agent's): nothing written"
                    .into(),
            );
        };
        let bytes = access.read(bdf).map_err(|source| AcsError::Access {
            bdf: bdf.clone(),
            source,
        })?;
        let found = PciIdentity::of(&bytes);
        if found != Some(recorded) {
            return skipped(format!(
                "it is {} now, not the {} the agent cleared: another device, nothing written",
                found.map_or("not answering (all ones)".into(), |i| i.text()),
                recorded.text()
            ));
        }
        let now = match pcie::parse_config(&bytes).acs {
            Acs::Present { offset, ctl, .. } if offset == p.offset => ctl,
            other => {
                return skipped(format!(
                    "its ACS capability is not at 0x{:03x} as recorded ({other:?}): nothing written",
                    p.offset
                ));
            }
        };
        if now == p.original {
            return Ok(Ran::done(format!("{bdf}: ACSCtl is {now:#06x} already")));
        }
        if now != p.written {
            return skipped(format!(
                "ACSCtl is {now:#06x}, not the {:#06x} the agent wrote: changed since, left as it is",
                p.written
            ));
        }
        let request = AcsRequest {
            bdf: bdf.clone(),
            identity: recorded,
            offset: p.offset,
            expect: p.written,
            value: p.original,
        };
        let w = access
            .write_acs(&request)
            .map_err(|source| AcsError::Write {
                bdf: bdf.clone(),
                source,
            })?;
        let what = format!(
            "ACSCtl {:#06x} → {:#06x} at 0x{:03x} ({})",
            w.old,
            w.new,
            p.offset + 6,
            recorded.text()
        );
        ledger::journal(
            &files.state(),
            "acs_restore",
            &config_path(bdf),
            OWNER,
            &what,
        );
        Ok(Ran::done(format!(
            "{bdf}: ACSCtl {:#06x} → {:#06x}",
            w.old, w.new
        )))
    }
}

/// `revert` facing a record it cannot read: fails, saying why, writing nothing.
#[derive(Debug)]
pub struct BrokenRecord {
    pub message: String,
}

impl Effect for BrokenRecord {
    fn key(&self) -> EffectKey {
        EffectKey::new("restore_acs", "gpudirect-acs.json".to_owned())
    }

    fn describe(&self) -> String {
        "write the recorded ACS values back".into()
    }

    fn run(&self, _cx: &LiveCtx) -> Result<Ran, EffectError> {
        Err(EffectError::new(AcsError::Broken(self.message.clone())))
    }
}

/// The effects that put back what the record says the agent changed.
pub fn undo(host: &ReadHost) -> Vec<Arc<dyn Effect>> {
    match load(host) {
        Ok(r) => r
            .ports
            .into_iter()
            .map(|(bdf, port)| Arc::new(RestoreAcs { bdf, port }) as Arc<dyn Effect>)
            .collect(),
        Err(e) => vec![Arc::new(BrokenRecord {
            message: e.to_string(),
        })],
    }
}
