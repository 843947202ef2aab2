//! A bounded reader of the kernel log since boot, from `/dev/kmsg`.
//!
//! The format is the kernel's (Documentation/ABI/testing/dev-kmsg): one record
//! per read(2), `prio,seq,usec,flag[,more];text\n`, then dictionary lines that
//! begin with a space (` SUBSYSTEM=pci`, ` DEVICE=+pci:0000:03:00.0`). Opened
//! non-blocking, a reader starts at the oldest record the ring buffer still
//! holds and gets EAGAIN after the newest: that is where it stops. EPIPE means
//! the record it was about to read was overwritten (counted as lost).
//!
//! Bounded: at most `max_bytes` read and `max_records` records looked at per
//! call; only records the caller's filter keeps are returned. A `/dev/kmsg`
//! that is a regular file (a fixture tree under `--root`) is read whole, up to
//! the same caps, and split into records at lines that do not begin with a space.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::read::ReadHost;

pub const KMSG: &str = "/dev/kmsg";
/// The kernel refuses reads into buffers smaller than CONSOLE_EXT_LOG_MAX (8 KiB).
const READ_BUF: usize = 16384;

/// How much one pass may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_bytes: u64,
    pub max_records: u64,
}

/// One record of the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub seq: u64,
    /// The syslog level (0 emerg … 7 debug).
    pub level: u8,
    /// The syslog facility: 0 (LOG_KERN) for the kernel's own messages; the
    /// kernel gives a line written into /dev/kmsg from userspace another
    /// (LOG_USER unless it names one), so it cannot pass for the kernel's.
    pub facility: u8,
    /// The message, as the kernel escaped it (non-printable bytes as `\xNN`).
    pub text: String,
    /// The `DEVICE=` dictionary value (`+pci:0000:03:00.0`), when present.
    pub device: Option<String>,
}

/// What one pass read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelLog {
    /// The records the filter kept, oldest first.
    pub records: Vec<Record>,
    /// The oldest and newest sequence numbers seen (kept or not).
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Records overwritten while reading (EPIPE).
    pub lost: u64,
    /// A cap stopped the pass before the end of the buffer.
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum KmsgError {
    #[error("not read: the agent reads a tree under --root that has no {path}")]
    Absent { path: PathBuf },
    #[error(
        "cannot read {path}: {source}: reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict = 1 (Debian's default), and /dev/kmsg visible to the reader (under the shipped unit the daemon asks systemd to run its kernel-log helper, which has both, when there is a NIC to watch; run `check` as root from a shell)"
    )]
    Denied { path: PathBuf, source: io::Error },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The privileged helper (`kernel-log`) could not read it for the daemon.
    #[error("the kernel log, read by the agent's kernel-log helper: {message}")]
    Helper { message: String },
    #[error(
        "{path} is not the kernel log (character device {major}:{minor}, not 1:11): a container's stand-in, so the kernel's messages cannot be read here"
    )]
    NotKmsg {
        path: PathBuf,
        major: u64,
        minor: u64,
    },
}

/// `prio,seq,usec,flag[,...];text` and its dictionary lines.
pub fn parse_record(raw: &str) -> Option<Record> {
    let mut lines = raw.split('\n');
    let first = lines.next()?;
    let (head, text) = first.split_once(';')?;
    let mut fields = head.split(',');
    let prio: u32 = fields.next()?.trim().parse().ok()?;
    let seq: u64 = fields.next()?.parse().ok()?;
    let device = lines
        .filter_map(|l| l.strip_prefix(' '))
        .find_map(|l| l.strip_prefix("DEVICE="))
        .map(str::to_owned);
    Some(Record {
        seq,
        level: (prio & 7) as u8,
        facility: (prio >> 3) as u8,
        text: text.to_owned(),
        device,
    })
}

