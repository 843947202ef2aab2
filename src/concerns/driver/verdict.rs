//! `driver.health`'s verdict from one cycle's facts and the next state (pure).
//! Every problem names its device and reporter or pattern; one unreadable
//! source never hides what the other says; the worst status wins.

use crate::concerns::driver::reasons;
use serde_json::json;

use super::config::DriverHealthConfig;
use super::patterns::{self, Severity};
use super::state::{self, State};
use super::{CHECK_ID, Devlink, Facts};
use crate::engine::check::{Check, Status};
use crate::host::devlink::Reporter;
use crate::reason::Reason;

pub struct Verdict {
    pub check: Check,
    /// Reporters of watched instances.
    pub watched: usize,
    /// `(device, source, kind, count)` for the metrics.
    pub problems: Vec<(String, String, &'static str, u64)>,
}

struct Found {
    status: Status,
    reason: Reason,
    text: String,
}

fn found(status: Status, reason: Reason, text: String) -> Found {
    Found {
        status,
        reason,
        text,
    }
}

/// `(shown name, devlink instance)` of every instance to watch.
fn instances(f: &Facts, cfg: &DriverHealthConfig) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = f
        .nics
        .iter()
        .filter_map(|n| {
            let pci = n.pci.as_ref()?;
            Some((format!("{} (pci/{pci})", n.name), format!("pci/{pci}")))
        })
        .collect();
    for i in &cfg.also_watch {
        if !out.iter().any(|(_, w)| w == i) {
            out.push((i.clone(), i.clone()));
        }
    }
    out
}

