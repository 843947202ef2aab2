//! The RDMA subsystem's network-namespace mode (`rdma.netns_mode`): SR-IOV setups
//! that hand each pod its own VF need `exclusive`.
//!
//! The live mode is read from sysfs (a netlink socket could auto-load ib_core);
//! the mode is persisted in the agent's own modprobe.d file (a ledger-owned file,
//! so `revert` removes it) and switched live over netlink when the kernel allows:
//! it refuses (EBUSY) while any other network namespace exists, and then only a
//! reboot applies it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::json;

use crate::config::rdma::{InitramfsPolicy, PluginPolicy, RdmaConfig};
use crate::engine::check::CheckId;
use crate::engine::check::{Check, Status};
use crate::engine::plan::{Action, ActionKind, FileChange, Plan};
use crate::host::HostError;
use crate::host::netlink::{NetlinkError, NetnsMode, RdmaNetlink};
use crate::host::procfs;
use crate::host::read::ReadHost;
use crate::host::snapshot::Snapshot;

pub const CHECK_ID: CheckId = CheckId::new("rdma.netns");
pub const OWNER: &str = "rdma-netns";
const PARAM: &str = "/sys/module/ib_core/parameters/netns_mode";
/// MLNX_OFED's `ofed_info` is a shell script carrying its version as text,
/// so it is read as a file (fixtures can supply it) rather than run.
const OFED_INFO: &str = "/usr/bin/ofed_info";
const NAMED_NETNS: &str = "/run/netns";
/// The shared device plugin registers under either directory, depending on its mode.
const PLUGIN_DIRS: &[&str] = &[
    "/var/lib/kubelet/device-plugins",
    "/var/lib/kubelet/plugins_registry",
];
/// Holders named per namespace in `details` (a namespace can hold many processes).
const HOLDERS_SHOWN: usize = 5;

/// The live mode as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    /// No `/sys/module/ib_core`: the modprobe.d options apply when it loads.
    NotLoaded,
    Mode(NetnsMode),
    Unreadable(String),
}

/// A network namespace other than the initial one, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Namespace {
    /// `net:[4026532451]`, `/run/netns/<name>`, or where else it is bind-mounted.
    pub id: String,
    pub holders: Vec<Holder>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    /// The last component of its cgroup (a systemd unit or a container scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// What the initramfs holds, from `lsinitramfs`/`lsinitrd` on the live host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initramfs {
    pub has_ib_core: bool,
    pub has_agent_file: bool,
    /// The command that rebuilds it.
    pub rebuild: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Facts {
    pub live: Live,
    pub osrelease: Option<String>,
    pub ofed_info: Option<String>,
    /// The agent's modprobe.d file as it is now.
    pub modprobe: Option<Vec<u8>>,
    pub namespaces: Vec<Namespace>,
    pub plugin_sockets: Vec<PathBuf>,
    pub cmdline: Option<String>,
    /// `None`: nothing to tell (not the live host, no image, or no listing tool).
    pub initramfs: Option<Initramfs>,
    /// The listing tool failed: whether ib_core loads from the initramfs is unknown.
    pub initramfs_error: Option<String>,
}

mod decide;
pub mod effects;
mod gather;
mod initramfs;
mod live;
pub mod metrics;
pub mod reasons;

pub use decide::{Decision, decide};
pub use gather::{gather, namespaces};
pub use live::set_live;

// ---------- parse (pure) ----------

/// `Y` shared, `N` exclusive (a bool module parameter; `1`/`0` accepted too).
pub fn parse_param(text: &str) -> Result<NetnsMode, String> {
    match text.trim() {
        "Y" | "y" | "1" => Ok(NetnsMode::Shared),
        "N" | "n" | "0" => Ok(NetnsMode::Exclusive),
        other => Err(format!("{PARAM} holds {other:?}, expected Y or N")),
    }
}

/// `5.15.0-91-generic` → (5, 15).
pub fn parse_kernel(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The version in `ofed_info`'s text: `MLNX_OFED_LINUX-5.8-1.0.1.1` → (5, 8).
pub fn parse_ofed(text: &str) -> Option<(u32, u32)> {
    let rest = &text[text.find("MLNX_OFED_LINUX-")? + "MLNX_OFED_LINUX-".len()..];
    let mut it = rest.split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `ib_core.netns_mode=` on the kernel command line (the last one wins).
pub fn cmdline_mode(cmdline: &str) -> Option<&str> {
    cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ib_core.netns_mode="))
        .next_back()
}

/// The last component of the process's cgroup v2 path (or of any v1 line).
pub fn cgroup_leaf(cgroup: &str) -> Option<String> {
    let line = cgroup
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| cgroup.lines().next())?;
    let path = line.splitn(3, ':').nth(2)?;
    path.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Network namespaces bind-mounted somewhere, from a `mountinfo` text: (mount
/// point, `net:[inode]`). nsfs mounts show the namespace as their root field.
pub fn nsfs_net_mounts(mountinfo: &str) -> Vec<(String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            if right.split_whitespace().next()? != "nsfs" {
                return None;
            }
            let f: Vec<&str> = left.split_whitespace().collect();
            let (root, point) = (*f.get(3)?, *f.get(4)?);
            root.starts_with("net:[")
                .then(|| (unescape_mount(point), root.to_owned()))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        let byte = oct.and_then(|d| {
            u8::try_from(d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0'))).ok()
        });
        match (b[i], byte) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a listing holds ib_core (any compression) and the agent's file.
pub fn initramfs_contents(listing: &str, agent_file: &Path) -> (bool, bool) {
    let agent = agent_file.to_string_lossy();
    let agent = agent.trim_start_matches('/');
    let mut has = (false, false);
    for l in listing.lines() {
        let l = l.trim().trim_start_matches("./");
        has.0 |= l
            .rsplit('/')
            .next()
            .is_some_and(|f| f.starts_with("ib_core.ko"));
        has.1 |= l.ends_with(agent);
    }
    has
}

pub fn modprobe_content(mode: NetnsMode) -> String {
    format!(
        "# Written by rdma-node-agent (rdma.netns_mode = \"{mode}\"); removed by `rdma-node-agent revert`.\n\
         options ib_core netns_mode={}\n",
        mode.wire()
    )
}

pub fn describe(namespaces: &[Namespace]) -> String {
    namespaces
        .iter()
        .map(|n| {
            if n.holders.is_empty() {
                return n.id.clone();
            }
            let holders: Vec<String> = n
                .holders
                .iter()
                .map(|h| match &h.unit {
                    Some(u) => format!("pid {} {} in {u}", h.pid, h.comm),
                    None => format!("pid {} {}", h.pid, h.comm),
                })
                .collect();
            format!("{} ({})", n.id, holders.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
