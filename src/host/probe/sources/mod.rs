//! Peer sources: where the prober learns which ports of which nodes to probe
//! (`[peers.source]`). Each returns `Vec<Peer>` or a typed error saying what
//! failed and where; all of them are bounded (size, count, time).

pub mod file;
pub mod prometheus;

use super::record::Peer;

/// At most this many peers from any source: 10,000 nodes × 8 rails, with room.
pub const MAX_PEERS: usize = 100_000;

/// The highest rail index a node or peer may name (8 rails is today's largest node).
pub const MAX_RAIL: u32 = 63;

/// Checks one peer's fields: a node name, an IPv4/IPv6 address, a fabric as
/// `fleet::Fabric::label` names it (`ib:<prefix>` or `roce:<IPv4 subnet>`), a
/// rail within `MAX_RAIL`.
pub fn check_peer(p: &Peer) -> Result<(), String> {
    if p.node.is_empty() || p.node.len() > 253 || p.node.contains(char::is_whitespace) {
        return Err(format!("node {:?} is not a node name", p.node));
    }
    if p.addr.parse::<std::net::IpAddr>().is_err() {
        return Err(format!("addr {:?} is not an IP address", p.addr));
    }
    let fabric_ok = match p.fabric.split_once(':') {
        Some(("ib", prefix)) => !prefix.is_empty(),
        Some(("roce", net)) => net.split_once('/').is_some_and(|(a, len)| {
            a.parse::<std::net::Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32)
        }),
        _ => false,
    };
    if !fabric_ok {
        return Err(format!(
            "fabric {:?} is neither ib:<subnet prefix> nor roce:<IPv4 subnet> (roce:10.0.0.0/24), as the agents' port_info names it",
            p.fabric
        ));
    }
    if let Some(r) = p.rail.filter(|r| *r > MAX_RAIL) {
        return Err(format!("rail {r} is above {}", MAX_RAIL));
    }
    Ok(())
}
