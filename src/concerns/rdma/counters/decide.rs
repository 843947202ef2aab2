//! The verdict, pure: each port's counts within the window against the
//! class thresholds; the management NIC's apart; a port without a baseline
//! named as such; an unreadable port `unknown` on its own.

use crate::concerns::rdma::counters::reasons;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::classes::{Class, Dir, class_of};
use super::config::CountersConfig;
use super::gather::PortRead;
use super::history::{History, PortHistory};
use crate::engine::check::Status;
use crate::reason::Reason;

/// One thing the check says about one port.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub port: String,
    pub status: Status,
    pub reason: Reason,
    pub text: String,
}

/// One port's class, as rated.
#[derive(Debug, Clone, PartialEq)]
pub struct Rated {
    pub class: Class,
    pub in_window: u64,
    pub total: u64,
    pub per_second: Option<f64>,
    /// The counters that rose within the window, with how much.
    pub rose: Vec<(String, u64)>,
}

/// `counters/symbol_error` → its class.
pub fn classify(key: &str) -> Option<Class> {
    let (dir, name) = key.split_once('/')?;
    let dir = match dir {
        "counters" => Dir::Counters,
        "hw_counters" => Dir::HwCounters,
        _ => return None,
    };
    class_of(dir, name)
}

/// Every class of a port with a history: its count in the window, total and rate.
pub fn rate(h: &PortHistory, now: u64, window: u64) -> Vec<Rated> {
    let covered = h.covered(now, window);
    Class::ALL
        .iter()
        .map(|&class| {
            let mut r = Rated {
                class,
                in_window: 0,
                total: 0,
                per_second: None,
                rose: Vec::new(),
            };
            for (key, total) in h.totals.iter().filter(|(k, _)| classify(k) == Some(class)) {
                r.total += total;
                let n = h.within(key, now, window);
                if n > 0 {
                    r.in_window += n;
                    r.rose.push((key.clone(), n));
                }
            }
            r.per_second = (covered > 0).then(|| r.in_window as f64 / covered as f64);
            r
        })
        .collect()
}

/// The findings for one port with a history.
pub fn judge(
    p: &PortRead,
    rated: &[Rated],
    cfg: &CountersConfig,
    shown_window: &str,
) -> Vec<Finding> {
    let name = p.name();
    let mut out = Vec::new();
    for r in rated {
        let (warn, fail) = cfg.thresholds(r.class.as_str());
        let status = if fail > 0 && r.in_window >= fail {
            Status::Fail
        } else if warn > 0 && r.in_window >= warn {
            Status::Warn
        } else {
            continue;
        };
        let rose: Vec<String> = r.rose.iter().map(|(k, n)| format!("{k} +{n}")).collect();
        let limit = match status {
            Status::Fail => format!("fails at {fail}"),
            _ => format!("warns at {warn}"),
        };
        out.push(Finding {
            port: name.clone(),
            status,
            reason: r.class.reason(),
            text: format!(
                "{name} {}: {} in the last {shown_window} ({}; [counters] {}_{} {limit})",
                r.class.as_str(),
                r.in_window,
                rose.join(", "),
                r.class.as_str(),
                if status == Status::Fail {
                    "fail"
                } else {
                    "warn"
                },
            ),
        });
    }
    for key in &p.saturated {
        out.push(Finding {
            port: name.clone(),
            status: Status::Warn,
            reason: reasons::COUNTERS_SATURATED,
            text: format!(
                "{name} {key} is at its maximum ({}): the kernel's counter no longer counts, so a rise cannot be seen; clear it (perfquery -R)",
                p.rated.get(key).copied().unwrap_or_default()
            ),
        });
    }
    out
}

/// The check's status, message and reason from every port's findings.
pub struct Verdict {
    pub status: Status,
    pub message: String,
    pub reason: Option<Reason>,
}

pub struct Summary<'a> {
    pub findings: &'a [Finding],
    pub management: &'a [Finding],
    pub pending: &'a [String],
    pub unrated: &'a [String],
    pub ports: usize,
    pub history_error: Option<&'a str>,
    pub shown_window: &'a str,
}

/// What the message adds after its verdict: ports without a rate yet, ports
/// with no rated counter, the management NIC's findings.
struct Suffixes {
    unrated: String,
    management: String,
    /// All three, as every verdict but the quiet ones ends.
    tail: String,
}

