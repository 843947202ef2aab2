//! The one walk of `/sys/class/infiniband`.
//!
//! `/sys/class/infiniband/<dev>` are relative links into `/sys/devices/…`;
//! each is read relative to the class directory, and the device's `ports/`
//! opened by its target: the device's own files are read as `../<name>` from
//! there and its ports' files relative to it, so the device's directory needs
//! no descriptor of its own (~1000 SR-IOV VFs: the cost is system calls). VFs
//! skip what only the PF's views use (parent, driver, GIDs).

use std::path::Path;

use super::{CLASS, ClassError, Device, DeviceLink, Inventory, Port, Read, on_pci};
use crate::host::read::ReadHost;
use crate::host::{Dir, Entry};

/// Below this many devices per thread, starting threads costs more than it saves.
const DEVICES_PER_WORKER: usize = 128;

/// Every device of `names` (the class listing), each with its problems.
pub fn walk(host: &ReadHost, names: &[String]) -> Result<Inventory, ClassError> {
    if names.is_empty() {
        return Ok(Inventory::default());
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
        let devices = names.iter().map(|n| device(host, class, n)).collect();
        return Ok(Inventory { devices });
    }
    let chunk = names.len().div_ceil(workers);
    let devices = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .chunks(chunk)
            .map(|c| s.spawn(move || c.iter().map(|n| device(host, class, n)).collect::<Vec<_>>()))
            .collect();
        // Sized once: a thousand devices are half a megabyte, not worth regrowing.
        let mut devices = Vec::with_capacity(names.len());
        for h in handles {
            devices.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        devices
    });
    Ok(Inventory { devices })
}

/// Where a device's files are read from.
enum At<'h> {
    /// Its `ports/`: the device's files are `../<name>` from there.
    Ports(Dir<'h>),
    /// Its own directory (no `ports/`, or a link of another shape).
    Device(Dir<'h>),
}

impl<'h> At<'h> {
    /// The device's real directory.
    fn path(&self) -> &Path {
        match self {
            At::Ports(p) => p.path().parent().unwrap_or(Path::new("/")),
            At::Device(d) => d.path(),
        }
    }

    fn read(&self, name: &str) -> Read {
        match self {
            At::Ports(p) => p.read_beside(name),
            At::Device(d) => d.read_string(name),
        }
        .map_err(|e| e.to_string())
    }

    fn read_port(&self, port: &str, name: &str) -> Read {
        match self {
            At::Ports(p) => p.read_string(&format!("{port}/{name}")),
            At::Device(d) => d.read_string(&format!("ports/{port}/{name}")),
        }
        .map_err(|e| e.to_string())
    }

    fn ports(&self) -> crate::host::Result<Vec<String>> {
        match self {
            At::Ports(p) => p.list(""),
            At::Device(d) => d.list("ports"),
        }
    }

    fn open_link(&self, name: &str, sub: Option<&str>) -> Option<Dir<'h>> {
        match self {
            At::Ports(p) => p.open_link_beside(name, sub),
            At::Device(d) => d.open_link(name, sub),
        }
    }

    fn exists(&self, name: &str) -> bool {
        match self {
            At::Ports(p) => p.exists_beside(name),
            At::Device(d) => d.exists(name),
        }
    }
}

/// The device `name`: its `ports/` opened straight from the class link (one
/// link read and one open), else its directory.
fn open<'h>(
    host: &'h ReadHost,
    class: Option<&Dir<'h>>,
    name: &str,
    d: &mut Device,
) -> Option<At<'h>> {
    if let Some(ports) = class.and_then(|c| c.open_link(name, Some("ports"))) {
        return Some(At::Ports(ports));
    }
    let dir = match class.and_then(|c| c.open_link(name, None)) {
        Some(dir) => Ok(Ok(dir)),
        None => host.open_dir(&Path::new(CLASS).join(name)),
    };
    match dir {
        Ok(Ok(dir)) => Some(At::Device(dir)),
        Ok(Err(target)) => {
            d.broken_link = Some(target);
            None
        }
        Err(e) => {
            d.open_error = Some(e.to_string());
            None
        }
    }
}

