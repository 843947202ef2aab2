//! `pcie.aer`'s verdicts, pure: each watched function's AER counts, its root
//! port totals and its link against the history of this boot.
//!
//! - a fatal error since boot (`aer_dev_fatal`, or the fatal messages a root
//!   port received) fails (`aer_fatal`): the link or device needed a reset;
//! - an uncorrectable non-fatal one warns by default (`aer_nonfatal`,
//!   `[pcie] nonfatal = "fail"` to fail): the link stayed up and the driver
//!   recovered the transaction, and some are benign (an `UnsupReq` from a
//!   probe of an unimplemented register);
//! - correctable errors that rose by more than `correctable_threshold` within
//!   `correctable_window` warn (`aer_correctable_rising`): counts from before
//!   the agent saw them, or from a boot before, never do;
//! - a link slower or narrower than it trained earlier this boot warns
//!   (`pcie_link_retrained_down`);
//! - a function without AER statistics, or one that cannot be read, is
//!   `unknown` for that function (`aer_unavailable`, `fact_unreadable`).
//!
//! The worst decides the status (fail, then unknown, then warn); the message
//! names every finding.

use crate::concerns::pcie::reasons;
use serde_json::{Value, json};

use super::config::{PcieConfig, WithoutAer};
use super::gather::{Function, Watched};
use super::history::{FnHistory, History};
use super::parse::{Severity, show_speed};
use crate::config::Severity as ConfigSeverity;
use crate::engine::check::Status;
use crate::reason::Reason;

/// One thing said about one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub status: Status,
    pub reason: Reason,
    pub text: String,
}

fn rank(s: Status) -> u8 {
    match s {
        Status::Fail => 0,
        Status::Unknown => 1,
        Status::Warn => 2,
        _ => 3,
    }
}

/// `0000:03:00.0 (NIC mlx5_0)`.
pub fn named(f: &Function) -> String {
    format!("{} ({})", f.bdf, f.role.describe())
}

/// Non-zero errors by name: ` (RxErr 5, BadTLP 2)`, or nothing.
fn by_name(c: &super::parse::Counts) -> String {
    if c.errors.is_empty() {
        return String::new();
    }
    let list: Vec<String> = c.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(" ({})", list.join(", "))
}

