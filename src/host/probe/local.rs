//! This node's probe sources: ACTIVE RDMA ports and the address each can be
//! reached at. A RoCE port's address is the IPv4 address its RoCE v2 GIDs
//! carry (`::ffff:a.b.c.d`): when the netdev loses its IPv4 address the GID
//! goes with it, and the port has no source (`Stage::Source`).

use std::path::Path;

use crate::host::Host;

/// One local RDMA port as the prober sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    pub device: String,
    pub port: u32,
    /// The port's IPv4 address from its RoCE v2 GID; None when it has none.
    pub addr: Option<String>,
    /// `roce:<IPv4 subnet>` when known (the peer source's fabric for this port).
    pub fabric: Option<String>,
    pub rail: Option<u32>,
}

const CLASS: &str = "/sys/class/infiniband";

/// ACTIVE Ethernet (RoCE) ports under `/sys/class/infiniband`, with the IPv4
/// address of their first RoCE v2 GID. IB ports (IPoIB addresses) are not
/// read here yet: they are left out, so their probes are absent, not `ok`.
pub fn active_roce_ports(host: &Host) -> Vec<LocalPort> {
    let mut out = Vec::new();
    let devices = host.list_dir(Path::new(CLASS)).unwrap_or_default();
    for device in devices {
        let ports_dir = Path::new(CLASS).join(&device).join("ports");
        for port in host.list_dir(&ports_dir).unwrap_or_default() {
            let Ok(num) = port.parse::<u32>() else {
                continue;
            };
            let dir = ports_dir.join(&port);
            let read = |p: &str| {
                host.read_string(&dir.join(p))
                    .ok()
                    .flatten()
                    .map(|s| s.trim().to_owned())
            };
            if !read("state").is_some_and(|s| s.ends_with("ACTIVE"))
                || read("link_layer").as_deref() != Some("Ethernet")
            {
                continue;
            }
            let addr = (0..16).find_map(|i| {
                let ty = read(&format!("gid_attrs/types/{i}"))?;
                if !ty.eq_ignore_ascii_case("RoCE v2") {
                    return None;
                }
                ipv4_of_gid(&read(&format!("gids/{i}"))?)
            });
            out.push(LocalPort {
                device: device.clone(),
                port: num,
                addr,
                fabric: None,
                rail: None,
            });
        }
    }
    out
}

/// `0000:0000:0000:0000:0000:ffff:0a4d:0001` → `10.77.0.1` (an IPv4-mapped GID).
pub fn ipv4_of_gid(gid: &str) -> Option<String> {
    let words: Vec<&str> = gid.trim().split(':').collect();
    if words.len() != 8 || words[..5].iter().any(|w| *w != "0000") || words[5] != "ffff" {
        return None;
    }
    let hi = u16::from_str_radix(words[6], 16).ok()?;
    let lo = u16::from_str_radix(words[7], 16).ok()?;
    Some(format!(
        "{}.{}.{}.{}",
        hi >> 8,
        hi & 0xff,
        lo >> 8,
        lo & 0xff
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_gid_names_its_ipv4_address_and_others_none() {
        assert_eq!(
            ipv4_of_gid("0000:0000:0000:0000:0000:ffff:0a4d:0001\n").as_deref(),
            Some("10.77.0.1")
        );
        assert_eq!(ipv4_of_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456"), None);
        // An unset GID slot reads all zeros.
        assert_eq!(ipv4_of_gid("0000:0000:0000:0000:0000:0000:0000:0000"), None);
    }

    #[test]
    fn only_active_roce_ports_with_their_v2_address() {
        let t = tempfile::tempdir().unwrap();
        let put = |p: &str, s: &str| {
            let f = t.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        let p = "/sys/class/infiniband/rxe0/ports/1";
        put(&format!("{p}/state"), "4: ACTIVE\n");
        put(&format!("{p}/link_layer"), "Ethernet\n");
        put(&format!("{p}/gid_attrs/types/0"), "IB/RoCE v1\n");
        put(
            &format!("{p}/gids/0"),
            "fe80:0000:0000:0000:5054:00ff:fe12:3456\n",
        );
        put(&format!("{p}/gid_attrs/types/1"), "RoCE v2\n");
        put(
            &format!("{p}/gids/1"),
            "fe80:0000:0000:0000:5054:00ff:fe12:3456\n",
        );
        put(&format!("{p}/gid_attrs/types/3"), "RoCE v2\n");
        put(
            &format!("{p}/gids/3"),
            "0000:0000:0000:0000:0000:ffff:0a4d:0001\n",
        );
        let q = "/sys/class/infiniband/rxe1/ports/1";
        put(&format!("{q}/state"), "1: DOWN\n");
        put(&format!("{q}/link_layer"), "Ethernet\n");
        let ports = active_roce_ports(&Host::new(t.path()));
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert_eq!(ports[0].device, "rxe0");
        assert_eq!(ports[0].addr.as_deref(), Some("10.77.0.1"));
    }
}
