//! The agent's own files (ledger, originals, journal, kernel record, locks)
//! under `/var/lib/rdma-node-agent` and `/run/rdma-node-agent`. Nothing in these
//! directories is followed through a symbolic link: each directory from the
//! agent's own down is opened with `O_NOFOLLOW | O_DIRECTORY`, files with
//! `O_NOFOLLOW` relative to it, and replaced by `renameat` (which replaces a
//! planted link instead of writing through it). Works on every kernel the agent
//! supports (no openat2 needed).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{OFlag, open, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// The most the agent reads of one of its own state files (the ledger, the
/// originals it keeps, kernel.json, link history): far above what it writes.
pub const STATE_MAX: u64 = 64 << 20;

use super::{Host, HostError, Result};

/// A file of the agent's own state a concern asks kept (a history, a record),
/// written by the executor or the daemon's state writer; never reverted: it
/// describes the host, it is not a change to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    /// Said to the operator when recorded.
    pub note: Option<String>,
}

/// The agent's own state: its ledger, journal, records and caches.
pub const STATE_DIR: &str = "/var/lib/rdma-node-agent";

/// See `Host::state_dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateDir {
    Present,
    Missing,
    Deleted,
}

/// The directories that hold only the agent's own files.
pub const AGENT_DIRS: &[&str] = &["/var/lib/rdma-node-agent", "/run/rdma-node-agent"];

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

