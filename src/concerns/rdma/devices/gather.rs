//! Reading /sys/class/infiniband: raw text only, parsed later.
//!
//! `/sys/class/infiniband/<dev>` are relative links into `/sys/devices/…`; they
//! are resolved inside the root. Only the files the check needs are read (about a
//! dozen per device), so ~1000 SR-IOV VFs stay fast.

use std::path::{Path, PathBuf};

use crate::host::read::ReadHost;
use crate::host::{Dir, HostError};

const CLASS: &str = "/sys/class/infiniband";

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

fn read(dir: &Dir, rel: &str) -> Read {
    dir.read_string(rel).map_err(|e| e.to_string())
}

/// Every device under /sys/class/infiniband (none when the class is absent:
/// no RDMA driver loaded). Each device's problems stay with it.
pub fn gather(host: &ReadHost) -> Result<Vec<RawDevice>, HostError> {
    let names = host.list_dir(Path::new(CLASS))?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    // Opened once: each device's link is read relative to it.
    let class = host.open_dir(Path::new(CLASS)).ok().and_then(Result::ok);
    let class = class.as_ref();
    // Reading sysfs is system calls, ~40 per device: an SR-IOV node with a
    // thousand VFs takes tens of milliseconds on one core, so use them all.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(names.len() / DEVICES_PER_WORKER)
        .max(1);
    if workers == 1 {
        return Ok(names
            .into_iter()
            .map(|n| gather_device(host, class, n))
            .collect());
    }
    let chunk = names.len().div_ceil(workers);
    Ok(std::thread::scope(|s| {
        let handles: Vec<_> = names
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|n| gather_device(host, class, n.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    }))
}

/// Below this many devices per thread, starting threads costs more than it saves.
const DEVICES_PER_WORKER: usize = 128;

fn gather_device(host: &ReadHost, class: Option<&Dir>, name: String) -> RawDevice {
    let mut raw = RawDevice::new(name);
    // Opened once: the files below are read relative to it, not re-walked from the root.
    let dir = match class.and_then(|c| c.open_link(&raw.name, None)) {
        Some(d) => Ok(Ok(d)),
        None => host.open_dir(&Path::new(CLASS).join(&raw.name)),
    };
    let dir = match dir {
        Ok(Ok(d)) => d,
        Ok(Err(target)) => {
            raw.broken_link = Some(target);
            return raw;
        }
        Err(e) => {
            raw.errors.push(format!("{}: {e}", raw.name));
            return raw;
        }
    };
    let device = dir.path().join("device");
    // Most functions have a `net/`: opening it reaches the function too.
    let net = dir
        .open_link("device", Some("net"))
        .or_else(|| host.open_subdir(&device, "net"));
    match net
        .as_ref()
        .map(|n| (n, n.path().parent().unwrap_or(Path::new("/"))))
    {
        Some((net, dev)) => {
            if on_pci(dev) {
                raw.pci = dev.file_name().map(|n| n.to_string_lossy().into_owned());
                raw.is_vf = net.exists_beside("physfn");
                raw.netdevs = net.list("").unwrap_or_default();
            }
        }
        None => gather_function(host, &device, &mut raw),
    }
    // The kernel puts software RDMA devices (Soft-RoCE, siw) under
    // /sys/devices/virtual; they have no `device` link and name their netdev in
    // `parent` instead.
    if dir.path().starts_with("/sys/devices/virtual") {
        raw.is_software = true;
        if let Ok(Some(p)) = dir.read_string("parent") {
            raw.netdevs = p.split_whitespace().map(str::to_owned).collect();
        }
    }
    raw.node_guid = read(&dir, "node_guid");
    raw.fw_ver = read(&dir, "fw_ver");
    raw.hca_type = read(&dir, "hca_type");
    raw.board_id = read(&dir, "board_id");
    match dir.list("ports") {
        Ok(ports) => {
            raw.ports = ports
                .into_iter()
                .map(|p| {
                    let d = format!("ports/{p}");
                    RawPort {
                        state: read(&dir, &format!("{d}/state")),
                        phys_state: read(&dir, &format!("{d}/phys_state")),
                        rate: read(&dir, &format!("{d}/rate")),
                        link_layer: read(&dir, &format!("{d}/link_layer")),
                        // The kernel answers EINVAL here for IB ports: no netdev, not an error.
                        ndev: dir
                            .read_string(&format!("{d}/gid_attrs/ndevs/0"))
                            .ok()
                            .flatten()
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty()),
                        name: p,
                    }
                })
                .collect()
        }
        Err(e) => raw.errors.push(format!("{}: {e}", raw.name)),
    }
    raw
}

fn on_pci(p: &Path) -> bool {
    p.to_string_lossy().starts_with("/sys/devices/pci")
}

/// The PCI function behind `device` (a link), when it has no `net/`.
fn gather_function(host: &ReadHost, device: &Path, raw: &mut RawDevice) {
    match host.open_dir(device) {
        Ok(Ok(dev)) if on_pci(dev.path()) => {
            raw.pci = dev
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            raw.is_vf = dev.exists("physfn");
            raw.netdevs = dev.list("net").unwrap_or_default();
        }
        // Not a directory, yet there: a PCI function without children.
        Ok(Err(dev)) if host.exists(&dev) && on_pci(&dev) => {
            raw.pci = dev.file_name().map(|n| n.to_string_lossy().into_owned());
        }
        _ => {}
    }
}
