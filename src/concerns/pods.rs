//! The `pods.memlock` check: running pod containers whose locked-memory limit is
//! below target. A new base spec only reaches containers created after containerd
//! restarts, so pods started earlier keep the old limit until they are recreated.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::json;

use crate::config::Severity;
use crate::engine::check::{Check, Status};
use crate::host::Result;
use crate::host::kubepods::{parse_cgroup, parse_shim_id};
use crate::host::limit::Limit;
use crate::host::procfs;
use crate::host::snapshot::Snapshot;

pub const CHECK_ID: &str = "pods.memlock";

/// A process of a pod container, found by its kubepods cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodProcess {
    pub pid: u32,
    pub comm: String,
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    #[serde(serialize_with = "as_display")]
    pub memlock: Limit,
    /// The `-id` of the containerd shim this process is a child of: a shim serves
    /// one pod and is named for its sandbox.
    #[serde(skip)]
    pub shim_id: Option<String>,
    #[serde(skip)]
    pub started: Option<SystemTime>,
}

impl PodProcess {
    /// The pod's sandbox (pause) container: it never registers memory, and
    /// containerd 1.6 builds its spec without the base spec, so it is no finding.
    pub fn is_sandbox(&self) -> bool {
        self.comm == "pause" || (self.shim_id.is_some() && self.shim_id == self.container_id)
    }
}

fn as_display<S: serde::Serializer>(l: &Limit, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(l)
}

pub fn gather(host: &Snapshot) -> Result<Vec<PodProcess>> {
    let mut out: Vec<PodProcess> = Vec::new();
    // Once per gather: it turns each container's start ticks into a time.
    let boot = procfs::boot_time(host);
    for pid in procfs::pids(host)? {
        let Some(cg) = procfs::read(host, pid, "cgroup") else {
            continue;
        };
        let Some((pod_uid, container_id)) = parse_cgroup(&cg) else {
            continue;
        };
        // One process per container is enough to tell its limit.
        if container_id.is_some() && out.iter().any(|p| p.container_id == container_id) {
            continue;
        }
        let comm = procfs::comm(host, pid).unwrap_or_default();
        let stat = procfs::read(host, pid, "stat");
        let shim_id = stat
            .as_deref()
            .and_then(procfs::parse_ppid)
            .and_then(|ppid| procfs::read(host, ppid, "cmdline"))
            .and_then(|c| parse_shim_id(&c));
        let started = stat.zip(boot).and_then(|(s, b)| procfs::started_at(&s, b));
        let Some(memlock) = procfs::read(host, pid, "limits")
            .and_then(|l| procfs::parse_limit(&l, procfs::MEMLOCK_ROW))
        else {
            continue;
        };
        out.push(PodProcess {
            pid,
            comm,
            pod_uid,
            container_id,
            memlock,
            shim_id,
            started,
        });
    }
    Ok(out)
}

/// `containerd_started`: when the running containerd, which has read the current
/// config, started (`None` when unknown or a restart is pending). A container
/// below target that started before it predates the change and needs its pod
/// recreated; one started since runs on a handler that does not get the base spec.
pub fn check(
    procs: &[PodProcess],
    target: Limit,
    severity: Severity,
    containerd_started: Option<SystemTime>,
) -> Check {
    let low: Vec<&PodProcess> = procs
        .iter()
        .filter(|p| !p.is_sandbox() && p.memlock < target)
        .collect();
    if low.is_empty() {
        return Check::new(
            CHECK_ID,
            Status::Ok,
            format!(
                "{} pod container(s) running, none below memlock {target}",
                procs.len()
            ),
        );
    }
    let status = match severity {
        Severity::Warn => Status::Warn,
        Severity::Fail => Status::Fail,
    };
    // /proc start times are exact to a clock tick, containerd's to the microsecond
    // or a second: a second of slack keeps a pod started with containerd "before".
    let since = |p: &&PodProcess| match (p.started, containerd_started) {
        (Some(at), Some(c)) => at > c + Duration::from_secs(1),
        _ => false,
    };
    let (after, before): (Vec<&PodProcess>, Vec<&PodProcess>) = low.into_iter().partition(since);
    let mut parts = Vec::new();
    if !before.is_empty() {
        parts.push(format!(
            "{} pod container(s) run below memlock {target} (started before the change; recreate their pods): {}",
            before.len(),
            name_some(&before)
        ));
    }
    if !after.is_empty() {
        parts.push(format!(
            "{} pod container(s) started since containerd's last start run below memlock {target} (their runtime handler gets no base spec: is it in containerd.handlers?): {}",
            after.len(),
            name_some(&after)
        ));
    }
    Check::new(CHECK_ID, status, parts.join("; "))
        .with_reason(crate::reason::Reason::MemlockBelowTarget)
        .with_details(json!({ "below_target": before, "started_since_containerd": after }))
}

