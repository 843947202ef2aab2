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
use crate::host::inventory::DeviceLink;
use crate::host::snapshot::{self, Snapshot};
use crate::host::{HostError, gunzip};

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
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
    /// Why the agent's privileged helper could not read the whole config
    /// space where this process got only the first 64 bytes.
    pub helper: Option<String>,
    /// With `acs = "disable"`, for a bridge whose ACS redirects: what an ACS
    /// clear there would take isolation away from.
    pub isolation: Option<Isolation>,
}

/// What sits below a bridge, for the ACS clear to refuse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    /// Functions (the bridge or below it) bound to a passthrough driver: (bdf, driver).
    pub passthrough: Vec<(String, String)>,
    /// The bridge's IOMMU group when it holds more than one device: (group, devices).
    pub shared_groups: Vec<(String, Vec<String>)>,
    /// What could not be read (a walk cut short counts too): refused as well.
    pub unreadable: Vec<String>,
}

/// Drivers that hand a device to a VM or to user space, trusting the IOMMU
/// groups the kernel made from ACS at boot: vfio-pci and its variant drivers
/// (`mlx5_vfio_pci`, `nvgrace_gpu_vfio_pci`, …), pci-stub, Xen's pciback.
pub fn is_passthrough(driver: &str) -> bool {
    driver.contains("vfio") || matches!(driver, "pci-stub" | "pciback" | "xen-pciback")
}

/// At most this many functions are looked at below one bridge.
const BELOW_MAX: usize = 256;

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
    /// RDMA devices whose sysfs `device` link cannot be resolved, with why:
    /// any of them may be a GPU's nearest NIC.
    pub unplaced_nics: Vec<(String, String)>,
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
    gather_for(snap, false)
}

/// What an ACS clear on the bridge at `real` (a resolved /sys/devices path)
/// would touch: its own and its functions' drivers (depth first, bounded) and
/// its own IOMMU group.
fn below_of(snap: &Snapshot, bdf: &str, real: &Path) -> Isolation {
    let mut out = Isolation::default();
    let mut todo = vec![(bdf.to_owned(), real.to_path_buf())];
    let mut seen = 0;
    while let Some((bdf, dir)) = todo.pop() {
        seen += 1;
        if seen > BELOW_MAX {
            out.unreadable
                .push(format!("more than {BELOW_MAX} functions below"));
            break;
        }
        match snap.read_link(&dir.join("driver")) {
            Ok(Some(d)) => {
                let name = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if is_passthrough(&name) {
                    out.passthrough.push((bdf.clone(), name));
                }
            }
            Ok(None) => {}
            Err(e) => out.unreadable.push(format!("{bdf}'s driver: {e}")),
        }
        // The bridge's own IOMMU group only: below it, functions without ACS
        // between them share a group whatever this bridge does.
        match snap.resolve(&dir.join("iommu_group")) {
            Ok(_) if seen > 1 => {}
            Ok(g) if snap.exists(&g) => {
                let name = g
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match snap.list_dir(&g.join("devices")) {
                    Ok(devs) if devs.len() > 1 => out.shared_groups.push((name, devs)),
                    Ok(_) => {}
                    Err(e) => out.unreadable.push(format!("IOMMU group {name}: {e}")),
                }
            }
            Ok(_) => {}
            Err(e) => out.unreadable.push(format!("{bdf}'s IOMMU group: {e}")),
        }
        match snap.list_dir(&dir) {
            Ok(names) => todo.extend(
                names
                    .into_iter()
                    .filter(|n| topo::is_bdf(n))
                    .map(|n| (n.clone(), dir.join(n))),
            ),
            Err(e) => out.unreadable.push(format!("below {bdf}: {e}")),
        }
    }
    out.passthrough.sort();
    out
}

/// `gather`; with `below`, also what sits below each bridge whose ACS
/// redirects (what `acs = "disable"` must not take isolation from).
pub fn gather_for(snap: &Snapshot, below: bool) -> Result<Facts, HostError> {
    let (gpus, unplaced) = gpus(snap)?;
    let (nics, unplaced_nics) = if gpus.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        nics(snap)?
    };
    // Every function on a path, read once; none without a NIC to pair with
    // (in a VM each config-space read traps to the hypervisor: on a real H200
    // cloud VM, reading the lone GPU's 4 KiB config cost 20 ms for nothing).
    let paired = if nics.is_empty() { &[][..] } else { &gpus[..] };
    let on_paths: Vec<&Endpoint> = paired.iter().chain(nics.iter().map(|n| &n.at)).collect();
    let functions = functions(snap, &on_paths, below);
    Ok(Facts {
        mechanism: if gpus.is_empty() {
            empty_mechanism()
        } else {
            mechanism(snap)
        },
        gpus,
        nics,
        unplaced,
        unplaced_nics,
        functions,
        iommu_units: snap.list_dir(Path::new(IOMMU_CLASS))?.len(),
        cmdline: snap.value(snapshot::CMDLINE),
    })
}

/// The NVIDIA GPUs placed on the PCI tree, and those that could not be. The
/// scan rdma.devices shares (a function whose vendor cannot be read is left
/// to rdma.devices to report).
fn gpus(snap: &Snapshot) -> Result<(Vec<Endpoint>, Vec<String>), HostError> {
    let mut gpus = Vec::new();
    let mut unplaced = Vec::new();
    for dev in &snap.nvidia_gpus()?.gpus {
        let link = Path::new(PCI_DEVICES).join(dev);
        match place(snap, &link) {
            Ok(Some((real, chain))) => gpus.push(endpoint(snap, dev.clone(), &real, chain)),
            _ => unplaced.push(dev.clone()),
        }
    }
    Ok((gpus, unplaced))
}

