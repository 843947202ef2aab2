//! A port's addresses, read on first ask (`Snapshot::port_addresses`), as
//! counters are: its LID, its subnet manager's LID and SL (InfiniBand), and
//! its whole GID table with each entry's type and netdev.
//!
//! drivers/infiniband/core/sysfs.c makes one `gids/N` (and `gid_attrs/types/N`,
//! `gid_attrs/ndevs/N`) per entry of the port's table (`gid_tbl_len`: rxe has
//! 1024). An empty slot reads as the zero GID, and its type and netdev answer
//! EINVAL. The kernel does not keep the used entries together: core/cache.c
//! puts a new GID in the first free slot and frees a deleted one in place
//! (an address removed from a netdev leaves a hole), so the whole table is
//! read, not up to the first empty slot.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Device, Read};
use crate::host::Dir;
use crate::host::read::ReadHost;

/// `gid_attrs/types/N` as sysfs.c's `print_gid_type` prints it
/// (`ib_cache_gid_type_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// `IB/RoCE v1`: an InfiniBand GID, or RoCE v1 on an Ethernet port.
    IbRoceV1,
    /// `RoCE v2`: routable, on UDP; the one RDMA-CM and NCCL pick over IP.
    RoceV2,
}

impl GidType {
    pub fn parse(text: &str) -> Result<GidType, String> {
        match text.trim() {
            "IB/RoCE v1" => Ok(GidType::IbRoceV1),
            "RoCE v2" => Ok(GidType::RoceV2),
            t => Err(format!(
                "cannot parse {t:?} (the kernel prints \"IB/RoCE v1\" or \"RoCE v2\")"
            )),
        }
    }
}

/// One used entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gid {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// Why the type could not be read or named, when it could not.
    pub kind: Result<GidType, String>,
    /// The netdev the entry belongs to (RoCE); `None` on InfiniBand, where
    /// the kernel answers EINVAL (no netdev), or when it could not be read.
    pub ndev: Option<String>,
}

impl Gid {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.gid.to_ipv4_mapped()
    }
}

/// A port's addresses. `lid`, `sm_lid` and `sm_sl` are InfiniBand's: not
/// read on an Ethernet (RoCE) port, where the kernel prints zeros (read when
/// the link layer is unknown: the values then tell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    pub lid: Read,
    pub sm_lid: Read,
    pub sm_sl: Read,
    /// The used entries in index order, or why the table could not be listed.
    pub gids: Result<Vec<Gid>, String>,
    /// Entries whose GID could not be read or parsed: `gids/N: why`.
    pub unreadable: Vec<String>,
}

impl Addresses {
    /// `lid` (`0x1a`); `None` when absent, unreadable or not a LID.
    pub fn lid(&self) -> Option<u16> {
        hex16(&self.lid)
    }

    /// `sm_lid`: the subnet manager's LID (`0x1`).
    pub fn sm_lid(&self) -> Option<u16> {
        hex16(&self.sm_lid)
    }

    /// `sm_sl`: the service level to reach the subnet manager (`0`).
    pub fn sm_sl(&self) -> Option<u8> {
        let t = self.sm_sl.as_ref().ok()?.as_deref()?;
        t.trim().parse().ok()
    }

    /// The used entries (none when the table could not be listed).
    pub fn gids(&self) -> &[Gid] {
        self.gids.as_deref().unwrap_or_default()
    }

    /// The first RoCE v2 entry with an IPv4-mapped GID (`::ffff:a.b.c.d`): what
    /// RDMA-CM needs to reach this port over IPv4. `Ok(None)`: the table, read
    /// whole, has none; `Err`: there is none among what could be read, and
    /// some entries could not be (unknown, never "none").
    pub fn roce_v2_ipv4_gid(&self) -> Result<Option<(&Gid, Ipv4Addr)>, String> {
        let gids = self.gids.as_ref().map_err(Clone::clone)?;
        let found = gids
            .iter()
            .filter(|g| g.kind == Ok(GidType::RoceV2))
            .find_map(|g| Some((g, g.ipv4()?)));
        if found.is_some() {
            return Ok(found);
        }
        // An IPv4-mapped entry whose type is unknown may be the one.
        let untyped = gids.iter().filter(|g| g.ipv4().is_some()).filter_map(|g| {
            g.kind
                .as_ref()
                .err()
                .map(|e| format!("types/{}: {e}", g.index))
        });
        let unknown: Vec<String> = self.unreadable.iter().cloned().chain(untyped).collect();
        if unknown.is_empty() {
            Ok(None)
        } else {
            Err(unknown.join("; "))
        }
    }
}

