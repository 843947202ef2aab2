//! A write refused as on a read-only file system, although the host (PID 1's
//! view) can write there: the directory is read-only to this service only,
//! because of its sandbox (`ProtectSystem=strict`). Two causes, told apart by
//! the unit's own `ReadWritePaths=`:
//!
//! - the unit grants the directory, but this service's mount namespace lost
//!   it (it did not exist, or was remounted, when the service started): a
//!   stale mount, which a restart of the service fixes;
//! - the unit does not grant it (a layout outside the unit's static list:
//!   microk8s's `/var/snap/microk8s/<rev>/args`, a config linked into `/opt`):
//!   the agent grants exactly the directories it writes files in, with a
//!   drop-in for its own unit, then has systemd restart it.
//!
//! Either way the restart is a job queued with systemd (not an exit, which
//! `Restart=on-failure` would count towards `StartLimitBurst`), at most once
//! per boot for the same directories: when it did not help, the check says
//! so (`path_not_writable`) and the daemon keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::engine::ledger::{Ledger, LedgerError};
use crate::engine::plan::{FileChange, Plan};
use crate::host::lock;
use crate::host::sandbox::{granted, own_unit};
use crate::host::service::{ServiceManager, SystemdError, UnitState};
use crate::host::state::STATE_DIR;
use crate::host::state_writer::{Access, StateWriter};
use crate::host::{Host, HostError};

/// The drop-in that grants the agent's unit its layout's directories.
pub const DROPIN: &str = "50-rdma-node-agent-paths.conf";
/// The ledger owner of that drop-in (`revert` removes it).
pub const OWNER: &str = "agent-unit";
const RECORD: &str = "self-restart.json";

/// What to do about directories read-only to this service only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Remedy {
    /// The unit grants them: a restart of the service makes them writable.
    Restart(Vec<PathBuf>),
    /// The unit does not grant these: the drop-in does, then a restart.
    Grant(Vec<PathBuf>),
    /// Nothing a restart can fix: said in the check; the daemon keeps serving.
    Report(String),
}

/// Pure: the remedy for `read_only` directories, given the unit's
/// `ReadWritePaths=` values and the directories a restart this boot was for.
pub(super) fn remedy(
    read_only: &[PathBuf],
    granted_by_unit: &[String],
    tried: &[PathBuf],
) -> Remedy {
    let list = |d: &[PathBuf]| {
        d.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if read_only.iter().all(|d| tried.contains(d)) {
        return Remedy::Report(format!(
            "{} stayed read-only to rdma-node-agent.service after it restarted for it (a mount systemd cannot make writable to it: see `systemctl show -p ReadWritePaths rdma-node-agent` and `findmnt` there); the daemon keeps serving and does not restart again this boot",
            list(read_only)
        ));
    }
    let missing: Vec<PathBuf> = read_only
        .iter()
        .filter(|d| !granted(d, granted_by_unit))
        .cloned()
        .collect();
    if let Some(wide) = missing.iter().find(|d| too_wide(d)) {
        return Remedy::Report(format!(
            "{} is read-only to rdma-node-agent.service, which grants itself only the directories its files are in, never one as wide as this: create the directory the file goes in (or set its path in the agent config), then `systemctl restart rdma-node-agent`",
            wide.display()
        ));
    }
    if missing.is_empty() {
        Remedy::Restart(read_only.to_vec())
    } else {
        Remedy::Grant(missing)
    }
}

/// A directory too wide to grant: `/` and its children, and trees that hold
/// far more than a layout's config (`/var/lib`, `/var/snap`, `/usr`, `/boot`).
fn too_wide(d: &Path) -> bool {
    d.components().count() < 3
        || [Path::new("/var/lib"), Path::new("/var/snap")].contains(&d)
        || d.starts_with("/usr")
        || d.starts_with("/boot")
}

/// The drop-in's text: every directory it granted before, and these.
pub(super) fn dropin_text(before: Option<&str>, add: &[PathBuf]) -> String {
    let mut dirs: Vec<String> = before
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("ReadWritePaths=-"))
        .map(str::to_owned)
        .collect();
    for d in add {
        let d = d.display().to_string();
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    let mut text = String::from(
        "# Written by rdma-node-agent: the directories of the files it manages on\n\
         # this node's containerd layout, writable to it under ProtectSystem=strict.\n\
         # `rdma-node-agent revert` removes this file.\n[Service]\n",
    );
    for d in dirs {
        text.push_str(&format!("ReadWritePaths=-{d}\n"));
    }
    text
}

/// Restarts this boot were for these directories (the agent's own state).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    boot_id: String,
    dirs: Vec<PathBuf>,
}