fn reporter_findings(
    shown: &str,
    r: &Reporter,
    (prev, next): (&State, &State),
    out: &mut Vec<Found>,
    problems: &mut Vec<(String, String, &'static str, u64)>,
) {
    let key = state::key(r);
    // The dump time is in the details (`devlink`), in Unix seconds.
    let dump = if r.last_dump_unix.is_some() {
        ", dumped"
    } else {
        ""
    };
    match r.state {
        0 => {}
        1 => {
            out.push(found(
                Status::Fail,
                reasons::DEVLINK_REPORTER_ERROR,
                format!(
                    "{shown}: health reporter {} is in error state ({} error(s), {} recovered{dump})",
                    r.name, r.errors, r.recovers
                ),
            ));
            problems.push((r.instance.clone(), key.clone(), "reporter_error", 1));
        }
        s => out.push(found(
            Status::Unknown,
            reasons::DEVLINK_UNAVAILABLE,
            format!(
                "{shown}: health reporter {} is in state {s}, which this agent does not know",
                r.name
            ),
        )),
    }
    let base = next.reporters.get(&key).map_or(0, |c| c.baseline);
    let before = prev.reporters.get(&key).map_or(base, |c| c.last);
    if r.errors > base {
        out.push(found(
            Status::Warn,
            reasons::DEVLINK_ERRORS_RISING,
            format!(
                "{shown}: health reporter {} counted {} error(s) since boot, {} since the last cycle ({} recovered{dump})",
                r.name,
                r.errors - base,
                r.errors.saturating_sub(before),
                r.recovers
            ),
        ));
    }
    if r.errors > 0 {
        problems.push((r.instance.clone(), key, "reporter_errors", r.errors));
    }
}

fn devlink_findings(
    f: &Facts,
    cfg: &DriverHealthConfig,
    (prev, next): (&State, &State),
    out: &mut Vec<Found>,
    notes: &mut Vec<String>,
    problems: &mut Vec<(String, String, &'static str, u64)>,
) -> usize {
    let watch = instances(f, cfg);
    let reporters = match &f.devlink {
        Devlink::Reporters(r) => r,
        Devlink::NotLive => {
            notes.push("devlink not asked (a tree under --root, not the running kernel)".into());
            return 0;
        }
        other if watch.is_empty() => {
            notes.push(no_instances(f));
            notes.push(format!("devlink: {}", devlink_why(other)));
            return 0;
        }
        other => {
            out.push(found(
                Status::Unknown,
                reasons::DEVLINK_UNAVAILABLE,
                format!(
                    "cannot read devlink health reporters: {}",
                    devlink_why(other)
                ),
            ));
            return 0;
        }
    };
    let mut watched = 0;
    for (shown, instance) in &watch {
        let mine: Vec<&Reporter> = reporters
            .iter()
            .filter(|r| &r.instance == instance)
            .collect();
        if mine.is_empty() {
            let text = format!(
                "{shown} has no devlink health reporter (its driver registers none, or no devlink instance)"
            );
            if cfg.also_watch.contains(instance) || f.log.is_none() {
                out.push(found(Status::Unknown, reasons::DEVLINK_UNAVAILABLE, text));
            } else {
                notes.push(text);
            }
        }
        for r in mine {
            watched += 1;
            reporter_findings(shown, r, (prev, next), out, problems);
        }
    }
    if watch.is_empty() {
        notes.push(no_instances(f));
    }
    watched
}

fn devlink_why(d: &Devlink) -> String {
    match d {
        Devlink::NoFamily => crate::host::devlink::DevlinkError::NoFamily.to_string(),
        Devlink::Error(e) => e.clone(),
        _ => String::new(),
    }
}

fn no_instances(f: &Facts) -> String {
    let why: Vec<String> = f
        .nics
        .iter()
        .map(|n| format!("{}: {}", n.name, n.why.as_deref().unwrap_or("?")))
        .collect();
    if why.is_empty() {
        "no RDMA device, and no devlink instance in [driver_health] also_watch".into()
    } else {
        format!(
            "no RDMA NIC with a PCI function to watch ({})",
            why.join("; ")
        )
    }
}

/// The RDMA device name of a PCI address, for messages.
fn shown_device(f: &Facts, pci: &str) -> String {
    match f.nics.iter().find(|n| n.pci.as_deref() == Some(pci)) {
        Some(n) => format!("{} (mlx5_core {pci})", n.name),
        None => format!("mlx5_core {pci}"),
    }
}

fn log_findings(
    f: &Facts,
    (next, nothing_to_watch): (&State, bool),
    missed: Option<u64>,
    out: &mut Vec<Found>,
    notes: &mut Vec<String>,
    problems: &mut Vec<(String, String, &'static str, u64)>,
) {
    match &f.log {
        None => notes.push("kernel log not read".into()),
        // The log is read for what the NICs' driver says: with no NIC on PCI
        // (and none in also_watch) there is nothing it could tell of them.
        Some(Err(e)) if nothing_to_watch => notes.push(format!("kernel log not read: {e}")),
        Some(Err(e)) => out.push(found(
            Status::Unknown,
            reasons::KERNEL_LOG_UNREADABLE,
            format!("the kernel log could not be read, so the driver's fatal messages are not known: {e}"),
        )),
        Some(Ok(_)) => {
            if let Some(n) = missed {
                notes.push(format!("{n} kernel-log record(s) of this boot were overwritten before the agent read them"));
            }
        }
    }
    for (k, n) in &next.kmsg {
        let Some((pci, name)) = k.rsplit_once('/') else {
            continue;
        };
        let Some(p) = patterns::pattern(name) else {
            continue;
        };
        let (status, reason) = match p.severity {
            Severity::Fail => (Status::Fail, reasons::DRIVER_FATAL_LOG),
            Severity::Warn => (Status::Warn, reasons::DRIVER_LOG_WARNING),
        };
        out.push(found(
            status,
            reason,
            format!(
                "{}: {name} ×{n} in the kernel log since boot: {}",
                shown_device(f, pci),
                p.meaning
            ),
        ));
        problems.push((pci.to_owned(), name.to_owned(), "kernel_log", *n));
    }
}

pub fn judge(
    f: &Facts,
    next: &State,
    missed: Option<u64>,
    state_error: Option<String>,
    cfg: &DriverHealthConfig,
) -> Verdict {
    let (mut out, mut notes, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(e) = state_error {
        out.push(found(
            Status::Unknown,
            Reason::FACT_UNREADABLE,
            format!("cannot read {}, so error counts before now are not known: {e}; the daemon starts a new one", super::STATE_PATH),
        ));
    }
    let prev = f.state.as_ref().ok().cloned().unwrap_or_default();
    let watched = devlink_findings(f, cfg, (&prev, next), &mut out, &mut notes, &mut problems);
    let nothing_to_watch = instances(f, cfg).is_empty();
    log_findings(
        f,
        (next, nothing_to_watch),
        missed,
        &mut out,
        &mut notes,
        &mut problems,
    );
    let worst = out.iter().map(|x| x.status).max();
    let log_read = matches!(f.log, Some(Ok(_)));
    let status = match worst {
        Some(s) => s,
        None if watched == 0 && !log_read => Status::Skipped,
        None => Status::Ok,
    };
    let mut message = match worst {
        None if status == Status::Skipped => "nothing to watch".to_owned(),
        Some(s) => out
            .iter()
            .filter(|x| x.status == s)
            .chain(out.iter().filter(|x| x.status != s))
            .map(|x| x.text.clone())
            .collect::<Vec<_>>()
            .join("; "),
        None => format!(
            "{watched} devlink health reporter(s) healthy{}",
            if log_read {
                ", no fatal driver message in the kernel log since boot"
            } else {
                ""
            }
        ),
    };
    if !notes.is_empty() {
        message = format!("{message} ({})", notes.join("; "));
    }
    let reason = worst.and_then(|s| out.iter().find(|x| x.status == s).map(|x| x.reason));
    let devlink: Vec<&Reporter> = match &f.devlink {
        Devlink::Reporters(r) => r.iter().collect(),
        _ => Vec::new(),
    };
    let details = json!({
        "devlink": devlink,
        "reporters": next.reporters,
        "kernel_log": next.kmsg,
        "kernel_log_read": f.log.as_ref().map(Result::is_ok),
        "notes": notes,
    });
    let mut check = Check::new(CHECK_ID, status, message).with_details(details);
    if let Some(r) = reason.filter(|_| status != Status::Ok && status != Status::Skipped) {
        check = check.with_reason(r);
    }
    Verdict {
        check,
        watched,
        problems,
    }
}
