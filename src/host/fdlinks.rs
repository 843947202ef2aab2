//! The targets of a directory of links, read relative to it: `/proc/<pid>/fd`
//! of every pod process is the agent's largest read (130k links on a busy
//! node), and one open, its listing and a `readlinkat` per entry cost less
//! kernel time than resolving `/proc/<pid>/fd/<n>` from the root for each link.

use std::mem::MaybeUninit;
use std::path::Path;

use rustix::fs::{CWD, Mode, OFlags, RawDir, openat, readlinkat};
use rustix::io::Errno;

use super::{Host, HostError, Result};

impl Host {
    /// The targets of the links in `dir` (a host path), as text, in listing
    /// order; empty when `dir` is absent (a process gone). A link removed
    /// between the listing and its read (a descriptor closed) is skipped.
    pub fn link_targets(&self, dir: &Path) -> Result<Vec<String>> {
        let real = self.path(dir);
        let failed = |e: Errno| HostError::Read {
            path: real.clone(),
            source: e.into(),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = match openat(CWD, &real, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::SRCH) => return Ok(Vec::new()),
            Err(e) => return Err(failed(e)),
        };
        let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
        let mut entries = RawDir::new(&fd, &mut buf);
        let mut out = Vec::new();
        let mut target = Vec::with_capacity(256);
        while let Some(entry) = entries.next() {
            let entry = entry.map_err(failed)?;
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            if let Ok(t) = readlinkat(&fd, name, std::mem::take(&mut target)) {
                out.push(String::from_utf8_lossy(t.as_bytes()).into_owned());
                target = t.into_bytes();
                target.clear();
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_read_relative_to_their_directory() {
        let t = tempfile::tempdir().unwrap();
        let fd = t.path().join("proc/7/fd");
        std::fs::create_dir_all(&fd).unwrap();
        std::os::unix::fs::symlink("/dev/infiniband/uverbs0", fd.join("3")).unwrap();
        std::os::unix::fs::symlink("socket:[1234]", fd.join("4")).unwrap();
        let h = Host::new(t.path());
        let mut got = h.link_targets(Path::new("/proc/7/fd")).unwrap();
        got.sort();
        assert_eq!(got, vec!["/dev/infiniband/uverbs0", "socket:[1234]"]);
        // A process gone: nothing, not an error.
        assert!(h.link_targets(Path::new("/proc/8/fd")).unwrap().is_empty());
        // This process's own descriptors, through the real /proc.
        let own = Host::new("/")
            .link_targets(Path::new("/proc/self/fd"))
            .unwrap();
        assert!(!own.is_empty());
    }
}
