//! The RDMA inventory: `/sys/class/infiniband` walked once per cycle (lazily,
//! through `Snapshot::rdma_inventory`), shared by every concern that asks
//! about RDMA devices, ports, their netdevs, GIDs, PCI functions and counters.
//! As node_exporter reads procfs's `InfiniBandClass` once per scrape.
//!
//! Each file is kept as read: its text, absent, or why it could not be read
//! (`Read`). One unreadable device never hides the others, and an unreadable
//! state stays unknown: what a file says is for each concern to judge.
//! Port counters are read only when a concern asks for them (their cost
//! follows RDMA work), once per port per cycle.

pub mod counters;
pub mod gids;
pub mod port;
#[cfg(test)]
mod tests;
pub mod walk;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub const CLASS: &str = "/sys/class/infiniband";

/// A sysfs file as read: absent, its text, or why it could not be read.
pub type Read = Result<Option<String>, String>;

/// A file's text as the inventory read it, trimmed; empty when absent or
/// unreadable (for labels and facts that show "" rather than fail).
pub fn trimmed(read: &Read) -> String {
    read.as_ref()
        .ok()
        .and_then(Option::as_deref)
        .map(|t| t.trim().to_owned())
        .unwrap_or_default()
}

/// Why `/sys/class/infiniband` itself could not be listed (the host layer's
/// message, unchanged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClassError(pub String);

/// Every device of the class, in name order.
#[derive(Debug, Default)]
pub struct Inventory {
    pub devices: Vec<Device>,
}

impl Inventory {
    /// The devices that are not SR-IOV VFs: a VF's link, firmware and
    /// counters are its PF's share, so fleet, link and counter views skip them.
    pub fn physical(&self) -> impl Iterator<Item = &Device> {
        self.devices.iter().filter(|d| !d.physfn)
    }

    /// Each SR-IOV VF's PCI address with its PF's, for the VFs whose `physfn`
    /// link was read.
    pub fn vf_parents(&self) -> impl Iterator<Item = (&str, &str)> {
        self.devices
            .iter()
            .filter_map(|d| Some((d.pci.as_deref()?, d.pf.as_deref()?)))
    }
}

/// One device under `/sys/class/infiniband`.
#[derive(Debug)]
pub struct Device {
    pub name: String,
    /// The class link resolves to nothing: where it points.
    pub broken_link: Option<PathBuf>,
    /// Why the device's directory could not be opened.
    pub open_error: Option<String>,
    /// The device's real directory (links resolved), when it opened.
    pub path: Option<PathBuf>,
    /// What `device` leads to.
    pub function: DeviceLink,
    /// The PCI function's address, when `device` leads to one on a PCI bus.
    pub pci: Option<String>,
    /// `device/physfn` exists: an SR-IOV virtual function.
    pub physfn: bool,
    /// The PF's PCI address (the name `device/physfn` leads to), for a VF.
    pub pf: Option<String>,
    /// Under /sys/devices/virtual: a software device (rxe, siw) on a netdev.
    pub is_software: bool,
    /// `device/net/*`: the function's netdevs.
    pub function_netdevs: Vec<String>,
    /// `parent` (rxe, siw name their netdev there); read for non-VF devices only.
    pub parent: Read,
    /// The function's driver (`device/driver` link's name); non-VF devices only.
    pub driver: Option<String>,
    pub node_guid: Read,
    pub fw_ver: Read,
    pub hca_type: Read,
    pub board_id: Read,
    /// `device/numa_node` (`-1`: none); non-VF devices only (a VF's is its PF's).
    pub numa_node: Read,
    /// `ports/*` in name order.
    pub ports: Vec<Port>,
    /// Why `ports/` could not be listed.
    pub ports_error: Option<String>,
}