pub fn window_shown(secs: u64) -> String {
    match secs {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// What is said of one function.
pub fn findings(f: &Function, h: Option<&FnHistory>, cfg: &PcieConfig, now: u64) -> Vec<Finding> {
    let who = named(f);
    let mut out = Vec::new();
    let mut say = |status, reason, text: String| {
        out.push(Finding {
            status,
            reason,
            text,
        })
    };
    match &f.aer {
        Err(e) => say(
            Status::Unknown,
            Reason::FACT_UNREADABLE,
            format!("{who}: cannot read its AER statistics: {e}"),
        ),
        Ok(None) => say(
            match cfg.without_aer {
                WithoutAer::Warn => Status::Warn,
                WithoutAer::Unknown => Status::Unknown,
            },
            reasons::AER_UNAVAILABLE,
            format!("{who} has no AER statistics"),
        ),
        Ok(Some([cor, nonfatal, fatal])) => {
            if fatal.total > 0 {
                say(
                    Status::Fail,
                    reasons::AER_FATAL,
                    format!(
                        "{who}: aer_dev_fatal TOTAL_ERR_FATAL {} since boot{}",
                        fatal.total,
                        by_name(fatal)
                    ),
                );
            }
            if nonfatal.total > 0 {
                say(
                    nonfatal_status(cfg),
                    reasons::AER_NONFATAL,
                    format!(
                        "{who}: aer_dev_nonfatal TOTAL_ERR_NONFATAL {} since boot{}",
                        nonfatal.total,
                        by_name(nonfatal)
                    ),
                );
            }
            let rise = h.map_or(0, |h| h.rise_within(now, cfg.correctable_window_secs));
            if rise > cfg.correctable_threshold {
                say(
                    Status::Warn,
                    reasons::AER_CORRECTABLE_RISING,
                    format!(
                        "{who}: aer_dev_correctable TOTAL_ERR_COR rose by {rise} in the last {} (more than pcie.correctable_threshold = {}; {} since boot{})",
                        window_shown(cfg.correctable_window_secs),
                        cfg.correctable_threshold,
                        cor.total,
                        by_name(cor)
                    ),
                );
            }
        }
    }
    if let Some(text) = retrained(f, h) {
        say(
            Status::Warn,
            reasons::PCIE_LINK_RETRAINED_DOWN,
            format!("{who}: {text}"),
        );
    }
    // The root port's totals after its own counts, before its link.
    let link = out
        .iter()
        .position(|x| x.reason == reasons::PCIE_LINK_RETRAINED_DOWN)
        .unwrap_or(out.len());
    out.splice(link..link, rootport(&who, f, nonfatal_status(cfg)));
    out
}

/// What an uncorrectable non-fatal error makes the check (`[pcie] nonfatal`).
fn nonfatal_status(cfg: &PcieConfig) -> Status {
    match cfg.nonfatal {
        ConfigSeverity::Fail => Status::Fail,
        ConfigSeverity::Warn => Status::Warn,
    }
}

/// A root port's totals: the error messages it received from below it.
fn rootport(who: &str, f: &Function, nonfatal: Status) -> Vec<Finding> {
    let finding = |status, reason, text: String| Finding {
        status,
        reason,
        text: format!("{who}: {text}"),
    };
    match &f.rootport {
        None => Vec::new(),
        Some(Err(e)) => vec![finding(
            Status::Unknown,
            Reason::FACT_UNREADABLE,
            format!("cannot read its root port totals: {e}"),
        )],
        Some(Ok([_, n, x])) => {
            let mut out = Vec::new();
            if *x > 0 {
                out.push(finding(
                    Status::Fail,
                    reasons::AER_FATAL,
                    format!("aer_rootport_total_err_fatal {x} since boot (fatal error messages from below it)"),
                ));
            }
            if *n > 0 {
                out.push(finding(
                    nonfatal,
                    reasons::AER_NONFATAL,
                    format!("aer_rootport_total_err_nonfatal {n} since boot (non-fatal error messages from below it)"),
                ));
            }
            out
        }
    }
}

/// `link at 8.0 GT/s x8, trained at 16.0 GT/s x16 earlier this boot`.
fn retrained(f: &Function, h: Option<&FnHistory>) -> Option<String> {
    let h = h?;
    let slower = matches!((f.speed, h.best_speed), (Some(c), Some(b)) if c < b);
    let narrower = matches!((f.width, h.best_width), (Some(c), Some(b)) if c < b);
    if !slower && !narrower {
        return None;
    }
    let link = |s: Option<u32>, w: Option<u32>| {
        format!(
            "{} x{}",
            s.map_or("unknown speed".into(), show_speed),
            w.map_or("?".into(), |w| w.to_string())
        )
    };
    Some(format!(
        "link retrained down: now {}, trained at {} earlier this boot (max {})",
        link(f.speed, f.width),
        link(h.best_speed, h.best_width),
        link(f.max_speed, f.max_width)
    ))
}

/// The check's status, reason and message from every function's findings.
pub fn verdict(
    w: &Watched,
    next: &History,
    history_error: Option<&str>,
    cfg: &PcieConfig,
    now: u64,
    noaer: bool,
) -> (Status, Reason, String) {
    let mut all: Vec<Finding> = w
        .functions
        .values()
        .flat_map(|f| findings(f, next.functions.get(&f.bdf), cfg, now))
        .collect();
    for u in &w.unplaced {
        all.push(Finding {
            status: Status::Unknown,
            reason: Reason::FACT_UNREADABLE,
            text: format!("cannot place {u} on the PCI bus, so its path is not watched"),
        });
    }
    if let Some(e) = history_error {
        all.push(Finding {
            status: Status::Unknown,
            reason: Reason::FACT_UNREADABLE,
            text: format!("cannot read the AER history, so rises and retraining before now are not known: {e}; the daemon starts a new one"),
        });
    }
    if w.functions.is_empty() && all.is_empty() {
        return (
            Status::Skipped,
            Reason::FACT_UNREADABLE,
            "no RDMA NIC or NVIDIA GPU on the PCI bus: no PCIe path to watch".into(),
        );
    }
    all.sort_by_key(|f| rank(f.status));
    let Some(worst) = all.first().cloned() else {
        let n = w.functions.len();
        return (
            Status::Ok,
            Reason::FACT_UNREADABLE,
            format!(
                "{n} PCIe function(s) of the RDMA NICs and GPUs and the bridges above them: no uncorrectable AER error since boot, correctable errors within {} per {}, no link retrained down",
                cfg.correctable_threshold,
                window_shown(cfg.correctable_window_secs)
            ),
        );
    };
    // The functions without statistics in one sentence, with why.
    let (unavailable, rest): (Vec<Finding>, Vec<Finding>) = all
        .into_iter()
        .partition(|f| f.reason == reasons::AER_UNAVAILABLE);
    // In rank order: after the failures, before the warnings.
    let fails = rest.iter().take_while(|f| f.status == Status::Fail).count();
    let mut parts: Vec<String> = rest.into_iter().map(|f| f.text).collect();
    if !unavailable.is_empty() {
        let names: Vec<&str> = unavailable
            .iter()
            .map(|f| f.text.trim_end_matches(" has no AER statistics"))
            .collect();
        let why = if noaer {
            "the kernel command line has pci=noaer"
        } else {
            "no aer_dev_* files: the function has no AER capability, or the kernel is built without CONFIG_PCIEAER"
        };
        parts.insert(
            fails,
            format!(
                "{} function(s) have no AER statistics, so their errors are not known ({why}): {}",
                names.len(),
                names.join(", ")
            ),
        );
    }
    (worst.status, worst.reason, parts.join("; "))
}

/// Per function, for `--json` and `/status`.
pub fn details(w: &Watched, next: &History, cfg: &PcieConfig, now: u64) -> Value {
    let functions: Vec<Value> = w
        .functions
        .values()
        .map(|f| {
            let h = next.functions.get(&f.bdf);
            let counts = match &f.aer {
                Ok(Some(c)) => json!(
                    Severity::ALL
                        .iter()
                        .zip(c.iter())
                        .map(|(s, c)| (
                            s.as_str().to_owned(),
                            json!({"total": c.total, "errors": c.errors})
                        ))
                        .collect::<serde_json::Map<_, _>>()
                ),
                Ok(None) => Value::Null,
                Err(e) => json!({ "unreadable": e }),
            };
            let found = findings(f, h, cfg, now);
            json!({
                "function": f.bdf,
                "what": f.role.describe(),
                "aer": counts,
                "rootport_totals": f.rootport.as_ref().map(|r| match r {
                    Ok([c, n, x]) => json!({"correctable": c, "nonfatal": n, "fatal": x}),
                    Err(e) => json!({ "unreadable": e }),
                }),
                "correctable_in_window": h.map(|h| h.rise_within(now, cfg.correctable_window_secs)),
                "link": {
                    "speed": f.speed.map(show_speed),
                    "width": f.width,
                    "max_speed": f.max_speed.map(show_speed),
                    "max_width": f.max_width,
                    "best_speed_this_boot": h.and_then(|h| h.best_speed).map(show_speed),
                    "best_width_this_boot": h.and_then(|h| h.best_width),
                },
                "findings": found.iter().map(|x| json!({
                    "status": x.status, "reason": x.reason, "message": x.text,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "correctable_threshold": cfg.correctable_threshold,
        "correctable_window_seconds": cfg.correctable_window_secs,
        "functions": functions,
        "unplaced": w.unplaced,
    })
}
