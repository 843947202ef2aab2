//! One cycle's view of the host: every concern reads the shared facts (/proc,
//! the kernel release, boot id, the loaded modules, the command line, the
//! OFED version) through it, so each is read at most once per cycle, and only
//! when some concern asks for it (`check --only` reads only what its check needs).

use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use super::devlink::{DevlinkError, Reporter};
use super::inventory::gids::Addresses;
use super::inventory::port::LinkLayer;
use super::inventory::{self, ClassError, Counters, Device, Inventory, Port};
use super::netlink::restrack::{self, Holders, Unavailable};
use super::read::ReadHost;
use super::service::{ServiceManager, SystemdError, UnitReader, UnitStatus};
use super::{Host, HostError};

/// Files under /proc of one process that the agent reads.
pub type ProcFile = &'static str;

/// A file's content as read once this cycle; `None`: absent or unreadable.
type Cache<K> = Mutex<HashMap<K, Option<Arc<str>>>>;

pub struct Snapshot {
    host: ReadHost,
    /// systemd, on the live host: unit states are read once per cycle too.
    manager: Option<Cached>,
    /// Why systemd could not be asked, on a live host without its bus.
    manager_error: Option<String>,
    pids: OnceLock<Result<Vec<u32>, String>>,
    /// (pid, file) → content; `Ok(None)`: gone; `Err`: why it could not be read.
    proc_files: Mutex<HashMap<(u32, ProcFile), ProcRead>>,
    /// Shared host files (osrelease, boot id, /proc/modules, …) → trimmed-free content.
    files: Cache<&'static str>,
    /// pid → the targets of its /proc/<pid>/fd links, or why they cannot be read.
    fd_targets: Mutex<HashMap<u32, FdTargets>>,
    /// Which containerd runs here, found once per cycle for every concern.
    containerd: OnceLock<super::runtime::Discovery>,
    /// NVIDIA GPUs on the PCI bus, scanned once for rdma.devices and gpudirect.path.
    nvidia_gpus: OnceLock<Result<Arc<PciGpus>, String>>,
    /// The daemon's NRI plugin as it stands (`None`: no plugin runs in this
    /// process, as in `check` from a shell).
    nri: Option<super::nri::Status>,
    /// `/sys/class/infiniband`, listed once per cycle.
    rdma_names: OnceLock<Result<Vec<String>, ClassError>>,
    /// The RDMA inventory, walked once per cycle (from `rdma_names`).
    rdma_inventory: OnceLock<Result<Arc<Inventory>, ClassError>>,
    /// The kernel's RDMA resource owners (restrack), asked once per cycle.
    restrack: OnceLock<Result<Holders, Unavailable>>,
    /// The kernel's devlink health reporters, asked once per cycle.
    devlink: OnceLock<Result<Vec<Reporter>, DevlinkError>>,
}

/// NVIDIA GPUs among the PCI functions: vendor `0x10de` (the only file read of
/// most functions), class `0x0300xx` (VGA) or `0x0302xx` (3D controller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciGpus {
    /// Their addresses under /sys/bus/pci/devices, in order.
    pub gpus: Vec<String>,
    /// Functions whose vendor or class could not be read, each with why: any
    /// of them may be a GPU.
    pub unreadable: Vec<String>,
}

pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const NVIDIA_VENDOR: &str = "0x10de";

/// A process's file as read: `Ok(None)` when the process (or file) is gone,
/// `Err` with the reason when it exists but could not be read.
pub type ProcRead = Result<Option<Arc<str>>, String>;

/// The targets of a process's open file descriptors (`/dev/infiniband/uverbs0`,
/// `socket:[123]`, …); `Err` says why they could not be read (permission).
pub type FdTargets = Result<Arc<[String]>, String>;

/// Concerns read the host through the snapshot; they cannot write to it.
impl Deref for Snapshot {
    type Target = ReadHost;
    fn deref(&self) -> &ReadHost {
        &self.host
    }
}

pub const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
pub const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
pub const PROC_MODULES: &str = "/proc/modules";
pub const CMDLINE: &str = "/proc/cmdline";
pub const PROC_STAT: &str = "/proc/stat";
/// MLNX_OFED's `ofed_info`, a shell script carrying its version as text.
pub const OFED_INFO: &str = "/usr/bin/ofed_info";

