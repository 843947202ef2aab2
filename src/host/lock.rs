//! One agent at a time: `apply`, `revert` and the daemon's reconciles take an
//! exclusive lock, so a shell `apply` cannot race the daemon.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::host::Host;

pub const LOCK_PATH: &str = "/run/rdma-node-agent/agent.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open lock file: {0}")]
    Open(#[from] crate::host::HostError),
    #[error(
        "another rdma-node-agent (pid {holder}) is changing this host (lock {path}); try again when it is done"
    )]
    Busy { path: PathBuf, holder: String },
}

/// Held while it lives; the kernel releases it if the process dies.
pub struct Lock {
    _file: Flock<std::fs::File>,
}

/// Takes the named lock under the root, waiting up to `wait` for a holder to finish.
pub fn acquire(host: &Host, name: &Path, wait: Duration) -> Result<Lock, LockError> {
    let path = host.path(name);
    let deadline = Instant::now() + wait;
    loop {
        // Never through a link planted at the lock's path (see host::state).
        let file = host.state_lock_file(name)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut locked) => {
                // The holder's pid, for the message another instance prints.
                let _ = locked.set_len(0);
                let _ = locked.rewind();
                let _ = write!(locked, "{}", std::process::id());
                return Ok(Lock { _file: locked });
            }
            Err((mut file, _)) if Instant::now() >= deadline => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(LockError::Busy {
                    path,
                    holder: if holder.trim().is_empty() {
                        "?".into()
                    } else {
                        holder.trim().to_owned()
                    },
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_pid() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        let _held = acquire(&host, Path::new(LOCK_PATH), Duration::ZERO).unwrap();
        let e = acquire(&host, Path::new(LOCK_PATH), Duration::from_millis(200))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(_held);
        acquire(&host, Path::new(LOCK_PATH), Duration::ZERO).unwrap();
    }
}
