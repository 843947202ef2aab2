//! Reading what `pcie.aer` decides on, through the host layer: each RDMA
//! NIC's PCI function (`/sys/class/infiniband/<dev>/device`, from the RDMA inventory),
//! each NVIDIA GPU (the snapshot's scan), every bridge and port above them up
//! to the root port, and for each: the AER statistics, a root port's totals
//! and the link attributes. Read only; one unreadable function never stops
//! the others from being read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::parse::{self, Counts, Severity};
use crate::host::inventory::DeviceLink;
use crate::host::pci_path::{self, UpstreamPath};
use crate::host::snapshot::{PCI_DEVICES, Snapshot};

/// What a watched function is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// An RDMA NIC's function, with its device names (`mlx5_0`; a bond's too).
    Nic(Vec<String>),
    Gpu,
    /// A bridge or port above NICs and GPUs; `root` when on the root bus.
    Bridge {
        root: bool,
        below: Vec<String>,
    },
}

impl Role {
    /// How a message names it: `NIC mlx5_0`, `GPU`, `root port on the path to NIC mlx5_0`.
    pub fn describe(&self) -> String {
        match self {
            Role::Nic(names) => format!("NIC {}", names.join(", ")),
            Role::Gpu => "GPU".to_owned(),
            Role::Bridge { root, below } => format!(
                "{} on the path to {}",
                if *root { "root port" } else { "bridge" },
                below.join(", ")
            ),
        }
    }
}

/// A sysfs value: `Ok(None)` absent, `Err` why it could not be read.
pub type Read<T> = Result<Option<T>, String>;

/// The three `aer_dev_*` files of one function, in `Severity::ALL` order.
pub type DevCounts = [Counts; 3];

#[derive(Debug, Clone)]
pub struct Function {
    pub bdf: String,
    pub role: Role,
    /// `Ok(None)`: none of the three files (no AER capability, or no CONFIG_PCIEAER).
    pub aer: Read<DevCounts>,
    /// A root port's `aer_rootport_total_err_*` (`None`: not a root port's files).
    pub rootport: Option<Result<[u64; 3], String>>,
    /// Speeds in tenths of GT/s; `None` unreadable or no link.
    pub speed: Option<u32>,
    pub max_speed: Option<u32>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
}

#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// By PCI address.
    pub functions: BTreeMap<String, Function>,
    /// NICs and GPUs whose place cannot be read, with why.
    pub unplaced: Vec<String>,
}

/// The functions to watch, each with its real directory and role.
fn placed(snap: &Snapshot) -> (BTreeMap<String, (PathBuf, Role)>, Vec<String>) {
    let mut ends: Vec<(UpstreamPath, Role)> = Vec::new();
    let mut unplaced = Vec::new();
    match snap.rdma_inventory() {
        Ok(inventory) => {
            // A VF's errors are its PF's (AER is reported by the physical function).
            for dev in inventory.physical() {
                match &dev.function {
                    DeviceLink::Real(p) | DeviceLink::Dangling(p) => {
                        if let Some(p) = pci_path::path_of(p) {
                            ends.push((p, Role::Nic(vec![dev.name.clone()])));
                        }
                    }
                    // Soft-RoCE and other virtual devices: no PCI function.
                    DeviceLink::None => {}
                    DeviceLink::Error(e) => unplaced.push(format!("{}: {e}", dev.name)),
                }
            }
        }
        Err(e) => unplaced.push(format!("the RDMA devices: {e}")),
    }
    match snap.nvidia_gpus() {
        Ok(scan) => {
            for bdf in &scan.gpus {
                match pci_path::upstream_path(snap, &Path::new(PCI_DEVICES).join(bdf)) {
                    Ok(Some(p)) => ends.push((p, Role::Gpu)),
                    Ok(None) => unplaced.push(format!("GPU {bdf}: not under a PCI host bridge")),
                    Err(e) => unplaced.push(format!("GPU {bdf}: {e}")),
                }
            }
            // Any of them may be a GPU.
            unplaced.extend(scan.unreadable.iter().cloned());
        }
        Err(e) => unplaced.push(e.to_string()),
    }
    let mut out: BTreeMap<String, (PathBuf, Role)> = BTreeMap::new();
    for (path, role) in &ends {
        let end = path.function();
        let shown = match role {
            Role::Nic(n) => format!("NIC {} ({})", n.join(", "), end.bdf),
            _ => format!("GPU {}", end.bdf),
        };
        for (i, f) in path.upstream().iter().enumerate() {
            let e = out.entry(f.bdf.clone()).or_insert_with(|| {
                let root = i == 0;
                let below = Vec::new();
                (f.dir.clone(), Role::Bridge { root, below })
            });
            if let Role::Bridge { below, .. } = &mut e.1 {
                if !below.contains(&shown) {
                    below.push(shown.clone());
                }
            }
        }
        match (out.get_mut(&end.bdf), role) {
            // A bond names the same function as its first port.
            (Some((_, Role::Nic(names))), Role::Nic(more)) => names.extend(more.iter().cloned()),
            _ => {
                out.insert(end.bdf.clone(), (end.dir.clone(), role.clone()));
            }
        }
    }
    (out, unplaced)
}

