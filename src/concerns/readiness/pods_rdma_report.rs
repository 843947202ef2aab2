//! How `pods.rdma` reports its findings: the check's message and details.

use serde_json::json;

use super::{CHECK_ID, Container, Finding, findings};
use crate::config::Severity;
use crate::engine::check::{Check, Status};
use crate::host::limit::Limit;
use crate::observe::RdmaProblem;
use crate::reason::Reason;

fn name(f: &Finding) -> String {
    format!(
        "pod {} container {} ({}, pid {})",
        f.pod_uid.as_deref().unwrap_or("?"),
        f.container_id
            .as_deref()
            .map_or("?", |c| &c[..c.len().min(12)]),
        f.process.comm,
        f.process.pid
    )
}

/// What is wrong with one finding and how to fix it.
pub fn explain(f: &Finding, target: Limit) -> String {
    let mut what = Vec::new();
    if f.problems.contains(&RdmaProblem::NoIpcLock) {
        what.push(
            "lacks CAP_IPC_LOCK: NCCL will crash registering memory; add IPC_LOCK to \
             securityContext.capabilities.add"
                .to_owned(),
        );
    }
    if f.problems.contains(&RdmaProblem::LowMemlock) {
        let soft = f.process.memlock_soft.unwrap_or(Limit(0));
        let hard = f
            .process
            .memlock_hard
            .map_or_else(|| "?".to_owned(), |h| h.to_string());
        what.push(format!(
            "its memlock {soft} (hard {hard}) is below {target} without CAP_IPC_LOCK: \
             ibv_reg_mr fails (\"Couldn't allocate MR\") past it; run `rdma-node-agent apply` \
             and recreate the pod"
        ));
    }
    format!("{} {} but {}", name(f), f.evidence, what.join("; and "))
}

pub fn check(containers: &[Container], target: Limit, severity: Severity) -> Check {
    check_with(containers, &[], target, severity)
}

/// `check`, also naming what could not be read while gathering (`not_read`):
/// a process skipped unseen could be the one without CAP_IPC_LOCK.
pub fn check_with(
    containers: &[Container],
    not_read: &[String],
    target: Limit,
    severity: Severity,
) -> Check {
    let (found, unreadable) = findings(containers, target);
    let bad: Vec<&Finding> = found.iter().filter(|f| !f.problems.is_empty()).collect();
    let unknown: Vec<&Finding> = found
        .iter()
        .filter(|f| f.problems.is_empty() && !f.unknown.is_empty())
        .collect();
    let details = json!({
        "containers": found,
        "unreadable": unreadable.iter().map(|c| json!({
            "pod_uid": c.pod_uid, "container_id": c.container_id,
        })).collect::<Vec<_>>(),
        "not_read": not_read,
    });
    let fds_note = (!unreadable.is_empty()).then(|| {
        format!(
            "the open files of {} pod container(s) could not be read (run as root, or with CAP_SYS_PTRACE as the service does)",
            unreadable.len()
        )
    });
    let read_note = (!not_read.is_empty()).then(|| {
        let shown: Vec<&str> = not_read.iter().take(3).map(String::as_str).collect();
        let more = not_read.len().saturating_sub(3);
        format!(
            "{} process file(s) could not be read: {}{}",
            not_read.len(),
            shown.join("; "),
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            }
        )
    });
    let unreadable_note = match (fds_note, read_note) {
        (None, None) => None,
        (a, b) => Some(a.into_iter().chain(b).collect::<Vec<_>>().join("; ")),
    };
    let (status, message, reason) = if !bad.is_empty() {
        let status = match severity {
            Severity::Warn => Status::Warn,
            Severity::Fail => Status::Fail,
        };
        let named: Vec<String> = bad.iter().take(5).map(|f| explain(f, target)).collect();
        let more = if bad.len() > 5 {
            format!("; and {} more", bad.len() - 5)
        } else {
            String::new()
        };
        let mut m = format!(
            "{} of {} RDMA pod container(s) cannot register memory: {}{more}",
            bad.len(),
            found.len(),
            named.join("; ")
        );
        if let Some(n) = &unreadable_note {
            m.push_str(&format!("; {n}"));
        }
        // The first named container's first problem.
        let reason = match bad[0].problems.first() {
            Some(RdmaProblem::LowMemlock) => Reason::RdmaPodLowMemlock,
            _ => Reason::RdmaPodNoIpcLock,
        };
        (status, m, reason)
    } else if !unknown.is_empty() || unreadable_note.is_some() {
        let mut parts: Vec<String> = unknown
            .iter()
            .map(|f| format!("{}: cannot read its {}", name(f), f.unknown.join(", ")))
            .collect();
        parts.extend(unreadable_note);
        (Status::Unknown, parts.join("; "), Reason::FactUnreadable)
    } else if found.is_empty() {
        (
            Status::Ok,
            "no running pod container has RDMA devices".to_owned(),
            Reason::FactUnreadable,
        )
    } else {
        (
            Status::Ok,
            format!(
                "{} RDMA pod container(s), each with CAP_IPC_LOCK or memlock at {target}",
                found.len()
            ),
            Reason::FactUnreadable,
        )
    };
    // An ok result carries no reason (`with_reason` drops it).
    Check::new(CHECK_ID, status, message)
        .with_reason(reason)
        .with_details(details)
}
