//! The `systemd.memlock` concern: a drop-in per configured unit (default
//! containerd.service) with `LimitMEMLOCK=`, so the runtime and the shims it starts
//! (which containers without a base spec inherit from) have the locked-memory limit.

use std::path::PathBuf;

use serde_json::json;

use crate::check::{Check, Status};
use crate::config::{Limit, SystemdConfig};
use crate::host::HostError;
use crate::host::snapshot::Snapshot;
use crate::plan::{FileChange, Plan};
use crate::procfs;

use super::{ServiceManager, UnitStatus};

pub const CHECK_ID: &str = "systemd.memlock";

#[derive(Debug, Clone)]
pub struct UnitFacts {
    pub unit: String,
    pub path: PathBuf,
    pub current: Option<Vec<u8>>,
    /// From systemd, when it can be asked (live host).
    pub status: Option<UnitStatus>,
    /// Why systemd could not be asked, when it could not.
    pub status_error: Option<String>,
    /// The soft locked-memory limit of the unit's running main process.
    pub process_memlock: Option<Limit>,
}

pub fn dropin_path(unit: &str, name: &str) -> PathBuf {
    PathBuf::from(format!("/etc/systemd/system/{unit}.d/{name}"))
}

/// `units`: each unit with the PID of its process when found without systemd.
pub fn gather(
    host: &Snapshot,
    cfg: &SystemdConfig,
    units: &[(String, Option<u32>)],
    manager: Option<&dyn ServiceManager>,
) -> Result<Vec<UnitFacts>, HostError> {
    let mut out = Vec::new();
    for (unit, found_pid) in units {
        let path = dropin_path(unit, &cfg.dropin);
        let current = host.read(&path)?.map(|d| d.bytes);
        let (status, status_error) = match manager.map(|m| m.status(unit)) {
            None => (None, None),
            Some(Ok(s)) => (Some(s), None),
            Some(Err(e)) => (None, Some(e.to_string())),
        };
        // Without systemd to name the main process, find it by its command name.
        let pid = match &status {
            Some(s) if s.main_pid > 0 => Some(s.main_pid),
            Some(_) => None,
            None => *found_pid,
        };
        let process_memlock = pid
            .and_then(|p| procfs::read(host, p, "limits"))
            .and_then(|l| procfs::parse_limit(&l, procfs::MEMLOCK_ROW));
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
    if !cfg.enabled {
        return Check::new(CHECK_ID, Status::Skipped, "disabled in the agent config");
    }
    let want = content(cfg.memlock);
    let mut problems: Vec<(Status, String)> = Vec::new();
    for f in facts {
        if f.current.as_deref() != Some(want.as_bytes()) {
            problems.push((
                Status::Fail,
                format!(
                    "{}: drop-in {} is missing or differs (run `rdma-node-agent apply`)",
                    f.unit,
                    f.path.display()
                ),
            ));
            continue;
        }
        if let Some(s) = &f.status {
            if s.limit_memlock != Some(cfg.memlock.0) {
                problems.push((
                    Status::Fail,
                    format!(
                        "{}: systemd has not loaded the drop-in yet (daemon-reload pending)",
                        f.unit
                    ),
                ));
                continue;
            }
            if s.active_state != "active" {
                problems.push((Status::Warn, format!("{} is {}", f.unit, s.active_state)));
                continue;
            }
        }
        match f.process_memlock {
            Some(l) if l == cfg.memlock => {}
            Some(l) => problems.push((
                Status::Fail,
                format!(
                    "{}: needs restart: its main process runs with memlock {l}, want {}",
                    f.unit, cfg.memlock
                ),
            )),
            None if f.status.is_none() => problems.push((
                Status::Warn,
                format!(
                    "{}: drop-in in place; the running process could not be found{}",
                    f.unit,
                    f.status_error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ),
            )),
            None => {}
        }
    }
    let details = json!({
        "target": cfg.memlock.systemd_value(),
        "units": facts.iter().map(|f| json!({
            "unit": f.unit,
            "dropin": f.path,
            "systemd_limit_memlock": f.status.as_ref().and_then(|s| s.limit_memlock),
            "main_pid": f.status.as_ref().map(|s| s.main_pid),
            "process_memlock": f.process_memlock.map(|l| l.to_string()),
        })).collect::<Vec<_>>(),
    });
    let worst = problems.iter().map(|(s, _)| *s).max();
    match worst {
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
                .map(|(_, m)| m)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
    .with_details(details)
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
        proc: Option<Limit>,
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
            active_state: "active".into(),
            main_pid: 42,
            limit_memlock: Some(limit),
            started: None,
        }
    }

    #[test]
    fn missing_dropin_is_planned_with_a_restart() {
        let c = cfg(Limit::UNLIMITED);
        let p = decide(&facts(None, None, None), &c);
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
        assert_eq!(check(&facts(None, None, None), &c).status, Status::Fail);
    }

    #[test]
    fn reload_then_restart_pending_then_ok() {
        let c = cfg(Limit(4 << 20));
        let want = content(c.memlock);
        let f = facts(Some(&want), Some(status(65536)), Some(Limit(65536)));
        assert!(decide(&f, &c).is_empty());
        assert!(check(&f, &c).message.contains("daemon-reload pending"));
        let f = facts(Some(&want), Some(status(4 << 20)), Some(Limit(65536)));
        assert!(check(&f, &c).message.contains("needs restart"));
        let f = facts(Some(&want), Some(status(4 << 20)), Some(Limit(4 << 20)));
        assert_eq!(check(&f, &c).status, Status::Ok);
    }
}