impl Device {
    pub fn new(name: String) -> Self {
        Device {
            name,
            broken_link: None,
            open_error: None,
            path: None,
            function: DeviceLink::None,
            pci: None,
            physfn: false,
            pf: None,
            is_software: false,
            function_netdevs: Vec::new(),
            parent: Ok(None),
            driver: None,
            node_guid: Ok(None),
            fw_ver: Ok(None),
            hca_type: Ok(None),
            board_id: Ok(None),
            numa_node: Ok(None),
            ports: Vec::new(),
            ports_error: None,
        }
    }

    /// The NUMA node of the device's function; `None` when it has none
    /// (`-1`, a software device, a VF) or it could not be read.
    pub fn numa_node(&self) -> Option<u32> {
        let t = self.numa_node.as_ref().ok()?.as_deref()?;
        t.trim().parse().ok()
    }

    /// `parent` trimmed, when it could be read.
    pub fn parent_text(&self) -> Option<&str> {
        self.parent.as_ref().ok().and_then(Option::as_deref)
    }
}

/// What a device's `device` link leads to, resolved inside the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceLink {
    /// No `device` entry (a software device, or a broken class link).
    None,
    /// The real path of what it leads to (a PCI function's directory, most often).
    Real(PathBuf),
    /// A link to nothing: where it points.
    Dangling(PathBuf),
    /// It could not be resolved: why.
    Error(String),
}

impl DeviceLink {
    /// Where `device` leads, whether or not something is there.
    pub fn path(&self) -> Option<&Path> {
        match self {
            DeviceLink::Real(p) | DeviceLink::Dangling(p) => Some(p),
            DeviceLink::None | DeviceLink::Error(_) => None,
        }
    }
}

/// One port of a device.
#[derive(Debug)]
pub struct Port {
    /// The directory name under `ports/` (a number on a sane node).
    pub name: String,
    pub state: Read,
    pub phys_state: Read,
    pub rate: Read,
    pub link_layer: Read,
    /// `gid_attrs/ndevs/0`: the netdev of the default GID (RoCE; the kernel
    /// answers EINVAL for IB ports: no netdev).
    pub ndev: Read,
    /// `gids/0`: the default GID (its subnet prefix names an IB fabric);
    /// non-VF devices only.
    pub gid0: Read,
    /// `counters/` and `hw_counters/`, read on first ask (`Snapshot::port_counters`).
    pub counters: OnceLock<Arc<Counters>>,
    /// LIDs and the GID table, read on first ask (`Snapshot::port_addresses`).
    pub addresses: OnceLock<Arc<gids::Addresses>>,
}

impl Port {
    pub fn new(name: String) -> Self {
        Port {
            name,
            state: Ok(None),
            phys_state: Ok(None),
            rate: Ok(None),
            link_layer: Ok(None),
            ndev: Ok(None),
            gid0: Ok(None),
            counters: OnceLock::new(),
            addresses: OnceLock::new(),
        }
    }

    /// The default GID's netdev, trimmed; `None` when absent, empty or unreadable.
    pub fn netdev(&self) -> Option<String> {
        self.ndev
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }
}

/// A counter's value, or why it could not be read (its text, or the error).
pub type Counter = Result<u64, String>;

/// One counter directory: its counters by name, or why it could not be listed.
/// Absent directories list empty (rxe and siw have no `counters/`).
pub type CounterDir = Result<BTreeMap<String, Counter>, String>;

/// A port's `counters/` and `hw_counters/`. A counter the driver does not
/// have (`N/A (no PMA)`, a file gone) is left out; `hw_counters/lifespan` (the
/// driver's cache time, a knob) too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    pub counters: CounterDir,
    pub hw_counters: CounterDir,
}

impl Counters {
    /// `counters/<name>`, when it was read as a number.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .as_ref()
            .ok()?
            .get(name)?
            .as_ref()
            .ok()
            .copied()
    }
}

/// Whether a real path is a PCI function's (or below one).
pub(crate) fn on_pci(p: &Path) -> bool {
    p.to_string_lossy().starts_with("/sys/devices/pci")
}