impl Snapshot {
    pub fn new(host: Host) -> Self {
        Snapshot {
            host: ReadHost::new(host),
            manager: None,
            manager_error: None,
            pids: OnceLock::new(),
            proc_files: Mutex::default(),
            files: Mutex::default(),
            fd_targets: Mutex::default(),
            containerd: OnceLock::new(),
            nvidia_gpus: OnceLock::new(),
            nri: None,
            rdma_names: OnceLock::new(),
            rdma_inventory: OnceLock::new(),
            restrack: OnceLock::new(),
            devlink: OnceLock::new(),
        }
    }

    /// With the daemon's NRI plugin state.
    pub fn with_nri(mut self, status: super::nri::Status) -> Self {
        self.nri = Some(status);
        self
    }

    /// The daemon's NRI plugin, when one runs in this process.
    pub fn nri(&self) -> Option<&super::nri::Status> {
        self.nri.as_ref()
    }

    /// With the kernel's restrack answer given rather than asked (unit tests,
    /// and the benchmark that stands in for a node with RDMA devices).
    pub fn with_restrack(self, answer: Result<Holders, Unavailable>) -> Self {
        let _ = self.restrack.set(answer);
        self
    }

    /// Which processes hold RDMA resources, from the running kernel's resource
    /// tracking (asked once per cycle), or why it could not be asked.
    pub fn restrack(&self) -> Result<&Holders, &Unavailable> {
        self.restrack
            .get_or_init(|| {
                // Opening a NETLINK_RDMA socket can load ib_core: only when sysfs
                // already lists an RDMA device.
                let listed = self.rdma_device_names().is_ok_and(|n| !n.is_empty());
                restrack::live(&self.host, listed)
            })
            .as_ref()
    }

    /// With the kernel's devlink answer given rather than asked (unit tests).
    pub fn with_devlink(self, answer: Result<Vec<Reporter>, DevlinkError>) -> Self {
        let _ = self.devlink.set(answer);
        self
    }

    /// Every devlink health reporter of the running kernel (asked once per
    /// cycle), or why it could not be asked.
    pub fn devlink_reporters(&self) -> Result<&[Reporter], &DevlinkError> {
        self.devlink
            .get_or_init(|| super::devlink::live(&self.host))
            .as_ref()
            .map(Vec::as_slice)
    }

    /// The names in `/sys/class/infiniband` (none when the class is absent: no
    /// RDMA driver loaded), listed once per cycle; or why it cannot be listed.
    pub fn rdma_device_names(&self) -> Result<&[String], &ClassError> {
        self.rdma_names
            .get_or_init(|| {
                self.host
                    .list_dir(Path::new(inventory::CLASS))
                    .map_err(|e| ClassError(e.to_string()))
            })
            .as_ref()
            .map(Vec::as_slice)
    }

    /// Every RDMA device, its ports, netdevs and PCI function, walked once per
    /// cycle on first ask (the one walk of `/sys/class/infiniband`).
    pub fn rdma_inventory(&self) -> Result<Arc<Inventory>, ClassError> {
        self.rdma_inventory
            .get_or_init(|| {
                let names = self.rdma_device_names().map_err(Clone::clone)?;
                inventory::walk::walk(&self.host, names).map(Arc::new)
            })
            .clone()
    }

