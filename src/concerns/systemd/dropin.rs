//! The `systemd.memlock` concern: a drop-in per configured unit (default
//! containerd.service) with `LimitMEMLOCK=`, so the runtime and the shims it starts
//! (which containers without a base spec inherit from) have the locked-memory limit.

use crate::concerns::systemd::reasons;
use crate::engine::check::CheckId;
use std::path::PathBuf;

use serde_json::json;

use crate::config::SystemdConfig;
use crate::engine::check::{Check, Status};
use crate::engine::plan::{FileChange, Plan};
use crate::host::HostError;
use crate::host::limit::Limit;
use crate::host::procfs;
use crate::host::snapshot::Snapshot;
use crate::reason::Reason;

use crate::host::service::{UnitReader, UnitState, UnitStatus};

pub const CHECK_ID: CheckId = CheckId::new("systemd.memlock");

#[derive(Debug, Clone)]
pub struct UnitFacts {
    pub unit: String,
    pub path: PathBuf,
    pub current: Option<Vec<u8>>,
    /// From systemd, when it can be asked (live host).
    pub status: Option<UnitStatus>,
    /// Why systemd could not be asked, when it could not.
    pub status_error: Option<String>,
    /// The soft locked-memory limit of the unit's running main process, or why
    /// it could not be read (no main process, /proc/PID/limits unreadable).
    pub process_memlock: Result<Limit, String>,
}

pub fn dropin_path(unit: &str, name: &str) -> PathBuf {
    PathBuf::from(format!("/etc/systemd/system/{unit}.d/{name}"))
}

