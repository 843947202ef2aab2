//! A change written as a whole or not at all: every new file is first written
//! complete at a temp name beside its target (`stage`), and every file to be
//! removed has its directory proven writable (`probe_writable`); only when all
//! of them succeeded is anything renamed into place (`Staged::commit`). A
//! `Staged` dropped without its commit removes its temp file and the
//! directories it created, so a refused write leaves the node as it was.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::files::{commit_temp, ownership_for, temp_name, write_temp};
use super::{Host, HostError, Result};

/// A file written at a temp name beside its target, not yet in place.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    real: PathBuf,
    /// Real paths of the directories made to hold it, outermost first.
    made: Vec<PathBuf>,
    /// The same, host-absolute (what the ledger records for `revert`).
    created_dirs: Vec<PathBuf>,
    committed: bool,
}

impl Staged {
    /// The directories this write created (host-absolute, outermost first).
    pub fn created_dirs(&self) -> &[PathBuf] {
        &self.created_dirs
    }

    /// Renames the temp file over the target (the atomic step).
    pub fn commit(mut self) -> Result<()> {
        self.committed = true;
        commit_temp(&self.tmp, &self.real)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let _ = fs::remove_file(&self.tmp);
        for dir in self.made.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

impl Host {
    /// Writes `bytes` for `p` completely at a temp name beside where `p` really
    /// is (links resolved as `write_atomic` does), with the mode, owner and
    /// group the write will have; creates missing directories. Nothing is in
    /// place until `commit`.
    pub fn stage(&self, p: &Path, bytes: &[u8], mode: u32) -> Result<Staged> {
        let r = self.resolve_managed(p)?;
        let real = self.path(&r.real);
        let mut created_dirs: Vec<PathBuf> = r
            .real
            .ancestors()
            .skip(1)
            .take_while(|d| !self.exists(d))
            .map(Path::to_path_buf)
            .collect();
        created_dirs.reverse();
        let mut staged = Staged {
            tmp: temp_name(&real),
            real: real.clone(),
            made: Vec::new(),
            created_dirs: Vec::new(),
            committed: false,
        };
        for d in &created_dirs {
            let at = self.path(d);
            fs::create_dir(&at).map_err(|source| HostError::Write {
                path: real.clone(),
                source,
            })?;
            staged.made.push(at);
            staged.created_dirs.push(d.clone());
        }
        let own = ownership_for(&real, mode)?;
        staged.tmp = write_temp(&real, bytes, &own, self.chown_helper())?;
        Ok(staged)
    }

    /// Proves that the entry `p` names can be removed: a temp file is created
    /// in its directory and removed again. Nothing to prove when it is absent.
    pub fn probe_writable(&self, p: &Path) -> Result<()> {
        let real = self.path(&self.resolve_entry(p)?);
        if real.symlink_metadata().is_err() {
            return Ok(());
        }
        let tmp = temp_name(&real);
        let _ = fs::remove_file(&tmp);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)
            .and_then(|_| fs::remove_file(&tmp))
            .map_err(|source| HostError::Write { path: real, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_file_is_in_place_only_once_committed() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        h.write_atomic(Path::new("/etc/a"), b"old", 0o640).unwrap();
        let s = h.stage(Path::new("/etc/a"), b"new", 0o600).unwrap();
        assert_eq!(fs::read(t.path().join("etc/a")).unwrap(), b"old");
        assert_eq!(h.list_dir(Path::new("/etc")).unwrap().len(), 2);
        s.commit().unwrap();
        let d = h.read(Path::new("/etc/a")).unwrap().unwrap();
        assert_eq!((d.bytes.as_slice(), d.mode), (&b"new"[..], 0o640));
        assert_eq!(h.list_dir(Path::new("/etc")).unwrap(), vec!["a"]);
    }

    #[test]
    fn a_dropped_stage_leaves_nothing_behind() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        fs::create_dir_all(t.path().join("etc")).unwrap();
        let s = h
            .stage(Path::new("/etc/new/deeper/spec.json"), b"{}", 0o644)
            .unwrap();
        assert_eq!(
            s.created_dirs(),
            [PathBuf::from("/etc/new"), PathBuf::from("/etc/new/deeper")]
        );
        drop(s);
        assert!(h.list_dir(Path::new("/etc")).unwrap().is_empty());
    }
}