impl Host {
    /// Opens the directory holding agent file `p` without following any link from
    /// the agent's own directory down; `None` when it does not exist and `create` is false.
    fn agent_dir(&self, p: &Path, create: bool) -> Result<Option<(OwnedFd, String)>> {
        let (top, rest) = AGENT_DIRS
            .iter()
            .find_map(|d| p.strip_prefix(d).ok().map(|r| (Path::new(d), r)))
            .unwrap_or_else(|| panic!("{} is not under an agent directory", p.display()));
        let mut names: Vec<String> = vec![top.file_name().unwrap().to_string_lossy().into()];
        names.extend(rest.components().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        }));
        let file = names.pop().expect("a file name");
        let parent = self.path(top.parent().unwrap_or(Path::new("/")));
        let err = |path: PathBuf, e: Errno| HostError::Write {
            path,
            source: io(e),
        };
        if create {
            std::fs::create_dir_all(&parent).map_err(|source| HostError::Write {
                path: parent.clone(),
                source,
            })?;
        }
        let mut fd = match open(
            &parent,
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(e) => return Err(err(parent, e)),
        };
        let mut shown = parent;
        for name in names {
            shown.push(&name);
            let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let next = match openat(&fd, name.as_str(), flags, Mode::empty()) {
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o700)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(err(shown, e)),
                    }
                    openat(&fd, name.as_str(), flags, Mode::empty())
                }
                other => other,
            };
            fd = match next {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(HostError::StateLink { path: shown });
                }
                Err(e) => return Err(err(shown, e)),
            };
            trusted(&fd, &shown, "the agent's state directory")?;
        }
        Ok(Some((fd, file)))
    }

    fn open_state(&self, p: &Path, flags: OFlag, mode: u32, create: bool) -> Result<Option<File>> {
        let Some((dir, name)) = self.agent_dir(p, create)? else {
            return Ok(None);
        };
        match openat(
            &dir,
            name.as_str(),
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Errno::ENOENT) if !create => Ok(None),
            Err(Errno::ELOOP) => Err(HostError::StateLink { path: self.path(p) }),
            Err(e) => Err(HostError::Write {
                path: self.path(p),
                source: io(e),
            }),
        }
    }

    /// Every file under the agent's state directory, with its bytes and mode:
    /// the daemon keeps this copy so that a state directory removed while it
    /// runs (by hand, by a cleanup job) can be written back (`revert` needs it).
    pub fn state_files(&self) -> Result<Vec<(PathBuf, Vec<u8>, u32)>> {
        let mut out = Vec::new();
        let mut dirs = vec![PathBuf::from(AGENT_DIRS[0])];
        while let Some(d) = dirs.pop() {
            for name in self.list_dir(&d)? {
                let p = d.join(&name);
                let Ok(meta) = std::fs::symlink_metadata(self.path(&p)) else {
                    continue;
                };
                if meta.is_dir() {
                    dirs.push(p);
                } else if meta.is_file() && !name.contains(".rdma-node-agent.") {
                    if let Some(bytes) = self.state_read(&p)? {
                        out.push((p, bytes, meta.mode() & 0o7777));
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Whether the agent's state directory is there: absent, or removed while
    /// this process holds it bound (a service's `StateDirectory=`: the path still
    /// opens, but names a directory no longer linked anywhere).
    pub fn state_dir(&self) -> StateDir {
        match std::fs::metadata(self.path(Path::new(AGENT_DIRS[0]))) {
            Err(_) => StateDir::Missing,
            Ok(m) if m.nlink() == 0 => StateDir::Deleted,
            Ok(_) => StateDir::Present,
        }
    }

    /// An agent file's bytes; `None` when absent. Read up to [`STATE_MAX`]:
    /// a larger one is refused, never buffered whole.
    pub fn state_read(&self, p: &Path) -> Result<Option<Vec<u8>>> {
        let Some(mut f) = self.open_state(p, OFlag::O_RDONLY, 0, false)? else {
            return Ok(None);
        };
        // The ledger decides what `revert` writes back.
        trusted(&f, &self.path(p), "the agent's state")?;
        let mut bytes = Vec::new();
        (&mut f)
            .take(STATE_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| HostError::Read {
                path: self.path(p),
                source,
            })?;
        if bytes.len() as u64 > STATE_MAX {
            return Err(HostError::Read {
                path: self.path(p),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "larger than {} MiB, which no file the agent writes reaches: move it aside and run `rdma-node-agent apply` again",
                        STATE_MAX >> 20
                    ),
                ),
            });
        }
        Ok(Some(bytes))
    }

    /// Replaces an agent file atomically (mode 0600, or 0644 for what other tools read).
    pub(in crate::host) fn state_write(&self, p: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        let (dir, name) = self.agent_dir(p, true)?.expect("created");
        let tmp = format!(".{name}.rdma-node-agent.{}", std::process::id());
        let err = |source| HostError::Write {
            path: self.path(p),
            source,
        };
        let _ = unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        let fd = openat(
            &dir,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| err(io(e)))?;
        let mut f = File::from(fd);
        let result = f
            .write_all(bytes)
            .and_then(|()| {
                nix::sys::stat::fchmod(f.as_fd(), Mode::from_bits_truncate(mode)).map_err(io)
            })
            .and_then(|()| f.sync_all())
            .and_then(|()| renameat(&dir, tmp.as_str(), &dir, name.as_str()).map_err(io))
            .and_then(|()| nix::unistd::fsync(&dir).map_err(io));
        if result.is_err() {
            let _ = unlinkat(&dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        result.map_err(err)
    }

    /// Appends to an agent log (the journal): one write, then fsync.
    pub fn state_append(&self, p: &Path, bytes: &[u8]) -> Result<()> {
        let mut f = self
            .open_state(
                p,
                OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
                0o600,
                true,
            )?
            .expect("created");
        f.write_all(bytes)
            .and_then(|()| f.sync_data())
            .map_err(|source| HostError::Write {
                path: self.path(p),
                source,
            })
    }

    /// `state_append`, first moving the file to `<name>.1` (replacing the one
    /// before) once it holds `max` bytes: a history that stays bounded on disk
    /// and in the daemon's copy of the state (`state_files`). A link planted
    /// there is not moved; the append refuses it.
    pub(in crate::host) fn state_append_bounded(
        &self,
        p: &Path,
        bytes: &[u8],
        max: u64,
    ) -> Result<()> {
        if let Some((dir, name)) = self.agent_dir(p, true)? {
            let full = fstatat(&dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
                SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                    && st.st_size as u64 >= max
            });
            if full {
                renameat(&dir, name.as_str(), &dir, format!("{name}.1").as_str())
                    .and_then(|()| nix::unistd::fsync(&dir))
                    .map_err(|e| HostError::Write {
                        path: self.path(p),
                        source: io(e),
                    })?;
            }
        }
        self.state_append(p, bytes)
    }

    /// Opens (creating) an agent lock file for reading and writing.
    pub fn state_lock_file(&self, p: &Path) -> Result<File> {
        Ok(self
            .open_state(p, OFlag::O_RDWR | OFlag::O_CREAT, 0o600, true)?
            .expect("created"))
    }

    /// Removes an agent file (a link planted there is removed, never followed).
    pub(in crate::host) fn state_remove(&self, p: &Path) -> Result<()> {
        let Some((dir, name)) = self.agent_dir(p, false)? else {
            return Ok(());
        };
        match unlinkat(&dir, name.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {
                nix::unistd::fsync(&dir).map_err(|e| HostError::Remove {
                    path: self.path(p),
                    source: io(e),
                })
            }
            Err(e) => Err(HostError::Remove {
                path: self.path(p),
                source: io(e),
            }),
        }
    }

    /// Removes an agent directory when it is empty.
    pub fn state_remove_dir_if_empty(&self, p: &Path) {
        if let Ok(Some((dir, name))) = self.agent_dir(p, false) {
            let _ = unlinkat(&dir, name.as_str(), UnlinkatFlags::RemoveDir);
        }
    }
}

/// Who a file is, for caching what a slow tool said of it: writing it, renaming
/// another over it or changing its metadata all move its ctime, which no
/// process can set back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Host {
    /// The stamp of a host file (its link's target); `None` when it cannot be read.
    pub fn stamp(&self, p: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(self.path(p)).ok()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        })
    }
}

