//! The `rdma.link` check: the ports that flapped more than the threshold
//! within the window, from the next history (what this reading adds).

use crate::concerns::rdma::link::reasons;
use serde_json::json;

use super::history::History;
use super::{CHECK_ID, Facts, utc};
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

pub(super) fn check(
    next: &History,
    f: &Facts,
    threshold: u32,
    window: u64,
    history_error: Option<String>,
) -> Check {
    let now = f.readings.now;
    let flapping: Vec<(String, u64, u64)> = f
        .readings
        .ports
        .keys()
        .filter_map(|name| {
            let p = next.ports.get(name)?;
            let n = p.flaps_within(now, window);
            (n > u64::from(threshold)).then(|| (name.clone(), n, p.last_flap().unwrap_or(now)))
        })
        .collect();
    let details = json!({
        "threshold": threshold,
        "window_seconds": window,
        "ports": f.readings.ports.keys().filter_map(|name| {
            let p = next.ports.get(name)?;
            Some(json!({
                "port": name,
                "flaps_in_window": p.flaps_within(now, window),
                "flaps_total": p.flaps_total,
                "link_downed_total": p.link_downed_total,
                "link_error_recovery_total": p.link_error_recovery_total,
                "last_flap": p.last_flap().map(utc),
            }))
        }).collect::<Vec<_>>(),
        "unreadable": f.unreadable,
    });
    let (status, message, reason) = match history_error {
        Some(e) => (
            Status::Unknown,
            format!(
                "cannot read the link history, so flaps before now are not known: {e}; the daemon starts a new one"
            ),
            Reason::FACT_UNREADABLE,
        ),
        None => verdict(next, f, threshold, window, &flapping),
    };
    Check::new(CHECK_ID, status, message)
        .with_reason(reason)
        .with_details(details)
}

/// The verdict once the history is read: flapping ports warn; an unread port
/// makes it unknown (it may be flapping: never `ok`); no port is skipped.
fn verdict(
    next: &History,
    f: &Facts,
    threshold: u32,
    window: u64,
    flapping: &[(String, u64, u64)],
) -> (Status, String, Reason) {
    let now = f.readings.now;
    let shown_window = shown(window);
    let ports = f.readings.ports.len();
    let unread = (!f.unreadable.is_empty()).then(|| {
        format!(
            "{} RDMA port(s) or device(s) could not be read, so their flaps are not known: {}",
            f.unreadable.len(),
            f.unreadable.join(", ")
        )
    });
    if !flapping.is_empty() {
        let named: Vec<String> = flapping
            .iter()
            .map(|(p, n, last)| {
                format!(
                    "{p} flapped {n} times in the last {shown_window}, last at {}",
                    utc(*last)
                )
            })
            .collect();
        let flaps = format!(
            "{} (more than rdma.flap_threshold = {threshold})",
            named.join("; ")
        );
        return match unread {
            // Unknown is the worse: the unread ports may flap too.
            Some(u) => (
                Status::Unknown,
                format!("{u}; {flaps}"),
                Reason::FACT_UNREADABLE,
            ),
            None => (Status::Warn, flaps, reasons::LINK_FLAPPING),
        };
    }
    if let Some(u) = unread {
        let read = f
            .readings
            .ports
            .values()
            .filter(|r| r.active.is_some())
            .count();
        return (
            Status::Unknown,
            format!("{u}; {read} port(s) read, none flapping"),
            Reason::FACT_UNREADABLE,
        );
    }
    if ports == 0 {
        return (
            Status::Skipped,
            "no RDMA port (/sys/class/infiniband is empty or absent): no link to watch".to_owned(),
            Reason::FACT_UNREADABLE,
        );
    }
    let total: u64 = f
        .readings
        .ports
        .keys()
        .filter_map(|n| next.ports.get(n))
        .map(|p| p.flaps_within(now, window))
        .sum();
    (
        Status::Ok,
        format!(
            "{ports} port(s), {total} flap(s) in the last {shown_window} (warns above {threshold} per port)"
        ),
        Reason::FACT_UNREADABLE,
    )
}

/// `1h`, `90s`, `2d`: the window as configured.
fn shown(secs: u64) -> String {
    match secs {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