pub(super) fn device(host: &ReadHost, class: Option<&Dir>, name: &str) -> Device {
    let mut d = Device::new(name.to_owned());
    let Some(at) = open(host, class, name, &mut d) else {
        return d;
    };
    d.path = Some(at.path().to_owned());
    function(host, &at, &mut d);
    // The kernel puts software RDMA devices (Soft-RoCE, siw) under
    // /sys/devices/virtual; they have no `device` link and name their netdev in
    // `parent` instead.
    d.is_software = at.path().starts_with("/sys/devices/virtual");
    if !d.physfn {
        d.parent = at.read("parent");
        d.driver = d.function.path().and_then(|f| driver(host, f));
        if let DeviceLink::Real(f) = &d.function {
            d.numa_node = host
                .read_string(&f.join("numa_node"))
                .map_err(|e| e.to_string());
        }
    }
    d.node_guid = at.read("node_guid");
    d.fw_ver = at.read("fw_ver");
    d.hca_type = at.read("hca_type");
    d.board_id = at.read("board_id");
    match at.ports() {
        Ok(ports) => d.ports = ports.into_iter().map(|p| port(&at, p, d.physfn)).collect(),
        Err(e) => d.ports_error = Some(e.to_string()),
    }
    d
}

fn port(at: &At, name: String, vf: bool) -> Port {
    let mut p = Port::new(name);
    p.state = at.read_port(&p.name, "state");
    p.phys_state = at.read_port(&p.name, "phys_state");
    p.rate = at.read_port(&p.name, "rate");
    p.link_layer = at.read_port(&p.name, "link_layer");
    p.ndev = at.read_port(&p.name, "gid_attrs/ndevs/0");
    if !vf {
        p.gid0 = at.read_port(&p.name, "gids/0");
    }
    p
}

/// `physfn` as the function's entry says it: a VF, and its PF's address.
fn physfn(entry: Entry, d: &mut Device) {
    d.physfn = entry != Entry::Absent;
    if let Entry::Link(to) = entry {
        d.pf = to.file_name().map(|n| n.to_string_lossy().into_owned());
    }
}

/// The function behind `device`: most have a `net/`, and opening it reaches
/// the function too (one link read and one open).
fn function(host: &ReadHost, at: &At, d: &mut Device) {
    let link = at.path().join("device");
    let net = at
        .open_link("device", Some("net"))
        .or_else(|| host.open_subdir(&link, "net"));
    if let Some(net) = net {
        let f = net.path().parent().unwrap_or(Path::new("/")).to_owned();
        physfn(net.entry_beside("physfn"), d);
        d.function_netdevs = net.list("").unwrap_or_default();
        if on_pci(&f) {
            d.pci = f.file_name().map(|n| n.to_string_lossy().into_owned());
        }
        d.function = DeviceLink::Real(f);
        return;
    }
    match host.open_dir(&link) {
        Ok(Ok(f)) => {
            physfn(f.entry("physfn"), d);
            d.function_netdevs = f.list("net").unwrap_or_default();
            if on_pci(f.path()) {
                d.pci = f
                    .path()
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
            }
            d.function = DeviceLink::Real(f.path().to_owned());
        }
        // Not a directory, yet there: a PCI function without children.
        Ok(Err(f)) if host.exists(&f) => {
            if on_pci(&f) {
                d.pci = f.file_name().map(|n| n.to_string_lossy().into_owned());
            }
            d.function = DeviceLink::Real(f);
        }
        Ok(Err(f)) if at.exists("device") => d.function = DeviceLink::Dangling(f),
        Ok(Err(_)) => {}
        Err(e) => d.function = DeviceLink::Error(e.to_string()),
    }
}

/// The name of the function's driver (its `driver` link).
fn driver(host: &ReadHost, function: &Path) -> Option<String> {
    host.read_link(&function.join("driver"))
        .ok()
        .flatten()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
}
