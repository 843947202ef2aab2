//! The files the agent writes whole (its LimitMEMLOCK drop-ins, its modprobe
//! options, its base spec, the NFD feature file): a link at
//! one of these paths is never followed, for reading or writing, whoever owns
//! it. Unlike containerd's config, its imports and templates (the admin's
//! files, edited in place, where `links`' trusted-link rule lets config
//! management keep them elsewhere), nobody has a reason to link the agent's
//! own file away; a link there, root's or not, would have the agent print the
//! target in a diff and replace its content. The link is refused, naming it.
//! Directory links above such a path stay under the trusted-link rule. The
//! agent's state has its own stricter rule (`state`).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use super::links::Resolved;
use super::{Host, HostError, Result, missing, normalize};

/// Which paths are the agent's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnPaths {
    files: Vec<PathBuf>,
    /// (a directory, a file name): that name in any `*.d` directory in it
    /// (a drop-in, whatever the unit).
    dropins: Vec<(PathBuf, OsString)>,
}

impl OwnPaths {
    /// `p` itself (host-absolute).
    pub fn file(mut self, p: impl Into<PathBuf>) -> Self {
        self.files.push(normalize(&p.into()));
        self
    }

    /// `name` in every `<dir>/*.d/`.
    pub fn dropin(mut self, dir: impl Into<PathBuf>, name: impl Into<OsString>) -> Self {
        self.dropins.push((normalize(&dir.into()), name.into()));
        self
    }

    pub fn contains(&self, p: &Path) -> bool {
        let p = normalize(p);
        if self.files.contains(&p) {
            return true;
        }
        let (Some(name), Some(d)) = (p.file_name(), p.parent()) else {
            return false;
        };
        let dotd = d
            .file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(".d"));
        dotd && self
            .dropins
            .iter()
            .any(|(dir, n)| n == name && d.parent() == Some(dir.as_path()))
    }
}

impl Host {
    /// With the paths the agent writes whole (see above).
    pub fn with_own_paths(mut self, own: OwnPaths) -> Self {
        self.own = std::sync::Arc::new(own);
        self
    }

    pub fn is_own(&self, p: &Path) -> bool {
        self.own.contains(p)
    }

    /// Where an own path's bytes are: the path itself (directory links above it
    /// by the trusted-link rule), refused when it is a link or not a regular file.
    pub(super) fn resolve_own(&self, p: &Path) -> Result<Resolved> {
        let real = self.resolve_entry(p)?;
        let shown = self.path(&real);
        let refuse = |what: String| HostError::OwnLink {
            path: self.path(p),
            what,
        };
        match fs::symlink_metadata(&shown) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&shown).unwrap_or_default();
                Err(refuse(format!(
                    "a symbolic link (to {}, owned by uid {})",
                    target.display(),
                    std::os::unix::fs::MetadataExt::uid(&m)
                )))
            }
            Ok(m) if !m.is_file() => Err(refuse("not a regular file".into())),
            Ok(_) => Ok(Resolved { real, link: None }),
            Err(e) if missing(&e) => Ok(Resolved { real, link: None }),
            Err(source) => Err(HostError::Read {
                path: shown,
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn own() -> OwnPaths {
        OwnPaths::default()
            .file("/etc/modprobe.d/rdma-node-agent.conf")
            .dropin("/etc/systemd/system", "50-rdma-node-agent.conf")
    }

    #[test]
    fn own_paths_are_the_files_and_the_dropin_in_any_unit() {
        let o = own();
        for p in [
            "/etc/modprobe.d/rdma-node-agent.conf",
            "/etc/modprobe.d/../modprobe.d/rdma-node-agent.conf",
            "/etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf",
            "/etc/systemd/system/k3s.service.d/50-rdma-node-agent.conf",
        ] {
            assert!(o.contains(Path::new(p)), "{p}");
        }
        for p in [
            "/etc/modprobe.d/other.conf",
            "/etc/systemd/system/50-rdma-node-agent.conf",
            "/etc/systemd/system/containerd.service.d/51.conf",
            "/etc/systemd/system/x/y.d/50-rdma-node-agent.conf",
            "/etc/containerd/config.toml",
        ] {
            assert!(!o.contains(Path::new(p)), "{p}");
        }
    }

    /// A root-owned link at an own path (what the trusted-link rule would
    /// follow) is refused for reading and writing, and the target is untouched.
    #[test]
    fn a_link_at_an_own_path_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("etc/modprobe.d")).unwrap();
        fs::write(
            t.path().join("etc/passwd.copy"),
            "root:x:0:0::/root:/bin/sh\n",
        )
        .unwrap();
        let link = t.path().join("etc/modprobe.d/rdma-node-agent.conf");
        symlink("/etc/passwd.copy", &link).unwrap();
        let p = Path::new("/etc/modprobe.d/rdma-node-agent.conf");
        let plain = Host::new(t.path());
        assert!(
            plain.read(p).unwrap().is_some(),
            "the trusted-link rule follows it"
        );
        let h = Host::new(t.path()).with_own_paths(own());
        let e = h.read(p).unwrap_err().to_string();
        assert!(
            e.contains("rdma-node-agent.conf")
                && e.contains("symbolic link (to /etc/passwd.copy")
                && !e.contains("root:x"),
            "{e}"
        );
        assert!(h.write_atomic(p, b"options x\n", 0o644).is_err());
        let own = crate::host::files::Ownership {
            mode: 0o644,
            uid: 0,
            gid: 0,
        };
        assert!(h.write_exact(p, b"options x\n", &own).is_err());
        assert!(h.read_trusted(p, "x").is_err());
        assert_eq!(
            fs::read_to_string(t.path().join("etc/passwd.copy")).unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
        assert!(link.is_symlink());
        // A FIFO there is refused too (a read would block).
        fs::remove_file(&link).unwrap();
        nix::unistd::mkfifo(&link, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(
            h.read(p)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        // A plain file is read and written as ever.
        fs::remove_file(&link).unwrap();
        h.write_atomic(p, b"options y\n", 0o644).unwrap();
        assert_eq!(h.read(p).unwrap().unwrap().bytes, b"options y\n");
        assert!(!link.is_symlink());
    }
}
