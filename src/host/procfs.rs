//! Facts about processes from `/proc` (under the root, so fixtures can supply
//! them), read through the cycle's snapshot so that each file is read once
//! whichever concerns need it. Parsers are pure functions of the file text.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::limit::Limit;
use crate::host::Result;
use crate::host::snapshot::{self, ProcFile, Snapshot};

/// Numeric entries of /proc.
pub fn pids(snap: &Snapshot) -> Result<Vec<u32>> {
    Ok(snap.pids()?.to_vec())
}

pub fn proc_file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// A process's file; `None` when it is gone or unreadable (processes come and go).
pub fn read(snap: &Snapshot, pid: u32, name: ProcFile) -> Option<Arc<str>> {
    snap.proc(pid, name)
}

pub fn comm(snap: &Snapshot, pid: u32) -> Option<String> {
    read(snap, pid, "comm").map(|s| s.trim_end().to_owned())
}

/// The soft limit of a `/proc/<pid>/limits` row, e.g. "Max locked memory".
pub fn parse_limit(limits: &str, row: &str) -> Option<Limit> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    let soft = line[row.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(Limit::UNLIMITED)
    } else {
        soft.parse().ok().map(Limit)
    }
}

pub const MEMLOCK_ROW: &str = "Max locked memory";

/// Field 22 of /proc/<pid>/stat: start time in clock ticks after boot.
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Field 4 of /proc/<pid>/stat: the parent's pid.
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `btime` of /proc/stat: boot time in seconds since the epoch.
pub fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// When a process started, to one clock tick.
pub fn start_time(snap: &Snapshot, pid: u32) -> Option<SystemTime> {
    started_at(&read(snap, pid, "stat")?, boot_time(snap)?)
}

/// The boot time in seconds since the epoch (`btime` of /proc/stat).
pub fn boot_time(snap: &Snapshot) -> Option<u64> {
    parse_boot_time(&snap.file(snapshot::PROC_STAT)?)
}

/// When the process of a `/proc/<pid>/stat` text started, given the boot time.
pub fn started_at(stat: &str, boot: u64) -> Option<SystemTime> {
    let ticks = parse_start_ticks(stat)?;
    let hz = clock_ticks_per_second();
    Some(UNIX_EPOCH + Duration::from_secs(boot) + Duration::from_millis(ticks * 1000 / hz))
}

fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100)
}

/// The first process whose command name is `name` (e.g. the containerd daemon).
pub fn find_by_comm(snap: &Snapshot, name: &str) -> Result<Option<u32>> {
    Ok(snap
        .pids()?
        .iter()
        .copied()
        .find(|pid| comm(snap, *pid).as_deref() == Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max locked memory         65536                8388608              bytes     \n\
Max open files            1048576              1048576              files     \n";

    #[test]
    fn limits_rows() {
        assert_eq!(parse_limit(LIMITS, MEMLOCK_ROW), Some(Limit(65536)));
        assert_eq!(parse_limit(LIMITS, "Max cpu time"), Some(Limit::UNLIMITED));
        assert_eq!(parse_limit("garbage", MEMLOCK_ROW), None);
    }

    #[test]
    fn stat_start_time_survives_odd_names() {
        let stat =
            "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_start_ticks(stat), Some(98765));
        assert_eq!(parse_ppid(stat), Some(1));
        assert_eq!(
            parse_boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_start_ticks("nonsense"), None);
        assert_eq!(parse_ppid("nonsense"), None);
    }
}
