//! A directory opened once, for reading many files under it (a sysfs device's
//! attributes) relative to its descriptor instead of re-walking a long path
//! under the root for each: the 1024-device inventory's cost is system calls
//! and path walks.
//!
//! The guarantees are the host layer's: the directory itself is reached with
//! `openat2(RESOLVE_IN_ROOT)` (links followed as if the root were `/`), and a
//! file under it with `RESOLVE_BENEATH`; a path that would leave the directory
//! through a link (`EXDEV`), or a kernel without `openat2`, takes the
//! path-based `Host` call instead, so every answer is the one `Host` gives.
//! A `Dir` with a descriptor always knows its real path (no link in it): from
//! `/proc/self/fd` after `RESOLVE_IN_ROOT`, or checked by `RESOLVE_NO_SYMLINKS`
//! (`open_link`), so `..` from it and joins onto it mean what they say.

use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
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
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let fd = self.fd.as_ref()?;
        let target = rustix::fs::readlinkat(fd, name, Vec::new()).ok()?;
        // This directory's path is real (no link in it): each `..` is its parent.
        let mut path = self.path.clone();
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
            if sub.is_empty() || sub.contains('/') || sub == ".." {
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

fn missing(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::NOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// Every answer a `Dir` gives is the one the path-based `Host` call gives.
    #[test]
    fn answers_as_the_path_based_calls_do() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("sys/devices/pci0/dev/ports/1")).unwrap();
        fs::create_dir_all(r.join("sys/class/ib")).unwrap();
        fs::write(r.join("sys/devices/pci0/dev/fw"), "1.2\n").unwrap();
        fs::write(r.join("sys/devices/pci0/dev/ports/1/state"), "4: ACTIVE\n").unwrap();
        fs::write(r.join("sys/devices/pci0/vendor"), "0x15b3\n").unwrap();
        fs::write(r.join("sys/devices/pci0/dev/bad"), [0xff]).unwrap();
        symlink("../../devices/pci0/dev", r.join("sys/class/ib/dev")).unwrap();
        symlink("../../devices/nope", r.join("sys/class/ib/gone")).unwrap();
        // Links out of the directory: both take the path-based call.
        symlink("../vendor", r.join("sys/devices/pci0/dev/up")).unwrap();
        symlink("/sys/devices/pci0", r.join("sys/devices/pci0/dev/abs")).unwrap();
        symlink("ports/1", r.join("sys/devices/pci0/dev/p1")).unwrap();
        symlink("loop", r.join("sys/devices/pci0/dev/loop")).unwrap();

        let h = Host::new(r);
        assert_eq!(
            h.open_dir(Path::new("/sys/class/ib/gone"))
                .unwrap()
                .unwrap_err(),
            PathBuf::from("/sys/devices/nope")
        );
        let d = h.open_dir(Path::new("/sys/class/ib/dev")).unwrap().unwrap();
        assert!(d.fd.is_some(), "openat2 is in every kernel this runs on");
        assert_eq!(d.path(), Path::new("/sys/devices/pci0/dev"));
        let full = |rel: &str| d.path().join(rel);
        for rel in [
            "fw",
            "ports/1/state",
            "up",
            "abs/vendor",
            "p1/state",
            "absent",
            "fw/x",
            "ports",
            "../vendor",
            "loop",
        ] {
            assert_eq!(
                format!("{:?}", d.read_string(rel)),
                format!("{:?}", h.read_string(&full(rel))),
                "{rel}"
            );
        }
        assert!(matches!(
            d.read_string("bad"),
            Err(HostError::NotUtf8 { .. })
        ));
        for rel in ["ports", "ports/1", "p1", "abs", "absent", "fw"] {
            assert_eq!(
                format!("{:?}", d.list(rel)),
                format!("{:?}", h.list_dir(&full(rel))),
                "{rel}"
            );
        }
        assert_eq!(d.list("ports").unwrap(), vec!["1"]);
        for name in [
            "fw",
            "up",
            "abs",
            "absent",
            "ports/1",
            "p1/state",
            "../vendor",
        ] {
            assert_eq!(d.exists(name), h.exists(&full(name)), "{name}");
        }
        // A real directory in a resolved one: its parent is that one resolved.
        let p = h
            .open_subdir(Path::new("/sys/class/ib/dev"), "ports")
            .unwrap();
        assert_eq!(p.path(), Path::new("/sys/devices/pci0/dev/ports"));
        assert_eq!(p.list("").unwrap(), vec!["1"]);
        assert!(p.exists_beside("fw") && p.exists_beside("up") && !p.exists_beside("absent"));
        // Not a link, not absent, not a file.
        for name in ["p1", "absent", "fw"] {
            assert!(
                h.open_subdir(Path::new("/sys/class/ib/dev"), name)
                    .is_none(),
                "{name}"
            );
        }
        // A sysfs-shaped link, opened by its lexical target.
        let class = h.open_dir(Path::new("/sys/class/ib")).unwrap().unwrap();
        let l = class.open_link("dev", None).unwrap();
        assert_eq!(l.path(), Path::new("/sys/devices/pci0/dev"));
        assert_eq!(l.read_string("fw").unwrap().as_deref(), Some("1.2\n"));
        let l = class.open_link("dev", Some("ports")).unwrap();
        assert_eq!(l.path(), Path::new("/sys/devices/pci0/dev/ports"));
        assert_eq!(l.list("").unwrap(), vec!["1"]);
        // Dangling, not a link, a link on the way, absolute, above the root: not this way.
        fs::create_dir_all(r.join("sys/class/ib/plain")).unwrap();
        symlink("../../devices/pci0/dev/p1", r.join("sys/class/ib/via")).unwrap();
        symlink("/sys/devices/pci0/dev", r.join("sys/class/ib/abs")).unwrap();
        symlink(
            "../../../../../sys/devices/pci0/dev",
            r.join("sys/class/ib/high"),
        )
        .unwrap();
        symlink("../../devices/./pci0/dev", r.join("sys/class/ib/dot")).unwrap();
        for name in ["gone", "plain", "via", "abs", "high", "dot", "absent"] {
            assert!(class.open_link(name, None).is_none(), "{name}");
        }
        assert!(
            class.open_link("dev", Some("p1")).is_none(),
            "a link as sub"
        );
        assert!(
            class.open_link("dev", Some("fw")).is_none(),
            "a file as sub"
        );
        // Without a descriptor (a kernel without openat2) the same, by path.
        let by_path = Dir {
            host: &h,
            path: d.path().to_owned(),
            fd: None,
            readable: false,
        };
        assert_eq!(by_path.read_string("fw").unwrap().as_deref(), Some("1.2\n"));
        assert_eq!(by_path.list("ports").unwrap(), vec!["1"]);
        assert!(by_path.exists("up"));
        assert!(by_path.exists_beside("dev") && !by_path.exists_beside("fw"));
    }

    /// The same on the kernel's own sysfs (kernfs: its link texts, its
    /// `openat2`), where the machine has one: the live root's network class.
    #[test]
    fn answers_on_the_live_sysfs_as_the_path_based_calls_do() {
        let h = Host::new("/");
        let class = Path::new("/sys/class/net");
        let Ok(Ok(c)) = h.open_dir(class) else {
            println!("no {} here: nothing to compare", class.display());
            return;
        };
        let names = h.list_dir(class).unwrap();
        for name in &names {
            let full = class.join(name);
            let Some(d) = c.open_link(name, None) else {
                // Only a link of another shape may take the long way.
                let raw = h.read_link(&full).unwrap();
                assert!(
                    raw.as_ref().is_none_or(|t| t.is_absolute()),
                    "{name}: {raw:?}"
                );
                continue;
            };
            assert_eq!(d.path(), h.resolve(&full).unwrap(), "{name}");
            for attr in ["address", "mtu", "type", "ifindex", "absent"] {
                assert_eq!(
                    d.read_string(attr).unwrap(),
                    h.read_string(&d.path().join(attr)).unwrap(),
                    "{name}/{attr}"
                );
            }
            assert_eq!(
                d.list("queues").unwrap(),
                h.list_dir(&full.join("queues")).unwrap()
            );
            // A real device: its `device` link, and a directory of the function.
            if let Some(sub) = d.open_link("device", Some("power")) {
                let dev = h.resolve(&d.path().join("device")).unwrap();
                assert_eq!(sub.path(), dev.join("power"), "{name}");
                assert_eq!(sub.exists_beside("uevent"), h.exists(&dev.join("uevent")));
                assert_eq!(
                    sub.list("").unwrap(),
                    h.list_dir(&dev.join("power")).unwrap()
                );
            }
        }
        println!("compared {} devices of {}", names.len(), class.display());
    }
}