fn suffixes(s: &Summary) -> Suffixes {
    let pending = if s.pending.is_empty() {
        String::new()
    } else {
        format!(
            "; no rate yet for {} (first reading: its baseline is taken now)",
            s.pending.join(", ")
        )
    };
    let management = if s.management.is_empty() {
        String::new()
    } else {
        let m: Vec<&str> = s.management.iter().map(|f| f.text.as_str()).collect();
        format!(
            "; management NIC (default route), reported, not counted against the node: {}",
            m.join("; ")
        )
    };
    let unrated = if s.unrated.is_empty() {
        String::new()
    } else {
        format!(
            "; no counter this check rates on {} (their counters are in the details)",
            s.unrated.join(", ")
        )
    };
    let tail = format!("{pending}{unrated}{management}");
    Suffixes {
        unrated,
        management,
        tail,
    }
}

pub fn verdict(s: &Summary) -> Verdict {
    let worst = [Status::Fail, Status::Unknown, Status::Warn]
        .into_iter()
        .find(|st| s.findings.iter().any(|f| f.status == *st));
    let Suffixes {
        unrated,
        management,
        tail,
    } = suffixes(s);
    if let Some(e) = s.history_error {
        return Verdict {
            status: Status::Unknown,
            message: format!(
                "cannot read the counter history, so no rate can be taken: {e}; the daemon starts a new one{tail}"
            ),
            reason: Some(Reason::AGENT_STATE_UNREADABLE),
        };
    }
    if let Some(st) = worst {
        let shown: Vec<&str> = [Status::Fail, Status::Unknown, Status::Warn]
            .iter()
            .flat_map(|st| s.findings.iter().filter(move |f| f.status == *st))
            .map(|f| f.text.as_str())
            .collect();
        let reason = s.findings.iter().find(|f| f.status == st).map(|f| f.reason);
        return Verdict {
            status: st,
            message: format!("{}{tail}", shown.join("; ")),
            reason,
        };
    }
    if s.ports == 0 {
        return Verdict {
            status: Status::Skipped,
            message: "no RDMA port (/sys/class/infiniband is empty or absent): no counters to read"
                .to_owned(),
            reason: Some(Reason::FACT_UNREADABLE),
        };
    }
    if s.unrated.len() == s.ports {
        return Verdict {
            status: Status::Skipped,
            message: format!(
                "{} port(s), none with a counter this check rates{unrated}{management}",
                s.ports
            ),
            reason: None,
        };
    }
    if s.pending.len() + s.unrated.len() == s.ports {
        return Verdict {
            status: Status::Skipped,
            message: format!(
                "{} port(s) read for the first time: baselines taken, no rate yet (rates from the next reconcile){unrated}{management}",
                s.pending.len()
            ),
            // Skipped carries no reason.
            reason: None,
        };
    }
    Verdict {
        status: Status::Ok,
        message: format!(
            "{} port(s), error and congestion counters within thresholds over the last {}{tail}",
            s.ports - s.pending.len() - s.unrated.len(),
            s.shown_window
        ),
        reason: None,
    }
}

/// A port's entry in the check's details.
pub fn port_details(
    p: &PortRead,
    h: Option<&PortHistory>,
    rated: &[Rated],
    management: bool,
    pending: bool,
) -> Value {
    let classes: BTreeMap<&str, Value> = rated
        .iter()
        .map(|r| {
            (
                r.class.as_str(),
                json!({"in_window": r.in_window, "total": r.total, "per_second": r.per_second}),
            )
        })
        .collect();
    json!({
        "port": p.name(),
        "identity": p.identity,
        "netdevs": p.netdevs,
        "management": management,
        "baseline_since_unix": if pending { None } else { h.map(|h| h.since) },
        "classes": classes,
        "rated": p.rated,
        "other": p.other,
        "unreadable": p.unreadable,
        "saturated": p.saturated,
    })
}

/// The history to compare with: `Err` when it cannot be read.
pub fn old_history(h: &Result<History, String>) -> (History, Option<&str>) {
    match h {
        Ok(h) => (h.clone(), None),
        Err(e) => (History::default(), Some(e.as_str())),
    }
}
