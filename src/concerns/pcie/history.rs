//! What `pcie.aer` remembers between reconciles, per boot: each function's
//! correctable-error total when it changed (for the rise within the window)
//! and the best link it trained at (for a link that retrained down). The
//! kernel's counts and links start again at each boot: a new boot id starts a
//! new history, and a total that falls within one boot (the function was
//! removed and rescanned, or reset) starts that function's samples again.
//! Neither is an alarm. Pure: readings in, the next history out.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// At most this many samples per function (a link erring every reconcile
/// for a long window): the oldest in the window go first.
const MAX_SAMPLES: usize = 512;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The boot these counts belong to (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: Option<String>,
    /// By PCI address.
    pub functions: BTreeMap<String, FnHistory>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FnHistory {
    /// (seconds since the epoch, `TOTAL_ERR_COR`) when the total changed,
    /// oldest first: the newest at or before the window's start, and those after.
    #[serde(default)]
    pub correctable: Vec<(u64, u64)>,
    /// The fastest speed (tenths of GT/s) and widest width this boot.
    #[serde(default)]
    pub best_speed: Option<u32>,
    #[serde(default)]
    pub best_width: Option<u32>,
    /// Times the total fell within this boot (a reset, not errors).
    #[serde(default)]
    pub resets: u64,
}

/// One function as read now; `None` where the value could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    pub correctable: Option<u64>,
    pub speed: Option<u32>,
    pub width: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readings {
    pub now: u64,
    pub boot_id: Option<String>,
    pub functions: BTreeMap<String, Reading>,
    /// Functions watched but not read this time: their history is kept.
    pub unread: BTreeSet<String>,
}

impl FnHistory {
    /// How much the correctable total rose within `window` seconds before `now`:
    /// from the total at the window's start (or the first seen, when later).
    pub fn rise_within(&self, now: u64, window: u64) -> u64 {
        let Some(&(_, current)) = self.correctable.last() else {
            return 0;
        };
        let start = now.saturating_sub(window);
        let base = self
            .correctable
            .iter()
            .rev()
            .find(|(at, _)| *at <= start)
            .or(self.correctable.first())
            .map_or(current, |(_, n)| *n);
        current.saturating_sub(base)
    }
}

/// The next history: `old` (when it is of this boot) with `r` folded in.
pub fn update(old: &History, r: &Readings, window: u64) -> History {
    let same_boot = old.boot_id.is_none() || r.boot_id.is_none() || old.boot_id == r.boot_id;
    let mut next = History {
        boot_id: r.boot_id.clone().or_else(|| old.boot_id.clone()),
        functions: BTreeMap::new(),
    };
    for (bdf, reading) in &r.functions {
        let mut h = if same_boot {
            old.functions.get(bdf).cloned().unwrap_or_default()
        } else {
            FnHistory::default()
        };
        fold(&mut h, reading, r.now, window);
        next.functions.insert(bdf.clone(), h);
    }
    if same_boot {
        for bdf in &r.unread {
            if let Some(h) = old.functions.get(bdf) {
                next.functions.insert(bdf.clone(), h.clone());
            }
        }
    }
    next
}

fn fold(h: &mut FnHistory, r: &Reading, now: u64, window: u64) {
    if let Some(total) = r.correctable {
        match h.correctable.last() {
            Some(&(_, last)) if total < last => {
                h.resets += 1;
                h.correctable = vec![(now, total)];
            }
            Some(&(_, last)) if total == last => {}
            _ => h.correctable.push((now, total)),
        }
        // The samples before the window but its baseline (the newest of them) go.
        let start = now.saturating_sub(window);
        let before = h.correctable.iter().filter(|(at, _)| *at <= start).count();
        if before > 1 {
            h.correctable.drain(..before - 1);
        }
        if h.correctable.len() > MAX_SAMPLES {
            let extra = h.correctable.len() - MAX_SAMPLES;
            h.correctable.drain(1..=extra);
        }
    }
    if let Some(s) = r.speed {
        h.best_speed = Some(h.best_speed.map_or(s, |b| b.max(s)));
    }
    if let Some(w) = r.width {
        h.best_width = Some(h.best_width.map_or(w, |b| b.max(w)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings(now: u64, boot: &str, cor: u64, speed: u32) -> Readings {
        Readings {
            now,
            boot_id: Some(boot.into()),
            functions: [(
                "0000:03:00.0".to_owned(),
                Reading {
                    correctable: Some(cor),
                    speed: Some(speed),
                    width: Some(16),
                },
            )]
            .into(),
            unread: BTreeSet::new(),
        }
    }

    fn f(h: &History) -> &FnHistory {
        &h.functions["0000:03:00.0"]
    }

    #[test]
    fn counts_before_the_agent_are_a_baseline_and_rises_are_windowed() {
        let h = update(&History::default(), &readings(1000, "a", 500, 160), 3600);
        assert_eq!(f(&h).rise_within(1000, 3600), 0);
        let h = update(&h, &readings(1060, "a", 520, 160), 3600);
        assert_eq!(f(&h).rise_within(1060, 3600), 20);
        let h = update(&h, &readings(2000, "a", 700, 160), 3600);
        assert_eq!(f(&h).rise_within(2000, 3600), 200);
        // An hour later nothing new: the rise has left the window.
        let h = update(&h, &readings(5700, "a", 700, 160), 3600);
        assert_eq!(f(&h).rise_within(5700, 3600), 0);
        assert_eq!(f(&h).correctable, vec![(2000, 700)]);
    }

    #[test]
    fn a_reboot_or_a_reset_is_no_rise() {
        let h = update(&History::default(), &readings(1000, "a", 500, 160), 3600);
        // A new boot: the kernel counts from 0 again.
        let h = update(&h, &readings(1100, "b", 3, 80), 3600);
        assert_eq!(f(&h).rise_within(1100, 3600), 0);
        assert_eq!(f(&h).best_speed, Some(80), "the old boot's best is gone");
        // Within a boot, a fall is a reset (remove and rescan), counted apart.
        let h = update(&h, &readings(1200, "b", 1, 80), 3600);
        assert_eq!((f(&h).rise_within(1200, 3600), f(&h).resets), (0, 1));
        let h = update(&h, &readings(1300, "b", 4, 80), 3600);
        assert_eq!(f(&h).rise_within(1300, 3600), 3);
    }

    #[test]
    fn the_best_link_of_the_boot_is_kept_and_an_unread_function_keeps_its_history() {
        let h = update(&History::default(), &readings(1000, "a", 0, 160), 3600);
        let h = update(&h, &readings(1100, "a", 0, 80), 3600);
        assert_eq!(f(&h).best_speed, Some(160));
        let mut r = readings(1200, "a", 0, 80);
        r.functions.clear();
        r.unread.insert("0000:03:00.0".into());
        let h2 = update(&h, &r, 3600);
        assert_eq!(h2, h);
    }

    #[test]
    fn samples_are_bounded() {
        let mut h = History::default();
        for i in 0..600u64 {
            h = update(&h, &readings(1000 + i, "a", i, 160), 3600);
        }
        assert_eq!(f(&h).correctable.len(), MAX_SAMPLES);
        assert_eq!(f(&h).correctable[0], (1000, 0));
    }
}
