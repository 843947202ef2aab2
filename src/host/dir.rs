//! A directory opened once, for reading many files under it (a sysfs device's
//! attributes) relative to its descriptor instead of re-walking a long path
//! under the root for each: the 1024-device inventory's cost is system calls
//! and path walks.
//!
//! The guarantees are the host layer's: the directory itself is reached with
//! `openat2(RESOLVE_IN_ROOT)` (links followed as if the root were `/`), and a
//! file under it with `RESOLVE_BENEATH`, one beside it (`../name`, read from a
//! device's `ports/`) with `RESOLVE_NO_SYMLINKS`; a path that would leave the
//! directory through a link (`EXDEV`, `ELOOP`), or a kernel without `openat2`,
//! takes the path-based `Host` call instead, so every answer is the one `Host`
//! gives.
//! A `Dir` with a descriptor always knows its real path (no link in it): from
//! `/proc/self/fd` after `RESOLVE_IN_ROOT`, or checked by `RESOLVE_NO_SYMLINKS`
//! (`open_link`), so `..` from it and joins onto it mean what they say.

use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, ResolveFlags, openat2, statat};
use rustix::io::Errno;

use super::{Host, HostError, Result, read_text};

/// A directory under the root: its real host-absolute path (links resolved)
/// and, when the kernel has `openat2`, a descriptor the reads under it start from.
#[derive(Debug)]
pub struct Dir<'h> {
    host: &'h Host,
    path: PathBuf,
    fd: Option<OwnedFd>,
    /// Opened for reading (not `O_PATH`): `list("")` reads it directly.
    readable: bool,
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

impl Host {
    /// The directory `p` resolves to inside the root. `Ok(Err(target))` when
    /// the resolved path is not a directory (absent: a dangling link).
    pub fn open_dir(&self, p: &Path) -> Result<std::result::Result<Dir<'_>, PathBuf>> {
        super::walks::record("open", || self.path(p));
        if let Some((fd, path)) =
            self.open_in_root(p, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC)
        {
            return Ok(Ok(Dir {
                host: self,
                path,
                fd: Some(fd),
                readable: false,
            }));
        }
        let path = self.resolve(p)?;
        if !self.is_dir(&path) {
            return Ok(Err(path));
        }
        Ok(Ok(Dir {
            host: self,
            path,
            fd: None,
            readable: false,
        }))
    }

    /// The directory at `p`, a host-absolute path known to hold no link (a
    /// resolved sysfs device path): one `openat2(RESOLVE_NO_SYMLINKS)`, no
    /// `/proc` lookup. `None` when that fails (a link on the way, no openat2):
    /// ask `open_dir`.
    pub fn open_real_dir(&self, p: &Path) -> Option<Dir<'_>> {
        let (root, _) = self.root_dir()?;
        let rel = p.strip_prefix("/").ok()?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let no_links = ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS;
        let fd = openat2(root, rel, flags, Mode::empty(), no_links).ok()?;
        Some(Dir {
            host: self,
            path: p.to_owned(),
            fd: Some(fd),
            readable: false,
        })
    }

    /// The directory `name` in the one `p` resolves to, when it is a directory
    /// there and not a link (so its parent is `p` resolved): one open where
    /// `open_dir` of both would take two. `None` otherwise: ask `open_dir`.
    pub fn open_subdir(&self, p: &Path, name: &str) -> Option<Dir<'_>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (fd, path) = self.open_in_root(&p.join(name), flags)?;
        Some(Dir {
            host: self,
            path,
            fd: Some(fd),
            readable: true,
        })
    }
}

