//! The RDMA device and port inventory from sysfs (what `ibstat`, `ibdev2netdev`
//! and `rdma link` show), checked against the expectations in the agent config.
//!
//! The cycle's RDMA inventory (`Snapshot::rdma_inventory`: sysfs as read) →
//! parse (the kernel's own spellings, typed) → assess (the check). Every value the kernel's `drivers/infiniband/core/sysfs.c` can
//! print is understood; anything else makes that field unknown, never "down".

mod assess;
pub mod metrics;
mod parse;
pub mod ports;
pub mod reasons;
#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::host::inventory::ClassError;
use crate::host::inventory::port::{LinkLayer, PhysState, PortState};
use crate::host::snapshot::Snapshot;

pub use assess::{CHECK_ID, check, unmet};
pub use parse::{parse, parse_guid, parse_text};

/// Every device under /sys/class/infiniband, parsed from the cycle's inventory
/// (none when the class is absent: no RDMA driver loaded). Each device's
/// problems stay with it.
pub fn gather(snap: &Snapshot) -> Result<Vec<Device>, ClassError> {
    Ok(snap.rdma_inventory()?.devices.iter().map(parse).collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A physical function (or a device without PCI parent).
    Pf,
    /// An SR-IOV virtual function.
    Vf,
    /// A RoCE LAG device (`mlx5_bond_*`).
    Bond,
    /// A software device on a netdev (Soft-RoCE `rxe`, `siw`): /sys/devices/virtual.
    Software,
}

/// Why a device listed in /sys/class/infiniband is not a usable device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "problem", content = "detail")]
pub enum Problem {
    /// The class link points at nothing (a driver half unbound, a stale tree).
    BrokenLink(String),
    /// The device has no `ports/` entries: nothing can use it.
    NoPorts,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    pub name: String,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    pub node_guid: Option<String>,
    /// `None` also when the driver has no firmware string (rxe, EFA, hns print an empty line).
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board_id: Option<String>,
    pub netdevs: Vec<String>,
    pub ports: Vec<Port>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    /// Per-field problems, e.g. `mlx5_0/1 rate: cannot parse "fast"`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Values read by their number whose text is not the kernel's spelling
    /// (`"4: ACTIVE" read as 4` for a phys_state): details, not problems.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Device {
    /// Listed, linked to a device and with ports: what a healthy inventory counts.
    pub fn is_usable(&self) -> bool {
        self.problem.is_none() && !self.ports.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    pub port: u32,
    /// `None`: the file could not be read or holds no number.
    pub state: Option<PortState>,
    pub phys_state: Option<PhysState>,
    pub rate_gbps: Option<f64>,
    pub link_layer: Option<LinkLayer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
}

impl Port {
    /// `Some(true)` ACTIVE, `Some(false)` another state the kernel names,
    /// `None` when the state is not known (unreadable, or the kernel's `UNKNOWN`).
    pub fn active(&self) -> Option<bool> {
        self.state
            .filter(|s| s.is_named())
            .map(PortState::is_active)
    }

    pub fn is_active(&self) -> bool {
        self.active() == Some(true)
    }

    /// The rate in bytes per second, as node_exporter's infiniband collector has it.
    pub fn rate_bytes_per_second(&self) -> Option<u64> {
        self.rate_gbps.map(gbps_to_bytes)
    }
}

/// Gb/s (decimal, as the kernel prints it) to bytes/s: × 10⁹ / 8.
pub fn gbps_to_bytes(gbps: f64) -> u64 {
    (gbps * 125_000_000.0).round() as u64
}
