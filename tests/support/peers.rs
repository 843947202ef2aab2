//! What the peer-probe and gate tests share: the boot id they write under the
//! root, a file written under it, and the time now.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The boot id written to the tree's `proc/sys/kernel/random/boot_id`.
pub const BOOT: &str = "3f1c9a5e-6b7d-4c2e-9a10-1b2c3d4e5f60";

/// Writes `text` at `rel` under `root`, making its directories.
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One probe of rxe0/1 (10.0.0.1) to `peer` in the record's shape, stopped at
/// `stage` (`done`: answered both ways), started `age` seconds ago. Hand-made
/// to the record's schema (src/host/probe/record.rs), labelled so.
pub fn probe_json(peer: &str, stage: &str, age: u64) -> serde_json::Value {
    let done = stage == "done";
    serde_json::json!({
        "device": "rxe0", "port": 1, "src": "10.0.0.1",
        "peer": {"node": peer, "addr": format!("10.0.0.{}", peer.len()), "fabric": "roce:10.0.0.0/24", "rail": null},
        "stage": stage,
        "error": if done { "" } else { "RDMA_CM_EVENT_UNREACHABLE" },
        "reject_why": null,
        "rtt_us": if done { Some(35) } else { None },
        "path_mtu": if done { Some(1024) } else { None },
        "gid_index": 1, "gid_type": "RoCE v2",
        "answered_node": if done { Some(peer) } else { None },
        "answered_rail": null,
        "started_unix": now() - age,
    })
}
