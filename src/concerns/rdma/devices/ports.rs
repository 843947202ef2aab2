//! The one port model: every RDMA port of the cycle's inventory as one typed
//! `observe::Port` (state, rate, width, link layer, netdev and its MTU, the
//! RDMA MTU, the fabric), made here once and read by every consumer
//! (`rdma.devices`' metrics, `kubelet.devices`, the fleet's `port_info`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use crate::fleet::Fabric;
use crate::host::inventory::port::LinkLayer;
use crate::host::inventory::{self, ClassError, trimmed};
use crate::host::snapshot::Snapshot;
use crate::observe::Port;

/// Every port of every device that opened, in the check's order (devices as
/// listed, ports by number); a port directory that is no number is left out
/// (the check reports it).
pub fn gather(snap: &Snapshot) -> Result<Vec<Port>, ClassError> {
    let inventory = snap.rdma_inventory()?;
    // Read once, and only when a RoCE port asks for its subnet.
    let mut routes: Option<String> = None;
    let mut ports = Vec::new();
    for dev in &inventory.devices {
        if dev.broken_link.is_some() || dev.open_error.is_some() {
            continue;
        }
        let mut of_device: Vec<Port> = dev
            .ports
            .iter()
            .filter_map(|p| {
                let number = p.name.parse::<u32>().ok()?;
                Some(port(snap, dev, number, p, &mut routes))
            })
            .collect();
        of_device.sort_by_key(|p| p.port);
        ports.extend(of_device);
    }
    Ok(ports)
}

/// A port's link, its netdev and MTUs, and its fabric (the GID subnet
/// prefix on InfiniBand, the netdev's IPv4 subnet on RoCE).
fn port(
    snap: &Snapshot,
    dev: &inventory::Device,
    number: u32,
    p: &inventory::Port,
    routes: &mut Option<String>,
) -> Port {
    let link_layer = p.link_layer_value();
    // A software device (rxe) names its netdev in `parent`.
    let netdev = p.netdev().or_else(|| {
        dev.parent_text()?
            .split_whitespace()
            .next()
            .map(str::to_owned)
    });
    let netdev_mtu = netdev.as_ref().and_then(|n| {
        snap.text_or_empty(&Path::new("/sys/class/net").join(n).join("mtu"))
            .parse::<u32>()
            .ok()
    });
    let ethernet = link_layer == Some(LinkLayer::Ethernet);
    let fabric = if ethernet {
        let routes = routes.get_or_insert_with(|| snap.text_or_empty(Path::new("/proc/net/route")));
        netdev
            .as_deref()
            .and_then(|n| roce_subnet(routes, n))
            .map(|(net, len)| Fabric::Roce(net, len))
    } else {
        ib_prefix(&trimmed(&p.gid0)).map(Fabric::Ib)
    };
    Port {
        device: dev.name.clone(),
        port: number,
        vf: dev.physfn,
        active: p
            .state_value()
            .filter(|s| s.is_named())
            .map(|s| s.is_active()),
        rate_gbps: p.rate_gbps(),
        width: p.width(),
        link_layer,
        netdev,
        netdev_mtu,
        port_mtu: netdev_mtu.filter(|_| ethernet).and_then(iboe_mtu),
        fabric,
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
}
