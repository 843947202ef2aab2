//! The root-aware host layer: the only place that touches the filesystem.
//!
//! Every path the agent knows is host-absolute (`/etc/containerd/config.toml`);
//! `Host` maps it under `--root`, so every check runs unchanged on a fixture tree.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

pub mod command;
pub mod cri;
pub mod dbus;
pub mod devlink;
mod dir;
mod fdlinks;
pub mod files;
pub mod gunzip;
pub mod helper_error;
pub mod http_client;
pub mod inventory;
pub mod kmsg;
pub mod kmsg_helper;
pub mod kubepods;
pub mod limit;
pub mod links;
pub mod live_files;
pub mod lock;
pub mod netlink;
pub mod nri;
pub mod own;
pub mod pci_config;
pub mod pci_helper;
pub mod pci_path;
pub mod peer;
pub mod probe;
pub mod procfs;
pub mod prometheus;
pub mod read;
mod resolve;
pub mod route;
pub mod rt;
pub mod rtnetlink;
pub mod runtime;
pub mod sandbox;
pub mod service;
pub mod snapshot;
pub mod stage;
pub mod state;
pub mod state_writer;
pub mod stop;
pub mod trust;
pub mod units;
pub(crate) mod walks;

pub use dir::{Dir, Entry};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}{}", read_only_hint(.source))]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot remove {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("{path} is not valid UTF-8")]
    NotUtf8 { path: PathBuf },
    #[error("bad glob pattern {pattern:?}: {message}")]
    Glob { pattern: String, message: String },
    #[error("{path}: too many levels of symbolic links")]
    SymlinkLoop { path: PathBuf },
    #[error("cannot read {what}: {message}")]
    Snapshot { what: &'static str, message: String },
    #[error(
        "refusing {path}: it is a symbolic link to {target}, {why}; its content was not read. The agent follows a link only when the link, its target and every directory on both paths are owned by root and writable by nobody else, inside the root: fix the one named, or replace the link with the file (see SECURITY.md)"
    )]
    UnsafeLink {
        path: PathBuf,
        target: PathBuf,
        why: String,
    },
    #[error(
        "refusing {path} ({what}): owned by uid {uid}, gid {gid}, mode {mode:04o}: {why}. It decides what this root agent writes, so it must be owned by root and writable by nobody else (like sshd's StrictModes): `chown root {path} && chmod go-w {path}`"
    )]
    Untrusted {
        path: PathBuf,
        what: String,
        uid: u32,
        gid: u32,
        mode: u32,
        why: String,
    },
    #[error(
        "refusing {path}: it is a symbolic link (or under one), and the agent never follows links in its own state directories; remove it"
    )]
    StateLink { path: PathBuf },
    #[error(
        "refusing {path}: it is {what}, at a file the agent writes whole; it never reads or writes through a link there, whoever owns it: remove it (the agent then writes a regular file)"
    )]
    OwnLink { path: PathBuf, what: String },
}

pub type Result<T> = std::result::Result<T, HostError>;

/// Under the shipped unit (ProtectSystem=strict) a read-only file system means the
/// directory is not among its ReadWritePaths, typically because it did not exist
/// when the service started.
fn read_only_hint(e: &io::Error) -> &'static str {
    if e.raw_os_error() == Some(nix::libc::EROFS) {
        " (make it writable; under rdma-node-agent.service a directory missing when \
         the service started stays read-only to it: create it, then \
         `systemctl restart rdma-node-agent`; a mount made writable since, or a \
         directory outside the unit's ReadWritePaths, the daemon picks up by \
         granting it to its unit if needed and restarting itself)"
    } else {
        ""
    }
}

/// A file's bytes and the metadata the agent needs to restore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileData {
    pub bytes: Vec<u8>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub modified: Option<SystemTime>,
    /// The link's target as stored, when the path is a symbolic link (the bytes are its target's).
    pub link: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    /// The root, opened once, for kernel-side resolution (see `resolve`).
    root_fd: std::sync::OnceLock<Option<std::sync::Arc<(std::os::fd::OwnedFd, PathBuf)>>>,
    /// Where the live host's module tree is visible (see [`MODULES_DIR_ENV`]).
    modules_dir: Option<PathBuf>,
    /// Who gives a rewritten file its owner back when this process may not.
    chown_helper: Option<files::Helper>,
    /// The files the agent writes whole: never through a link (`own`).
    own: std::sync::Arc<own::OwnPaths>,
}

