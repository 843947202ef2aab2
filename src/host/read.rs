//! The host as concerns see it while they gather: reads only. No write, no
//! removal, and no program but the read-only tools below (a listing, a status,
//! a dump), so a concern cannot change the node, whatever it gets wrong. The
//! one thing it may keep is its own cache of slow answers (`cache_put`), in
//! the agent's state directory.

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use super::command::RunError;
use super::links::Resolved;
use super::state::FileStamp;
use super::{Dir, FileData, Host, Result};

/// The programs a gather may run, by file name, and the first arguments each
/// must be given: they only read. A program outside this list is refused.
const READ_ONLY_TOOLS: &[(&str, &[&str])] = &[
    // containerd's view of a config, and its version.
    ("containerd", &["--version"]),
    ("containerd", &["--config"]),
    // The OCI spec containerd generates for a container (printed, not applied).
    ("ctr", &["oci", "spec"]),
    ("dkms", &["status"]),
    ("ofed_info", &["-s"]),
    // Listings of an initramfs image.
    ("lsinitramfs", &[]),
    ("lsinitrd", &[]),
];

/// Whether `program` with `args` is one of the read-only tools. A config dump
/// is `containerd --config F config dump`: its last words must say so.
fn read_only(program: &str, args: &[&str]) -> bool {
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(program);
    READ_ONLY_TOOLS.iter().any(|(tool, first)| {
        *tool == name
            && args.starts_with(first)
            && (*first != ["--config"] || args.ends_with(&["config", "dump"]))
    })
}

/// The host, readable only.
#[derive(Clone)]
pub struct ReadHost(Host);

impl ReadHost {
    pub fn new(host: Host) -> Self {
        ReadHost(host)
    }

    pub fn root(&self) -> &Path {
        self.0.root()
    }

    /// The host behind it, for the host layer's own read-only helpers.
    pub(super) fn host(&self) -> &Host {
        &self.0
    }

    /// True when the agent looks at the running machine, not a tree under `--root`.
    pub fn is_live(&self) -> bool {
        self.0.is_live()
    }

    pub fn path(&self, host_path: &Path) -> PathBuf {
        self.0.path(host_path)
    }

    pub fn read(&self, p: &Path) -> Result<Option<FileData>> {
        self.0.read(p)
    }

    pub fn read_any(&self, p: &Path) -> Result<Option<Vec<u8>>> {
        self.0.read_any(p)
    }

    pub fn read_string(&self, p: &Path) -> Result<Option<String>> {
        self.0.read_string(p)
    }

    pub fn read_trusted(&self, p: &Path, what: &str) -> Result<Option<FileData>> {
        self.0.read_trusted(p, what)
    }

    pub fn check_trusted(&self, shown: &Path, meta: &Metadata, what: &str) -> Result<()> {
        self.0.check_trusted(shown, meta, what)
    }

    pub fn is_dir(&self, p: &Path) -> bool {
        self.0.is_dir(p)
    }

    pub fn exists(&self, p: &Path) -> bool {
        self.0.exists(p)
    }

    pub fn list_dir(&self, p: &Path) -> Result<Vec<String>> {
        self.0.list_dir(p)
    }

    pub fn glob(&self, pattern: &str) -> Result<Vec<PathBuf>> {
        self.0.glob(pattern)
    }

    pub fn read_link(&self, p: &Path) -> Result<Option<PathBuf>> {
        self.0.read_link(p)
    }

    pub fn link_targets(&self, dir: &Path) -> Result<Vec<String>> {
        self.0.link_targets(dir)
    }

