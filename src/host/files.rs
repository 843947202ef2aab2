//! Reading and rewriting the host files the agent manages (containerd's config
//! and base specs, drop-ins, modprobe.d, NFD features): through a link only by
//! the rule in `links`, atomically, and keeping each file's mode, owner and group.
//!
//! A rewrite is a new inode (temp file + rename), so the owner and group are
//! given back to the temp file before the rename. Only when they are not the
//! agent's own (root:root, the common case, needs nothing): `fchown` where the
//! process may (a root shell); under the shipped unit, which has neither
//! `CAP_CHOWN` nor the chown system calls, a [`Chown`] helper asks systemd to
//! run `chown -h` on that temp file as a transient unit. Without either the
//! write fails and the file is left as it was: losing a group (`root:adm` 0640
//! → `root:root`) is never silent.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::service::SystemdError;
use super::{FileData, Host, HostError, Result, missing};

/// Changes the owner of a file this process created but may not chown itself.
pub trait Chown: Send + Sync {
    /// `chown -h uid:gid path` (never through a link); `Err` says why not.
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> std::result::Result<(), ChownError>;
}

/// The unit that runs the chown failed: where its output is.
#[derive(Debug, thiserror::Error)]
#[error("{source} (see `journalctl -u {unit}`)")]
pub struct ChownError {
    pub unit: String,
    #[source]
    pub source: SystemdError,
}

#[derive(Clone)]
pub(super) struct Helper(pub(super) std::sync::Arc<dyn Chown>);

impl std::fmt::Debug for Helper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chown helper")
    }
}

/// A file's permission bits, owner and group: what a rewrite keeps and `revert` restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ownership {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Ownership {
    fn of(meta: &fs::Metadata) -> Ownership {
        Ownership {
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }
}

impl Host {
    /// A managed file's bytes and metadata; `None` when absent. A link is read at
    /// its target when the link rule allows it, else this fails naming both
    /// (the target is never opened).
    pub fn read(&self, p: &Path) -> Result<Option<FileData>> {
        let r = self.resolve_managed(p)?;
        let real = self.path(&r.real);
        // O_NOFOLLOW: a link swapped in after the check is not followed either.
        let mut f = match OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&real)
        {
            Ok(f) => f,
            Err(e) if missing(&e) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
                return Err(HostError::UnsafeLink {
                    path: self.path(p),
                    target: r.real,
                    why: "which changed into a link while being read".into(),
                });
            }
            Err(source) => return Err(HostError::Read { path: real, source }),
        };
        let err = |source| HostError::Read {
            path: real.clone(),
            source,
        };
        let meta = f.metadata().map_err(err)?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        f.read_to_end(&mut bytes).map_err(err)?;
        let own = Ownership::of(&meta);
        Ok(Some(FileData {
            bytes,
            mode: own.mode,
            uid: own.uid,
            gid: own.gid,
            modified: meta.modified().ok(),
            link: r.link,
        }))
    }

    /// Any file's bytes, following links as the kernel does within the root (module
    /// files, which are parsed, never shown or written); `None` when absent.
    pub fn read_any(&self, p: &Path) -> Result<Option<Vec<u8>>> {
        let real = self.path(p);
        match fs::read(&real) {
            Ok(b) => Ok(Some(b)),
            Err(e) if missing(&e) => Ok(None),
            Err(source) => Err(HostError::Read { path: real, source }),
        }
    }

    /// Writes a managed file atomically: temp file in the same directory, fsync,
    /// rename, fsync dir, so a reader (or a crash) sees the old bytes or the new
    /// ones, never a mix. A link is written at its target (the link stays). An
    /// existing file keeps its mode, owner and group; a new one gets `mode`
    /// without the permission bits none of its siblings has, and the agent's owner.
    pub fn write_atomic(&self, p: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        let r = self.resolve_managed(p)?;
        let real = self.path(&r.real);
        let own = ownership_for(&real, mode)?;
        write_file(&real, bytes, &own, self.chown_helper.as_ref())
    }

    pub(super) fn chown_helper(&self) -> Option<&Helper> {
        self.chown_helper.as_ref()
    }

    /// Writes a file with exactly this mode, owner and group (what `revert` restores).
    pub fn write_exact(&self, p: &Path, bytes: &[u8], own: &Ownership) -> Result<()> {
        let r = self.resolve_managed(p)?;
        write_file(&self.path(&r.real), bytes, own, self.chown_helper.as_ref())
    }

    /// Puts a symbolic link back at `p` (atomically replacing whatever is there;
    /// directory links above it resolved by the link rule, inside the root).
    pub fn restore_link(&self, p: &Path, target: &Path) -> Result<()> {
        let real = self.path(&self.resolve_entry(p)?);
        let err = |source| HostError::Write {
            path: real.clone(),
            source,
        };
        if fs::read_link(&real).is_ok_and(|t| t == target) {
            return Ok(());
        }
        let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
        let tmp = temp_name(&real);
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).map_err(err)?;
        fs::rename(&tmp, &real)
            .and_then(|()| File::open(&dir)?.sync_all())
            .map_err(|e| {
                let _ = fs::remove_file(&tmp);
                err(e)
            })
    }

    /// Removes a file (a link itself, not its target; behind a directory link,
    /// the file where that link leads); already gone is not an error.
    pub fn remove(&self, p: &Path) -> Result<()> {
        let real = self.path(&self.resolve_entry(p)?);
        match fs::remove_file(&real) {
            Ok(()) => {
                if let Some(dir) = real.parent() {
                    let _ = File::open(dir).and_then(|d| d.sync_all());
                }
                Ok(())
            }
            Err(e) if missing(&e) => Ok(()),
            Err(source) => Err(HostError::Remove { path: real, source }),
        }
    }

    /// Removes a directory if it is empty (so `revert` leaves no trace of what it created).
    pub fn remove_dir_if_empty(&self, p: &Path) {
        if let Ok(real) = self.resolve_entry(p) {
            let _ = fs::remove_dir(self.path(&real));
        }
    }
}

