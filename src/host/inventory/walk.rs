//! The one walk of `/sys/class/infiniband`.
//!
//! `/sys/class/infiniband/<dev>` are relative links into `/sys/devices/…`;
//! each is read relative to the class directory and opened once, and its files
//! are read relative to that descriptor (about a dozen per device), so ~1000
//! SR-IOV VFs stay fast. VFs skip what only the PF's views use (parent, driver,
//! GIDs).

use std::path::Path;

use super::{CLASS, ClassError, Device, DeviceLink, Inventory, Port, Read, on_pci};
use crate::host::Dir;
use crate::host::read::ReadHost;

/// Below this many devices per thread, starting threads costs more than it saves.
const DEVICES_PER_WORKER: usize = 128;

fn read(dir: &Dir, rel: &str) -> Read {
    dir.read_string(rel).map_err(|e| e.to_string())
}

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
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    Ok(Inventory { devices })
}

fn device(host: &ReadHost, class: Option<&Dir>, name: &str) -> Device {
    let mut d = Device::new(name.to_owned());
    // Opened once: the files below are read relative to it, not re-walked from the root.
    let dir = match class.and_then(|c| c.open_link(name, None)) {
        Some(dir) => Ok(Ok(dir)),
        None => host.open_dir(&Path::new(CLASS).join(name)),
    };
    let dir = match dir {
        Ok(Ok(dir)) => dir,
        Ok(Err(target)) => {
            d.broken_link = Some(target);
            return d;
        }
        Err(e) => {
            d.open_error = Some(e.to_string());
            return d;
        }
    };
    d.path = Some(dir.path().to_owned());
    function(host, &dir, &mut d);
    // The kernel puts software RDMA devices (Soft-RoCE, siw) under
    // /sys/devices/virtual; they have no `device` link and name their netdev in
    // `parent` instead.
    d.is_software = dir.path().starts_with("/sys/devices/virtual");
    if !d.physfn {
        d.parent = read(&dir, "parent");
        d.driver = d.function.path().and_then(|f| driver(host, f));
        if let DeviceLink::Real(f) = &d.function {
            d.numa_node = host
                .read_string(&f.join("numa_node"))
                .map_err(|e| e.to_string());
        }
    }
    d.node_guid = read(&dir, "node_guid");
    d.fw_ver = read(&dir, "fw_ver");
    d.hca_type = read(&dir, "hca_type");
    d.board_id = read(&dir, "board_id");
    match dir.list("ports") {
        Ok(ports) => d.ports = ports.into_iter().map(|p| port(&dir, p, d.physfn)).collect(),
        Err(e) => d.ports_error = Some(e.to_string()),
    }
    d
}

fn port(dir: &Dir, name: String, vf: bool) -> Port {
    let at = format!("ports/{name}");
    let mut p = Port::new(name);
    p.state = read(dir, &format!("{at}/state"));
    p.phys_state = read(dir, &format!("{at}/phys_state"));
    p.rate = read(dir, &format!("{at}/rate"));
    p.link_layer = read(dir, &format!("{at}/link_layer"));
    p.ndev = read(dir, &format!("{at}/gid_attrs/ndevs/0"));
    if !vf {
        p.gid0 = read(dir, &format!("{at}/gids/0"));
    }
    p
}

/// The function behind `device`: most have a `net/`, and opening it reaches
/// the function too (one link read and one open).
fn function(host: &ReadHost, dir: &Dir, d: &mut Device) {
    let link = dir.path().join("device");
    let net = dir
        .open_link("device", Some("net"))
        .or_else(|| host.open_subdir(&link, "net"));
    if let Some(net) = net {
        let f = net.path().parent().unwrap_or(Path::new("/")).to_owned();
        d.physfn = net.exists_beside("physfn");
        d.function_netdevs = net.list("").unwrap_or_default();
        if on_pci(&f) {
            d.pci = f.file_name().map(|n| n.to_string_lossy().into_owned());
        }
        d.function = DeviceLink::Real(f);
        return;
    }
    match host.open_dir(&link) {
        Ok(Ok(f)) => {
            d.physfn = f.exists("physfn");
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
        Ok(Err(f)) if dir.exists("device") => d.function = DeviceLink::Dangling(f),
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
