//! Reading what `gpudirect.path` decides on, through the host layer (every
//! path under `--root`, sysfs links resolved inside it): NVIDIA GPUs and RDMA
//! devices with their PCI functions, every function on their paths (raw
//! `config`, link attributes, NUMA node, IOMMU group type), the GPUDirect
//! modules, the driver version and the kernel's configuration. Read only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::mechanism::{KernelConfig, MechanismFacts, PeermemFacts};
use super::pcie::{self, PortType};
use super::topo::{self, Chain};
use crate::host::snapshot::{self, Snapshot};
use crate::host::{HostError, gunzip};

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const IB_CLASS: &str = "/sys/class/infiniband";
const MEMORY_PEERS: &str = "/sys/kernel/mm/memory_peers";
const NVIDIA_VERSION: &str = "/proc/driver/nvidia/version";
const PROC_CONFIG_GZ: &str = "/proc/config.gz";
const IOMMU_CLASS: &str = "/sys/class/iommu";
const PEERMEM_MODULES: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];

/// A sysfs attribute as read: `Ok(None)` absent, `Err` why it could not be read.
pub type AttrOf<T> = Result<Option<T>, String>;
pub type Attr = AttrOf<String>;

/// One PCI function on a GPU's or NIC's path.
#[derive(Debug, Clone)]
pub struct Function {
    /// Raw configuration space (4096 bytes for root; 64 or 256 otherwise);
    /// not read (`Ok(None)`) for the GPUs and NICs themselves.
    pub config: AttrOf<Vec<u8>>,
    pub current_link_speed: Attr,
    pub max_link_speed: Attr,
    pub current_link_width: Attr,
    pub max_link_width: Attr,
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub pci: String,
    pub chain: Chain,
    pub numa: Option<i32>,
    /// `iommu_group/type` (`DMA`, `DMA-FQ`, `identity`…); `None`: no group.
    pub iommu: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Nic {
    pub name: String,
    pub at: Endpoint,
}

#[derive(Debug, Clone)]
pub struct Facts {
    pub gpus: Vec<Endpoint>,
    pub nics: Vec<Nic>,
    /// PCI functions that are GPUs but whose place in the hierarchy cannot be read.
    pub unplaced: Vec<String>,
    pub functions: BTreeMap<String, Function>,
    pub mechanism: MechanismFacts,
    /// Names under /sys/class/iommu (IOMMU units the kernel registered).
    pub iommu_units: usize,
    pub cmdline: Option<String>,
}

fn attr(snap: &Snapshot, p: &Path) -> Attr {
    snap.read_string(p).map_err(|e| e.to_string())
}

/// Where a sysfs device link leads, as a chain; `None` when it leads nowhere PCI.
fn place(snap: &Snapshot, link: &Path) -> Result<Option<(PathBuf, Chain)>, HostError> {
    let real = snap.resolve(link)?;
    Ok(topo::chain_of(&real).map(|c| (real, c)))
}

fn endpoint(snap: &Snapshot, pci: String, real: &Path, chain: Chain) -> Endpoint {
    let numa = attr(snap, &real.join("numa_node"))
        .ok()
        .flatten()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|n| *n >= 0);
    let iommu = attr(snap, &real.join("iommu_group/type"))
        .ok()
        .flatten()
        .map(|s| s.trim().to_owned());
    Endpoint {
        pci,
        chain,
        numa,
        iommu,
    }
}

