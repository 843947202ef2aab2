//! The agent's privileged helper for the kernel log, and how the daemon asks it.
//!
//! Reading `/dev/kmsg` needs CAP_SYSLOG where `kernel.dmesg_restrict = 1`
//! (Debian's default), and the node itself. The daemon's unit has neither
//! (`ProtectKernelLogs=yes`: systemd-analyze counts both, and a daemon that
//! serves HTTP has no need of the whole log). So, as for PCI config space, the
//! daemon asks systemd to run `rdma-node-agent kernel-log …` as a transient
//! unit with CAP_SYSLOG alone, `/dev/kmsg` its only device (read-only) and
//! only `/run/rdma-node-agent/kernel-log` writable:
//!
//! `kernel-log --token T --prefix P [--after SEQ] --max-bytes N --max-records N`
//! reads the log after SEQ within the caps and writes the kernel's own records
//! (facility LOG_KERN: a line root wrote into /dev/kmsg is not the kernel's)
//! whose text starts with P into `/run/rdma-node-agent/kernel-log/T.json`.
//!
//! A shell's `check` as root reads /dev/kmsg itself: the helper is the path
//! only when a direct read is refused and systemd is there to ask.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Host;
use super::kmsg::{self, Caps, KernelLog, KmsgError};
use super::pci_helper::{answer_path, is_token, own_exe, token};
use super::read::ReadHost;
use super::service::{PrivilegedHelper, ServiceManager};
use super::snapshot::Snapshot;
use super::stop::Stop;

/// Where the helper leaves its answers (in the daemon's runtime directory).
pub const OUT_DIR: &str = "/run/rdma-node-agent/kernel-log";
/// The transient units' names start with this (one per run).
pub const UNIT_PREFIX: &str = "rdma-node-agent-kernel-log";
const TIMEOUT: Duration = Duration::from_secs(30);
/// A prefix names a driver (`mlx5_core `): short, printable.
const MAX_PREFIX: usize = 64;

/// `rdma-node-agent kernel-log …` (hidden: systemd runs it for the daemon).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    pub token: String,
    /// Keep the kernel's records whose text starts with this.
    #[arg(long)]
    pub prefix: String,
    /// Records after this sequence number only.
    #[arg(long)]
    pub after: Option<u64>,
    #[arg(long)]
    pub max_bytes: u64,
    #[arg(long)]
    pub max_records: u64,
}

/// The helper's answer: the records it kept, or why it could not read.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    pub result: Result<KernelLog, String>,
}

fn out_path(token: &str) -> PathBuf {
    answer_path(OUT_DIR, token)
}

/// The kernel's own records starting with `prefix` (the filter both paths use).
fn keeps(prefix: &str) -> impl Fn(&kmsg::Record) -> bool + '_ {
    move |r| r.facility == 0 && r.text.starts_with(prefix)
}

/// Runs the helper: the log under `sys`'s root, its answer under `out`'s
/// (both `/` but in tests). `Err` (exit status 1) when the arguments are
/// refused or no answer could be written; a log it cannot read is an answer.
pub fn execute(sys: &ReadHost, out: &Host, args: &Args) -> Result<(), String> {
    if !is_token(&args.token) {
        return Err(format!(
            "--token {:?}: 1 to 32 lower-case hex digits",
            args.token
        ));
    }
    if args.prefix.is_empty()
        || args.prefix.len() > MAX_PREFIX
        || !args.prefix.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(format!(
            "--prefix {:?}: 1 to {MAX_PREFIX} printable ASCII characters",
            args.prefix
        ));
    }
    let caps = Caps {
        max_bytes: args.max_bytes,
        max_records: args.max_records,
    };
    let result = kmsg::read(sys, args.after, &keeps(&args.prefix), caps).map_err(|e| e.to_string());
    let bytes = serde_json::to_vec(&Answer { result }).map_err(|e| e.to_string())?;
    out.state_write(&out_path(&args.token), &bytes, 0o600)
        .map_err(|e| e.to_string())
}

