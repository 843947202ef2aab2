//! The counter history: pure. One reading per reconcile turns the persisted
//! history into the next, as `rdma.link`'s flap history does:
//!
//! - A port is keyed by a stable identity (node GUID, else PCI address, with
//!   the port number), so a device that comes back under a new name keeps its
//!   baseline, and its old name leaves no verdict behind.
//! - The first reading of a port only sets its baseline: no rate yet.
//! - A counter's rise is added to its total; a wrap (32- or 64-bit) counts
//!   across the top; any other decrease is a reset, which counts nothing.
//! - A new boot (`boot_id`) re-baselines every raw value; totals and the
//!   steps inside the window stay, so a reboot neither raises nor hides.
//! - Steps (time, total) are kept per counter, one per bucket of
//!   `window / BUCKETS`, so the count within the window is a lookup and the
//!   file stays small however often the counters move.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::classes::rise;

pub const VERSION: u32 = 1;
/// A port gone from sysfs keeps its history this long.
pub const FORGET_AFTER_SECS: u64 = 7 * 86400;
/// Steps per window: the window's start is known to within window / BUCKETS.
pub const BUCKETS: u64 = 60;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub version: u32,
    pub boot_id: Option<String>,
    /// Identity (`guid:<node guid>/<port>`, `pci:<address>/<port>`) → history.
    pub ports: BTreeMap<String, PortHistory>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortHistory {
    /// `device/port` as last read.
    pub name: String,
    /// When the baseline was first taken, seconds since the epoch.
    pub since: u64,
    pub seen: u64,
    /// Raw values (`counters/symbol_error` → value) of the rated counters.
    pub last: BTreeMap<String, u64>,
    /// Rises since `since`, per counter, across resets and reboots.
    pub totals: BTreeMap<String, u64>,
    /// Per counter, (time, total) after each bucket that saw a rise, oldest first.
    pub steps: BTreeMap<String, Vec<Step>>,
    /// The last time a counter went down (a reset, not counted).
    pub last_reset: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub at: u64,
    pub total: u64,
}

/// One port as read this reconcile: its rated counters' raw values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortReading {
    pub name: String,
    pub values: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readings {
    pub now: u64,
    pub boot_id: Option<String>,
    pub ports: BTreeMap<String, PortReading>,
}

impl PortHistory {
    /// How much `counter` rose in the `window` seconds up to `now`: its total
    /// now less its total at the window's start (0 before the first step).
    pub fn within(&self, counter: &str, now: u64, window: u64) -> u64 {
        let total = self.totals.get(counter).copied().unwrap_or(0);
        let start = now.saturating_sub(window);
        let at_start = self
            .steps
            .get(counter)
            .and_then(|s| s.iter().rev().find(|s| s.at <= start))
            .map_or(0, |s| s.total);
        total.saturating_sub(at_start)
    }

    /// Seconds of the window the history covers (less than `window` for a
    /// baseline taken inside it).
    pub fn covered(&self, now: u64, window: u64) -> u64 {
        now.saturating_sub(self.since).min(window)
    }
}

/// The next history from the last one and this reconcile's readings.
pub fn update(old: &History, r: &Readings, window: u64) -> History {
    let new_boot = old.boot_id.is_some() && r.boot_id.is_some() && old.boot_id != r.boot_id;
    let mut ports = BTreeMap::new();
    for (id, reading) in &r.ports {
        let p = match old.ports.get(id) {
            None => PortHistory {
                name: reading.name.clone(),
                since: r.now,
                seen: r.now,
                last: reading.values.clone(),
                ..PortHistory::default()
            },
            Some(last) if new_boot => PortHistory {
                name: reading.name.clone(),
                seen: seen(last.seen, r.now),
                last: reading.values.clone(),
                ..last.clone()
            },
            Some(last) => step(last, reading, r.now, window),
        };
        ports.insert(id.clone(), p);
    }
    for (id, last) in &old.ports {
        if !ports.contains_key(id) && r.now.saturating_sub(last.seen) < FORGET_AFTER_SECS {
            ports.insert(id.clone(), last.clone());
        }
    }
    History {
        version: VERSION,
        boot_id: r.boot_id.clone().or_else(|| old.boot_id.clone()),
        ports,
    }
}

/// `seen` moves hourly: an idle port's history is not rewritten every reconcile.
fn seen(last: u64, now: u64) -> u64 {
    if now.saturating_sub(last) < 3600 {
        last
    } else {
        now
    }
}

fn step(last: &PortHistory, r: &PortReading, now: u64, window: u64) -> PortHistory {
    let mut p = PortHistory {
        name: r.name.clone(),
        seen: seen(last.seen, now),
        last: r.values.clone(),
        ..last.clone()
    };
    let bucket = (window / BUCKETS).max(1);
    for (counter, value) in &r.values {
        // A counter new to this port (a driver update) only sets its baseline.
        let Some(before) = last.last.get(counter) else {
            continue;
        };
        match rise(*before, *value) {
            Some(0) => {}
            Some(n) => {
                let total = p.totals.entry(counter.clone()).or_default();
                *total += n;
                let total = *total;
                let steps = p.steps.entry(counter.clone()).or_default();
                // One step per bucket, at its last rise: a total is exact at
                // its step's time, and a window's start is at most one bucket early.
                match steps.last_mut() {
                    Some(s) if s.at / bucket == now / bucket => *s = Step { at: now, total },
                    _ => steps.push(Step { at: now, total }),
                }
            }
            None => p.last_reset = Some(now),
        }
    }
    // Steps older than the window's start are needed only as its starting value.
    let start = now.saturating_sub(window);
    for steps in p.steps.values_mut() {
        let before = steps.iter().filter(|s| s.at <= start).count();
        steps.drain(..before.saturating_sub(1));
    }
    p
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
