//! The `pods.memlock` check: running pod containers whose locked-memory limit is
//! below target. A new base spec only reaches containers created after containerd
//! restarts, so pods started earlier keep the old limit until they are recreated.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::json;

use crate::config::Severity;
use crate::engine::check::CheckId;
use crate::engine::check::{Check, Status};
use crate::host::Result;
use crate::host::kubepods::{parse_cgroup, parse_shim_id};
use crate::host::limit::Limit;
use crate::host::procfs;
use crate::host::snapshot::Snapshot;
use crate::observe::ObservationKind;

pub const CHECK_ID: CheckId = CheckId::new("pods.memlock");

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

/// The pod processes read, and the processes that could not be: each of
/// those may be a pod container below target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pods {
    pub procs: Vec<PodProcess>,
    /// `pid N: what could not be read` (a process gone meanwhile is not here).
    pub unreadable: Vec<String>,
}

pub fn gather(host: &Snapshot) -> Result<Pods> {
    let mut out: Vec<PodProcess> = Vec::new();
    let mut unreadable = Vec::new();
    // Once per gather: it turns each container's start ticks into a time.
    let boot = procfs::boot_time(host);
    for pid in procfs::pids(host)? {
        let cg = match host.proc_read(pid, "cgroup") {
            Ok(Some(cg)) => cg,
            // Gone since /proc was listed.
            Ok(None) => continue,
            Err(e) => {
                unreadable.push(format!("pid {pid}: {e}"));
                continue;
            }
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
        let memlock = match host.proc_read(pid, "limits") {
            // The kernel prints nothing for a process that has exited.
            Ok(Some(l)) if l.trim().is_empty() => continue,
            Ok(Some(l)) => match procfs::parse_limit(&l, procfs::MEMLOCK_ROW) {
                Some(m) => m,
                None => {
                    unreadable.push(format!(
                        "pid {pid}: /proc/{pid}/limits has no \"{}\" row",
                        procfs::MEMLOCK_ROW
                    ));
                    continue;
                }
            },
            Ok(None) => continue,
            Err(e) => {
                unreadable.push(format!("pid {pid}: {e}"));
                continue;
            }
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
    Ok(Pods {
        procs: out,
        unreadable,
    })
}

/// `containerd_started`: when the running containerd, which has read the current
/// config, started (`None` when unknown or a restart is pending). A container
/// below target that started before it predates the change and needs its pod
/// recreated; one started since runs on a handler that does not get the base spec.
/// A process that could not be read is not "none below": the check is
/// `unknown` (or `fail`, when a container read is below target and the
/// severity is `fail`), naming them and how many.
pub fn check(
    pods: &Pods,
    target: Limit,
    severity: Severity,
    containerd_started: Option<SystemTime>,
) -> Check {
    let procs = &pods.procs;
    let low: Vec<&PodProcess> = procs
        .iter()
        .filter(|p| !p.is_sandbox() && p.memlock < target)
        .collect();
    let unread = (!pods.unreadable.is_empty()).then(|| {
        format!(
            "{} process(es) could not be read, so whether they are pod containers below memlock {target} is not known: {}",
            pods.unreadable.len(),
            first_five(&pods.unreadable)
        )
    });
    if low.is_empty() {
        let seen = format!(
            "{} pod container(s) running, none below memlock {target}",
            procs.len()
        );
        return match unread {
            None => Check::new(CHECK_ID, Status::Ok, seen),
            Some(u) => Check::new(
                CHECK_ID,
                Status::Unknown,
                format!("{u}; of those read, {seen}"),
            )
            .with_reason(crate::reason::Reason::FACT_UNREADABLE)
            .with_details(json!({ "unreadable": pods.unreadable })),
        };
    }
    let found = match severity {
        Severity::Warn => Status::Warn,
        Severity::Fail => Status::Fail,
    };
    // The worse of what was found and what could not be read.
    let status = if unread.is_some() {
        found.max(Status::Unknown)
    } else {
        found
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
    parts.extend(unread);
    let reason = if status == found {
        crate::reason::Reason::MEMLOCK_BELOW_TARGET
    } else {
        crate::reason::Reason::FACT_UNREADABLE
    };
    Check::new(CHECK_ID, status, parts.join("; "))
        .with_reason(reason)
        .with_details(json!({
            "below_target": before,
            "started_since_containerd": after,
            "unreadable": pods.unreadable,
        }))
}

/// The first five, and how many more.
fn first_five(items: &[String]) -> String {
    let more = match items.len() {
        n if n > 5 => format!(" and {} more", n - 5),
        _ => String::new(),
    };
    format!("{}{more}", items[..items.len().min(5)].join("; "))
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
    type Facts = Pods;

    // Its codes are shared with systemd.memlock (src/reason.rs).
    fn reasons(&self) -> &'static [crate::reason::Reason] {
        &[]
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    /// When containerd read its config: through the engine, by kind.
    fn needs(&self) -> &'static [ObservationKind] {
        &[ObservationKind::Containerd]
    }

    fn enabled(&self, _cfg: &crate::config::Config) -> bool {
        true
    }

    fn gather(
        &self,
        snap: &Snapshot,
        _cfg: &crate::config::Config,
    ) -> std::result::Result<Pods, crate::engine::concern::GatherError> {
        gather(snap).map_err(crate::engine::concern::GatherError::unknown)
    }

    fn decide(
        &self,
        pods: &Pods,
        ctx: &crate::engine::concern::Ctx,
    ) -> crate::engine::concern::Decision {
        use crate::observe::Observations;
        crate::engine::concern::Decision {
            checks: vec![check(
                pods,
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

    fn pods(procs: Vec<PodProcess>) -> Pods {
        Pods {
            procs,
            unreadable: Vec::new(),
        }
    }

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
            &pods(vec![
                proc("ib_write_bw", Limit(65536)),
                proc("pause", Limit(65536)),
            ]),
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
            &pods(vec![
                proc("x", Limit::UNLIMITED),
                // A sandbox of a non-standard pause image, known by its shim.
                PodProcess {
                    shim_id: Some(ID.into()),
                    ..proc("sleep", Limit(65536))
                },
            ]),
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
            &pods(vec![
                at(50, "old"),
                at(100, "with-containerd"),
                at(200, "new"),
            ]),
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
        let c = check(
            &pods(vec![at(200, "new")]),
            Limit(4 << 20),
            Severity::Warn,
            None,
        );
        assert!(
            c.message.starts_with("1 pod container(s) run below"),
            "{}",
            c.message
        );
    }

    /// A process whose cgroup or limits cannot be read may be a pod container
    /// below target: before, it was skipped and the check said "none below".
    #[test]
    fn unreadable_processes_make_it_unknown_never_none_below() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let pod = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice/cri-containerd-{ID}.scope\n"
        );
        let ok_limits = "Limit  Soft Limit  Hard Limit  Units\nMax locked memory         unlimited            unlimited            bytes\n";
        for pid in ["100", "101", "102", "103"] {
            std::fs::create_dir_all(root.join("proc").join(pid)).unwrap();
        }
        // 100: read, unlimited. 101: limits unreadable. 102: cgroup unreadable.
        std::fs::write(root.join("proc/100/cgroup"), &pod).unwrap();
        std::fs::write(root.join("proc/100/limits"), ok_limits).unwrap();
        std::fs::write(
            root.join("proc/101/cgroup"),
            pod.replace(ID, &"1".repeat(64)),
        )
        .unwrap();
        // A directory: unreadable as a file, even to root.
        std::fs::create_dir(root.join("proc/101/limits")).unwrap();
        std::fs::create_dir(root.join("proc/102/cgroup")).unwrap();
        // 103 exited while read: the kernel prints empty limits. Gone, not unreadable.
        std::fs::write(
            root.join("proc/103/cgroup"),
            pod.replace(ID, &"3".repeat(64)),
        )
        .unwrap();
        std::fs::write(root.join("proc/103/limits"), "").unwrap();
        let snap = Snapshot::new(crate::host::Host::new(root));
        let got = gather(&snap).unwrap();
        assert_eq!(got.procs.len(), 1);
        assert_eq!(got.unreadable.len(), 2, "{:?}", got.unreadable);
        assert!(
            got.unreadable[0].starts_with("pid 101: "),
            "{:?}",
            got.unreadable
        );
        assert!(
            got.unreadable[1].starts_with("pid 102: "),
            "{:?}",
            got.unreadable
        );
        let c = check(&got, Limit::UNLIMITED, Severity::Warn, None);
        assert_eq!(c.status, Status::Unknown, "{}", c.message);
        assert_eq!(c.reason, Some(crate::reason::Reason::FACT_UNREADABLE));
        assert!(
            c.message.starts_with("2 process(es) could not be read, so whether they are pod containers below memlock unlimited is not known: pid 101: "),
            "{}",
            c.message
        );
        assert!(
            c.message.ends_with(
                "; of those read, 1 pod container(s) running, none below memlock unlimited"
            ),
            "{}",
            c.message
        );
        // A finding stays in the message; `fail` stays `fail`.
        let mut below = got.clone();
        below.procs.push(proc("ib_write_bw", Limit(65536)));
        let c = check(&below, Limit::UNLIMITED, Severity::Warn, None);
        assert_eq!(c.status, Status::Unknown);
        assert!(
            c.message.contains("run below memlock unlimited"),
            "{}",
            c.message
        );
        let c = check(&below, Limit::UNLIMITED, Severity::Fail, None);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.reason, Some(crate::reason::Reason::MEMLOCK_BELOW_TARGET));
    }
}
