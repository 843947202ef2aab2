//! The peer-probe record: what the prober writes after each round to
//! `/var/lib/rdma-node-agent/peers.json` (through the state writer) and what
//! `rdma.peers`, `/metrics` and the fleet view read. Its schema is the
//! contract between the prober (which runs probes) and the concern (which
//! judges them): a field is added, never renamed; `version` changes when a
//! meaning does.

use serde::{Deserialize, Serialize};

/// Where the record lives, under `host::state::STATE_DIR`.
pub const FILE: &str = "peers.json";
pub const VERSION: u32 = 1;

/// A peer as a peer source (file, DNS, Prometheus) names it: one port of one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Peer {
    /// The peer's node name (its Kubernetes node / hostname).
    pub node: String,
    /// The address its responder listens on: the port's IPv4 address (RoCE) or
    /// its IPoIB address (IB): RDMA-CM resolves the GID from it.
    pub addr: String,
    /// `ib:<subnet prefix>` or `roce:<IPv4 subnet>`, as `fleet::Fabric::label` names it.
    pub fabric: String,
    /// The rail index, when the source knows it.
    pub rail: Option<u32>,
}

/// How far a probe got: the first stage that failed, or `Done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// No usable local source: the port has no address (e.g. its netdev lost
    /// its IPv4 address, so the RoCE v2 IPv4 GID is gone).
    Source,
    /// rdma_resolve_addr / rdma_resolve_route failed or timed out.
    Resolve,
    /// The connection was not established (timeout, unreachable).
    Connect,
    /// The responder refused it (`reject_why` says why: bad key, rate limit).
    Rejected,
    /// The small message did not complete (no completion, or an error status).
    Small,
    /// The small message completed but the path-MTU-sized one did not: the
    /// path carries less than the ports negotiated (an MTU mismatch on the way).
    Full,
    /// The helper could not run, or said something unreadable.
    Helper,
    /// The helper was killed past its budget and did not exit (stuck in the
    /// kernel), or earlier ones are still stuck so none was started: this
    /// node's own RDMA stack is not answering, whatever the peers do.
    Stuck,
    Done,
}

/// One probe from one local port to one peer, both ways: a SEND to the peer
/// and its echo back, each with its completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub device: String,
    pub port: u32,
    /// The local address the probe was sourced from; empty when none (`Stage::Source`).
    pub src: String,
    pub peer: Peer,
    pub stage: Stage,
    /// What failed, as the helper or the kernel said it; empty when `Done`.
    pub error: String,
    /// The responder's reason when `Stage::Rejected` (`bad_key`, `rate_limited`, ...).
    pub reject_why: Option<String>,
    /// Round-trip time of the small exchange, microseconds.
    pub rtt_us: Option<u64>,
    /// The path MTU of the connected QP (bytes: 256..4096).
    pub path_mtu: Option<u32>,
    /// The local GID index and type the connection used (`RoCE v2`, `IB/RoCE v1`).
    pub gid_index: Option<u32>,
    pub gid_type: Option<String>,
    /// The peer's rail and node as its responder reported them in the reply
    /// (a peer answering from another rail than the source said: a cabling fault).
    pub answered_node: Option<String>,
    pub answered_rail: Option<u32>,
    pub started_unix: u64,
}

impl Probe {
    /// Answered both ways, by the node the peer source names for the address.
    /// An answer from another node (its name proven by the fleet key) proves
    /// no path to this peer: a stale peer list, or an address reused or
    /// held twice.
    pub fn answered(&self) -> bool {
        self.stage == Stage::Done && !self.answered_by_another()
    }

    /// Done, but another node than the source's answered at the peer's address.
    pub fn answered_by_another(&self) -> bool {
        self.stage == Stage::Done
            && self
                .answered_node
                .as_deref()
                .is_some_and(|n| n != self.peer.node)
    }
}

/// One round: every probe the prober ran in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub started_unix: u64,
    pub finished_unix: u64,
    pub probes: Vec<Probe>,
}

/// Probes this node's responder answered or refused, per local port and sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    pub device: String,
    pub port: u32,
    /// The sender's address, and its node when its probe named one that its key proved.
    pub from: String,
    pub from_node: Option<String>,
    pub answered_total: u64,
    pub refused_total: u64,
    pub last_answered_unix: Option<u64>,
    pub last_refused_unix: Option<u64>,
    pub last_refused_why: Option<String>,
}

/// A port's responder: running, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Responder {
    pub device: String,
    pub port: u32,
    pub addr: String,
    pub running: bool,
    pub error: Option<String>,
    /// Since when the running responder listens (its `ready`): peers' probes
    /// are expected from then on (`rdma.peers`'s `not_reached`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since_unix: Option<u64>,
}

/// The whole record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeersRecord {
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` when written: a record from before
    /// this boot proves nothing about this one (the return-to-service gate).
    pub boot_id: String,
    /// The last rounds, oldest first (at most a few: verdicts need two).
    pub rounds: Vec<Round>,
    pub inbound: Vec<Inbound>,
    pub responders: Vec<Responder>,
    /// Why the peer source could not be read for the newest round (the round
    /// then ran on the last list read, if any): the record proves nothing
    /// about the fleet while it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
}
