//! The runtime's sockets, checked before what answers on them is believed:
//! whoever can bind containerd's NRI socket could pose as containerd (be told
//! every container, and make `containerd.nri` say the plugin is registered),
//! and whoever answers on its CRI socket decides which base specs the agent
//! judges. A socket is trusted when the file is a socket owned by root and
//! writable by nobody else (its group only when that group is root, as
//! containerd makes its own 0660 root:root), every directory above it is owned
//! by root and writable by nobody else (a sticky one allowed), and the process
//! that listens is root by `SO_PEERCRED`. The agent's own user counts as root
//! for trees under `--root`, as in `trust`.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

fn trusted_uid(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Why the socket file `real` (a path on this machine) and its directories
/// cannot be trusted, if they cannot.
pub fn socket_file(real: &Path) -> Result<(), String> {
    let shown = real.display();
    let m = std::fs::metadata(real).map_err(|e| format!("cannot inspect {shown}: {e}"))?;
    if !m.file_type().is_socket() {
        return Err(format!("{shown} is not a socket"));
    }
    let (uid, gid, mode) = (m.uid(), m.gid(), m.mode() & 0o7777);
    let why = if !trusted_uid(uid) {
        Some("it is not owned by root")
    } else if mode & 0o002 != 0 {
        Some("it is writable by others")
    } else if mode & 0o020 != 0 && gid != 0 {
        Some("it is writable by a group other than root")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(format!(
            "refusing the socket {shown} (owned by uid {uid}, gid {gid}, mode {mode:04o}): {why}, so a process besides root could be listening there"
        ));
    }
    // The directories as the kernel resolves them: who could replace the socket.
    let canon = real
        .canonicalize()
        .map_err(|e| format!("cannot resolve {shown}: {e}"))?;
    for d in canon.ancestors().skip(1) {
        let m = std::fs::metadata(d)
            .map_err(|e| format!("cannot inspect {} above {shown}: {e}", d.display()))?;
        if let Some(why) = super::trust::untrusted(m.uid(), m.mode(), true) {
            return Err(format!(
                "refusing the socket {shown}: the directory {} above it (owned by uid {}, mode {:04o}) is {why}, so someone besides root could put another socket there",
                d.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// Why the process at the other end of a connected unix socket is not root.
pub fn peer(stream: &tokio::net::UnixStream, shown: &Path) -> Result<(), String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("cannot tell who listens on {}: {e}", shown.display()))?;
    if trusted_uid(cred.uid()) {
        return Ok(());
    }
    Err(format!(
        "refusing the socket {}: the process listening on it (pid {}) runs as uid {}, not root, so it is not containerd",
        shown.display(),
        cred.pid().map_or("?".into(), |p| p.to_string()),
        cred.uid()
    ))
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
