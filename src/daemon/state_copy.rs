//! The agent's state (the ledger and the originals `revert` puts back) kept in
//! the daemon's memory too, so that a state directory removed while the daemon
//! runs (by hand, by a cleanup job) is written back rather than lost.

use std::sync::Mutex;

use crate::host::Host;
use crate::host::state::{AGENT_DIRS, Record, StateDir};
use crate::host::state_writer::{Access, StateWriter};

/// The files of the state directory as last seen, as records to write back.
#[derive(Default)]
pub struct StateCopy(Mutex<Vec<(Record, Access)>>);

/// What a write-back did.
pub enum WriteBack {
    Nothing,
    /// Written back where the daemon sees them: it goes on.
    Restored(String),
    /// Written back as the host sees them, but this process still holds the
    /// removed directory (a service's `StateDirectory=` is bound at start):
    /// only a restart of the service gives it the new one.
    RestartNeeded(String),
}

impl StateCopy {
    /// Remembers the state directory as it is now (after a cycle's writes).
    pub fn refresh(&self, host: &Host) {
        if host.state_dir() != StateDir::Present {
            return;
        }
        match host.state_files() {
            Ok(files) => {
                *self.0.lock().expect("state copy") = files
                    .into_iter()
                    .map(|(path, bytes, mode)| {
                        let r = Record {
                            path,
                            bytes,
                            note: None,
                        };
                        (r, Access::of_mode(mode))
                    })
                    .collect()
            }
            Err(e) => tracing::warn!("cannot keep a copy of the agent's state: {e}"),
        }
    }

    /// Writes the remembered files back when the state directory is gone.
    pub fn write_back(&self, host: &Host) -> WriteBack {
        let files = self.0.lock().expect("state copy").clone();
        let gone = host.state_dir();
        if files.is_empty() || gone == StateDir::Present {
            return WriteBack::Nothing;
        }
        let dir = AGENT_DIRS[0];
        let write = |target: &Host| {
            let w = StateWriter::new(target);
            files.iter().try_for_each(|(r, access)| w.keep(r, *access))
        };
        let what = format!(
            "the agent's state directory {dir} was removed while it ran; its {} file(s) (the ledger and the originals `revert` restores) were written back from memory",
            files.len()
        );
        // Where this process sees it, when it can write there; else (a service
        // whose state directory was bound at start, in a read-only tree) as PID 1
        // sees it, and only a restart of the service brings that one in.
        let own = match gone {
            StateDir::Deleted => None,
            _ => Some(write(host)),
        };
        match own {
            Some(Ok(())) => WriteBack::Restored(what),
            _ if host.is_live() => match write(&Host::new("/proc/1/root")) {
                Ok(()) => WriteBack::RestartNeeded(what),
                Err(e) => WriteBack::Restored(format!(
                    "the agent's state directory {dir} was removed while it ran, and writing it back failed: {e}; `revert` no longer knows the original bytes of the files the agent changed"
                )),
            },
            Some(Err(e)) => WriteBack::Restored(format!(
                "the agent's state directory {dir} was removed while it ran, and writing it back failed: {e}; `revert` no longer knows the original bytes of the files the agent changed"
            )),
            None => WriteBack::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_removed_state_directory_is_written_back_whole() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        let ledger = Path::new("/var/lib/rdma-node-agent/ledger.json");
        let original = Path::new("/var/lib/rdma-node-agent/originals/etc_x");
        let w = StateWriter::new(&host);
        let keep = |p: &Path, b: &[u8]| {
            let r = Record {
                path: p.into(),
                bytes: b.to_vec(),
                note: None,
            };
            w.keep(&r, Access::Private).unwrap()
        };
        keep(ledger, b"{}");
        keep(original, b"old");
        let copy = StateCopy::default();
        copy.refresh(&host);
        assert!(matches!(copy.write_back(&host), WriteBack::Nothing));
        std::fs::remove_dir_all(t.path().join("var/lib/rdma-node-agent")).unwrap();
        let WriteBack::Restored(what) = copy.write_back(&host) else {
            panic!("not written back");
        };
        assert!(what.contains("2 file(s)"), "{what}");
        assert_eq!(
            host.state_read(ledger).unwrap().as_deref(),
            Some(&b"{}"[..])
        );
        assert_eq!(
            host.state_read(original).unwrap().as_deref(),
            Some(&b"old"[..])
        );
    }
}
