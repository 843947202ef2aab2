//! The one writer of the agent's own state: every file under the agent's
//! directories is written as a `Record` through a `StateWriter` (a concern's
//! history or record, the daemon's link-down tally, the ledger and its
//! originals, the daemon's write-back of a removed state directory). The host's
//! raw state writes are private to the host layer, so nothing writes agent
//! state beside this channel.
//!
//! ```compile_fail
//! # use rdma_node_agent::host::Host;
//! // Outside the host layer, state is written only as records.
//! Host::new("/").state_write(std::path::Path::new("/var/lib/rdma-node-agent/x"), b"", 0o644);
//! ```

use std::path::Path;

use super::state::Record;
use super::{Host, Result};

/// A record's permissions: who may read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// It describes the host (a history, a tally): `0644`.
    Public,
    /// The ledger, an original file's bytes, the sandbox record: `0600`.
    Private,
}

impl Access {
    fn mode(self) -> u32 {
        match self {
            Access::Public => 0o644,
            Access::Private => 0o600,
        }
    }

    /// A file found with `mode`: private unless group or others may read it.
    pub fn of_mode(mode: u32) -> Access {
        if mode & 0o077 == 0 {
            Access::Private
        } else {
            Access::Public
        }
    }
}

/// Writes the agent's state for one host (a tree under `--root`, the live
/// host, or PID 1's view of it).
#[derive(Clone, Copy)]
pub struct StateWriter<'a> {
    host: &'a Host,
}

impl<'a> StateWriter<'a> {
    pub fn new(host: &'a Host) -> Self {
        StateWriter { host }
    }

    /// Replaces the record's file whole (never through a link: see host::state).
    pub fn keep(&self, r: &Record, access: Access) -> Result<()> {
        self.host.state_write(&r.path, &r.bytes, access.mode())
    }

    pub fn remove(&self, p: &Path) -> Result<()> {
        self.host.state_remove(p)
    }

    /// Appends to a file kept under `max` bytes (the journal).
    pub fn append_bounded(&self, p: &Path, bytes: &[u8], max: u64) -> Result<()> {
        self.host.state_append_bounded(p, bytes, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn records_are_written_whole_with_their_access() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        let w = StateWriter::new(&host);
        let record = |name: &str, bytes: &[u8]| Record {
            path: Path::new("/var/lib/rdma-node-agent").join(name),
            bytes: bytes.to_vec(),
            note: None,
        };
        w.keep(&record("history.json", b"{}\n"), Access::Public)
            .unwrap();
        w.keep(&record("ledger.json", b"{\"files\":{}}\n"), Access::Private)
            .unwrap();
        let dir = t.path().join("var/lib/rdma-node-agent");
        let mode = |n: &str| std::fs::metadata(dir.join(n)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("history.json"), 0o644);
        assert_eq!(mode("ledger.json"), 0o600);
        assert_eq!(std::fs::read(dir.join("history.json")).unwrap(), b"{}\n");
        assert_eq!(Access::of_mode(0o600), Access::Private);
        assert_eq!(Access::of_mode(0o640), Access::Public);
        w.remove(&record("history.json", b"").path).unwrap();
        assert!(!dir.join("history.json").exists());
    }
}
