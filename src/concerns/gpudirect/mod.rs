//! `gpudirect.path`: what stands between each NVIDIA GPU and its nearest RDMA
//! NIC. gather (sysfs, /proc, the kernel config under the root) → decide
//! (pure: pairs, path, ACS, links, mechanism) → one check, metrics per pair
//! and per link, and the NFD label `rdma-node-agent.gpudirect`.
//! It only reports.

pub mod acs_error;
pub mod acs_fix;
pub mod decide;
pub mod gather;
pub mod mechanism;
pub mod metrics;
pub mod pcie;
pub mod reasons;
pub mod topo;

#[cfg(test)]
mod acs_safety_tests;
#[cfg(test)]
mod acs_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::json;

use crate::config::Config;
use crate::config::gpudirect::{AcsMode, GpuDirectConfig};
use crate::engine::check::CheckId;
use crate::engine::check::{Check, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::engine::effect::Effect;
use crate::engine::plan::{Action, ActionKind};
use crate::host::snapshot::Snapshot;
use crate::observe::Observation;
use crate::reason::Reason;
use decide::{Pair, View};
use mechanism::{Kind, Mechanism};

pub const CHECK_ID: CheckId = CheckId::new("gpudirect.path");

/// How many problems the message lists before "(and N more)".
const LISTED: usize = 3;

pub struct Path;

impl Concern for Path {
    type Facts = gather::Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.gpudirect.enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<gather::Facts, GatherError> {
        let below = matches!(cfg.gpudirect.acs, AcsMode::Disable);
        gather::gather_for(snap, below).map_err(|e| {
            GatherError::unknown(format!(
                "cannot read the PCI devices: {e} (run the check as root on the host, or check --root)"
            ))
        })
    }

    fn decide(&self, f: &gather::Facts, ctx: &Ctx) -> Decision {
        let out = assess(f, &ctx.config.gpudirect);
        let mut observations = Vec::new();
        if !f.gpus.is_empty() {
            observations.push(Observation::GpuDirectMechanism(
                out.mechanism
                    .as_ref()
                    .filter(|m| m.kind != Kind::None || m.unknown.is_none())
                    .map(|m| m.kind.as_str()),
            ));
        }
        // A link shared by several pairs (a NIC under a switch with two GPUs)
        // is one series: each device once.
        let mut links = std::collections::BTreeSet::new();
        for p in &out.pairs {
            observations.push(Observation::GpuDirectPair {
                gpu: p.gpu.clone(),
                nic: p.nic.clone(),
                mechanism: p.mechanism.as_str(),
                distance: p.distance.as_str(),
                ready: p.ready,
                // Each once, in the order of `Reason::ALL`: the metrics list them as given.
                reasons: decide::Reason::ALL
                    .iter()
                    .filter(|r| p.reasons.contains(r))
                    .map(|r| r.as_str())
                    .collect(),
            });
            for h in p.hops.iter().filter(|h| links.insert(h.device.clone())) {
                observations.push(Observation::PcieLink {
                    device: h.device.clone(),
                    speed_tenths_gts: h.speed,
                    max_speed_tenths_gts: h.max_speed,
                    width: h.width,
                    max_width: h.max_width,
                });
            }
        }
        let actions = out
            .acs_targets
            .iter()
            .map(|t| Action {
                reason: format!(
                    "[gpudirect] acs = \"disable\": ACS redirects peer-to-peer for {}",
                    t.pairs.join(", ")
                ),
                kind: ActionKind::Effect(Arc::new(acs_fix::ClearAcs { target: t.clone() })),
            })
            .collect();
        Decision {
            checks: vec![out.check],
            observations,
            actions,
            ..Decision::default()
        }
    }

    fn undo(&self, snap: &Snapshot, _cfg: &Config) -> Vec<Arc<dyn Effect>> {
        acs_fix::undo(snap)
    }
}

pub struct Outcome {
    pub check: Check,
    pub pairs: Vec<Pair>,
    /// `None` without GPUs.
    pub mechanism: Option<Mechanism>,
    /// With `acs = "disable"`: the bridges `apply` clears.
    pub acs_targets: Vec<acs_fix::Target>,
}

fn required(cfg: &GpuDirectConfig, gpu: &str) -> bool {
    cfg.required || cfg.required_gpus.iter().any(|g| g == gpu)
}

/// The check from the facts: pure.
pub fn assess(f: &gather::Facts, cfg: &GpuDirectConfig) -> Outcome {
    if f.gpus.is_empty() && f.unplaced.is_empty() {
        return no_gpu(cfg);
    }
    let mech = mechanism::decide(&f.mechanism);
    let view = View::new(f);
    let pairs = decide::pairs(&view, &mech);
    let iommu = decide::node_iommu(f);
    let mut v = Verdict::unplaced(f);
    if pairs.is_empty() {
        return v.no_pairs(f, cfg, mech, iommu);
    }
    if mech.kind == Kind::None {
        if mech.unknown.is_some() {
            v.raise(Status::Unknown, Reason::FACT_UNREADABLE);
        }
        v.problems.push(format!("GPUDirect mechanism {}: GPU memory would be staged through host memory; load nvidia_peermem with MLNX_OFED/DOCA-OFED, or use the open GPU kernel modules on a kernel with CONFIG_PCI_P2PDMA=y", mech.describe()));
    }
    v.judge_pairs(cfg, &pairs);
    let ready = pairs.iter().filter(|p| p.ready == Some(true)).count();
    let mut distances: Vec<&str> = pairs.iter().map(|p| p.distance.as_str()).collect();
    distances.sort_unstable();
    distances.dedup();
    let mut message = format!(
        "{} GPU↔NIC pair(s), {ready} ready; mechanism {}; distance {}; IOMMU {iommu}",
        pairs.len(),
        mech.kind.as_str(),
        distances.join("/"),
    );
    if v.problems.is_empty() {
        message.push_str("; no ACS redirect, every link at its maximum");
    }
    let (acs_targets, refused) = match cfg.acs {
        AcsMode::Disable => acs_fix::targets(&view, &pairs),
        AcsMode::Report => (Vec::new(), Vec::new()),
    };
    // A refused clear is said first: the operator asked for it.
    for r in refused.into_iter().rev() {
        v.problems.insert(0, r);
    }
    if !acs_targets.is_empty() {
        let names: Vec<&str> = acs_targets.iter().map(|t| t.bdf.as_str()).collect();
        message.push_str(&format!(
            "; apply clears ACS on {} ([gpudirect] acs = \"disable\")",
            names.join(", ")
        ));
    }
    let more = v.problems.len().saturating_sub(LISTED);
    for p in v.problems.iter().take(LISTED) {
        message.push_str("; ");
        message.push_str(p);
    }
    if more > 0 {
        message.push_str(&format!(" (and {more} more)"));
    }
    Outcome {
        check: Check::new(CHECK_ID, v.status, message)
            .with_reason(v.reason)
            .with_details(details(&pairs, &mech, iommu)),
        pairs,
        mechanism: Some(mech),
        acs_targets,
    }
}

/// No NVIDIA GPU on the node: skipped, or a failure when one is required.
fn no_gpu(cfg: &GpuDirectConfig) -> Outcome {
    let (status, message) = if cfg.required {
        (
            Status::Fail,
            "no NVIDIA GPU on the PCI bus, and [gpudirect] required = true".to_owned(),
        )
    } else {
        (
            Status::Skipped,
            "no NVIDIA GPU (/sys/bus/pci/devices has none of vendor 0x10de, class 0x0300/0x0302): nothing to check".to_owned(),
        )
    };
    Outcome {
        check: Check::new(CHECK_ID, status, message).with_reason(reasons::NO_GPU),
        pairs: Vec::new(),
        mechanism: None,
        acs_targets: Vec::new(),
    }
}

/// The check's status so far, the reason of the first problem that raised
/// it to where it is, and every problem found.
struct Verdict {
    status: Status,
    reason: Reason,
    problems: Vec<String>,
}

impl Verdict {
    fn raise(&mut self, s: Status, r: Reason) {
        if s > self.status {
            self.status = s;
            self.reason = r;
        }
    }

    /// GPUs and NICs whose place on the PCI tree cannot be read.
    fn unplaced(f: &gather::Facts) -> Self {
        let mut v = Verdict {
            status: Status::Ok,
            reason: Reason::FACT_UNREADABLE,
            problems: Vec::new(),
        };
        for gpu in &f.unplaced {
            v.raise(Status::Unknown, Reason::FACT_UNREADABLE);
            v.problems.push(format!(
                "GPU {gpu}: its sysfs link does not lead to a device under /sys/devices/pci*: its path cannot be read"
            ));
        }
        // A NIC not placed may be a GPU's nearest: no pair, and no skip, is sure.
        for (nic, why) in &f.unplaced_nics {
            v.raise(Status::Unknown, Reason::FACT_UNREADABLE);
            v.problems.push(format!(
                "RDMA device {nic}: its sysfs device link cannot be resolved ({why}): its distance to the GPUs cannot be read"
            ));
        }
        v
    }

    /// GPUs but no RDMA NIC with a PCI function: no path to check.
    fn no_pairs(
        mut self,
        f: &gather::Facts,
        cfg: &GpuDirectConfig,
        mech: Mechanism,
        iommu: &str,
    ) -> Outcome {
        let gpus = f.gpus.len();
        let any_required = cfg.required || f.gpus.iter().any(|g| required(cfg, &g.pci));
        if any_required {
            self.raise(Status::Fail, Reason::NO_RDMA_DEVICES);
        } else if self.problems.is_empty() {
            self.raise(Status::Skipped, Reason::NO_RDMA_DEVICES);
        }
        let mut message = format!(
            "{gpus} NVIDIA GPU(s), no RDMA NIC with a PCI function (/sys/class/infiniband): no GPU↔NIC path to check; GPUDirect mechanism: {}; IOMMU {iommu}",
            mech.describe()
        );
        if any_required {
            message.push_str("; required by [gpudirect]");
        }
        for p in self.problems {
            message.push_str("; ");
            message.push_str(&p);
        }
        Outcome {
            check: Check::new(CHECK_ID, self.status, message)
                .with_reason(self.reason)
                .with_details(details(&[], &mech, iommu)),
            pairs: Vec::new(),
            mechanism: Some(mech),
            acs_targets: Vec::new(),
        }
    }

    /// Each pair: not ready where required fails, elsewhere warns; unknown
    /// is named by what could not be read, else by its first reason.
    fn judge_pairs(&mut self, cfg: &GpuDirectConfig, pairs: &[Pair]) {
        for p in pairs {
            let need = required(cfg, &p.gpu);
            let s = match p.ready {
                Some(false) if need => Status::Fail,
                Some(false) => Status::Warn,
                None => Status::Unknown,
                Some(true) if !p.reasons.is_empty() => Status::Warn,
                Some(true) => Status::Ok,
            };
            let r = match s {
                Status::Unknown => p.reasons.iter().find(|r| r.is_unknown()),
                _ => p.reasons.iter().find(|r| !r.is_unknown()),
            };
            self.raise(s, r.map_or(Reason::FACT_UNREADABLE, |r| r.code()));
            self.problems.extend(p.problems.iter().cloned());
        }
    }
}

fn details(pairs: &[Pair], mech: &Mechanism, iommu: &str) -> serde_json::Value {
    json!({
        "mechanism": mech,
        "iommu": iommu,
        "pairs": pairs,
        "lines": pairs.iter().map(Pair::line).collect::<Vec<_>>(),
    })
}
