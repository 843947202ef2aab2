//! Every RDMA port's `counters/` and `hw_counters/`, from the cycle's RDMA
//! inventory (read there once per cycle, under `--root`). What cannot be read
//! stays with its port: one device in error never hides the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::host::inventory::{ClassError, CounterDir as InventoryDir, Device, Port};
use crate::host::read::ReadHost;
use crate::host::snapshot::Snapshot;

use super::classes::{Dir as CounterDir, class_of, saturates_at};

const NET: &str = "/sys/class/net";

/// One port as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortRead {
    pub device: String,
    pub port: String,
    /// `guid:<node guid>/<port>`, else `pci:<address>/<port>`, else `name:<device>/<port>`.
    pub identity: String,
    /// The netdevs behind the port (its GID's, the function's, rxe's parent,
    /// and their bond masters).
    pub netdevs: BTreeSet<String>,
    /// Counters the check rates (`counters/symbol_error` → value).
    pub rated: BTreeMap<String, u64>,
    /// Every other counter, kept and shown, not rated.
    pub other: BTreeMap<String, u64>,
    /// `counters/<name>: why`, and whole directories that could not be listed.
    pub unreadable: Vec<String>,
    /// Rated counters at their saturation value: they can no longer show a rise.
    pub saturated: Vec<String>,
}

impl PortRead {
    pub fn name(&self) -> String {
        format!("{}/{}", self.device, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathered {
    pub ports: Vec<PortRead>,
    /// Devices whose ports could not be listed, with why.
    pub devices_unreadable: Vec<String>,
    /// The netdevs with a default route; `Err`: the route tables are unreadable.
    pub default_route: Result<BTreeSet<String>, String>,
}

/// Every non-VF RDMA device's ports, from the cycle's RDMA inventory. An
/// SR-IOV VF's counters are its function's share of the PF's link: the PF's
/// say what the link does.
pub fn gather(snap: &Snapshot) -> Result<Gathered, ClassError> {
    let inventory = snap.rdma_inventory()?;
    let default_route = snap.default_route_netdevs().map_err(|e| e.to_string());
    let mut g = Gathered {
        ports: Vec::new(),
        devices_unreadable: Vec::new(),
        default_route,
    };
    for dev in inventory.physical() {
        let name = &dev.name;
        if let Some(target) = &dev.broken_link {
            g.devices_unreadable
                .push(format!("{name}: links to {} (absent)", target.display()));
            continue;
        }
        if let Some(e) = &dev.open_error {
            g.devices_unreadable.push(format!("{name}: {e}"));
            continue;
        }
        if let Some(e) = &dev.ports_error {
            g.devices_unreadable.push(format!("{name}: ports: {e}"));
            continue;
        }
        let id = identity(dev);
        for port in &dev.ports {
            g.ports.push(read_port(snap, dev, port, &id));
        }
    }
    dedupe_identities(&mut g.ports);
    Ok(g)
}

fn read_port(snap: &Snapshot, dev: &Device, port: &Port, id: &str) -> PortRead {
    let mut p = PortRead {
        device: dev.name.clone(),
        identity: format!("{id}/{}", port.name),
        port: port.name.clone(),
        ..PortRead::default()
    };
    p.netdevs.extend(dev.function_netdevs.iter().cloned());
    p.netdevs.extend(
        dev.parent_text()
            .into_iter()
            .flat_map(|t| t.split_whitespace().map(str::to_owned)),
    );
    p.netdevs.extend(port.netdev());
    let masters: Vec<String> = p.netdevs.iter().filter_map(|n| master(snap, n)).collect();
    p.netdevs.extend(masters);
    let counters = snap.port_counters(dev, port);
    for (which, read) in [
        (CounterDir::Counters, &counters.counters),
        (CounterDir::HwCounters, &counters.hw_counters),
    ] {
        sort_counters(which, read, &mut p);
    }
    p
}

/// The node GUID (rxe's comes from its netdev's MAC: stable too), else the
/// PCI function, else the name.
fn identity(dev: &Device) -> String {
    let guid = dev.node_guid.as_ref().ok().and_then(Option::as_deref);
    if let Some(g) = guid.map(str::trim)
        && !g.is_empty()
        && g.bytes().any(|b| b != b'0' && b != b':')
    {
        return format!("guid:{g}");
    }
    dev.function
        .path()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map_or_else(|| format!("name:{}", dev.name), |pci| format!("pci:{pci}"))
}

/// The bond (or bridge) a netdev is enslaved to: the default route is on it.
fn master(host: &ReadHost, netdev: &str) -> Option<String> {
    host.read_link(&Path::new(NET).join(netdev).join("master"))
        .ok()
        .flatten()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// One counter directory as read, sorted into rated and other counters.
fn sort_counters(which: CounterDir, read: &InventoryDir, p: &mut PortRead) {
    let counters = match read {
        Ok(c) => c,
        Err(e) => {
            p.unreadable.push(format!("{}: {e}", which.as_str()));
            return;
        }
    };
    for (name, value) in counters {
        let key = format!("{}/{name}", which.as_str());
        match value {
            Ok(v) => {
                if class_of(which, name).is_some() {
                    if saturates_at(which, name) == Some(*v) {
                        p.saturated.push(key.clone());
                    }
                    p.rated.insert(key, *v);
                } else {
                    p.other.insert(key, *v);
                }
            }
            Err(why) => p.unreadable.push(format!("{key}: {why}")),
        }
    }
}

/// Two devices with one GUID (a firmware that reports none properly): each
/// keyed by its name as well, so neither takes the other's baseline.
fn dedupe_identities(ports: &mut [PortRead]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for p in ports.iter() {
        *seen.entry(p.identity.clone()).or_default() += 1;
    }
    for p in ports.iter_mut() {
        if seen[&p.identity] > 1 {
            p.identity = format!("{}@{}", p.identity, p.device);
        }
    }
}
