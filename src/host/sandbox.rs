//! The agent's own sandbox as the unit sets it up (`ProtectSystem=strict` with
//! `ReadWritePaths=`): which unit this process runs in, which of the
//! directories it must write are read-only to it, and which of those the host
//! itself (PID 1's mount namespace) can write.

use std::path::{Path, PathBuf};

use super::Host;

/// The systemd service this process runs in, from its own cgroup
/// (`0::/system.slice/rdma-node-agent.service`); `None` outside a service.
pub fn own_unit() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    unit_of_cgroup(&text)
}

fn unit_of_cgroup(text: &str) -> Option<String> {
    // cgroup v2's line (or v1's name=systemd line): the last .service on the path.
    let line = text
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| text.lines().find(|l| l.contains(":name=systemd:")))?;
    let path = line.splitn(3, ':').nth(2)?;
    path.split('/')
        .rev()
        .find(|c| c.ends_with(".service"))
        .map(str::to_owned)
}

/// Whether `dir` is under one of the unit's `ReadWritePaths=` values (their
/// `-`/`+` prefixes dropped): a directory the unit grants, so a restart of the
/// service makes it writable (if it exists by then).
pub fn granted(dir: &Path, read_write_paths: &[String]) -> bool {
    read_write_paths.iter().any(|p| {
        let p = p.trim_start_matches(['-', '+']);
        !p.is_empty() && dir.starts_with(p)
    })
}

impl Host {
    /// The directories that hold (or would hold) these managed files and that
    /// are read-only to this process: the file's own directory, or the nearest
    /// one that exists above it (where the missing ones would be made). Links
    /// are resolved as a write resolves them. Empty off the live host.
    pub fn read_only_dirs(&self, files: &[PathBuf]) -> Vec<PathBuf> {
        if !self.is_live() {
            return Vec::new();
        }
        let mut out: Vec<PathBuf> = Vec::new();
        for f in files {
            let Ok(r) = self.resolve_managed(f) else {
                continue;
            };
            let Some(dir) = r.real.ancestors().skip(1).find(|d| self.exists(d)) else {
                continue;
            };
            let read_only = nix::unistd::access(&self.path(dir), nix::unistd::AccessFlags::W_OK)
                == Err(nix::errno::Errno::EROFS);
            if read_only && !out.iter().any(|d| d == dir) {
                out.push(dir.to_owned());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_read_from_the_cgroup() {
        assert_eq!(
            unit_of_cgroup("0::/system.slice/rdma-node-agent.service\n").as_deref(),
            Some("rdma-node-agent.service")
        );
        assert_eq!(
            unit_of_cgroup("12:pids:/x\n1:name=systemd:/system.slice/a.service\n").as_deref(),
            Some("a.service")
        );
        assert_eq!(unit_of_cgroup("0::/user.slice/session-3.scope\n"), None);
    }

    #[test]
    fn a_directory_is_granted_under_a_read_write_path() {
        let rw = ["-/etc/containerd".to_owned(), "/run".to_owned()];
        assert!(granted(Path::new("/etc/containerd/rdma-node-agent"), &rw));
        assert!(granted(Path::new("/run/x"), &rw));
        assert!(!granted(Path::new("/etc/containerd-x"), &rw));
        assert!(!granted(Path::new("/var/snap/microk8s/1/args"), &rw));
    }
}