pub fn gather(snap: &Snapshot) -> Watched {
    let (wanted, unplaced) = placed(snap);
    let functions = wanted
        .into_iter()
        .map(|(bdf, (dir, role))| {
            let f = read_function(snap, bdf.clone(), &dir, role);
            (bdf, f)
        })
        .collect();
    Watched {
        functions,
        unplaced,
    }
}

fn read_function(snap: &Snapshot, bdf: String, dir: &Path, role: Role) -> Function {
    // Opened once: its files are read relative to it, not each by a long path.
    let opened = snap
        .open_real_dir(dir)
        .or_else(|| snap.open_dir(dir).ok().and_then(Result::ok));
    let read = |name: &str| -> Read<String> {
        match &opened {
            Some(d) => d.read_string(name),
            None => snap.read_string(&dir.join(name)),
        }
        .map_err(|e| e.to_string())
    };
    let link = |name: &str, parse: fn(&str) -> Option<u32>| {
        read(name).ok().flatten().and_then(|t| parse(&t))
    };
    Function {
        aer: aer(&read),
        rootport: rootport(&read),
        speed: link("current_link_speed", parse::speed_tenths),
        max_speed: link("max_link_speed", parse::speed_tenths),
        width: link("current_link_width", parse::width),
        max_width: link("max_link_width", parse::width),
        bdf,
        role,
    }
}

fn aer(read: &dyn Fn(&str) -> Read<String>) -> Read<DevCounts> {
    let mut got = Vec::new();
    for s in Severity::ALL {
        match read(s.dev_file()) {
            Ok(Some(t)) => got.push(
                parse::counts(&t, s)
                    .map_err(|e| format!("{} does not parse: {e}", s.dev_file()))?,
            ),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    match got.len() {
        0 => Ok(None),
        3 => Ok(got.try_into().ok()),
        n => Err(format!(
            "only {n} of aer_dev_correctable, aer_dev_nonfatal and aer_dev_fatal are there"
        )),
    }
}

fn rootport(read: &dyn Fn(&str) -> Read<String>) -> Option<Result<[u64; 3], String>> {
    let mut out = [0; 3];
    for (i, s) in Severity::ALL.into_iter().enumerate() {
        match read(s.rootport_file()) {
            Ok(Some(t)) => match parse::number(&t) {
                Some(n) => out[i] = n,
                None => return Some(Err(format!("{} is not a number: {t:?}", s.rootport_file()))),
            },
            Ok(None) if i == 0 => return None,
            Ok(None) => return Some(Err(format!("{} is missing", s.rootport_file()))),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(out))
}