    /// A port's counters, read on first ask this cycle.
    pub fn port_counters<'a>(&self, device: &Device, port: &'a Port) -> &'a Counters {
        port.counters
            .get_or_init(|| Arc::new(inventory::counters::read(&self.host, device, &port.name)))
    }

    /// A port's LIDs and GID table, read on first ask this cycle.
    pub fn port_addresses<'a>(&self, device: &Device, port: &'a Port) -> &'a Addresses {
        port.addresses.get_or_init(|| {
            let roce = port.link_layer_value() == Some(LinkLayer::Ethernet);
            Arc::new(inventory::gids::read(&self.host, device, &port.name, roce))
        })
    }

    /// The NVIDIA GPUs on the PCI bus, scanned once per cycle.
    pub fn nvidia_gpus(&self) -> Result<Arc<PciGpus>, HostError> {
        self.nvidia_gpus
            .get_or_init(|| self.scan_gpus().map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(|message| HostError::Snapshot {
                what: "the PCI devices",
                message,
            })
    }

    fn scan_gpus(&self) -> Result<PciGpus, HostError> {
        let mut out = PciGpus::default();
        // A function whose vendor or class cannot be read is not "not a GPU".
        let read = |p: &Path| -> Result<String, String> {
            match self.host.read_string(p) {
                Ok(Some(s)) => Ok(s),
                Ok(None) => Err(format!("{} is missing", self.host.path(p).display())),
                Err(e) => Err(e.to_string()),
            }
        };
        // A VF's vendor is its PF's: the kernel copies it (drivers/pci/iov.c,
        // pci_iov_add_virtfn: `virtfn->vendor = dev->vendor`). So the VFs of
        // an RDMA NIC, known from the inventory when it was walked this cycle,
        // are not read one by one once their PF's vendor was.
        let walked = self.rdma_inventory.get().and_then(|i| i.as_ref().ok());
        let pf_of: HashMap<&str, &str> =
            walked.map_or_else(HashMap::new, |i| i.vf_parents().collect());
        let pfs: HashSet<&str> = pf_of.values().copied().collect();
        let mut not_nvidia: HashSet<String> = HashSet::new();
        for dev in self.host.list_dir(Path::new(PCI_DEVICES))? {
            if pf_of
                .get(dev.as_str())
                .is_some_and(|pf| not_nvidia.contains(*pf))
            {
                continue;
            }
            let dir = Path::new(PCI_DEVICES).join(&dev);
            // Only the vendor of most functions is read; the class only for NVIDIA ones.
            match read(&dir.join("vendor")) {
                Ok(v) if v.trim() == NVIDIA_VENDOR => {}
                Ok(_) => {
                    if pfs.contains(dev.as_str()) {
                        not_nvidia.insert(dev);
                    }
                    continue;
                }
                Err(e) => {
                    out.unreadable.push(e);
                    continue;
                }
            }
            match read(&dir.join("class")) {
                Ok(c) if c.trim().starts_with("0x0300") || c.trim().starts_with("0x0302") => {
                    out.gpus.push(dev)
                }
                Ok(_) => {}
                Err(e) => out.unreadable.push(e),
            }
        }
        Ok(out)
    }

    /// With systemd to ask about units (the live host).
    pub fn with_manager(mut self, manager: Arc<dyn ServiceManager>) -> Self {
        self.manager = Some(Cached {
            inner: manager,
            status: Mutex::default(),
        });
        self
    }

    /// On the live host when systemd's bus did not answer: why.
    pub fn with_manager_error(mut self, why: String) -> Self {
        self.manager_error = Some(why);
        self
    }

    /// Why systemd could not be asked this cycle, on a live host.
    pub fn manager_error(&self) -> Option<&str> {
        self.manager_error.as_deref()
    }

    /// systemd's view of units, when the agent acts on the live host and its
    /// bus answered: status only, so a gather cannot restart or start anything:
    ///
    /// ```compile_fail
    /// # use rdma_node_agent::host::{snapshot::Snapshot, stop::Stop};
    /// fn gather(snap: &Snapshot) {
    ///     let m = snap.manager().unwrap();
    ///     m.restart("containerd.service", std::time::Duration::ZERO, &Stop::new());
    /// }
    /// ```
    pub fn manager(&self) -> Option<&dyn UnitReader> {
        self.manager.as_ref().map(|m| m as &dyn UnitReader)
    }

    /// The full manager, for the host layer's own privileged reads (the PCI
    /// helper runs as a transient unit); no concern can name it.
    pub(in crate::host) fn privileged_runner(&self) -> Option<&dyn ServiceManager> {
        self.manager.as_ref().map(|m| m.inner.as_ref())
    }

    /// Which containerd runs here (its unit, the config it reads, its process),
    /// found on first use this cycle. The hints are the agent config's.
    pub fn containerd(&self, hints: &super::runtime::Hints) -> &super::runtime::Discovery {
        self.containerd
            .get_or_init(|| super::runtime::discover(self, hints))
    }

    /// The numeric entries of /proc, read once.
    pub fn pids(&self) -> Result<&[u32], HostError> {
        let r = self.pids.get_or_init(|| {
            let mut v: Vec<u32> = self
                .host
                .list_dir(Path::new("/proc"))
                .map_err(|e| e.to_string())?
                .iter()
                .filter_map(|n| n.parse().ok())
                .collect();
            v.sort_unstable();
            Ok(v)
        });
        match r {
            Ok(v) => Ok(v),
            Err(message) => Err(HostError::Snapshot {
                what: "/proc",
                message: message.clone(),
            }),
        }
    }

    /// `/proc/<pid>/<name>`, read once per cycle; `None` when gone or unreadable.
    pub fn proc(&self, pid: u32, name: ProcFile) -> Option<Arc<str>> {
        self.proc_read(pid, name).ok().flatten()
    }

    /// `/proc/<pid>/<name>`, read once per cycle, keeping why it could not be
    /// read apart from its absence: a fact that was not seen is not a fact.
    pub fn proc_read(&self, pid: u32, name: ProcFile) -> ProcRead {
        let mut m = self.proc_files.lock().expect("snapshot lock");
        m.entry((pid, name))
            .or_insert_with(|| {
                match self
                    .host
                    .read_string(Path::new(&format!("/proc/{pid}/{name}")))
                {
                    Ok(o) => Ok(o.map(Arc::from)),
                    // It exited between open and read: gone, not unreadable.
                    Err(crate::host::HostError::Read { source, .. })
                        if source.raw_os_error() == Some(nix::libc::ESRCH) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e.to_string()),
                }
            })
            .clone()
    }

    /// Where a process's open file descriptors point, read once per cycle. A
    /// process that is gone has none; one whose fds cannot be read says why.
    pub fn fd_targets(&self, pid: u32) -> FdTargets {
        let mut m = self.fd_targets.lock().expect("snapshot lock");
        m.entry(pid)
            .or_insert_with(|| {
                self.host
                    .link_targets(Path::new(&format!("/proc/{pid}/fd")))
                    .map(Arc::from)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// A shared host file (one of the constants above), read once per cycle.
    pub fn file(&self, path: &'static str) -> Option<Arc<str>> {
        let mut m = self.files.lock().expect("snapshot lock");
        m.entry(path)
            .or_insert_with(|| {
                self.host
                    .read_string(Path::new(path))
                    .ok()
                    .flatten()
                    .map(Arc::from)
            })
            .clone()
    }

    /// A file's text trimmed; empty when absent or unreadable (for labels
    /// and facts that show "" rather than fail).
    pub fn text_or_empty(&self, p: &Path) -> String {
        self.read_string(p)
            .ok()
            .flatten()
            .map(|t| t.trim().to_owned())
            .unwrap_or_default()
    }

    /// A shared file's content trimmed, `None` when absent or empty.
    pub fn value(&self, path: &'static str) -> Option<String> {
        self.file(path)
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// The running kernel's release.
    pub fn kernel_release(&self) -> Option<String> {
        self.value(OSRELEASE)
    }

    pub fn boot_id(&self) -> Option<String> {
        self.value(BOOT_ID)
    }
}

/// systemd as concerns see it during a cycle: each unit's status is asked once.
struct Cached {
    inner: Arc<dyn ServiceManager>,
    status: Mutex<HashMap<String, Result<UnitStatus, String>>>,
}

impl UnitReader for Cached {
    fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError> {
        let mut m = self.status.lock().expect("snapshot lock");
        m.entry(unit.to_owned())
            .or_insert_with(|| self.inner.status(unit).map_err(|e| e.to_string()))
            .clone()
            .map_err(|message| SystemdError::Call {
                call: format!("status of {unit}"),
                message,
            })
    }
}

impl From<Host> for Snapshot {
    fn from(host: Host) -> Self {
        Snapshot::new(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_proc_file_once() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/7")).unwrap();
        std::fs::write(t.path().join("proc/7/comm"), "containerd\n").unwrap();
        std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(
            t.path().join("proc/sys/kernel/osrelease"),
            "6.1.0-27-amd64\n",
        )
        .unwrap();
        let s = Snapshot::new(Host::new(t.path()));
        assert_eq!(s.pids().unwrap(), &[7]);
        assert_eq!(s.proc(7, "comm").as_deref(), Some("containerd\n"));
        assert_eq!(s.kernel_release().as_deref(), Some("6.1.0-27-amd64"));
        // A second read is the first one's value, even once the file changed.
        std::fs::write(t.path().join("proc/7/comm"), "other\n").unwrap();
        std::fs::remove_file(t.path().join("proc/sys/kernel/osrelease")).unwrap();
        assert_eq!(s.proc(7, "comm").as_deref(), Some("containerd\n"));
        assert_eq!(s.kernel_release().as_deref(), Some("6.1.0-27-amd64"));
        assert_eq!(s.proc(8, "comm"), None);
    }
}
