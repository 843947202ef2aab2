//! What a node exports so that a fleet can be compared (firmware, kernel,
//! memlock; its ports' rates, MTUs and fabric are `observe::Port`) and its link history, as typed observations for
//! the metrics; and the agent state a concern asks the daemon to keep every
//! cycle, whatever the mode (a history of the host, not a change to it).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::host::state::Record;

#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// One RDMA device; empty strings where the kernel gives nothing.
    Device {
        device: String,
        fw_ver: String,
        board_id: String,
        /// The kernel driver (`mlx5_core`), or the OFED version where MLNX_OFED/DOCA-OFED is installed.
        driver: String,
        node_guid: String,
    },
    /// The node's settings a fleet compares.
    Node {
        kernel: String,
        netns_mode: String,
        memlock_target: String,
        memlock_via: String,
        gpu_driver: String,
    },
    /// One port's link history, cumulative across agent restarts and reboots.
    Link {
        device: String,
        port: u32,
        flaps_total: u64,
        link_downed_total: u64,
        link_error_recovery_total: u64,
        /// Seconds since the epoch; `None` before the first flap.
        last_flap_unix: Option<u64>,
    },
    /// Agent state the daemon writes after every reconcile (report and enforce
    /// alike); `check` only reads it. `check` is the id of the check that says
    /// so when the write fails.
    Persist { record: Record, check: &'static str },
}

/// The fabric a port is on: ports that can reach each other share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// InfiniBand: the subnet prefix, the first 64 bits of the port's default GID.
    Ib(Ipv6Addr),
    /// RoCE: the IPv4 subnet of the netdev's connected route, and its prefix length.
    Roce(Ipv4Addr, u8),
}

impl Fabric {
    /// `ib:fe80:0000:0000:0000` (the GID's groups as sysfs prints them) or
    /// `roce:10.0.2.0/24`.
    pub fn label(&self) -> String {
        match self {
            Fabric::Ib(gid) => {
                let g = gid.segments();
                format!("ib:{:04x}:{:04x}:{:04x}:{:04x}", g[0], g[1], g[2], g[3])
            }
            Fabric::Roce(net, len) => format!("roce:{net}/{len}"),
        }
    }
}
