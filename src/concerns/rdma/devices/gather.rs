//! What the check reads of each device, taken from the cycle's RDMA inventory
//! (`Snapshot::rdma_inventory`: the one walk of /sys/class/infiniband): raw
//! text only, parsed later.

use std::path::PathBuf;

use crate::host::inventory::{ClassError, Device as Listed};
use crate::host::snapshot::Snapshot;

/// A sysfs file as read: absent, its text, or why it could not be read.
pub type Read = Result<Option<String>, String>;

/// What gather read for one device, before parsing.
#[derive(Debug, Clone)]
pub struct RawDevice {
    pub name: String,
    /// The class link resolves to nothing: where it points.
    pub broken_link: Option<PathBuf>,
    /// The PCI function (last component of the resolved `device` link).
    pub pci: Option<String>,
    /// `device/physfn` exists.
    pub is_vf: bool,
    /// Under /sys/devices/virtual: a software device (rxe, siw) on a netdev.
    pub is_software: bool,
    pub node_guid: Read,
    pub fw_ver: Read,
    pub hca_type: Read,
    pub board_id: Read,
    /// `device/net/*`.
    pub netdevs: Vec<String>,
    pub ports: Vec<RawPort>,
    /// Directory-level problems (unresolvable link, unreadable ports dir).
    pub errors: Vec<String>,
}

impl RawDevice {
    pub fn new(name: String) -> Self {
        RawDevice {
            name,
            broken_link: None,
            pci: None,
            is_vf: false,
            is_software: false,
            node_guid: Ok(None),
            fw_ver: Ok(None),
            hca_type: Ok(None),
            board_id: Ok(None),
            netdevs: Vec::new(),
            ports: Vec::new(),
            errors: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RawPort {
    /// The directory name under `ports/` (a number on a sane node).
    pub name: String,
    pub state: Read,
    pub phys_state: Read,
    pub rate: Read,
    pub link_layer: Read,
    /// `gid_attrs/ndevs/0`: the netdev of the default GID (RoCE; IB ports have none).
    pub ndev: Option<String>,
}

/// Every device under /sys/class/infiniband (none when the class is absent:
/// no RDMA driver loaded). Each device's problems stay with it.
pub fn gather(snap: &Snapshot) -> Result<Vec<RawDevice>, ClassError> {
    Ok(snap.rdma_inventory()?.devices.iter().map(raw).collect())
}

fn raw(d: &Listed) -> RawDevice {
    let mut raw = RawDevice::new(d.name.clone());
    if let Some(to) = &d.broken_link {
        raw.broken_link = Some(to.clone());
        return raw;
    }
    if let Some(e) = &d.open_error {
        raw.errors.push(format!("{}: {e}", d.name));
        return raw;
    }
    // Only a PCI function's netdevs and VF-ness are the device's.
    if d.pci.is_some() {
        raw.pci = d.pci.clone();
        raw.is_vf = d.physfn;
        raw.netdevs = d.function_netdevs.clone();
    }
    if d.is_software {
        raw.is_software = true;
        if let Some(p) = d.parent_text() {
            raw.netdevs = p.split_whitespace().map(str::to_owned).collect();
        }
    }
    raw.node_guid = d.node_guid.clone();
    raw.fw_ver = d.fw_ver.clone();
    raw.hca_type = d.hca_type.clone();
    raw.board_id = d.board_id.clone();
    if let Some(e) = &d.ports_error {
        raw.errors.push(format!("{}: {e}", d.name));
    }
    raw.ports = d
        .ports
        .iter()
        .map(|p| RawPort {
            name: p.name.clone(),
            state: p.state.clone(),
            phys_state: p.phys_state.clone(),
            rate: p.rate.clone(),
            link_layer: p.link_layer.clone(),
            ndev: p.netdev(),
        })
        .collect();
    raw
}