/// What a rewrite of `real` keeps (its mode, owner and group), or what a new
/// file gets: `mode` without the bits none of its siblings has, the agent's owner.
pub(super) fn ownership_for(real: &Path, mode: u32) -> Result<Ownership> {
    match fs::symlink_metadata(real) {
        Ok(m) => Ok(Ownership::of(&m)),
        Err(e) if missing(&e) => Ok(Ownership {
            mode: mode & sibling_bits(real.parent()),
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }),
        Err(source) => Err(HostError::Read {
            path: real.to_owned(),
            source,
        }),
    }
}

/// The permission bits any regular file in `dir` has (all of them when it has none):
/// a new file is never more open than its siblings.
fn sibling_bits(dir: Option<&Path>) -> u32 {
    let Some(rd) = dir.and_then(|d| fs::read_dir(d).ok()) else {
        return 0o7777;
    };
    let modes: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.mode() & 0o777)
        .collect();
    if modes.is_empty() {
        0o7777
    } else {
        modes.iter().fold(0o7000, |acc, m| acc | m)
    }
}

pub(super) fn temp_name(real: &Path) -> PathBuf {
    let name = real.file_name().unwrap_or_default().to_string_lossy();
    real.with_file_name(format!(".{name}.rdma-node-agent.{}", std::process::id()))
}

/// The atomic write at a real path, with this ownership.
fn write_file(real: &Path, bytes: &[u8], own: &Ownership, helper: Option<&Helper>) -> Result<()> {
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    fs::create_dir_all(&dir).map_err(|source| HostError::Write {
        path: real.to_owned(),
        source,
    })?;
    let tmp = write_temp(real, bytes, own, helper)?;
    commit_temp(&tmp, real)
}

