//! A port's `counters/` and `hw_counters/`, read on first ask: the device's
//! directory is opened again by its real path (one `openat2`, no walk of the
//! class), and each counter directory once, its files read relative to it.

use std::collections::BTreeMap;

use super::{Counter, CounterDir, Counters, Device};
use crate::host::Dir;
use crate::host::read::ReadHost;

const DIRS: [&str; 2] = ["counters", "hw_counters"];

/// The counters of `port` of `device` (both directories empty when the
/// device's directory is not known: its problem is the device's).
pub fn read(host: &ReadHost, device: &Device, port: &str) -> Counters {
    let Some(path) = &device.path else {
        return Counters {
            counters: Ok(BTreeMap::new()),
            hw_counters: Ok(BTreeMap::new()),
        };
    };
    let opened = match host.open_real_dir(path) {
        Some(d) => Ok(Ok(d)),
        None => host.open_dir(path),
    };
    let dir = match opened {
        Ok(Ok(d)) => d,
        Ok(Err(_)) => {
            let gone = format!("{} is gone", path.display());
            return Counters {
                counters: Err(gone.clone()),
                hw_counters: Err(gone),
            };
        }
        Err(e) => {
            return Counters {
                counters: Err(e.to_string()),
                hw_counters: Err(e.to_string()),
            };
        }
    };
    let port_dir = dir.subdir("ports").and_then(|d| d.subdir(port));
    let [counters, hw_counters] = DIRS.map(|which| one(&dir, port_dir.as_ref(), port, which));
    Counters {
        counters,
        hw_counters,
    }
}

fn one(dir: &Dir<'_>, port_dir: Option<&Dir<'_>>, port: &str, which: &str) -> CounterDir {
    // Opened once, its files read relative to it (the cost is system calls);
    // else by path from the device. An absent directory lists empty: rxe has
    // no `counters/`, siw neither.
    let opened = port_dir.and_then(|d| d.subdir(which));
    let (from, prefix) = match &opened {
        Some(d) => (d, String::new()),
        None => (dir, format!("ports/{port}/{which}/")),
    };
    let names = from
        .list(prefix.trim_end_matches('/'))
        .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for name in names {
        // hw_counters/lifespan is the driver's cache time (ms), a knob, not a counter.
        if which == "hw_counters" && name == "lifespan" {
            continue;
        }
        let value: Counter = match from.read_string(&format!("{prefix}{name}")) {
            // A driver without a PMA (i40iw, irdma) answers `N/A (no PMA)`:
            // the counter does not exist there, it is not unreadable.
            Ok(Some(t)) if t.trim_start().starts_with("N/A") => continue,
            Ok(Some(t)) => t
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{:?} is not a count", t.trim())),
            Ok(None) => continue,
            Err(e) => Err(e.to_string()),
        };
        out.insert(name, value);
    }
    Ok(out)
}