/// Under the shipped unit, `ProtectKernelModules=yes` hides `/lib/modules` and
/// `/usr/lib/modules`; the unit binds the tree read-only elsewhere and names
/// that place in this variable, so `kernel.modules` and `kernel.dkms` still read it.
pub const MODULES_DIR_ENV: &str = "RDMA_NODE_AGENT_MODULES_DIR";

impl Host {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let modules_dir = (root == Path::new("/"))
            .then(|| std::env::var_os(MODULES_DIR_ENV))
            .flatten()
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && d.is_dir());
        Host {
            root,
            root_fd: std::sync::OnceLock::new(),
            modules_dir,
            chown_helper: None,
            own: std::sync::Arc::default(),
        }
    }

    /// With a helper for the chown this process may not do (see `files`).
    pub fn with_chown_helper(mut self, helper: std::sync::Arc<dyn files::Chown>) -> Self {
        self.chown_helper = Some(files::Helper(helper));
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// This host, readable only (what a concern's gather gets).
    pub fn reader(&self) -> read::ReadHost {
        read::ReadHost::new(self.clone())
    }

    /// True when the agent acts on the running machine, not on a tree under `--root`.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The real path of a host-absolute path under the root. `..` cannot climb above the root.
    pub fn path(&self, host_path: &Path) -> PathBuf {
        // Sized once: a check of 1000 RDMA devices builds ~20k of these, and
        // growing them a component at a time was most of its user time.
        let normal = normalize(host_path);
        if let Some(dir) = &self.modules_dir {
            for tree in ["/lib/modules", "/usr/lib/modules"] {
                if let Ok(rest) = normal.strip_prefix(tree) {
                    return dir.join(rest);
                }
            }
        }
        let mut out =
            PathBuf::with_capacity(self.root.as_os_str().len() + normal.as_os_str().len() + 1);
        out.push(&self.root);
        // `normal` is `/` and names joined by `/`: append them in one piece.
        let rest = &normal.as_os_str().as_bytes()[1..];
        if !rest.is_empty() {
            out.push(OsStr::from_bytes(rest));
        }
        out
    }

    /// A text file's content, without its metadata: open, read, close. A check
    /// cycle reads thousands of small sysfs and /proc files, so no stat per file.
    pub fn read_string(&self, p: &Path) -> Result<Option<String>> {
        let real = self.path(p);
        let f = match File::open(&real) {
            Ok(f) => f,
            Err(e) if missing(&e) => return Ok(None),
            Err(source) => return Err(HostError::Read { path: real, source }),
        };
        read_text(f, || real).map(Some)
    }

    /// A directory (following links, as sysfs and /lib/modules need).
    pub fn is_dir(&self, p: &Path) -> bool {
        self.path(p).is_dir()
    }

    pub fn exists(&self, p: &Path) -> bool {
        walks::record("stat", || self.path(p));
        self.path(p).symlink_metadata().is_ok()
    }

    /// Names in a directory, sorted; empty when the directory does not exist.
    pub fn list_dir(&self, p: &Path) -> Result<Vec<String>> {
        let real = self.path(p);
        walks::record("list", || real.clone());
        let rd = match fs::read_dir(&real) {
            Ok(rd) => rd,
            Err(e) if missing(&e) => return Ok(Vec::new()),
            Err(source) => return Err(HostError::Read { path: real, source }),
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Host-absolute paths matching a host-absolute glob pattern, sorted.
    pub fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>> {
        let real_pattern = self.path(Path::new(pattern));
        // Glob metacharacters in the root itself must not be interpreted.
        let escaped_root = glob::Pattern::escape(&self.root.to_string_lossy());
        let rel = real_pattern
            .strip_prefix(&self.root)
            .unwrap_or(&real_pattern)
            .to_string_lossy()
            .into_owned();
        let full = Path::new(&escaped_root).join(rel);
        let paths = glob::glob(&full.to_string_lossy()).map_err(|e| HostError::Glob {
            pattern: pattern.to_owned(),
            message: e.to_string(),
        })?;
        let mut out = Vec::new();
        for p in paths {
            // A directory that cannot be listed may hold matches: an error naming
            // it, never a silent "no match".
            let p = p.map_err(|e| HostError::Read {
                path: e.path().to_owned(),
                source: io::Error::new(e.error().kind(), e.error().to_string()),
            })?;
            if let Ok(r) = p.strip_prefix(&self.root) {
                out.push(Path::new("/").join(r));
            }
        }
        out.sort();
        Ok(out)
    }

    /// A symbolic link's target as stored (`/proc/<pid>/ns/net` holds `net:[4026531992]`);
    /// `None` when the path is absent or not a link.
    pub fn read_link(&self, p: &Path) -> Result<Option<PathBuf>> {
        let real = self.path(p);
        walks::record("readlink", || real.clone());
        match fs::read_link(&real) {
            Ok(t) => Ok(Some(t)),
            Err(e) if missing(&e) || e.kind() == io::ErrorKind::InvalidInput => Ok(None),
            Err(source) => Err(HostError::Read { path: real, source }),
        }
    }

    /// Whether the file system holding `p` (a host path) is writable as PID 1
    /// sees it (`/proc/1/root`), on the live host: under the service's sandbox a
    /// mount is bound once, at start. False when it cannot be told.
    pub fn writable_for_pid1(&self, p: &Path) -> bool {
        if !self.is_live() {
            return false;
        }
        // The nearest directory that exists: where a missing one would be made.
        for dir in p.ancestors().skip(1) {
            let through_pid1 = Path::new("/proc/1/root").join(dir.strip_prefix("/").unwrap_or(dir));
            match nix::sys::statvfs::statvfs(&through_pid1) {
                Ok(v) => return !v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY),
                Err(nix::errno::Errno::ENOENT) => continue,
                Err(_) => return false,
            }
        }
        false
    }

    /// Runs a program of the host, only when acting on the live machine: a fixture
    /// tree has no binaries we could trust to match it. `None` when not live or absent.
    pub fn run(&self, program: &str, args: &[&str]) -> Option<io::Result<Output>> {
        if !self.is_live() {
            return None;
        }
        match Command::new(program).args(args).output() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            other => Some(other),
        }
    }

    /// Where `program` is on the live host's PATH, as `run` would find it: for a
    /// command handed to another process (systemd). `None` when not live or absent.
    pub fn which(&self, program: &str) -> Option<PathBuf> {
        if !self.is_live() {
            return None;
        }
        let executable = |p: &Path| {
            fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.contains('/') {
            return Some(PathBuf::from(program)).filter(|p| executable(p));
        }
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
    }
}

/// An open file's text: most are a few bytes, read on the stack (small, as
/// zeroing a page per file showed in profiles), allocating only what the text needs.
/// `real` names the file in an error (built only then).
fn read_text(mut f: File, real: impl FnOnce() -> PathBuf) -> Result<String> {
    let mut buf = [0u8; 512];
    let mut bytes = Vec::new();
    loop {
        match f.read(&mut buf) {
            Ok(n) => {
                bytes.extend_from_slice(&buf[..n]);
                // A short read of a regular file (or a sysfs attribute) is its end.
                if n < buf.len() {
                    break;
                }
                // A larger file: the rest straight into the vector.
                if let Err(source) = f.read_to_end(&mut bytes) {
                    return Err(HostError::Read {
                        path: real(),
                        source,
                    });
                }
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(HostError::Read {
                    path: real(),
                    source,
                });
            }
        }
    }
    String::from_utf8(bytes).map_err(|_| HostError::NotUtf8 { path: real() })
}

pub(crate) fn missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Lexically removes `.` and resolves `..` without touching the filesystem.
pub(crate) fn normalize(p: &Path) -> PathBuf {
    if is_normal(p) {
        return p.to_path_buf();
    }
    let mut out = PathBuf::with_capacity(p.as_os_str().len() + 1);
    out.push("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Already what `normalize` makes of it (most paths): absolute, no `.`, `..` or
/// empty component, no trailing `/`. A byte scan, cheaper than `components()`.
fn is_normal(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b.len() > 1
        && b[0] == b'/'
        && b[1..]
            .split(|&c| c == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

#[cfg(test)]
#[path = "host/host_tests.rs"]
mod tests;