/// `units`: each unit with the PID of its process when found without systemd.
pub fn gather(
    host: &Snapshot,
    cfg: &SystemdConfig,
    units: &[(String, Result<u32, Option<String>>)],
    manager: Option<&dyn UnitReader>,
) -> Result<Vec<UnitFacts>, HostError> {
    let mut out = Vec::new();
    for (unit, found_pid) in units {
        let path = dropin_path(unit, &cfg.dropin);
        let current = host.read(&path)?.map(|d| d.bytes);
        let (status, status_error) = match manager.map(|m| m.status(unit)) {
            None => (None, host.manager_error().map(str::to_owned)),
            Some(Ok(s)) => (Some(s), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        // Without systemd to name the main process, find it by its command name.
        let pid = match &status {
            Some(s) if s.main_pid > 0 => Ok(s.main_pid),
            Some(s) => Err(format!(
                "systemd names no main process of {unit} (it is {})",
                s.active_state
            )),
            None => found_pid.clone().map_err(|why| {
                why.unwrap_or_else(|| {
                    format!("no containerd process of {unit} found (systemd cannot be asked)")
                })
            }),
        };
        let process_memlock = pid.and_then(|p| memlock_of(host, p));
        out.push(UnitFacts {
            unit: unit.clone(),
            path,
            current,
            status,
            status_error,
            process_memlock,
        });
    }
    Ok(out)
}

/// The soft memlock of a process, or why it could not be read.
fn memlock_of(host: &Snapshot, pid: u32) -> Result<Limit, String> {
    let path = procfs::proc_file(pid, "limits");
    match host.proc_read(pid, "limits") {
        Ok(Some(l)) => procfs::parse_limit(&l, procfs::MEMLOCK_ROW).ok_or_else(|| {
            format!(
                "{} has no readable \"{}\" row",
                path.display(),
                procfs::MEMLOCK_ROW
            )
        }),
        Ok(None) => Err(format!(
            "{} is gone (process {pid} exited?)",
            path.display()
        )),
        Err(e) => Err(e),
    }
}

pub fn content(limit: Limit) -> String {
    format!(
        "# Written by rdma-node-agent: RDMA needs a high locked-memory limit.\n\
         # Removed by `rdma-node-agent revert`; edit /etc/rdma-node-agent/config.toml instead.\n\
         [Service]\nLimitMEMLOCK={}\n",
        limit.systemd_value()
    )
}

/// The drop-in files to write and the restarts they need. Pure.
pub fn decide(facts: &[UnitFacts], cfg: &SystemdConfig) -> Plan {
    let mut plan = Plan::default();
    let want = content(cfg.memlock);
    for f in facts {
        if f.current.as_deref() != Some(want.as_bytes()) {
            plan.changes.push(FileChange {
                path: f.path.clone(),
                old: f.current.clone(),
                new: Some(want.clone().into_bytes()),
                mode: 0o644,
                owner: "systemd",
                reason: format!(
                    "LimitMEMLOCK={} for {}",
                    cfg.memlock.systemd_value(),
                    f.unit
                ),
                // systemd reads it at daemon-reload; the unit's process at its start.
                restart: vec![f.unit.clone()],
            });
        }
    }
    plan
}

pub fn check(facts: &[UnitFacts], cfg: &SystemdConfig) -> Check {
    let want = content(cfg.memlock);
    let problems: Vec<Problem> = facts
        .iter()
        .filter_map(|f| unit_problem(f, cfg, &want))
        .collect();
    let details = json!({
        "target": cfg.memlock.systemd_value(),
        "units": facts.iter().map(|f| json!({
            "unit": f.unit,
            "dropin": f.path,
            "systemd_limit_memlock": f.status.as_ref().and_then(|s| s.limit_memlock),
            "main_pid": f.status.as_ref().map(|s| s.main_pid),
            "process_memlock": f.process_memlock.as_ref().ok().map(|l| l.to_string()),
            "process_memlock_error": f.process_memlock.as_ref().err(),
        })).collect::<Vec<_>>(),
    });
    let worst = problems.iter().map(|(s, _, _)| *s).max();
    // The first problem of the worst status names the reason.
    let reason = problems
        .iter()
        .find(|(s, _, _)| Some(*s) == worst)
        .map(|(_, r, _)| *r);
    // What systemd was not asked (unit state, loaded limit), and why.
    let not_asked = facts
        .iter()
        .find_map(|f| f.status_error.as_deref())
        .map(|e| format!(" (unit state and loaded LimitMEMLOCK unchecked: {e})"))
        .unwrap_or_default();
    let check = match worst {
        None => Check::new(
            CHECK_ID,
            Status::Ok,
            format!(
                "{}: LimitMEMLOCK={} in effect",
                facts
                    .iter()
                    .map(|f| f.unit.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                cfg.memlock.systemd_value()
            ),
        ),
        Some(status) => Check::new(
            CHECK_ID,
            status,
            problems
                .into_iter()
                .map(|(_, _, m)| m)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let check = match reason {
        Some(r) => check.with_reason(r),
        None => check,
    };
    Check {
        message: format!("{}{not_asked}", check.message),
        ..check
    }
    .with_details(details)
}

/// A problem the check reports: its status, reason and message.
type Problem = (Status, Reason, String);

/// The first thing between one unit and the memlock in effect, in order: the
/// drop-in, systemd's loaded limit, the unit's state, its process's limit.
fn unit_problem(f: &UnitFacts, cfg: &SystemdConfig, want: &str) -> Option<Problem> {
    if f.current.as_deref() != Some(want.as_bytes()) {
        return Some((
            Status::Fail,
            reasons::DROPIN_MISSING,
            format!(
                "{}: drop-in {} is missing or differs (run `rdma-node-agent apply`)",
                f.unit,
                f.path.display()
            ),
        ));
    }
    if let Some(s) = &f.status {
        if s.limit_memlock != Some(cfg.memlock.0) {
            return Some((
                Status::Fail,
                reasons::DAEMON_RELOAD_PENDING,
                format!(
                    "{}: systemd has not loaded the drop-in yet (daemon-reload pending)",
                    f.unit
                ),
            ));
        }
        if s.active_state != UnitState::Active {
            return Some((
                Status::Warn,
                reasons::UNIT_NOT_ACTIVE,
                format!("{} is {}", f.unit, s.active_state),
            ));
        }
    }
    match &f.process_memlock {
        Ok(l) if *l == cfg.memlock => None,
        Ok(l) => Some((
            Status::Fail,
            Reason::MEMLOCK_BELOW_TARGET,
            format!(
                "{}: needs restart: its main process runs with memlock {l}, want {}",
                f.unit, cfg.memlock
            ),
        )),
        // Not seen in effect is not in effect: the check cannot tell.
        Err(why) => Some((
            Status::Unknown,
            Reason::FACT_UNREADABLE,
            format!(
                "{}: drop-in in place, but its effect on the running process could not be read: {why}",
                f.unit
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(limit: Limit) -> SystemdConfig {
        SystemdConfig {
            memlock: limit,
            ..SystemdConfig::default()
        }
    }

    fn facts(
        current: Option<&str>,
        status: Option<UnitStatus>,
        proc: Result<Limit, String>,
    ) -> Vec<UnitFacts> {
        vec![UnitFacts {
            unit: "containerd.service".into(),
            path: dropin_path("containerd.service", "50-rdma-node-agent.conf"),
            current: current.map(|s| s.as_bytes().to_vec()),
            status,
            status_error: None,
            process_memlock: proc,
        }]
    }

    fn status(limit: u64) -> UnitStatus {
        UnitStatus {
            active_state: UnitState::Active,
            main_pid: 42,
            limit_memlock: Some(limit),
            started: None,
        }
    }

    #[test]
    fn missing_dropin_is_planned_with_a_restart() {
        let c = cfg(Limit::UNLIMITED);
        let p = decide(&facts(None, None, Err("none".into())), &c);
        assert_eq!(p.changes.len(), 1);
        assert!(
            String::from_utf8_lossy(p.changes[0].new.as_ref().unwrap())
                .contains("[Service]\nLimitMEMLOCK=infinity\n")
        );
        // The drop-in names its unit as its reader: a plan restarts it.
        assert_eq!(p.changes[0].restart, ["containerd.service"]);
        let mut plan = Plan::default();
        plan.extend(p);
        assert_eq!(plan.restarts().collect::<Vec<_>>(), ["containerd.service"]);
        assert_eq!(
            check(&facts(None, None, Err("none".into())), &c).status,
            Status::Fail
        );
    }

    #[test]
    fn reload_then_restart_pending_then_ok() {
        let c = cfg(Limit(4 << 20));
        let want = content(c.memlock);
        let f = facts(Some(&want), Some(status(65536)), Ok(Limit(65536)));
        assert!(decide(&f, &c).is_empty());
        assert!(check(&f, &c).message.contains("daemon-reload pending"));
        let f = facts(Some(&want), Some(status(4 << 20)), Ok(Limit(65536)));
        assert!(check(&f, &c).message.contains("needs restart"));
        let f = facts(Some(&want), Some(status(4 << 20)), Ok(Limit(4 << 20)));
        assert_eq!(check(&f, &c).status, Status::Ok);
    }

    /// Systemd has loaded the drop-in and the unit is active, but the main
    /// process's limits cannot be read: that is not "in effect".
    #[test]
    fn unreadable_main_process_is_unknown_not_ok() {
        let c = cfg(Limit::UNLIMITED);
        let want = content(c.memlock);
        let t = tempfile::tempdir().unwrap();
        // /proc/42/limits exists but cannot be read (a directory in its place).
        std::fs::create_dir_all(t.path().join("proc/42/limits")).unwrap();
        let snap = Snapshot::new(crate::host::Host::new(t.path()));
        let why = memlock_of(&snap, 42).unwrap_err();
        assert!(why.contains("/proc/42/limits"), "{why}");
        let f = facts(Some(&want), Some(status(u64::MAX)), Err(why));
        let ch = check(&f, &c);
        assert_eq!(ch.status, Status::Unknown, "{}", ch.message);
        assert!(ch.message.contains("/proc/42/limits"), "{}", ch.message);
        // Gone: named too.
        assert!(
            memlock_of(&snap, 43)
                .unwrap_err()
                .contains("/proc/43/limits")
        );
        // MainPID 0 for an active service: systemd could not name the process.
        let mut s = status(u64::MAX);
        s.main_pid = 0;
        let dir = t.path().join("etc/systemd/system/containerd.service.d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("50-rdma-node-agent.conf"), &want).unwrap();
        let facts = gather_with_status(&snap, &c, s);
        let ch = check(&facts, &c);
        assert_eq!(ch.status, Status::Unknown, "{}", ch.message);
        assert!(ch.message.contains("no main process"), "{}", ch.message);
    }

    fn gather_with_status(snap: &Snapshot, c: &SystemdConfig, s: UnitStatus) -> Vec<UnitFacts> {
        struct One(UnitStatus);
        impl UnitReader for One {
            fn status(&self, _: &str) -> Result<UnitStatus, crate::host::service::SystemdError> {
                Ok(self.0.clone())
            }
        }
        gather(
            snap,
            c,
            &[("containerd.service".to_owned(), Err(None))],
            Some(&One(s)),
        )
        .unwrap()
    }

    /// On a live host without systemd's bus, the check says what it could not ask.
    #[test]
    fn without_systemd_the_check_says_what_it_could_not_ask() {
        let c = cfg(Limit::UNLIMITED);
        let t = tempfile::tempdir().unwrap();
        let snap = Snapshot::new(crate::host::Host::new(t.path()))
            .with_manager_error("cannot ask systemd: no bus socket".into());
        let f = gather(
            &snap,
            &c,
            &[("containerd.service".to_owned(), Err(None))],
            None,
        )
        .unwrap();
        let ch = check(&f, &c);
        assert_eq!(ch.status, Status::Fail, "{}", ch.message);
        assert!(
            ch.message
                .contains("unit state and loaded LimitMEMLOCK unchecked")
                && ch.message.contains("cannot ask systemd: no bus socket"),
            "{}",
            ch.message
        );
    }
}
