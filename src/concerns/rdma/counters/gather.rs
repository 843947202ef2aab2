//! Reading every RDMA port's `counters/` and `hw_counters/` once per cycle,
//! through the host layer (under `--root`), each device from a directory
//! opened once. What cannot be read stays with its port: one device in error
//! never hides the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::host::Dir;
use crate::host::read::ReadHost;

use super::classes::{Dir as CounterDir, class_of, saturates_at};

pub const CLASS: &str = "/sys/class/infiniband";
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

/// Every non-VF RDMA device's ports. An SR-IOV VF's counters are its
/// function's share of the PF's link: the PF's say what the link does.
pub fn gather(host: &ReadHost) -> Result<Gathered, crate::host::HostError> {
    let names = host.list_dir(Path::new(CLASS))?;
    let default_route = host.default_route_netdevs().map_err(|e| e.to_string());
    let class = host.open_dir(Path::new(CLASS)).ok().and_then(Result::ok);
    let mut g = Gathered {
        ports: Vec::new(),
        devices_unreadable: Vec::new(),
        default_route,
    };
    for dev in names {
        let opened = match class.as_ref().and_then(|c| c.open_link(&dev, None)) {
            Some(d) => Ok(Ok(d)),
            None => host.open_dir(&Path::new(CLASS).join(&dev)),
        };
        let dir = match opened {
            Ok(Ok(d)) => d,
            Ok(Err(target)) => {
                g.devices_unreadable
                    .push(format!("{dev}: links to {} (absent)", target.display()));
                continue;
            }
            Err(e) => {
                g.devices_unreadable.push(format!("{dev}: {e}"));
                continue;
            }
        };
        if dir.exists("device") && host.exists(&dir.path().join("device/physfn")) {
            continue;
        }
        let ports = match dir.list("ports") {
            Ok(p) => p,
            Err(e) => {
                g.devices_unreadable.push(format!("{dev}: ports: {e}"));
                continue;
            }
        };
        let id = identity(host, &dir, &dev);
        let ports_dir = dir.subdir("ports");
        let function_netdevs = dir.list("device/net").unwrap_or_default();
        let parent = dir.read_string("parent").ok().flatten();
        for port in ports {
            let mut p = PortRead {
                device: dev.clone(),
                identity: format!("{id}/{port}"),
                port,
                ..PortRead::default()
            };
            let base = format!("ports/{}", p.port);
            p.netdevs.extend(function_netdevs.iter().cloned());
            p.netdevs.extend(
                parent
                    .iter()
                    .flat_map(|t| t.split_whitespace().map(str::to_owned)),
            );
            if let Ok(Some(n)) = dir.read_string(&format!("{base}/gid_attrs/ndevs/0")) {
                p.netdevs
                    .extend(Some(n.trim().to_owned()).filter(|n| !n.is_empty()));
            }
            let masters: Vec<String> = p.netdevs.iter().filter_map(|n| master(host, n)).collect();
            p.netdevs.extend(masters);
            for which in [CounterDir::Counters, CounterDir::HwCounters] {
                read_counters(&dir, ports_dir.as_ref(), &p.port.clone(), which, &mut p);
            }
            g.ports.push(p);
        }
    }
    dedupe_identities(&mut g.ports);
    Ok(g)
}

/// The node GUID (rxe's comes from its netdev's MAC: stable too), else the
/// PCI function, else the name.
fn identity(host: &ReadHost, dir: &Dir<'_>, dev: &str) -> String {
    let guid = dir.read_string("node_guid").ok().flatten();
    if let Some(g) = guid.map(|g| g.trim().to_owned())
        && !g.is_empty()
        && g.bytes().any(|b| b != b'0' && b != b':')
    {
        return format!("guid:{g}");
    }
    host.read_link(&dir.path().join("device"))
        .ok()
        .flatten()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map_or_else(|| format!("name:{dev}"), |pci| format!("pci:{pci}"))
}

/// The bond (or bridge) a netdev is enslaved to: the default route is on it.
fn master(host: &ReadHost, netdev: &str) -> Option<String> {
    host.read_link(&Path::new(NET).join(netdev).join("master"))
        .ok()
        .flatten()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn read_counters(
    dir: &Dir<'_>,
    ports: Option<&Dir<'_>>,
    port: &str,
    which: CounterDir,
    p: &mut PortRead,
) {
    // Opened once, its files read relative to it (the cost is system calls);
    // else by path from the device. An absent directory lists empty: rxe has
    // no `counters/`, siw neither.
    let opened = ports
        .and_then(|d| d.subdir(port))
        .and_then(|d| d.subdir(which.as_str()));
    let (from, prefix) = match &opened {
        Some(d) => (d, String::new()),
        None => (dir, format!("ports/{port}/{}/", which.as_str())),
    };
    let names = match from.list(prefix.trim_end_matches('/')) {
        Ok(n) => n,
        Err(e) => {
            p.unreadable.push(format!("{}: {e}", which.as_str()));
            return;
        }
    };
    for name in names {
        // hw_counters/lifespan is the driver's cache time (ms), a knob, not a counter.
        if which == CounterDir::HwCounters && name == "lifespan" {
            continue;
        }
        let key = format!("{}/{name}", which.as_str());
        let value = match from.read_string(&format!("{prefix}{name}")) {
            // A driver without a PMA (i40iw, irdma) answers `N/A (no PMA)`:
            // the counter does not exist there, it is not unreadable.
            Ok(Some(t)) if t.trim_start().starts_with("N/A") => continue,
            Ok(Some(t)) => t
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{:?} is not a count", t.trim())),
            Ok(None) => continue,
            Err(e) => Err(e.to_string()),
        };
        match value {
            Ok(v) => {
                if class_of(which, &name).is_some() {
                    if saturates_at(which, &name) == Some(v) {
                        p.saturated.push(key.clone());
                    }
                    p.rated.insert(key, v);
                } else {
                    p.other.insert(key, v);
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