impl<'h> Dir<'h> {
    /// The directory the link `name` here points to, or with `sub` its
    /// directory `sub` (not a link itself), when the link is shaped as sysfs
    /// links are (`../` steps, then names) and nothing on the way is a link:
    /// read, then opened by its lexical target with `RESOLVE_NO_SYMLINKS`, two
    /// cheap calls where `Host::open_dir` resolves from the root and asks
    /// `/proc` where it got. `None` otherwise: ask `Host::open_dir`.
    pub fn open_link(&self, name: &str, sub: Option<&str>) -> Option<Dir<'h>> {
        if !plain(name) {
            return None;
        }
        self.follow(name, &self.path, sub)
    }

    /// `open_link` of the link `name` beside this directory (in its parent):
    /// `../name` read from here, so the parent needs no descriptor of its own.
    pub fn open_link_beside(&self, name: &str, sub: Option<&str>) -> Option<Dir<'h>> {
        if !plain(name) {
            return None;
        }
        let parent = self.path.parent()?;
        self.follow(&format!("../{name}"), parent, sub)
    }

    /// The link `link` (relative to this directory's descriptor) that sits in
    /// `base` (a real path), opened by its lexical target.
    fn follow(&self, link: &str, base: &Path, sub: Option<&str>) -> Option<Dir<'h>> {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let fd = self.fd.as_ref()?;
        let target = rustix::fs::readlinkat(fd, link, Vec::new()).ok()?;
        // `base` is real (no link in it): each `..` is its parent.
        let mut path = base.to_owned();
        let mut climbing = true;
        for c in target.to_bytes().split(|&b| b == b'/') {
            match c {
                b".." if climbing => {
                    if !path.pop() {
                        return None;
                    }
                }
                b"" | b"." | b".." => return None,
                n => {
                    climbing = false;
                    path.push(OsStr::from_bytes(n));
                }
            }
        }
        if climbing {
            return None;
        }
        if let Some(sub) = sub {
            if !plain(sub) {
                return None;
            }
            path.push(sub);
        }
        let (root, _) = self.host.root_dir()?;
        let rel = path.strip_prefix("/").ok()?;
        let flags = match sub {
            Some(_) => OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            None => OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        };
        let no_links = ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS;
        let fd = openat2(root, rel, flags, Mode::empty(), no_links).ok()?;
        Some(Dir {
            host: self.host,
            path,
            fd: Some(fd),
            readable: sub.is_some(),
        })
    }

    /// The real host-absolute path (links resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` under this directory without leaving it; `None` when the
    /// path-based call must answer (no descriptor, or a link out of it).
    fn open(&self, rel: &str, flags: OFlags) -> Option<std::result::Result<OwnedFd, Errno>> {
        let fd = self.fd.as_ref()?;
        match openat2(fd, rel, flags | OFlags::CLOEXEC, Mode::empty(), BENEATH) {
            // Out of the directory, no openat2, a rename race, a magic link or a
            // loop: the path-based call answers (and says ELOOP itself for a loop).
            Err(Errno::XDEV | Errno::NOSYS | Errno::AGAIN | Errno::LOOP) => None,
            r => Some(r),
        }
    }

    fn real(&self, rel: &str) -> PathBuf {
        self.host.path(&self.path.join(rel))
    }

    /// `Host::read_string` of `rel` under this directory.
    pub fn read_string(&self, rel: &str) -> Result<Option<String>> {
        match self.open(rel, OFlags::RDONLY) {
            None => self.host.read_string(&self.path.join(rel)),
            Some(Ok(fd)) => read_text(File::from(fd), || self.real(rel)).map(Some),
            Some(Err(e)) if missing(e) => Ok(None),
            Some(Err(e)) => Err(HostError::Read {
                path: self.real(rel),
                source: e.into(),
            }),
        }
    }

    /// `Host::read_string` of `name` beside this directory (in its parent):
    /// `../name` opened from here with no link followed. This directory's path
    /// holds no link, so `..` is its parent, inside the root; a link there, or
    /// no descriptor, takes the path-based call.
    pub fn read_beside(&self, name: &str) -> Result<Option<String>> {
        let Some(parent) = self.path.parent() else {
            return self.host.read_string(&self.path.join(name));
        };
        let by_path = || self.host.read_string(&parent.join(name));
        let Some(fd) = self.fd.as_ref().filter(|_| plain(name)) else {
            return by_path();
        };
        let how = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::NO_MAGICLINKS);
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        match openat2(fd, format!("../{name}"), flags, Mode::empty(), how) {
            Ok(fd) => read_text(File::from(fd), || self.host.path(&parent.join(name))).map(Some),
            Err(e) if missing(e) => Ok(None),
            // A link (ELOOP), no openat2, a rename race: the path-based call answers.
            Err(Errno::LOOP | Errno::NOSYS | Errno::AGAIN | Errno::XDEV) => by_path(),
            Err(e) => Err(HostError::Read {
                path: self.host.path(&parent.join(name)),
                source: e.into(),
            }),
        }
    }

    /// `rel` under this directory opened for reading, with its real path;
    /// `Ok(None)` when it does not exist.
    pub fn open_file(&self, rel: &str) -> Result<Option<(File, PathBuf)>> {
        let real = self.real(rel);
        match self.open(rel, OFlags::RDONLY) {
            Some(Ok(fd)) => Ok(Some((File::from(fd), real))),
            Some(Err(e)) if missing(e) => Ok(None),
            Some(Err(e)) => Err(HostError::Read {
                path: real,
                source: e.into(),
            }),
            None => match File::open(&real) {
                Ok(f) => Ok(Some((f, real))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(HostError::Read { path: real, source }),
            },
        }
    }

    /// `Host::list_dir` of `rel` under this directory (`""`: itself): names, sorted.
    pub fn list(&self, rel: &str) -> Result<Vec<String>> {
        if let (true, "", Some(fd)) = (self.readable, rel, &self.fd) {
            return self.names(fd, rel);
        }
        let fd = match self.open(rel, OFlags::RDONLY | OFlags::DIRECTORY) {
            None => return self.host.list_dir(&self.path.join(rel)),
            Some(Ok(fd)) => fd,
            Some(Err(e)) if missing(e) => return Ok(Vec::new()),
            Some(Err(e)) => {
                return Err(HostError::Read {
                    path: self.real(rel),
                    source: e.into(),
                });
            }
        };
        self.names(&fd, rel)
    }

    /// The names of the directories in this one (opened by `open_subdir` or
    /// `subdir`), sorted: by the entries' own types, no stat of each.
    pub fn subdirs(&self) -> Result<Vec<String>> {
        match (&self.fd, self.readable) {
            (Some(fd), true) => self.entries(fd, "", true),
            _ => Ok(self
                .host
                .list_dir(&self.path)?
                .into_iter()
                .filter(|n| self.host.is_dir(&self.path.join(n)))
                .collect()),
        }
    }

    /// The directory `name` here (not a link), opened for listing; `None` when
    /// it is not one, or the path-based calls must answer.
    pub fn subdir(&self, name: &str) -> Option<Dir<'h>> {
        if name.contains('/') || name == ".." {
            return None;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let fd = self.open(name, flags)?.ok()?;
        Some(Dir {
            host: self.host,
            path: self.path.join(name),
            fd: Some(fd),
            readable: true,
        })
    }

    /// The names in the open directory `fd` (`rel` here), sorted.
    fn names(&self, fd: &OwnedFd, rel: &str) -> Result<Vec<String>> {
        self.entries(fd, rel, false)
    }

    fn entries(&self, fd: &OwnedFd, rel: &str, dirs_only: bool) -> Result<Vec<String>> {
        // getdents64 straight away: opendir (std's read_dir) adds an fstat per directory.
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut entries = RawDir::new(fd, &mut buf);
        let mut names = Vec::new();
        while let Some(entry) = entries.next() {
            let entry = entry.map_err(|e| HostError::Read {
                path: self.real(rel),
                source: e.into(),
            })?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if dirs_only && entry.file_type() != FileType::Directory {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// `Host::exists` of a name in this directory (the name itself, not a link's target).
    pub fn exists(&self, name: &str) -> bool {
        match &self.fd {
            Some(fd) if !name.contains('/') && name != ".." => {
                statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
            }
            _ => self.host.exists(&self.path.join(name)),
        }
    }

    /// What the name `name` in this directory is (not a link's target): one
    /// `readlinkat`, where `exists` and then reading the link would take two.
    pub fn entry(&self, name: &str) -> Entry {
        self.entry_at(name, false)
    }

    /// `entry` of a name beside this directory (in its parent).
    pub fn entry_beside(&self, name: &str) -> Entry {
        self.entry_at(name, true)
    }

    fn entry_at(&self, name: &str, beside: bool) -> Entry {
        let dir = match beside {
            true => self.path.parent(),
            false => Some(self.path.as_path()),
        };
        let (Some(fd), Some(_), true) = (&self.fd, dir, plain(name)) else {
            let p = dir.unwrap_or(Path::new("/")).join(name);
            return match self.host.read_link(&p) {
                Ok(Some(t)) => Entry::Link(t),
                _ if self.host.exists(&p) => Entry::Other,
                _ => Entry::Absent,
            };
        };
        let rel = match beside {
            true => format!("../{name}"),
            false => name.to_owned(),
        };
        match rustix::fs::readlinkat(fd, rel, Vec::new()) {
            Ok(t) => Entry::Link(PathBuf::from(std::ffi::OsString::from_vec(t.into_bytes()))),
            // Not a link: there, as `exists` would say.
            Err(Errno::INVAL) => Entry::Other,
            Err(_) => Entry::Absent,
        }
    }

    /// `Host::exists` of a name beside this directory (in its parent).
    pub fn exists_beside(&self, name: &str) -> bool {
        match &self.fd {
            Some(fd) if !name.contains('/') && name != ".." => {
                // `..` of a directory is its real parent, inside the root but for the root itself.
                self.path.parent().is_some()
                    && statat(fd, format!("../{name}"), AtFlags::SYMLINK_NOFOLLOW).is_ok()
            }
            _ => self
                .host
                .exists(&self.path.parent().unwrap_or(Path::new("/")).join(name)),
        }
    }
}

/// What a name in a directory is, its links not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Absent,
    /// A symbolic link: its target, as written.
    Link(PathBuf),
    /// A file or a directory.
    Other,
}

/// One name, neither `..` nor a path: opened from here, it stays here.
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != ".." && name != "."
}

fn missing(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::NOTDIR)
}

#[cfg(test)]
#[path = "dir_tests.rs"]
mod tests;
