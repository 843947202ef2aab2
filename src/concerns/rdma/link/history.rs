//! The link history: pure. One reading per reconcile (and the link-down events
//! the daemon counted between them) turns the persisted history into the next.
//!
//! - The first reading of a port only sets its baseline: no flap at first poll.
//! - A flap is the port leaving ACTIVE (seen by a poll, or a link event between
//!   polls), or the kernel's `link_downed` counter rising: both see the same
//!   flap, so one interval counts the larger of the two, not their sum.
//! - Counters are cumulative from sysfs deltas. A value below the last one in
//!   the same boot is a reset (driver reload): the new value is the delta. A new
//!   boot re-baselines every port: reboot and link training are no flaps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Flaps kept per port (each with its time and count): enough for any window
/// the threshold can mean, bounded so the file stays small.
pub const KEEP: usize = 64;
/// A port gone from sysfs (driver reload, VF removed) keeps its history this long.
pub const FORGET_AFTER_SECS: u64 = 7 * 86400;
pub const VERSION: u32 = 1;
/// How stale `seen` may be before it is refreshed: the file is rewritten only
/// when something changed, not at every reconcile.
pub const SEEN_EVERY_SECS: u64 = 3600;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub version: u32,
    /// The boot the readings were taken in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: Option<String>,
    /// The daemon instance whose link-event tallies were last counted.
    #[serde(default)]
    pub events_instance: Option<String>,
    /// `device/port` → its history.
    pub ports: BTreeMap<String, PortHistory>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortHistory {
    /// Last known state (unknown readings leave it as it was).
    pub active: Option<bool>,
    /// Last raw sysfs counter values, to take deltas from.
    pub link_downed: Option<u64>,
    pub link_error_recovery: Option<u64>,
    /// The daemon's link-down events for this port's netdev last counted.
    #[serde(default)]
    pub events: u64,
    /// Downs the last reading saw by polling before the daemon's tally had
    /// them: their events, when they come, are not counted again.
    #[serde(default)]
    pub credit: u64,
    pub flaps_total: u64,
    pub link_downed_total: u64,
    pub link_error_recovery_total: u64,
    /// The last `KEEP` flaps, oldest first.
    pub flaps: Vec<Flap>,
    /// Last time the port was read, seconds since the epoch.
    pub seen: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flap {
    /// When it was seen (the reconcile's time), seconds since the epoch.
    pub at: u64,
    pub count: u64,
}

impl PortHistory {
    pub fn last_flap(&self) -> Option<u64> {
        self.flaps.last().map(|f| f.at)
    }

    /// Flaps seen in the `window` seconds up to `now`.
    pub fn flaps_within(&self, now: u64, window: u64) -> u64 {
        let since = now.saturating_sub(window);
        self.flaps
            .iter()
            .filter(|f| f.at > since)
            .map(|f| f.count)
            .sum()
    }
}

/// One port as read this reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// `None`: the state could not be read or is one the kernel does not name.
    pub active: Option<bool>,
    pub link_downed: Option<u64>,
    pub link_error_recovery: Option<u64>,
    /// The daemon's cumulative link-down events for the port's netdev (this instance).
    pub events: u64,
}

/// What one reconcile read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readings {
    pub now: u64,
    pub boot_id: Option<String>,
    /// The daemon instance that counted `events` (none: no event source).
    pub events_instance: Option<String>,
    pub ports: BTreeMap<String, Reading>,
}

/// A counter's increase from `last` to `now`; a decrease is a reset, after
/// which `now` counts from zero.
fn delta(last: Option<u64>, now: Option<u64>) -> u64 {
    match (last, now) {
        (Some(l), Some(n)) if n >= l => n - l,
        (Some(_), Some(n)) => n,
        _ => 0,
    }
}

/// The next history from the last one and this reconcile's readings.
pub fn update(old: &History, r: &Readings) -> History {
    let new_boot = old.boot_id.is_some() && r.boot_id.is_some() && old.boot_id != r.boot_id;
    let same_events = old.events_instance.is_some() && old.events_instance == r.events_instance;
    let mut ports = BTreeMap::new();
    for (name, reading) in &r.ports {
        let p = match old.ports.get(name) {
            // First sight, or a new boot: the baseline.
            None => baseline(reading, r.now),
            Some(last) if new_boot => rebaseline(last, reading, r.now),
            Some(last) => step(
                last,
                reading,
                r.now,
                same_events,
                r.events_instance.is_some(),
            ),
        };
        ports.insert(name.clone(), p);
    }
    // Ports not read this time keep their history for a while.
    for (name, last) in &old.ports {
        if !ports.contains_key(name) && r.now.saturating_sub(last.seen) < FORGET_AFTER_SECS {
            ports.insert(name.clone(), last.clone());
        }
    }
    History {
        version: VERSION,
        boot_id: r.boot_id.clone().or_else(|| old.boot_id.clone()),
        events_instance: r.events_instance.clone(),
        ports,
    }
}

fn baseline(r: &Reading, now: u64) -> PortHistory {
    PortHistory {
        active: r.active,
        link_downed: r.link_downed,
        link_error_recovery: r.link_error_recovery,
        events: r.events,
        seen: now,
        ..PortHistory::default()
    }
}

/// A new boot: totals and past flaps stay, the raw values start again.
fn rebaseline(last: &PortHistory, r: &Reading, now: u64) -> PortHistory {
    PortHistory {
        flaps_total: last.flaps_total,
        link_downed_total: last.link_downed_total,
        link_error_recovery_total: last.link_error_recovery_total,
        flaps: last.flaps.clone(),
        ..baseline(r, now)
    }
}

fn step(
    last: &PortHistory,
    r: &Reading,
    now: u64,
    same_events: bool,
    event_source: bool,
) -> PortHistory {
    let downed = delta(last.link_downed, r.link_downed);
    let recovery = delta(last.link_error_recovery, r.link_error_recovery);
    let left_active = u64::from(last.active == Some(true) && r.active == Some(false));
    // Events since the last count by the same daemon; a new daemon's tally starts at 0.
    let events = if same_events {
        r.events.saturating_sub(last.events)
    } else {
        r.events
    };
    // A down the last poll counted before its event was tallied: that event
    // is in this interval's, and counted already.
    let events = if same_events {
        events.saturating_sub(last.credit)
    } else {
        events
    };
    // A poll that sees the port down again after events saw it go down counts those.
    let observed = left_active.max(events);
    let flaps = observed.max(downed);
    let mut p = PortHistory {
        active: r.active.or(last.active),
        link_downed: r.link_downed.or(last.link_downed),
        link_error_recovery: r.link_error_recovery.or(last.link_error_recovery),
        events: r.events,
        credit: if event_source {
            left_active.saturating_sub(events)
        } else {
            0
        },
        flaps_total: last.flaps_total + flaps,
        link_downed_total: last.link_downed_total + downed,
        link_error_recovery_total: last.link_error_recovery_total + recovery,
        flaps: last.flaps.clone(),
        seen: if now.saturating_sub(last.seen) < SEEN_EVERY_SECS {
            last.seen
        } else {
            now
        },
    };
    if flaps > 0 {
        p.flaps.push(Flap {
            at: now,
            count: flaps,
        });
        let extra = p.flaps.len().saturating_sub(KEEP);
        p.flaps.drain(..extra);
    }
    p
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