/// A helper run's argument words (after the program), as a unit test's
/// systemd runs them.
#[cfg(test)]
pub(crate) fn execute_words(sys: &Host, out: &Host, argv: &[String]) -> Result<(), String> {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Words {
        #[command(flatten)]
        args: Args,
    }
    let rest = argv
        .iter()
        .skip_while(|w| *w != "kernel-log")
        .skip(1)
        .cloned();
    let w = Words::try_parse_from(std::iter::once("kernel-log".to_owned()).chain(rest))
        .map_err(|e| e.to_string())?;
    execute(&ReadHost::new(sys.clone()), out, &w.args)
}

/// `rdma-node-agent [--root DIR] kernel-log …`.
pub fn main(root: &Path, args: &Args) -> std::process::ExitCode {
    let host = Host::new(root);
    match execute(&ReadHost::new(host.clone()), &host, args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-node-agent kernel-log: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The kernel's records after `after` whose text starts with `prefix`: read
/// directly, or (refused, on the live host, with systemd to ask) through the
/// helper when `helper` allows it.
pub fn read(
    snap: &Snapshot,
    helper: bool,
    after: Option<u64>,
    prefix: &str,
    caps: Caps,
) -> Result<KernelLog, KmsgError> {
    read_with(snap, snap.privileged_runner(), helper, after, prefix, caps)
}

fn read_with(
    host: &ReadHost,
    manager: Option<&dyn ServiceManager>,
    helper: bool,
    after: Option<u64>,
    prefix: &str,
    caps: Caps,
) -> Result<KernelLog, KmsgError> {
    match kmsg::read(host, after, &keeps(prefix), caps) {
        Err(e @ KmsgError::Denied { .. }) if helper && host.is_live() => match manager {
            Some(m) => through_helper(m, host, after, prefix, caps),
            None => Err(e),
        },
        other => other,
    }
}

fn through_helper(
    manager: &dyn ServiceManager,
    host: &ReadHost,
    after: Option<u64>,
    prefix: &str,
    caps: Caps,
) -> Result<KernelLog, KmsgError> {
    let helper = |message: String| KmsgError::Helper { message };
    let token = token();
    let unit = format!("{UNIT_PREFIX}-{token}.service");
    let mut argv = vec![
        own_exe()
            .map_err(|e| helper(e.to_string()))?
            .display()
            .to_string(),
        "kernel-log".into(),
        "--token".into(),
        token.clone(),
        "--prefix".into(),
        prefix.to_owned(),
        "--max-bytes".into(),
        caps.max_bytes.to_string(),
        "--max-records".into(),
        caps.max_records.to_string(),
    ];
    if let Some(a) = after {
        argv.extend(["--after".to_owned(), a.to_string()]);
    }
    // Its answer's directory, root's alone, must exist for the sandbox.
    let dir = host.path(Path::new(OUT_DIR));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| helper(format!("cannot create {}: {e}", dir.display())))?;
    let ran = manager.run_privileged_helper(
        PrivilegedHelper::KernelLog,
        &unit,
        &argv,
        TIMEOUT,
        &Stop::new(),
    );
    let path = out_path(&token);
    let answer = host.state_read(&path);
    // Read once: gone, so answers never pile up in /run.
    let _ = Host::new(host.root()).state_remove(&path);
    let bytes = match (answer, ran) {
        (Ok(Some(b)), _) => b,
        (Ok(None), Err(e)) => {
            return Err(helper(format!(
                "the helper unit {unit} failed: {e} (see `journalctl -u {unit}`)"
            )));
        }
        (Ok(None), Ok(())) => return Err(helper(format!("the helper unit {unit} left no answer"))),
        (Err(e), _) => return Err(helper(format!("cannot read the helper's answer: {e}"))),
    };
    let a: Answer = serde_json::from_slice(&bytes)
        .map_err(|e| helper(format!("the helper's answer does not parse: {e}")))?;
    a.result.map_err(helper)
}

#[cfg(test)]
#[path = "kmsg_helper_tests.rs"]
mod tests;