    pub fn open_dir(&self, p: &Path) -> Result<std::result::Result<Dir<'_>, PathBuf>> {
        self.0.open_dir(p)
    }

    pub fn open_real_dir(&self, p: &Path) -> Option<Dir<'_>> {
        self.0.open_real_dir(p)
    }

    pub fn read_pci_config<T>(
        &self,
        p: &Path,
        walk: impl FnOnce(&mut super::pci_config::ConfigReader) -> std::io::Result<T>,
    ) -> Result<Option<T>> {
        self.0.read_pci_config(p, walk)
    }

    pub fn open_subdir(&self, p: &Path, name: &str) -> Option<Dir<'_>> {
        self.0.open_subdir(p, name)
    }

    pub fn resolve(&self, p: &Path) -> Result<PathBuf> {
        self.0.resolve(p)
    }

    pub fn resolve_managed(&self, p: &Path) -> Result<Resolved> {
        self.0.resolve_managed(p)
    }

    pub fn stamp(&self, p: &Path) -> Option<FileStamp> {
        self.0.stamp(p)
    }

    pub fn state_read(&self, p: &Path) -> Result<Option<Vec<u8>>> {
        self.0.state_read(p)
    }

    /// One of the agent's own JSON state files (a history a concern keeps):
    /// the default when absent, what failed (naming the file) when it cannot
    /// be read or parsed.
    pub fn state_json<T: serde::de::DeserializeOwned + Default>(
        &self,
        p: &str,
    ) -> std::result::Result<T, String> {
        match self.state_read(Path::new(p)) {
            Ok(None) => Ok(T::default()),
            Ok(Some(b)) => {
                serde_json::from_slice(&b).map_err(|e| format!("{p} does not parse ({e})"))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    pub fn unit_file(&self, name: &str) -> Result<Option<super::units::UnitFile>> {
        self.0.unit_file(name)
    }

    pub fn writable_for_pid1(&self, p: &Path) -> bool {
        self.0.writable_for_pid1(p)
    }

    pub fn which(&self, program: &str) -> Option<PathBuf> {
        self.0.which(program)
    }

    /// The running containerd's CRI config (a read-only gRPC query).
    pub fn cri_config(&self, socket: &Path) -> std::result::Result<String, super::cri::CriError> {
        self.0.cri_config(socket)
    }

    /// Runs one of the read-only tools. `None` when not live or not installed;
    /// any other program is refused (an error, never run).
    pub fn query(&self, program: &str, args: &[&str]) -> Option<std::io::Result<Output>> {
        if !read_only(program, args) {
            return Some(Err(refused(program, args)));
        }
        self.0.run(program, args)
    }

    /// `query` that kills the tool after `timeout`.
    pub fn query_bounded(
        &self,
        program: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Option<std::result::Result<Output, RunError>> {
        if !read_only(program, args) {
            return Some(Err(RunError::Spawn {
                program: program.to_owned(),
                source: refused(program, args),
            }));
        }
        self.0.run_bounded(program, args, timeout)
    }

    /// A read-only tool on copies of candidate files (`command::run_on_copies`):
    /// containerd's own parser on the config as it is.
    pub fn query_on_copies(
        &self,
        program: &Path,
        texts: &[String],
        args: &[&str],
    ) -> std::io::Result<Output> {
        let shown = program.to_string_lossy();
        if !read_only(&shown, args) {
            return Err(refused(&shown, args));
        }
        super::command::run_on_copies(program, texts, args)
    }

    /// Keeps a slow answer in the agent's state directory (`name` under it),
    /// for the next cycle. The one write a gather may make: the agent's own.
    pub fn cache_put(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.0.state_write(&cache_path(name), bytes, 0o600)
    }

    pub fn cache_get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.0.state_read(&cache_path(name))
    }
}

fn cache_path(name: &str) -> PathBuf {
    Path::new(crate::host::state::STATE_DIR).join(name)
}

fn refused(program: &str, args: &[&str]) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "`{program} {}` is not a read-only tool a check may run",
            args.join(" ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_tools_run() {
        assert!(read_only("/usr/bin/containerd", &["--version"]));
        assert!(read_only(
            "containerd",
            &["--config", "/etc/containerd/config.toml", "config", "dump"]
        ));
        assert!(
            !read_only("containerd", &["--config", "/x.toml"]),
            "serving"
        );
        assert!(read_only("ctr", &["oci", "spec"]));
        assert!(!read_only("ctr", &["containers", "rm", "x"]));
        assert!(read_only("dkms", &["status"]));
        assert!(!read_only("dkms", &["install", "x/1"]));
        assert!(read_only("lsinitramfs", &["/boot/initrd.img-6.1"]));
        assert!(!read_only("update-initramfs", &["-u"]));
        assert!(!read_only("rm", &["-rf", "/"]));
    }

    #[test]
    fn a_refused_program_is_an_error_not_a_run() {
        let t = tempfile::tempdir().unwrap();
        let r = ReadHost::new(Host::new(t.path()));
        let e = r.query("rm", &["-rf", "/"]).unwrap().unwrap_err();
        assert!(e.to_string().contains("not a read-only tool"), "{e}");
    }
}