fn hex16(read: &Read) -> Option<u16> {
    let t = read.as_ref().ok()?.as_deref()?.trim();
    u16::from_str_radix(t.strip_prefix("0x")?, 16).ok()
}

/// The addresses of `port` of `device`; `roce`: the port's link layer is
/// Ethernet (its LIDs are not read).
pub fn read(host: &ReadHost, device: &Device, port: &str, roce: bool) -> Addresses {
    let none = |why: String| Addresses {
        lid: Ok(None),
        sm_lid: Ok(None),
        sm_sl: Ok(None),
        gids: Err(why),
        unreadable: Vec::new(),
    };
    let Some(path) = &device.path else {
        return none(format!(
            "{}: its directory could not be opened",
            device.name
        ));
    };
    let dir = match host.open_real_dir(path).map(Ok).map(Ok) {
        Some(d) => d,
        None => host.open_dir(path),
    };
    let dir = match dir {
        Ok(Ok(d)) => d,
        Ok(Err(_)) => return none(format!("{} is gone", path.display())),
        Err(e) => return none(e.to_string()),
    };
    // The port's directory opened once, its files read relative to it.
    let port_dir = dir.subdir("ports").and_then(|d| d.subdir(port));
    let (from, at) = match &port_dir {
        Some(d) => (d, String::new()),
        None => (&dir, format!("ports/{port}/")),
    };
    let attr = |name: &str| -> Read {
        if roce {
            return Ok(None);
        }
        from.read_string(&format!("{at}{name}"))
            .map_err(|e| e.to_string())
    };
    let (lid, sm_lid, sm_sl) = (attr("lid"), attr("sm_lid"), attr("sm_sl"));
    let mut unreadable = Vec::new();
    let gids = table(from, &at, &mut unreadable);
    Addresses {
        lid,
        sm_lid,
        sm_sl,
        gids,
        unreadable,
    }
}

/// Every used entry of `gids/` (under `at` in `from`).
fn table(from: &Dir<'_>, at: &str, unreadable: &mut Vec<String>) -> Result<Vec<Gid>, String> {
    let gids_dir = format!("{at}gids");
    let mut indexes: Vec<u32> = from
        .list(&gids_dir)
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    indexes.sort_unstable();
    let mut out = Vec::new();
    for index in indexes {
        let gid = match from.read_string(&format!("{gids_dir}/{index}")) {
            Ok(Some(t)) => match t.trim().parse::<Ipv6Addr>() {
                Ok(g) => g,
                Err(_) => {
                    unreadable.push(format!("gids/{index}: cannot parse {:?}", t.trim()));
                    continue;
                }
            },
            // Gone since the listing: the table shrank (a port going away).
            Ok(None) => continue,
            Err(e) => {
                unreadable.push(format!("gids/{index}: {e}"));
                continue;
            }
        };
        // The zero GID is an empty slot: its type and netdev answer EINVAL.
        if gid.is_unspecified() {
            continue;
        }
        let kind = match from.read_string(&format!("{at}gid_attrs/types/{index}")) {
            Ok(Some(t)) => GidType::parse(&t),
            Ok(None) => Err("missing".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        let ndev = from
            .read_string(&format!("{at}gid_attrs/ndevs/{index}"))
            .ok()
            .flatten()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        out.push(Gid {
            index,
            gid,
            kind,
            ndev,
        });
    }
    Ok(out)
}
