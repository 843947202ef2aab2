//! The netdevs that carry a default route (IPv4 `/proc/net/route`, IPv6
//! `/proc/net/ipv6_route`, under the root): the node's management network,
//! whose NIC's counters are reported apart from the RDMA fabric's.

use std::collections::BTreeSet;
use std::path::Path;

use super::Result;
use super::read::ReadHost;

pub const ROUTE_V4: &str = "/proc/net/route";
pub const ROUTE_V6: &str = "/proc/net/ipv6_route";

/// `RTF_UP` and `RTF_REJECT` (include/uapi/linux/route.h).
const RTF_UP: u32 = 0x0001;
const RTF_REJECT: u32 = 0x0200;

impl ReadHost {
    /// The netdevs with a default route, IPv4 or IPv6. A table that is absent
    /// (no IPv6) adds none; one that cannot be read is an error.
    pub fn default_route_netdevs(&self) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        for (path, parse) in [
            (ROUTE_V4, defaults_v4 as fn(&str) -> Vec<String>),
            (ROUTE_V6, defaults_v6),
        ] {
            match self.read_string(Path::new(path)) {
                Ok(Some(text)) => out.extend(parse(&text)),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

fn flags(hex: &str) -> u32 {
    u32::from_str_radix(hex, 16).unwrap_or(0)
}

/// `Iface Destination Gateway Flags … Mask …`: destination and mask 0, up.
pub fn defaults_v4(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let default = f.len() >= 8 && f[1] == "00000000" && f[7] == "00000000";
            (default && flags(f[3]) & RTF_UP != 0 && flags(f[3]) & RTF_REJECT == 0)
                .then(|| f[0].to_owned())
        })
        .collect()
}

/// `dest plen src splen nexthop metric refcnt use flags dev`: `::/0`, up, not
/// the kernel's unreachable entries on `lo`.
pub fn defaults_v6(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let default = f.len() >= 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00";
            let ok = flags(f.get(8)?) & RTF_UP != 0 && flags(f[8]) & RTF_REJECT == 0;
            (default && ok && f[9] != "lo").then(|| f[9].to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written in the kernel's formats (x86_64, labelled so): eth0 holds
    /// the IPv4 default, ens1f0np0 a connected route only.
    #[test]
    fn the_default_routes_netdevs() {
        let v4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t00000000\t0102000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                  eth0\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
                  ens1f0np0\t0000A8C0\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(defaults_v4(v4), ["eth0"]);
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 bond0\n\
                  fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 ens1f0np0\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n";
        assert_eq!(defaults_v6(v6), ["bond0"]);
    }
}
