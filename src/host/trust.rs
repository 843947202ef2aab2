//! Files that decide what the agent writes must be as trusted as the agent
//! itself, as sshd's StrictModes demands of its keys: owned by root (or the
//! user the agent runs as, for `--root` trees) and writable by nobody else,
//! in a directory chain nobody else can write either.
//!
//! Those files: the agent's own config (the memlock every pod gets), containerd's
//! config and its imports and k3s/rke2 template (which files the agent edits and
//! which base spec paths it writes), the base specs (every pod's spec), and the
//! agent's state (the ledger decides what `revert` writes back).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{FileData, Host, HostError, Result};

/// Owners a trusted file may have: root, and the agent's own user.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Why a file or directory with this owner and mode cannot be trusted.
pub fn untrusted(uid: u32, mode: u32, is_dir: bool) -> Option<&'static str> {
    if !trusted_owner(uid) {
        return Some("not owned by root");
    }
    // A sticky directory (like /tmp) lets others add files but not replace ours.
    if mode & 0o022 != 0 && !(is_dir && mode & 0o1000 != 0) {
        return Some(if mode & 0o002 != 0 {
            "writable by others"
        } else {
            "writable by its group"
        });
    }
    None
}

impl Host {
    /// Refuses `real` (a path under the root) and its directories up to the root
    /// when someone besides root could have written them.
    pub fn check_trusted(&self, shown: &Path, meta: &Metadata, what: &str) -> Result<()> {
        let refuse = |path: &Path, m: &Metadata, why: &str| HostError::Untrusted {
            path: path.to_owned(),
            what: what.to_owned(),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            why: why.to_owned(),
        };
        if let Some(why) = untrusted(meta.uid(), meta.mode(), meta.is_dir()) {
            return Err(refuse(shown, meta, why));
        }
        let mut dir = shown.parent();
        while let Some(d) = dir {
            if !d.starts_with(&self.root) {
                break;
            }
            // A directory that cannot be inspected cannot be trusted.
            let m = std::fs::metadata(d).map_err(|source| HostError::Read {
                path: d.to_owned(),
                source: std::io::Error::new(
                    source.kind(),
                    format!("{source}; cannot tell who may write {what} in it"),
                ),
            })?;
            if let Some(why) = untrusted(m.uid(), m.mode(), true) {
                return Err(refuse(d, &m, why));
            }
            if d == self.root {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// `read`, for a file that decides what the agent writes: refused unless trusted.
    pub fn read_trusted(&self, p: &Path, what: &str) -> Result<Option<FileData>> {
        let Some(data) = self.read(p)? else {
            return Ok(None);
        };
        let real = self.path(&self.resolve_managed(p)?.real);
        let meta = std::fs::metadata(&real).map_err(|source| HostError::Read {
            path: real.clone(),
            source,
        })?;
        // The bytes read and the metadata checked must be the same file.
        if (meta.uid(), meta.gid(), meta.mode() & 0o7777) != (data.uid, data.gid, data.mode) {
            return Err(HostError::Read {
                path: real,
                source: std::io::Error::other("changed while being read; try again"),
            });
        }
        self.check_trusted(&real, &meta, what)?;
        Ok(Some(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn group_or_world_writable_files_and_dirs_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        fs::create_dir_all(t.path().join("etc/a")).unwrap();
        let f = t.path().join("etc/a/config.toml");
        fs::write(&f, "x").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        let p = Path::new("/etc/a/config.toml");
        assert!(h.read_trusted(p, "the agent config").unwrap().is_some());
        fs::set_permissions(&f, fs::Permissions::from_mode(0o666)).unwrap();
        let e = h
            .read_trusted(p, "the agent config")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("writable by others") && e.contains("0666"),
            "{e}"
        );
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(t.path().join("etc/a"), fs::Permissions::from_mode(0o775)).unwrap();
        let e = h
            .read_trusted(p, "the agent config")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("etc/a (the agent config)") && e.contains("writable by its group"),
            "{e}"
        );
        assert!(untrusted(0, 0o1777, true).is_none(), "sticky dirs are fine");
        assert!(untrusted(0, 0o1777, false).is_some());
        assert_eq!(untrusted(54321, 0o644, false), Some("not owned by root"));
    }

    /// A directory on the chain whose metadata cannot be read is not trusted.
    #[test]
    fn an_ancestor_that_cannot_be_inspected_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        fs::create_dir_all(t.path().join("etc/a")).unwrap();
        let f = t.path().join("etc/a/config.toml");
        fs::write(&f, "x").unwrap();
        let meta = fs::metadata(&f).unwrap();
        // The file's directory is gone (replaced) between the read and the check.
        fs::rename(t.path().join("etc/a"), t.path().join("etc/b")).unwrap();
        let e = h
            .check_trusted(&f, &meta, "the agent config")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("etc/a") && e.contains("cannot tell who may write"),
            "{e}"
        );
    }
}
