//! The PCIe hierarchy between a GPU and a NIC: the path up to their common
//! ancestor and the distance class, with the meaning `nvidia-smi topo -m` and
//! NCCL give them (NCCL flattens a switch's upstream and downstream ports into
//! one node, so two devices on one switch are PIX):
//!
//! - PIX: at most a single PCIe bridge (one switch) between them;
//! - PXB: several bridges, without the host bridge;
//! - PHB: through a PCIe host bridge (the same root complex);
//! - NODE: between host bridges within one NUMA node;
//! - SYS: across the interconnect between NUMA nodes (QPI/UPI, xGMI).

use serde::Serialize;

use super::pcie::PortType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Distance {
    #[serde(rename = "PIX")]
    Pix,
    #[serde(rename = "PXB")]
    Pxb,
    #[serde(rename = "PHB")]
    Phb,
    #[serde(rename = "NODE")]
    Node,
    #[serde(rename = "SYS")]
    Sys,
}

impl Distance {
    pub const ALL: [Distance; 5] = [
        Distance::Pix,
        Distance::Pxb,
        Distance::Phb,
        Distance::Node,
        Distance::Sys,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Phb => "PHB",
            Distance::Node => "NODE",
            Distance::Sys => "SYS",
        }
    }
}

/// A device's place in the hierarchy: the components of its real sysfs path
/// under `/sys/devices` (`pci0000:15`, `0000:15:01.0`, …, the device itself).
/// The first names the host bridge; PCI functions are the ones that parse as
/// addresses.
pub type Chain = Vec<String>;

/// `0000:1b:00.0` (domain may be wider than 4 digits behind a VMD).
pub fn is_bdf(s: &str) -> bool {
    let mut parts = s.rsplitn(2, '.');
    let (Some(func), Some(rest)) = (parts.next(), parts.next()) else {
        return false;
    };
    let segs: Vec<&str> = rest.split(':').collect();
    func.len() == 1
        && func.chars().all(|c| c.is_ascii_digit())
        && segs.len() == 3
        && segs
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The chain of a resolved sysfs path (`/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0`).
pub fn chain_of(path: &std::path::Path) -> Option<Chain> {
    let rest = path.strip_prefix("/sys/devices").ok()?;
    let chain: Chain = rest
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (chain.first()?.starts_with("pci") && chain.len() >= 2 && is_bdf(chain.last()?))
        .then_some(chain)
}

/// The route from one device to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub distance: Distance,
    /// The bridges and ports traffic between them passes, in order (up from
    /// the first device, then down to the second).
    pub bridges: Vec<String>,
}

/// The route between two chains; `numa` the two devices' NUMA nodes (`None`:
/// unknown or -1) decides NODE from SYS across host bridges; `port` gives a
/// function's PCIe port type when its configuration space was read.
pub fn route(
    a: &[String],
    b: &[String],
    numa: (Option<i32>, Option<i32>),
    port: impl Fn(&str) -> Option<PortType>,
) -> Route {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    // The bridges below the common point on each side (not the devices).
    let up: Vec<String> = a[common.max(1)..a.len() - 1].to_vec();
    let down: Vec<String> = b[common.max(1)..b.len() - 1].to_vec();
    let shared = (common >= 2).then(|| a[common - 1].clone());
    let mut bridges: Vec<String> = up.iter().rev().cloned().collect();
    bridges.extend(shared.clone());
    bridges.extend(down.iter().cloned());
    let distance = match common {
        0 => match numa {
            (Some(x), Some(y)) if x != y => Distance::Sys,
            // One NUMA node, or the kernel does not tell (-1 on a one-node
            // machine): the host bridges are in one node.
            (Some(_), Some(_)) | (None, None) => Distance::Node,
            _ => Distance::Sys,
        },
        1 => Distance::Phb,
        _ => {
            // A switch is one hop: its downstream ports count as its upstream port.
            let mut units: Vec<&str> = bridges
                .iter()
                .map(|br| match port(br) {
                    Some(PortType::SwitchDownstream) => parent_of(a, br)
                        .or_else(|| parent_of(b, br))
                        .unwrap_or(br.as_str()),
                    _ => br.as_str(),
                })
                .collect();
            units.sort_unstable();
            units.dedup();
            if units.len() <= 1 {
                Distance::Pix
            } else {
                Distance::Pxb
            }
        }
    };
    Route { distance, bridges }
}

fn parent_of<'c>(chain: &'c [String], name: &str) -> Option<&'c str> {
    let i = chain.iter().position(|c| c == name)?;
    (i >= 2).then(|| chain[i - 1].as_str())
}

/// The functions whose upstream link lies on a device's chain, each with the
/// function above it (`None` on the root bus): the device itself, and every
/// bridge that is neither a root port nor a switch downstream port (their own
/// link attributes describe the link below them, which the child reports).
/// A bridge whose type is unknown is left out rather than misread.
pub fn links(
    chain: &[String],
    port: impl Fn(&str) -> Option<PortType>,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (i, f) in chain.iter().enumerate().skip(1) {
        let parent = (i >= 2).then(|| chain[i - 1].clone());
        let endpoint = i == chain.len() - 1;
        let upstream_side = matches!(
            port(f),
            Some(PortType::SwitchUpstream | PortType::PcieToPciBridge)
        );
        if endpoint || upstream_side {
            out.push((f.clone(), parent));
        }
    }
    out
}
