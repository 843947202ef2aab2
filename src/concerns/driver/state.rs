//! What `driver.health` remembers across cycles, per boot: each reporter's
//! error count when first seen this boot (its baseline) and at the last
//! cycle, and the kernel-log pattern counts with the last record counted.
//! A new boot id starts over; a count below its baseline (the driver was
//! reloaded, its reporters registered anew) moves the baseline down.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::devlink::Reporter;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub boot_id: Option<String>,
    /// `instance[/port]/name` → counts.
    pub reporters: BTreeMap<String, Counts>,
    /// The last kernel-log record counted (its sequence number).
    pub kmsg_seq: Option<u64>,
    /// `pci address/pattern` → records seen this boot.
    pub kmsg: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// The error count errors are counted from this boot: 0, or the count
    /// after a driver reload reset it.
    pub baseline: u64,
    /// The error count at the last cycle.
    pub last: u64,
}

/// The key of a reporter in the state and in messages.
pub fn key(r: &Reporter) -> String {
    match r.port {
        Some(p) => format!("{}/{p}/{}", r.instance, r.name),
        None => format!("{}/{}", r.instance, r.name),
    }
}

/// One cycle's kernel-log counts (records after `State::kmsg_seq`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogReading {
    pub last_seq: Option<u64>,
    pub first_seq: Option<u64>,
    pub counts: BTreeMap<String, u64>,
}

/// The state after this cycle's readings (pure).
pub fn update(
    old: &State,
    boot_id: Option<&str>,
    reporters: &[Reporter],
    log: Option<&LogReading>,
) -> State {
    let same_boot = old.boot_id.is_some() && old.boot_id.as_deref() == boot_id;
    let base = if same_boot {
        old.clone()
    } else {
        State {
            boot_id: boot_id.map(str::to_owned),
            ..State::default()
        }
    };
    let mut next = State {
        reporters: BTreeMap::new(),
        ..base.clone()
    };
    for r in reporters {
        let k = key(r);
        // The kernel's count starts at 0 when the driver registers the
        // reporter (at boot): first seen, all of it is this boot's. A count
        // below the baseline means the driver was reloaded: count from there.
        let baseline = match base.reporters.get(&k) {
            Some(c) if r.errors >= c.baseline => c.baseline,
            Some(_) => r.errors,
            None => 0,
        };
        next.reporters.insert(
            k,
            Counts {
                baseline,
                last: r.errors,
            },
        );
    }
    if let Some(log) = log {
        for (k, n) in &log.counts {
            *next.kmsg.entry(k.clone()).or_default() += n;
        }
        if log.last_seq.is_some() {
            next.kmsg_seq = log.last_seq;
        }
    }
    next
}

/// Records between the last counted (or the boot's first, sequence 0) and
/// the oldest still in the buffer were overwritten before any pass read them:
/// how many, when some were.
pub fn missed(old: &State, boot_id: Option<&str>, log: &LogReading) -> Option<u64> {
    let same_boot = old.boot_id.is_some() && old.boot_id.as_deref() == boot_id;
    let from = old.kmsg_seq.filter(|_| same_boot).map_or(0, |s| s + 1);
    let first = log.first_seq?;
    (first > from).then(|| first - from)
}