pub fn gather(snap: &Snapshot) -> Result<Facts, HostError> {
    let mut gpus = Vec::new();
    let mut unplaced = Vec::new();
    // The scan rdma.devices shares (a function whose vendor cannot be read is
    // left to rdma.devices to report).
    for dev in &snap.nvidia_gpus()?.gpus {
        let link = Path::new(PCI_DEVICES).join(dev);
        match place(snap, &link) {
            Ok(Some((real, chain))) => gpus.push(endpoint(snap, dev.clone(), &real, chain)),
            _ => unplaced.push(dev.clone()),
        }
    }
    let mut nics = Vec::new();
    if !gpus.is_empty() {
        for name in snap.list_dir(Path::new(IB_CLASS))? {
            let dev = Path::new(IB_CLASS).join(&name).join("device");
            // Virtual functions are left out: a GPU pairs with the physical NIC.
            if snap.exists(&dev.join("physfn")) {
                continue;
            }
            if let Ok(Some((real, chain))) = place(snap, &dev) {
                let pci = chain.last().cloned().unwrap_or_default();
                nics.push(Nic {
                    name,
                    at: endpoint(snap, pci, &real, chain),
                });
            }
        }
    }
    // Every function on a path, read once; none without a NIC to pair with
    // (in a VM each config-space read traps to the hypervisor: on a real H200
    // cloud VM, reading the lone GPU's 4 KiB config cost 20 ms for nothing).
    // Each with its real directory (the chain is the resolved path: no link in it).
    let mut wanted = BTreeMap::new();
    let paired = if nics.is_empty() { &[][..] } else { &gpus[..] };
    for e in paired.iter().chain(nics.iter().map(|n| &n.at)) {
        let mut real = PathBuf::from("/sys/devices");
        for c in &e.chain {
            real.push(c);
            if topo::is_bdf(c) {
                wanted.entry(c.clone()).or_insert_with(|| real.clone());
            }
        }
    }
    // What decide reads, and no more (each config read is a trap to the
    // hypervisor in a VM, config cycles on bare metal): the bridges' config
    // space (port type, ACS), not the GPU's or NIC's; the current link of the
    // functions whose upstream link is a hop (endpoints, switch upstream ports),
    // only the maximum of the others (the far end of a hop).
    let ends: BTreeSet<&str> = paired
        .iter()
        .chain(nics.iter().map(|n| &n.at))
        .filter_map(|e| e.chain.last().map(String::as_str))
        .collect();
    let mut functions = BTreeMap::new();
    for (bdf, real) in wanted {
        // Opened once: its files are read relative to it, not each by a long path.
        let opened = snap
            .open_real_dir(&real)
            .or_else(|| snap.open_dir(&real).ok().and_then(Result::ok));
        let read = |name: &str| -> Attr {
            match &opened {
                Some(d) => d.read_string(name).map_err(|e| e.to_string()),
                None => attr(snap, &real.join(name)),
            }
        };
        let end = ends.contains(bdf.as_str());
        let config = match (&opened, end) {
            (_, true) => Ok(None),
            (Some(d), false) => d
                .read_pci_config("config", |r| pcie::read_config(r))
                .map_err(|e| e.to_string()),
            (None, false) => snap
                .read_pci_config(&real.join("config"), |r| pcie::read_config(r))
                .map_err(|e| e.to_string()),
        };
        let port = match &config {
            Ok(Some(b)) => pcie::parse_config(b).port,
            _ => None,
        };
        let hop = end || !matches!(port, Some(PortType::RootPort | PortType::SwitchDownstream));
        let current = |name: &str| if hop { read(name) } else { Ok(None) };
        functions.insert(
            bdf,
            Function {
                config,
                current_link_speed: current("current_link_speed"),
                max_link_speed: read("max_link_speed"),
                current_link_width: current("current_link_width"),
                max_link_width: read("max_link_width"),
            },
        );
    }
    Ok(Facts {
        mechanism: if gpus.is_empty() {
            empty_mechanism()
        } else {
            mechanism(snap)
        },
        gpus,
        nics,
        unplaced,
        functions,
        iommu_units: snap.list_dir(Path::new(IOMMU_CLASS))?.len(),
        cmdline: snap.value(snapshot::CMDLINE),
    })
}

fn empty_mechanism() -> MechanismFacts {
    MechanismFacts {
        peermem: PeermemFacts::default(),
        driver: Ok(None),
        kernel_release: None,
        kconfig: KernelConfig::Missing(String::new()),
    }
}

fn mechanism(snap: &Snapshot) -> MechanismFacts {
    let modules: BTreeSet<String> = snap
        .file(snapshot::PROC_MODULES)
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let loaded = PEERMEM_MODULES
        .iter()
        .find(|m| {
            modules.contains(**m) || snap.exists(&Path::new("/sys/module").join(m).join("version"))
        })
        .map(|m| (*m).to_owned());
    let registered = snap
        .list_dir(Path::new(MEMORY_PEERS))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| snap.exists(&Path::new(MEMORY_PEERS).join(p).join("version")))
        .collect();
    let kernel_release = snap.kernel_release();
    MechanismFacts {
        peermem: PeermemFacts { loaded, registered },
        driver: snap
            .read_string(Path::new(NVIDIA_VERSION))
            .map_err(|e| e.to_string()),
        kconfig: kernel_config(snap, kernel_release.as_deref()),
        kernel_release,
    }
}

/// `/boot/config-<release>`, else `/proc/config.gz` (CONFIG_IKCONFIG_PROC).
fn kernel_config(snap: &Snapshot, release: Option<&str>) -> KernelConfig {
    let boot = release.map(|r| format!("/boot/config-{r}"));
    if let Some(b) = &boot {
        match snap.read_string(Path::new(b)) {
            Ok(Some(text)) => {
                return KernelConfig::Read {
                    source: b.clone(),
                    text,
                };
            }
            Ok(None) => {}
            Err(e) => return KernelConfig::Unreadable(format!("cannot read {b}: {e}")),
        }
    }
    match snap.read_any(Path::new(PROC_CONFIG_GZ)) {
        Ok(Some(bytes)) => match gunzip::gunzip(&bytes) {
            Ok(text) => KernelConfig::Read {
                source: PROC_CONFIG_GZ.to_owned(),
                text: String::from_utf8_lossy(&text).into_owned(),
            },
            Err(e) => KernelConfig::Unreadable(format!("{PROC_CONFIG_GZ}: {e}")),
        },
        Ok(None) => KernelConfig::Missing(format!(
            "{} and {PROC_CONFIG_GZ} are absent",
            boot.unwrap_or_else(|| "/boot/config-<release>".into())
        )),
        Err(e) => KernelConfig::Unreadable(format!("cannot read {PROC_CONFIG_GZ}: {e}")),
    }
}
