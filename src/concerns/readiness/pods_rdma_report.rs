//! How `pods.rdma` reports its findings: the check's message and details.

use crate::concerns::readiness::reasons;
use serde_json::json;

use super::{CHECK_ID, Container, Facts, Finding, Remedy, Route, findings};
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

/// The node-level remedy: the limit every RDMA container starts with.
const NODE_MEMLOCK: &str = "`rdma-node-agent apply` (the base spec; then recreate the pod), \
    or `[containerd] memlock_via = \"nri\"` (set as each RDMA container is created, no containerd restart)";

/// What is wrong with one finding, which remedy can work, and why.
pub fn explain(f: &Finding, target: Limit) -> String {
    let p = &f.process;
    let memlock = || {
        let soft = p.memlock_soft.unwrap_or(Limit(0));
        let hard = p
            .memlock_hard
            .map_or_else(|| "?".to_owned(), |h| h.to_string());
        format!(
            "its memlock {soft} (hard {hard}) is below {target}: ibv_reg_mr fails \
             (\"Couldn't allocate MR\") past it"
        )
    };
    let uid = p.uid.map_or_else(|| "?".to_owned(), |u| u.to_string());
    let what = match f.remedy {
        Some(Remedy::IpcLock) => {
            "lacks CAP_IPC_LOCK: NCCL will crash registering memory; add IPC_LOCK \
             to securityContext.capabilities.add"
                .to_owned()
        }
        Some(Remedy::Either) => format!(
            "lacks CAP_IPC_LOCK and {}; either remedy works, as it runs as root: IPC_LOCK in \
             securityContext.capabilities.add, for this pod (root keeps its spec's capabilities \
             across exec, and CAP_IPC_LOCK lifts the limit), or the node's memlock, for every RDMA \
             pod: {NODE_MEMLOCK}",
            memlock()
        ),
        Some(Remedy::NodeMemlockNonRoot) => format!(
            "{}; it runs as uid {uid}, not root, so IPC_LOCK in securityContext.capabilities.add \
             gives it no effective capability (execve drops every capability that is not ambient, \
             capabilities(7), and Kubernetes sets none): raise the node's memlock: {NODE_MEMLOCK}",
            memlock()
        ),
        Some(Remedy::NodeMemlockUserNs) => format!(
            "{}; it runs in a user namespace (hostUsers: false), where CAP_IPC_LOCK is that \
             namespace's and the kernel asks for the initial namespace's (capable() in \
             ib_umem_get): raise the node's memlock: {NODE_MEMLOCK}",
            memlock()
        ),
        None => "cannot register memory".to_owned(),
    };
    format!("{} {} but {what}", name(f), f.evidence)
}

/// The check from the gathered facts, saying how the RDMA users were found.
pub fn check_facts(facts: &Facts, target: Limit, severity: Severity) -> Check {
    let mut c = check_with(&facts.containers, &facts.unreadable, target, severity);
    if let Some(d) = c.details.as_object_mut() {
        d.insert("found_by".into(), json!(facts.route));
        d.insert("pods_from".into(), json!(facts.pods_from));
    }
    // A node with RDMA devices whose kernel did not answer: say the fd scan stood in.
    if let Route::FdScan {
        why,
        expected: false,
    } = &facts.route
    {
        c.message.push_str(&format!(
            " (every pod process's open files were read: the kernel's RDMA resource tracking could not be asked: {why})"
        ));
    }
    c
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
    let unreadable_note = unreadable_note(unreadable.len(), not_read);
    let (status, message, reason) = if !bad.is_empty() {
        cannot_register(
            &bad,
            found.len(),
            target,
            severity,
            unreadable_note.as_deref(),
        )
    } else if !unknown.is_empty() || unreadable_note.is_some() {
        let mut parts: Vec<String> = unknown
            .iter()
            .map(|f| format!("{}: cannot read its {}", name(f), f.unknown.join(", ")))
            .collect();
        parts.extend(unreadable_note);
        (Status::Unknown, parts.join("; "), Reason::FACT_UNREADABLE)
    } else if found.is_empty() {
        (
            Status::Ok,
            "no running pod container has RDMA devices".to_owned(),
            Reason::FACT_UNREADABLE,
        )
    } else {
        (
            Status::Ok,
            format!(
                "{} RDMA pod container(s), each with CAP_IPC_LOCK or memlock at {target}",
                found.len()
            ),
            Reason::FACT_UNREADABLE,
        )
    };
    // An ok result carries no reason (`with_reason` drops it).
    Check::new(CHECK_ID, status, message)
        .with_reason(reason)
        .with_details(details)
}

/// What could not be read: the open files of pod containers, and process
/// files skipped while gathering (the first three named).
fn unreadable_note(unreadable: usize, not_read: &[String]) -> Option<String> {
    let fds_note = (unreadable > 0).then(|| {
        format!(
            "the open files of {unreadable} pod container(s) could not be read (run as root, or with CAP_SYS_PTRACE as the service does)"
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
    match (fds_note, read_note) {
        (None, None) => None,
        (a, b) => Some(a.into_iter().chain(b).collect::<Vec<_>>().join("; ")),
    }
}

/// The failure (or warning, as configured) for containers that cannot
/// register memory: the first five named; the first one's first problem
/// names the reason.
fn cannot_register(
    bad: &[&Finding],
    found: usize,
    target: Limit,
    severity: Severity,
    unreadable_note: Option<&str>,
) -> (Status, String, Reason) {
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
        "{} of {found} RDMA pod container(s) cannot register memory: {}{more}",
        bad.len(),
        named.join("; ")
    );
    if let Some(n) = unreadable_note {
        m.push_str(&format!("; {n}"));
    }
    let reason = match bad[0].problems.first() {
        Some(RdmaProblem::LowMemlock) => reasons::RDMA_POD_LOW_MEMLOCK,
        _ => reasons::RDMA_POD_NO_IPC_LOCK,
    };
    (status, m, reason)
}
