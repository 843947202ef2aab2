//! Resolving symbolic links without leaving the root (sysfs is full of relative
//! links; a `--root` tree must never reach the real `/` through an absolute one).

use std::ffi::OsStr;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::{Host, HostError, Result, normalize};

impl Host {
    /// Follows symbolic links without leaving the root (sysfs is full of relative links).
    /// Returns the host-absolute target.
    pub fn resolve(&self, p: &Path) -> Result<PathBuf> {
        super::walks::record("resolve", || self.path(p));
        if let Some(r) = self.resolve_in_kernel(p) {
            return Ok(r);
        }
        self.resolve_by_walking(p)
    }

    /// openat2(RESOLVE_IN_ROOT) follows every link as if the root were `/`, in one
    /// call instead of a readlink per component (a 1000-device sysfs needs ~20k of
    /// those). `None` (kernel before 5.6, a path that does not exist): walk instead.
    pub(super) fn resolve_in_kernel(&self, p: &Path) -> Option<PathBuf> {
        use rustix::fs::OFlags;
        self.open_in_root(p, OFlags::PATH | OFlags::CLOEXEC)
            .map(|(_, path)| path)
    }

    /// Opens `p` with `flags`, links followed inside the root; with the
    /// host-absolute path it resolved to. `None` when it cannot (see above).
    pub(super) fn open_in_root(
        &self,
        p: &Path,
        flags: rustix::fs::OFlags,
    ) -> Option<(std::os::fd::OwnedFd, PathBuf)> {
        use rustix::fs::{Mode, ResolveFlags, openat2};
        use std::os::fd::AsRawFd;
        let root = self.root_dir()?;
        let rel = normalize(p);
        let rel = rel.strip_prefix("/").ok()?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
        let fd = openat2(&root.0, rel, flags, Mode::empty(), resolve).ok()?;
        let real = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let inside = real.strip_prefix(&root.1).ok()?;
        Some((fd, Path::new("/").join(inside)))
    }

    /// The root, opened once (`O_PATH`), with its canonical path.
    pub(super) fn root_dir(&self) -> Option<&(std::os::fd::OwnedFd, PathBuf)> {
        self.root_fd
            .get_or_init(|| {
                let canonical = fs::canonicalize(&self.root).ok()?;
                let fd = nix::fcntl::open(
                    &canonical,
                    nix::fcntl::OFlag::O_PATH
                        | nix::fcntl::OFlag::O_DIRECTORY
                        | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .ok()?;
                Some(std::sync::Arc::new((fd, canonical)))
            })
            .as_deref()
    }

    pub(super) fn resolve_by_walking(&self, p: &Path) -> Result<PathBuf> {
        let mut done = PathBuf::from("/");
        let mut todo: Vec<std::ffi::OsString> = normalize(p)
            .components()
            .rev()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_owned()),
                _ => None,
            })
            .collect();
        let mut hops = 0;
        while let Some(name) = todo.pop() {
            if name == OsStr::new("..") {
                done.pop();
                continue;
            }
            let candidate = done.join(&name);
            match fs::read_link(self.path(&candidate)) {
                Ok(target) => {
                    hops += 1;
                    if hops > 40 {
                        return Err(HostError::SymlinkLoop { path: self.path(p) });
                    }
                    if target.is_absolute() {
                        done = PathBuf::from("/");
                    }
                    for c in target.components().rev() {
                        match c {
                            Component::Normal(n) => todo.push(n.to_owned()),
                            Component::ParentDir => todo.push("..".into()),
                            _ => {}
                        }
                    }
                }
                Err(_) => done = candidate,
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn resolves_relative_links_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let h = Host::new(t.path());
        fs::create_dir_all(t.path().join("sys/devices/pci0/infiniband/mlx5_0")).unwrap();
        fs::create_dir_all(t.path().join("sys/class/infiniband")).unwrap();
        symlink(
            "../../devices/pci0/infiniband/mlx5_0",
            t.path().join("sys/class/infiniband/mlx5_0"),
        )
        .unwrap();
        // An absolute link must not escape to the real /.
        symlink("/sys/devices", t.path().join("sys/abs")).unwrap();
        assert_eq!(
            h.resolve(Path::new("/sys/class/infiniband/mlx5_0"))
                .unwrap(),
            PathBuf::from("/sys/devices/pci0/infiniband/mlx5_0")
        );
        assert_eq!(
            h.resolve(Path::new("/sys/abs/pci0")).unwrap(),
            PathBuf::from("/sys/devices/pci0")
        );
        // The kernel's openat2 answer and the fallback walk agree.
        for p in [
            "/sys/class/infiniband/mlx5_0",
            "/sys/abs/pci0",
            "/sys/abs/../class",
        ] {
            assert_eq!(
                h.resolve_in_kernel(Path::new(p)),
                Some(h.resolve_by_walking(Path::new(p)).unwrap()),
                "{p}"
            );
        }
        // A path that does not exist falls back to the walk.
        assert_eq!(h.resolve_in_kernel(Path::new("/sys/nope")), None);
        assert_eq!(
            h.resolve(Path::new("/sys/nope")).unwrap(),
            PathBuf::from("/sys/nope")
        );
    }
}