/// RDMA devices by name, with why they could not be placed.
type Unplaced = Vec<(String, String)>;

/// Config space, by function.
type Configs = BTreeMap<String, AttrOf<Vec<u8>>>;

/// The RDMA devices placed on the PCI tree, and those that could not be, with why.
fn nics(snap: &Snapshot) -> Result<(Vec<Nic>, Unplaced), HostError> {
    let mut nics = Vec::new();
    let mut unplaced_nics = Vec::new();
    let listed = snap.rdma_inventory().map_err(|e| HostError::Snapshot {
        what: "the RDMA devices",
        message: e.to_string(),
    })?;
    // Virtual functions are left out: a GPU pairs with the physical NIC.
    for dev in listed.physical() {
        let name = dev.name.clone();
        // No link (Soft-RoCE, a virtual device) or not on the PCI bus: no path to a GPU.
        match &dev.function {
            DeviceLink::Real(real) => {
                if let Some(chain) = topo::chain_of(real) {
                    let pci = chain.last().cloned().unwrap_or_default();
                    nics.push(Nic {
                        name,
                        at: endpoint(snap, pci, real, chain),
                    });
                }
            }
            DeviceLink::Dangling(real) => {
                if topo::chain_of(real).is_some() {
                    unplaced_nics.push((
                        name,
                        format!("it leads to {}, which is not there", real.display()),
                    ));
                }
            }
            DeviceLink::None => {}
            DeviceLink::Error(e) => unplaced_nics.push((name, e.clone())),
        }
    }
    Ok((nics, unplaced_nics))
}

/// Every function on these endpoints' paths, read once.
fn functions(snap: &Snapshot, on_paths: &[&Endpoint], below: bool) -> BTreeMap<String, Function> {
    // Each with its real directory (the chain is the resolved path: no link in it).
    let mut wanted = BTreeMap::new();
    for e in on_paths {
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
    let ends: BTreeSet<&str> = on_paths
        .iter()
        .filter_map(|e| e.chain.last().map(String::as_str))
        .collect();
    let (mut configs, mut helper_errors) = bridge_configs(snap, &wanted, &ends);
    let mut functions = BTreeMap::new();
    for (bdf, real) in wanted {
        let config = configs.remove(&bdf).unwrap_or(Ok(None));
        let helper = helper_errors.remove(&bdf);
        let end = ends.contains(bdf.as_str());
        let f = function(snap, &bdf, &real, end, config, helper, below);
        functions.insert(bdf, f);
    }
    functions
}

/// The bridges' config space, by function, and why the privileged helper
/// could not read one. Where this process gets only 64 bytes (no
/// CAP_SYS_ADMIN: the daemon's unit), the helper reads it.
fn bridge_configs(
    snap: &Snapshot,
    wanted: &BTreeMap<String, PathBuf>,
    ends: &BTreeSet<&str>,
) -> (Configs, BTreeMap<String, String>) {
    let mut configs: Configs = BTreeMap::new();
    for (bdf, real) in wanted {
        if ends.contains(bdf.as_str()) {
            continue;
        }
        let config = match snap.open_real_dir(real) {
            Some(d) => d.read_pci_config("config", |r| pcie::read_config(r)),
            None => snap.read_pci_config(&real.join("config"), |r| pcie::read_config(r)),
        };
        configs.insert(bdf.clone(), config.map_err(|e| e.to_string()));
    }
    let short: Vec<String> = configs
        .iter()
        .filter(|(_, c)| matches!(c, Ok(Some(b)) if pcie::unprivileged_read(b)))
        .map(|(b, _)| b.clone())
        .collect();
    let mut helper_errors: BTreeMap<String, String> = BTreeMap::new();
    if !short.is_empty() {
        match snap.pci_config_privileged(&short) {
            None => {}
            Some(Ok(read)) => {
                for (bdf, got) in read {
                    match got {
                        Ok(bytes) => {
                            configs.insert(bdf, Ok(Some(bytes)));
                        }
                        Err(e) => {
                            helper_errors.insert(bdf, e);
                        }
                    }
                }
            }
            Some(Err(e)) => {
                let e = e.to_string();
                helper_errors.extend(short.iter().map(|b| (b.clone(), e.clone())))
            }
        }
    }
    (configs, helper_errors)
}

/// One function's link attributes (the current link only where it is a hop)
/// and, with `below`, what sits below a bridge whose ACS redirects.
fn function(
    snap: &Snapshot,
    bdf: &str,
    real: &Path,
    end: bool,
    config: AttrOf<Vec<u8>>,
    helper: Option<String>,
    below: bool,
) -> Function {
    // Opened once: its files are read relative to it, not each by a long path.
    let opened = snap
        .open_real_dir(real)
        .or_else(|| snap.open_dir(real).ok().and_then(Result::ok));
    let read = |name: &str| -> Attr {
        match &opened {
            Some(d) => d.read_string(name).map_err(|e| e.to_string()),
            None => attr(snap, &real.join(name)),
        }
    };
    let parsed = match &config {
        Ok(Some(b)) => Some(pcie::parse_config(b)),
        _ => None,
    };
    let port = parsed.and_then(|c| c.port);
    let hop = end || !matches!(port, Some(PortType::RootPort | PortType::SwitchDownstream));
    let current = |name: &str| if hop { read(name) } else { Ok(None) };
    let isolation = parsed
        .filter(|c| below && c.acs.blocking() != 0)
        .map(|_| below_of(snap, bdf, real));
    Function {
        config,
        current_link_speed: current("current_link_speed"),
        max_link_speed: read("max_link_speed"),
        current_link_width: current("current_link_width"),
        max_link_width: read("max_link_width"),
        helper,
        isolation,
    }
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
