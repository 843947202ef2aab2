//! `rdma-node-agent gate reset`: the operator closes the gate (after a repair:
//! a cable, a NIC, a firmware flash). The request is a file the daemon watches
//! (`gate::RESET_FILE`, written through the state writer); the daemon's next
//! reconcile, which it starts at once, folds it into the gate's state, so the
//! gate's own state has one writer, the daemon.

use std::time::Duration;

use super::gate::{RESET_FILE, ResetRequest};
use crate::host::Host;
use crate::host::lock::{self, LockError};
use crate::host::state::Record;
use crate::host::state_writer::{Access, StateWriter};

/// Writes the request; says whether a daemon is there to act on it now.
pub fn reset(host: &Host, daemon_lock: &str, now: u64) -> Result<String, String> {
    let mut bytes = serde_json::to_vec(&ResetRequest {
        requested_unix: now,
    })
    .expect("request serializes");
    bytes.push(b'\n');
    let record = Record {
        path: RESET_FILE.into(),
        bytes,
        note: None,
    };
    StateWriter::new(host)
        .keep(&record, Access::Public)
        .map_err(|e| {
            format!("cannot leave the reset request for the daemon: {e} (run it as root)")
        })?;
    // The daemon holds its lock while it runs: taking it here means none does.
    let running = matches!(
        lock::acquire(host, std::path::Path::new(daemon_lock), Duration::ZERO),
        Err(LockError::Busy { .. })
    );
    Ok(if running {
        format!(
            "gate reset requested ({RESET_FILE}); the daemon closes the gate at the reconcile \
             this starts: `/readyz` answers 503 (`rdma-node-agent status` shows `rdma.gate` \
             failing) until the selftest and a round of peer probes pass again"
        )
    } else {
        format!(
            "gate reset requested ({RESET_FILE}), but no daemon runs now: the gate closes when \
             `systemctl start rdma-node-agent` starts it (before the next boot, which closes it anyway)"
        )
    })
}