/// The first half of an atomic write: the complete file, owned as asked and
/// fsynced, at a temp name beside `real` (whose directory exists). Returns the
/// temp file's real path; on failure nothing is left behind.
pub(super) fn write_temp(
    real: &Path,
    bytes: &[u8],
    own: &Ownership,
    helper: Option<&Helper>,
) -> Result<PathBuf> {
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = real.file_name().unwrap_or_default().to_string_lossy();
    let prefix = format!(".{name}.rdma-node-agent.");
    // A run killed mid-write leaves its temp file: never the real one, but litter.
    if let Ok(entries) = fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let tmp = temp_name(real);
    let result = (|| {
        // Private until complete and owned right: O_EXCL|O_NOFOLLOW so nothing
        // planted at the temp name is followed or reused.
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The mode first, while the file is still the agent's (no CAP_FOWNER
        // needed); the umask never applies here.
        f.set_permissions(fs::Permissions::from_mode(own.mode))?;
        let meta = f.metadata()?;
        if (meta.uid(), meta.gid()) != (own.uid, own.gid) {
            match (
                std::os::unix::fs::fchown(&f, Some(own.uid), Some(own.gid)),
                helper,
            ) {
                (Ok(()), _) => {}
                (Err(e), Some(h)) if e.raw_os_error() == Some(nix::libc::EPERM) => {
                    h.0.chown(&tmp, own.uid, own.gid)
                        .map_err(|why| ownership_error(io::Error::other(why), own))?;
                    // What was renamed must be what was written, owned as asked.
                    let now = f.metadata()?;
                    if (now.uid(), now.gid()) != (own.uid, own.gid) {
                        return Err(ownership_error(
                            io::Error::other("the helper's chown did not take"),
                            own,
                        ));
                    }
                }
                (Err(e), _) => return Err(ownership_error(e, own)),
            }
            // A chown clears set-id bits; put them back (rare: needs CAP_FOWNER).
            if f.metadata()?.mode() & 0o7777 != own.mode {
                f.set_permissions(fs::Permissions::from_mode(own.mode))?;
            }
        }
        f.sync_all()
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(source) => {
            let _ = fs::remove_file(&tmp);
            Err(HostError::Write {
                path: real.to_owned(),
                source,
            })
        }
    }
}

/// The second half: the temp file renamed over `real`, and the directory fsynced.
pub(super) fn commit_temp(tmp: &Path, real: &Path) -> Result<()> {
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    fs::rename(tmp, real)
        .and_then(|()| File::open(&dir)?.sync_all())
        .map_err(|source| {
            let _ = fs::remove_file(tmp);
            HostError::Write {
                path: real.to_owned(),
                source,
            }
        })
}

fn ownership_error(e: io::Error, own: &Ownership) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "cannot give the rewritten file its owner and group back ({}:{}): {e}; for a file not owned by root:root the agent needs CAP_CHOWN, or (under its unit) systemd over D-Bus to run chown; the file was left unchanged",
            own.uid, own.gid
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn rewrites_keep_mode_owner_and_group() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        h.write_atomic(Path::new("/a/b.txt"), b"one", 0o640)
            .unwrap();
        let f = t.path().join("a/b.txt");
        // Tests run as root in CI; elsewhere the chown below is not allowed.
        let chowned = nix::unistd::chown(&f, Some(1.into()), Some(4.into())).is_ok();
        h.write_atomic(Path::new("/a/b.txt"), b"two", 0o600)
            .unwrap();
        let d = h.read(Path::new("/a/b.txt")).unwrap().unwrap();
        assert_eq!(d.bytes, b"two");
        assert_eq!(d.mode, 0o640, "an existing file keeps its mode");
        if chowned {
            assert_eq!((d.uid, d.gid), (1, 4));
        }
        assert_eq!(h.list_dir(Path::new("/a")).unwrap(), vec!["b.txt"]);
        let own = Ownership {
            mode: 0o604,
            uid: d.uid,
            gid: d.gid,
        };
        h.write_exact(Path::new("/a/b.txt"), b"3", &own).unwrap();
        assert_eq!(h.read(Path::new("/a/b.txt")).unwrap().unwrap().mode, 0o604);
    }

    #[test]
    fn new_files_are_never_more_open_than_their_siblings() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        h.write_atomic(Path::new("/d/new"), b"", 0o644).unwrap();
        assert_eq!(h.read(Path::new("/d/new")).unwrap().unwrap().mode, 0o644);
        let p = t.path().join("d/new");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        h.write_atomic(Path::new("/d/second"), b"", 0o644).unwrap();
        assert_eq!(h.read(Path::new("/d/second")).unwrap().unwrap().mode, 0o600);
    }

    #[test]
    fn a_link_is_written_at_its_target_and_stays_a_link() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        let dir = t.path().join("etc/containerd");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("real.toml"), "a = 1\n").unwrap();
        symlink("real.toml", dir.join("config.toml")).unwrap();
        let p = Path::new("/etc/containerd/config.toml");
        let d = h.read(p).unwrap().unwrap();
        assert_eq!(d.link, Some(PathBuf::from("real.toml")));
        h.write_atomic(p, b"a = 2\n", 0o644).unwrap();
        assert_eq!(
            fs::read_link(dir.join("config.toml")).unwrap(),
            Path::new("real.toml")
        );
        assert_eq!(fs::read(dir.join("real.toml")).unwrap(), b"a = 2\n");
        // A link replaced by a file is put back as the link.
        fs::remove_file(dir.join("config.toml")).unwrap();
        fs::write(dir.join("config.toml"), "copy").unwrap();
        h.restore_link(p, Path::new("real.toml")).unwrap();
        assert_eq!(
            fs::read_link(dir.join("config.toml")).unwrap(),
            Path::new("real.toml")
        );
    }

    /// An absolute directory link under `--root` leads inside the root for every
    /// write, removal and restored link (the kernel alone would leave it).
    #[test]
    fn an_absolute_directory_link_is_written_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        fs::create_dir_all(t.path().join("etc")).unwrap();
        let outside = format!("/opt/rdma-node-agent-test-{}", std::process::id());
        symlink(&outside, t.path().join("etc/containerd")).unwrap();
        fs::create_dir_all(t.path().join(&outside[1..])).unwrap();
        let p = Path::new("/etc/containerd/new/spec.json");
        h.write_atomic(p, b"{}", 0o644).unwrap();
        let inside = t.path().join(&outside[1..]).join("new/spec.json");
        assert_eq!(fs::read(&inside).unwrap(), b"{}");
        assert!(!Path::new(&outside).exists());
        assert_eq!(h.read(p).unwrap().unwrap().bytes, b"{}");
        symlink("spec.json", inside.with_file_name("link.json")).unwrap();
        fs::remove_file(inside.with_file_name("link.json")).unwrap();
        h.restore_link(
            Path::new("/etc/containerd/new/link.json"),
            Path::new("spec.json"),
        )
        .unwrap();
        assert!(inside.with_file_name("link.json").is_symlink());
        h.remove(Path::new("/etc/containerd/new/link.json"))
            .unwrap();
        assert!(inside.is_file(), "removing a link removed its target");
        h.remove(p).unwrap();
        assert!(!inside.exists());
        h.remove_dir_if_empty(Path::new("/etc/containerd/new"));
        assert!(!inside.parent().unwrap().exists());
        assert!(t.path().join("etc/containerd").is_symlink());
    }
}
