//! What a fleet compares between nodes, as low-cardinality facts for the info
//! metrics (no check of its own): per RDMA device its firmware, board and
//! driver; per port its rate, width, link layer, MTUs and fabric; per node its
//! kernel, netns mode, memlock target and GPU driver. Read-only, from sysfs,
//! /proc and the config; the netns mode from `rdma.netns`'s observation.
//! SR-IOV VFs are left out: they repeat their PF.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use crate::config::Config;
use crate::config::nri::MemlockVia;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::fleet::{Fabric, Fact};
use crate::host::inventory::port::LinkLayer;
use crate::host::inventory::{Device, Port, Read};
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, Observations};
use crate::reason::Reason;

pub struct Facts {
    devices: Vec<Fact>,
    ports: Vec<Fact>,
    kernel: String,
    gpu_driver: String,
    /// The route containers get memlock by this cycle: `auto` resolved.
    memlock_via: &'static str,
}

pub struct Export;

impl Concern for Export {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    fn ids(&self) -> &'static [CheckId] {
        &[]
    }

    /// Read-only and cheap: exported whatever the checks' settings.
    fn enabled(&self, _cfg: &Config) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        let host = snap;
        let routes = text(host, Path::new("/proc/net/route"));
        let mut devices = Vec::new();
        let mut ports = Vec::new();
        let inventory = snap.rdma_inventory().map_err(GatherError::unknown)?;
        // SR-IOV VFs share their PF's firmware, board and link: a node with
        // a thousand of them would export a thousand series saying so.
        for dev in inventory.physical() {
            devices.push(device(host, dev));
            for port in &dev.ports {
                let Ok(number) = port.name.parse::<u32>() else {
                    continue;
                };
                ports.push(self::port(host, dev, number, port, &routes));
            }
        }
        Ok(Facts {
            devices,
            ports,
            kernel: snap.kernel_release().unwrap_or_default(),
            gpu_driver: text(host, Path::new("/sys/module/nvidia/version")),
            memlock_via: memlock_via(cfg, snap),
        })
    }

    fn decide(&self, f: &Facts, ctx: &Ctx) -> Decision {
        let node = Fact::Node {
            kernel: f.kernel.clone(),
            netns_mode: ctx
                .observations
                .netns_mode()
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default(),
            memlock_target: ctx.config.containerd.memlock.to_string(),
            memlock_via: f.memlock_via.to_owned(),
            gpu_driver: f.gpu_driver.clone(),
        };
        let observations = f
            .devices
            .iter()
            .chain(&f.ports)
            .cloned()
            .chain([node])
            .map(Observation::Fleet)
            .collect();
        Decision {
            observations,
            ..Decision::default()
        }
    }
}

/// A file's text, trimmed; empty when it cannot be read.
fn text(host: &Snapshot, p: &Path) -> String {
    host.read_string(p)
        .ok()
        .flatten()
        .map(|t| t.trim().to_owned())
        .unwrap_or_default()
}

/// A sysfs file's text as the inventory read it, trimmed; empty when it
/// could not be read.
fn value(read: &Read) -> String {
    read.as_ref()
        .ok()
        .and_then(Option::as_deref)
        .map(|t| t.trim().to_owned())
        .unwrap_or_default()
}

/// A device's firmware, board, driver (with its OFED module version) and GUID.
fn device(host: &Snapshot, dev: &Device) -> Fact {
    let driver = dev.driver.clone().unwrap_or_default();
    // MLNX_OFED and DOCA-OFED modules carry a version; in-tree ones do not.
    let version = text(
        host,
        &Path::new("/sys/module").join(&driver).join("version"),
    );
    Fact::Device {
        device: dev.name.clone(),
        fw_ver: value(&dev.fw_ver),
        board_id: value(&dev.board_id),
        driver: if driver.is_empty() || version.is_empty() {
            driver
        } else {
            format!("{driver} {version}")
        },
        node_guid: value(&dev.node_guid),
    }
}

/// A port's link, its netdev and MTUs, and its fabric (the GID subnet
/// prefix on InfiniBand, the netdev's IPv4 subnet on RoCE).
fn port(host: &Snapshot, dev: &Device, number: u32, p: &Port, routes: &str) -> Fact {
    let link_layer = p.link_layer_value().unwrap_or(LinkLayer::Unknown);
    let netdev = p.netdev().or_else(|| {
        dev.parent_text()?
            .split_whitespace()
            .next()
            .map(str::to_owned)
    });
    let netdev_mtu = netdev.as_ref().and_then(|n| {
        text(host, &Path::new("/sys/class/net").join(n).join("mtu"))
            .parse::<u32>()
            .ok()
    });
    let ethernet = link_layer == LinkLayer::Ethernet;
    let fabric = if ethernet {
        netdev
            .as_deref()
            .and_then(|n| roce_subnet(routes, n))
            .map(|(net, len)| Fabric::Roce(net, len))
    } else {
        ib_prefix(&value(&p.gid0)).map(Fabric::Ib)
    };
    Fact::Port {
        device: dev.name.clone(),
        port: number,
        link_layer,
        rate_gbps: p.rate_gbps(),
        width: p.width(),
        netdev,
        netdev_mtu,
        port_mtu: netdev_mtu.filter(|_| ethernet).and_then(iboe_mtu),
        fabric,
    }
}

