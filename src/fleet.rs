//! What a node exports so that a fleet can be compared (firmware, rates, MTUs,
//! fabric, kernel, memlock) and its link history, as typed observations for
//! the metrics; and the agent state a concern asks the daemon to keep every
//! cycle, whatever the mode (a history of the host, not a change to it).

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
    /// One RDMA port as a fleet compares it.
    Port {
        device: String,
        port: u32,
        link_layer: String,
        /// The number of sysfs `rate` in Gb/s, as the kernel prints it (`200`, `2.5`).
        rate: String,
        /// The width from `rate`'s parenthesis (`4X`).
        width: String,
        netdev: String,
        netdev_mtu: String,
        /// RoCE: the RDMA MTU the kernel derives from the netdev's (`iboe_get_mtu`); IB: empty (only the SM knows).
        port_mtu: String,
        /// What ports on one fabric share: `ib:<subnet prefix>` or `roce:<IPv4 subnet>`; empty when unknown.
        fabric: String,
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