fn open_error(path: PathBuf, source: io::Error) -> KmsgError {
    match source.kind() {
        io::ErrorKind::PermissionDenied => KmsgError::Denied { path, source },
        // The private /dev of PrivateDevices= has no kmsg: the grant is missing.
        io::ErrorKind::NotFound => KmsgError::Denied { path, source },
        _ => KmsgError::Io { path, source },
    }
}

/// Reads the log after `after_seq` (all of it when `None`) up to the end of
/// the buffer or a cap, keeping the records `keep` accepts.
pub fn read(
    host: &ReadHost,
    after_seq: Option<u64>,
    keep: &dyn Fn(&Record) -> bool,
    caps: Caps,
) -> Result<KernelLog, KmsgError> {
    let path = host.path(std::path::Path::new(KMSG));
    let meta = match std::fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && !host.is_live() => {
            return Err(KmsgError::Absent { path });
        }
        Err(e) => return Err(open_error(path, e)),
        Ok(m) => m,
    };
    let mut log = KernelLog::default();
    let take = |raw: &str, log: &mut KernelLog| {
        let Some(r) = parse_record(raw) else { return };
        log.first_seq.get_or_insert(r.seq);
        log.last_seq = Some(r.seq);
        if after_seq.is_none_or(|a| r.seq > a) && keep(&r) {
            log.records.push(r);
        }
    };
    if !meta.file_type().is_char_device() {
        return read_file(&path, caps, log, &take);
    }
    // A container's /dev/kmsg may be /dev/null (systemd-nspawn): it reads as an
    // empty log, which must not pass for a clean one.
    let (major, minor) = (
        nix::sys::stat::major(meta.rdev()),
        nix::sys::stat::minor(meta.rdev()),
    );
    // systemd's stand-in for a hidden node (ProtectKernelLogs=, InaccessiblePaths=)
    // is a 0:0 device nobody may open: a refusal, not another device.
    if (major, minor) == (0, 0) {
        let source = io::Error::from(io::ErrorKind::PermissionDenied);
        return Err(KmsgError::Denied { path, source });
    }
    if (major, minor) != (1, 11) {
        return Err(KmsgError::NotKmsg { path, major, minor });
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(&path)
        .map_err(|e| open_error(path.clone(), e))?;
    let mut buf = vec![0u8; READ_BUF];
    let (mut bytes, mut count) = (0u64, 0u64);
    loop {
        if bytes >= caps.max_bytes || count >= caps.max_records {
            log.truncated = true;
            return Ok(log);
        }
        match f.read(&mut buf) {
            Ok(0) => return Ok(log),
            Ok(n) => {
                bytes += n as u64;
                count += 1;
                take(&String::from_utf8_lossy(&buf[..n]), &mut log);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(log),
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EPIPE as i32) => log.lost += 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(KmsgError::Io { path, source: e }),
        }
    }
}

/// A plain file in place of the device (a recording, a test's tree): its
/// records up to the caps.
fn read_file(
    path: &std::path::Path,
    caps: Caps,
    mut log: KernelLog,
    take: &dyn Fn(&str, &mut KernelLog),
) -> Result<KernelLog, KmsgError> {
    let mut text = String::new();
    let f = File::open(path).map_err(|e| open_error(path.to_owned(), e))?;
    f.take(caps.max_bytes)
        .read_to_string(&mut text)
        .map_err(|e| KmsgError::Io {
            path: path.to_owned(),
            source: e,
        })?;
    for (count, raw) in split_records(&text).enumerate() {
        if count as u64 >= caps.max_records {
            log.truncated = true;
            break;
        }
        take(raw, &mut log);
    }
    log.truncated |= text.len() as u64 >= caps.max_bytes;
    Ok(log)
}

/// Records of a file: a record starts at each line that is not a dictionary line.
fn split_records(text: &str) -> impl Iterator<Item = &str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            starts.push(at);
        }
        at += line.len();
    }
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([text.len()]).collect();
    starts
        .into_iter()
        .zip(ends)
        .map(move |(s, e)| text[s..e].trim_end_matches('\n'))
}

#[cfg(test)]
#[path = "kmsg_tests.rs"]
mod tests;
