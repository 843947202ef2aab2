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