/// Refuses an agent directory or file someone besides root could have written.
fn trusted(fd: &impl AsFd, shown: &Path, what: &str) -> Result<()> {
    let st = nix::sys::stat::fstat(fd).map_err(|e| HostError::Read {
        path: shown.to_owned(),
        source: io(e),
    })?;
    let is_dir = st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR;
    match super::trust::untrusted(st.st_uid, st.st_mode, is_dir) {
        None => Ok(()),
        Some(why) => Err(HostError::Untrusted {
            path: shown.to_owned(),
            what: what.to_owned(),
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode & 0o7777,
            why: why.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn state_files_round_trip() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        let p = Path::new("/var/lib/rdma-node-agent/originals/x");
        assert_eq!(h.state_read(p).unwrap(), None);
        h.state_write(p, b"one", 0o600).unwrap();
        h.state_write(p, b"two", 0o600).unwrap();
        assert_eq!(h.state_read(p).unwrap().unwrap(), b"two");
        let j = Path::new("/var/lib/rdma-node-agent/journal.jsonl");
        h.state_append(j, b"a\n").unwrap();
        h.state_append(j, b"b\n").unwrap();
        assert_eq!(h.state_read(j).unwrap().unwrap(), b"a\nb\n");
        h.state_remove(p).unwrap();
        h.state_remove_dir_if_empty(Path::new("/var/lib/rdma-node-agent/originals"));
        assert!(!t.path().join("var/lib/rdma-node-agent/originals").exists());
    }

    #[test]
    fn a_state_file_past_the_bound_is_refused_not_buffered() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        let p = Path::new("/var/lib/rdma-node-agent/ledger.json");
        h.state_write(p, b"{}", 0o600).unwrap();
        // Sparse: no disk, and no memory unless the read buffers it whole.
        let f = fs::OpenOptions::new()
            .write(true)
            .open(t.path().join("var/lib/rdma-node-agent/ledger.json"))
            .unwrap();
        f.set_len(STATE_MAX + 1).unwrap();
        let e = h.state_read(p).unwrap_err().to_string();
        assert!(
            e.contains("ledger.json") && e.contains("larger than 64 MiB"),
            "{e}"
        );
        f.set_len(STATE_MAX).unwrap();
        assert_eq!(h.state_read(p).unwrap().unwrap().len() as u64, STATE_MAX);
    }

    #[test]
    fn a_bounded_history_keeps_one_previous_file() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        let j = Path::new("/var/lib/rdma-node-agent/journal.jsonl");
        let old = Path::new("/var/lib/rdma-node-agent/journal.jsonl.1");
        for line in [&b"aaaa\n"[..], b"bbbb\n", b"cccc\n", b"dddd\n", b"eeee\n"] {
            h.state_append_bounded(j, line, 10).unwrap();
        }
        // Moved aside at 10 bytes (two lines), the one before replaced.
        assert_eq!(h.state_read(j).unwrap().unwrap(), b"eeee\n");
        assert_eq!(h.state_read(old).unwrap().unwrap(), b"cccc\ndddd\n");
        let mode = fs::metadata(t.path().join("var/lib/rdma-node-agent/journal.jsonl"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A link planted as the history is neither moved nor followed.
        let state = t.path().join("var/lib/rdma-node-agent");
        fs::remove_file(state.join("journal.jsonl")).unwrap();
        fs::write(t.path().join("victim"), "0123456789abcdef").unwrap();
        symlink(t.path().join("victim"), state.join("journal.jsonl")).unwrap();
        let e = h.state_append_bounded(j, b"x\n", 10).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(h.state_read(old).unwrap().unwrap(), b"cccc\ndddd\n");
        assert_eq!(
            fs::read(t.path().join("victim")).unwrap(),
            b"0123456789abcdef"
        );
    }

    #[test]
    fn links_in_the_state_directories_are_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        let state = t.path().join("var/lib/rdma-node-agent");
        fs::create_dir_all(&state).unwrap();
        fs::write(t.path().join("victim"), "keep").unwrap();
        symlink(t.path().join("victim"), state.join("journal.jsonl")).unwrap();
        let e = h
            .state_append(Path::new("/var/lib/rdma-node-agent/journal.jsonl"), b"x\n")
            .unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(
            h.state_read(Path::new("/var/lib/rdma-node-agent/journal.jsonl"))
                .is_err()
        );
        // An atomic replace replaces the link itself.
        symlink(t.path().join("victim"), state.join("ledger.json")).unwrap();
        h.state_write(
            Path::new("/var/lib/rdma-node-agent/ledger.json"),
            b"{}",
            0o600,
        )
        .unwrap();
        assert!(!state.join("ledger.json").is_symlink());
        // A linked directory is refused too.
        fs::create_dir_all(t.path().join("elsewhere")).unwrap();
        symlink(t.path().join("elsewhere"), state.join("originals")).unwrap();
        let e = h
            .state_write(
                Path::new("/var/lib/rdma-node-agent/originals/x"),
                b"x",
                0o600,
            )
            .unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read(t.path().join("victim")).unwrap(), b"keep");
        assert_eq!(fs::read_dir(t.path().join("elsewhere")).unwrap().count(), 0);
    }
}