/// The first five, and how many more.
fn name_some(procs: &[&PodProcess]) -> String {
    let named: Vec<String> = procs
        .iter()
        .take(5)
        .map(|p| {
            format!(
                "pod {} container {} ({}, pid {}, memlock {})",
                p.pod_uid.as_deref().unwrap_or("?"),
                p.container_id.as_deref().map_or("?", |c| &c[..12]),
                p.comm,
                p.pid,
                p.memlock
            )
        })
        .collect();
    let more = if procs.len() > 5 {
        format!(" and {} more", procs.len() - 5)
    } else {
        String::new()
    };
    format!("{}{more}", named.join("; "))
}

/// `pods.memlock` as a concern; it needs containerd's start time (an observation).
pub struct Memlock;

impl crate::engine::concern::Concern for Memlock {
    type Facts = Vec<PodProcess>;

    fn ids(&self) -> &'static [&'static str] {
        &[CHECK_ID]
    }

    fn needs(&self) -> &'static [&'static str] {
        // By check id: concerns meet only through the engine.
        &["containerd.memlock"]
    }

    fn enabled(&self, _cfg: &crate::config::Config) -> bool {
        true
    }

    fn gather(
        &self,
        snap: &Snapshot,
        _cfg: &crate::config::Config,
    ) -> std::result::Result<Vec<PodProcess>, crate::engine::concern::GatherError> {
        gather(snap).map_err(crate::engine::concern::GatherError::unknown)
    }

    fn decide(
        &self,
        procs: &Vec<PodProcess>,
        ctx: &crate::engine::concern::Ctx,
    ) -> crate::engine::concern::Decision {
        use crate::observe::Observations;
        crate::engine::concern::Decision {
            checks: vec![check(
                procs,
                ctx.config.containerd.memlock,
                ctx.config.pods.below_target,
                ctx.observations.containerd_current_since(),
            )],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn proc(comm: &str, memlock: Limit) -> PodProcess {
        PodProcess {
            pid: 7,
            comm: comm.into(),
            pod_uid: Some("uid".into()),
            container_id: Some(ID.into()),
            memlock,
            shim_id: None,
            started: None,
        }
    }

    #[test]
    fn names_containers_below_target() {
        let c = check(
            &[
                proc("ib_write_bw", Limit(65536)),
                proc("pause", Limit(65536)),
            ],
            Limit::UNLIMITED,
            Severity::Warn,
            None,
        );
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.message
                .contains("pod uid container 0123456789ab (ib_write_bw, pid 7, memlock 64KiB)"),
            "{}",
            c.message
        );
        let ok = check(
            &[
                proc("x", Limit::UNLIMITED),
                // A sandbox of a non-standard pause image, known by its shim.
                PodProcess {
                    shim_id: Some(ID.into()),
                    ..proc("sleep", Limit(65536))
                },
            ],
            Limit::UNLIMITED,
            Severity::Fail,
            None,
        );
        assert_eq!(ok.status, Status::Ok);
    }

    #[test]
    fn containers_started_since_containerd_are_told_apart() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let at = |secs: u64, comm: &str| PodProcess {
            started: Some(t + Duration::from_secs(secs)),
            ..proc(comm, Limit(65536))
        };
        // containerd started at t + 100.
        let c = check(
            &[at(50, "old"), at(100, "with-containerd"), at(200, "new")],
            Limit(4 << 20),
            Severity::Warn,
            Some(t + Duration::from_secs(100)),
        );
        assert!(
            c.message.starts_with(
                "2 pod container(s) run below memlock 4MiB (started before the change; recreate their pods): pod uid container 0123456789ab (old,"
            ),
            "{}",
            c.message
        );
        assert!(
            c.message.contains(
                "; 1 pod container(s) started since containerd's last start run below memlock 4MiB (their runtime handler gets no base spec: is it in containerd.handlers?): pod uid container 0123456789ab (new,"
            ),
            "{}",
            c.message
        );
        assert_eq!(c.details["below_target"].as_array().unwrap().len(), 2);
        assert_eq!(c.details["started_since_containerd"][0]["comm"], "new");
        // Without containerd's start time, every one counts as started before.
        let c = check(&[at(200, "new")], Limit(4 << 20), Severity::Warn, None);
        assert!(
            c.message.starts_with("1 pod container(s) run below"),
            "{}",
            c.message
        );
    }
}