/// How containers get their memlock here, as `[containerd] memlock_via`
/// spells it, with `auto` resolved as `containerd.memlock` resolves it this
/// cycle; empty when the agent does not prepare containerd.
fn memlock_via(cfg: &Config, snap: &Snapshot) -> &'static str {
    let via = cfg.containerd.memlock_via;
    match via {
        _ if !cfg.containerd.enabled => "",
        MemlockVia::Auto if cfg.containerd.base_spec_route(snap) => MemlockVia::BaseSpec.as_str(),
        MemlockVia::Auto => MemlockVia::Nri.as_str(),
        _ => via.as_str(),
    }
}

/// The RDMA MTU of a RoCE port on a netdev of this MTU, as the kernel's
/// `iboe_get_mtu` (include/rdma/ib_addr.h) derives it: the netdev MTU less the
/// largest RoCE headers (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4),
/// rounded down to an IB MTU. Drivers with their own rule (rxe) may differ.
pub fn iboe_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| room >= *m)
}

/// `fe80:0000:0000:0000:0c42:a103:0065:6a3c` → its subnet prefix, the first
/// 64 bits (the rest zero); none for an all-zero GID (an unset table entry)
/// or text that is no GID.
pub fn ib_prefix(gid: &str) -> Option<Ipv6Addr> {
    let gid: Ipv6Addr = gid.trim().parse().ok()?;
    let bits = gid.to_bits();
    (bits != 0).then(|| Ipv6Addr::from_bits(bits & !u128::from(u64::MAX)))
}

/// The IPv4 subnet of a netdev's connected route in `/proc/net/route` (a
/// route without gateway, not the default), the longest prefix first.
pub fn roce_subnet(routes: &str, netdev: &str) -> Option<(Ipv4Addr, u8)> {
    // The kernel prints each address as a native-endian number of its
    // network-order bytes: back to those bytes, then to the address.
    let addr = |s: &str| {
        u32::from_str_radix(s, 16)
            .ok()
            .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
    };
    routes
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[0] == netdev && f[2] == "00000000").then_some(())?;
            let dest = addr(f[1])?;
            let mask = addr(f[7])?;
            (mask != 0).then_some((mask.count_ones() as u8, dest))
        })
        .max_by_key(|(len, dest)| (*len, std::cmp::Reverse(*dest)))
        .map(|(len, dest)| (Ipv4Addr::from(dest), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_as_the_kernel_derives_it() {
        assert_eq!(iboe_mtu(9000), Some(4096));
        assert_eq!(iboe_mtu(4200), Some(4096));
        assert_eq!(iboe_mtu(4191), Some(2048));
        assert_eq!(iboe_mtu(1500), Some(1024));
        assert_eq!(iboe_mtu(300), None);
    }

    #[test]
    fn fabric_labels() {
        let ib = ib_prefix("fe80:0000:0000:0000:0c42:a103:0065:6a3c").map(Fabric::Ib);
        assert_eq!(
            ib.map(|f| f.label()).as_deref(),
            Some("ib:fe80:0000:0000:0000")
        );
        assert_eq!(ib_prefix("0000:0000:0000:0000:0000:0000:0000:0000"), None);
        // Hand-written in /proc/net/route's format (x86_64): eth0 on
        // 10.0.2.0/24, and a default route via 10.0.2.2.
        let routes = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             eth0\t00000000\t0202000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
             eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let roce = roce_subnet(routes, "eth0").map(|(n, l)| Fabric::Roce(n, l));
        assert_eq!(roce.map(|f| f.label()).as_deref(), Some("roce:10.0.2.0/24"));
        assert_eq!(roce_subnet(routes, "eth1"), None);
    }

    /// `node_info{memlock_via}` is the route this cycle takes: before, it
    /// said "base-spec" whatever the config.
    #[test]
    fn memlock_via_is_the_route_taken() {
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(crate::host::Host::new(t.path()));
        let via = |text: &str| {
            let cfg = Config::parse(
                text,
                Path::new("c.toml"),
                crate::concerns::registry::SECTIONS,
            )
            .unwrap();
            memlock_via(&cfg, &snap)
        };
        assert_eq!(via(""), "base-spec");
        assert_eq!(via("[containerd]\nmemlock_via = \"nri\"\n"), "nri");
        assert_eq!(via("[containerd]\nmemlock_via = \"both\"\n"), "both");
        // `auto` with no NRI socket to take plugins: the base spec.
        assert_eq!(via("[containerd]\nmemlock_via = \"auto\"\n"), "base-spec");
        assert_eq!(
            via("[containerd]\nenabled = false\nmemlock_via = \"nri\"\n"),
            ""
        );
    }
}