/// Why the remedy could not be carried out (said after "cannot restart this
/// service: ").
#[derive(Debug, thiserror::Error)]
pub(super) enum SettleError {
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error("cannot write {}: {source}", .path.display())]
    Grant {
        path: PathBuf,
        #[source]
        source: LedgerError,
    },
    #[error("systemd is not reachable over D-Bus")]
    NoSystemd,
    /// The record of this boot's restarts (so one is not repeated).
    #[error(transparent)]
    Record(#[from] HostError),
    #[error(transparent)]
    Reload(#[from] SystemdError),
}

/// Carries out the remedy for the plan's files that are read-only here.
/// Returns what to say; `Err` when there is no systemd to ask (the caller
/// falls back to exiting for `Restart=on-failure`, once).
pub(super) fn settle(agent: &Agent, plan: &Plan) -> Result<String, SettleError> {
    let host = &agent.host;
    let files: Vec<PathBuf> = plan.changes.iter().map(|c| c.path.clone()).collect();
    let mut read_only = host.read_only_dirs(&files);
    // Only what the host itself can write: a restart cannot help elsewhere.
    read_only.retain(|d| host.writable_for_pid1(&d.join("file")));
    if read_only.is_empty() {
        return Ok(
            "nothing to grant: its directories are writable to this service now, or read-only to the host too"
                .into(),
        );
    }
    let Some(unit) = own_unit() else {
        return Ok(format!(
            "{} is read-only to this process, which runs in no systemd service: run it where it can write there",
            read_only[0].display()
        ));
    };
    let unit_file = host.unit_file(&unit).ok().flatten();
    let granted_by_unit = unit_file.map(|u| u.read_write_paths).unwrap_or_default();
    let boot_id = boot_id(host);
    let record_path = Path::new(STATE_DIR).join(RECORD);
    let record = this_boots_record(host, &record_path, &boot_id);
    let manager = agent.live.as_ref().and_then(|l| l.manager.clone());
    let what = match remedy(&read_only, &granted_by_unit, &record.dirs) {
        Remedy::Report(why) => return Ok(why),
        Remedy::Restart(dirs) => format!(
            "{} is granted by {unit} but missing from this service's mounts (made or remounted since it started): stale mounts, restarting",
            dirs[0].display()
        ),
        Remedy::Grant(dirs) => grant(host, &unit, &dirs)?,
    };
    let m = manager.ok_or(SettleError::NoSystemd)?;
    let mut dirs = record.dirs;
    dirs.extend(read_only);
    let bytes = serde_json::to_vec(&Record { boot_id, dirs }).expect("record serializes");
    let kept = crate::host::state::Record {
        path: record_path,
        bytes,
        note: None,
    };
    StateWriter::new(host).keep(&kept, Access::Private)?;
    // The unit as it is on disk now (a drop-in just written, or one not yet loaded).
    m.reload()?;
    restart_when_active(m, unit);
    Ok(what)
}

/// This boot's id: restarts are counted per boot.
fn boot_id(host: &Host) -> String {
    host.read_string(Path::new("/proc/sys/kernel/random/boot_id"))
        .ok()
        .flatten()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The directories restarts were made for this boot (none from another boot).
fn this_boots_record(host: &Host, record_path: &Path, boot_id: &str) -> Record {
    host.state_read(record_path)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|r: &Record| r.boot_id == boot_id)
        .unwrap_or_default()
}

/// Grants the unit these directories in the agent's drop-in (through the
/// ledger, so `revert` removes it). Returns what to say.
fn grant(host: &Host, unit: &str, dirs: &[PathBuf]) -> Result<String, SettleError> {
    let path = Path::new("/etc/systemd/system")
        .join(format!("{unit}.d"))
        .join(DROPIN);
    let before = host.read(&path).ok().flatten().map(|d| d.bytes);
    let before = before.map(|b| String::from_utf8_lossy(&b).into_owned());
    let text = dropin_text(before.as_deref(), dirs);
    let change = FileChange {
        path: path.clone(),
        old: before.map(String::into_bytes),
        new: Some(text.into_bytes()),
        mode: 0o644,
        owner: OWNER,
        reason: "grant the agent's unit the directories of its containerd layout".into(),
        restart: Vec::new(),
    };
    let one = Plan {
        changes: vec![change],
        ..Plan::default()
    };
    let _lock = lock::acquire(host, Path::new(lock::LOCK_PATH), Duration::from_secs(10))?;
    Ledger::load(&host.reader())
        .and_then(|mut l| l.apply(host, &one))
        .map_err(|source| SettleError::Grant {
            path: path.clone(),
            source,
        })?;
    Ok(format!(
        "{} not granted by {unit}: granted in {} (ReadWritePaths=), restarting",
        list_dirs(dirs),
        path.display()
    ))
}

/// Queues the restart once the unit is active: queued while its start job still
/// runs (before READY, at the first reconcile), it would cancel that job and
/// fail the `systemctl start` that started it (a package's postinst).
fn restart_when_active(m: Arc<dyn ServiceManager>, unit: String) {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline
            && !m
                .status(&unit)
                .is_ok_and(|s| s.active_state == UnitState::Active)
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        match m.queue_restart(&unit) {
            Ok(()) => tracing::info!("restart of {unit} queued with systemd"),
            Err(e) => tracing::error!("cannot restart {unit}: {e}"),
        }
    });
}

fn list_dirs(d: &[PathBuf]) -> String {
    d.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// The shipped unit's ReadWritePaths= values.
    fn shipped() -> Vec<String> {
        let unit = include_str!("../../systemd/rdma-node-agent.service");
        unit.lines()
            .filter_map(|l| l.strip_prefix("ReadWritePaths="))
            .flat_map(|v| v.split_whitespace().map(str::to_owned))
            .collect()
    }

    /// A granted directory that is read-only here is a stale mount (restart);
    /// one the unit does not grant (microk8s, a link into /opt) is granted.
    #[test]
    fn a_stale_mount_is_told_from_a_directory_the_unit_does_not_grant() {
        let rw = shipped();
        assert_eq!(
            remedy(&[p("/etc/containerd")], &rw, &[]),
            Remedy::Restart(vec![p("/etc/containerd")])
        );
        let mk = p("/var/snap/microk8s/5372/args");
        assert_eq!(
            remedy(std::slice::from_ref(&mk), &rw, &[]),
            Remedy::Grant(vec![mk.clone()])
        );
        let opt = p("/opt/cm/containerd");
        assert_eq!(
            remedy(&[opt.clone(), p("/etc/containerd")], &rw, &[]),
            Remedy::Grant(vec![opt])
        );
        // Once granted (the drop-in's value is among the unit's), a stale mount again.
        let mut with_dropin = rw.clone();
        with_dropin.push(format!("-{}", mk.display()));
        assert_eq!(
            remedy(std::slice::from_ref(&mk), &with_dropin, &[]),
            Remedy::Restart(vec![mk.clone()])
        );
    }

    #[test]
    fn one_restart_per_boot_and_never_a_wide_grant() {
        let rw = shipped();
        let mk = p("/var/snap/microk8s/5372/args");
        assert!(matches!(
            remedy(std::slice::from_ref(&mk), &rw, std::slice::from_ref(&mk)),
            Remedy::Report(m) if m.contains("stayed read-only") && m.contains("keeps serving")
        ));
        for wide in ["/etc", "/opt", "/var/lib", "/usr/local/etc", "/var/snap"] {
            assert!(
                matches!(remedy(&[p(wide)], &rw, &[]), Remedy::Report(_)),
                "{wide}"
            );
        }
    }

    #[test]
    fn the_dropin_keeps_what_it_granted() {
        let one = dropin_text(None, &[p("/var/snap/microk8s/1/args")]);
        assert!(one.contains("[Service]\nReadWritePaths=-/var/snap/microk8s/1/args\n"));
        let two = dropin_text(Some(&one), &[p("/var/snap/microk8s/2/args")]);
        assert!(two.ends_with(
            "ReadWritePaths=-/var/snap/microk8s/1/args\nReadWritePaths=-/var/snap/microk8s/2/args\n"
        ));
        assert_eq!(
            dropin_text(Some(&two), &[p("/var/snap/microk8s/2/args")]),
            two
        );
    }
}
