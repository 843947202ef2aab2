//! `kernel.change`: the kernel the agent last ran on, and the release order
//! used to tell which installed kernels are newer.

use crate::concerns::kernel::reasons;
use std::cmp::Ordering;

use serde_json::json;

use super::{CHANGE, Facts, KernelState};
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

/// Kernel releases in version order: digits compare as numbers (6.8.0-51 > 6.8.0-9).
pub fn compare_releases(a: &str, b: &str) -> Ordering {
    fn parts(s: &str) -> Vec<Result<u64, String>> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut digits = false;
        for c in s.chars() {
            let d = c.is_ascii_digit();
            if !cur.is_empty() && d != digits {
                out.push(if digits {
                    cur.parse().map_err(|_| cur.clone())
                } else {
                    Err(cur.clone())
                });
                cur.clear();
            }
            digits = d;
            cur.push(c);
        }
        if !cur.is_empty() {
            out.push(if digits {
                cur.parse().map_err(|_| cur.clone())
            } else {
                Err(cur)
            });
        }
        out
    }
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(&pb) {
        let o = match (x, y) {
            (Ok(x), Ok(y)) => x.cmp(y),
            (Err(x), Err(y)) => x.cmp(y),
            (Ok(_), Err(_)) => Ordering::Greater,
            (Err(_), Ok(_)) => Ordering::Less,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

/// The state `apply` records, if it differs from what is recorded.
pub fn next_state(f: &Facts) -> Option<KernelState> {
    // A corrupt record is the operator's to look at, not ours to overwrite.
    if f.state_error.is_some() {
        return None;
    }
    let (release, boot_id) = (f.release.clone()?, f.boot_id.clone().unwrap_or_default());
    let state = match &f.state {
        None => KernelState {
            release,
            boot_id,
            previous: None,
        },
        Some(s) if s.release != release => KernelState {
            release,
            boot_id,
            previous: Some(s.release.clone()),
        },
        // Same kernel, new boot: the change was reported in its boot; forget it.
        Some(s) if s.boot_id != boot_id => KernelState {
            release,
            boot_id,
            previous: None,
        },
        Some(_) => return None,
    };
    Some(state)
}

/// The release this boot changed from, once per boot: for metrics and alerts.
pub fn changed_from(f: &Facts) -> Option<String> {
    let release = f.release.as_ref()?;
    match &f.state {
        Some(s) if &s.release != release => Some(s.release.clone()),
        Some(s) if f.boot_id.as_deref() == Some(s.boot_id.as_str()) => s.previous.clone(),
        _ => None,
    }
}

pub fn check_change(f: &Facts) -> Check {
    let Some(release) = &f.release else {
        return Check::new(
            CHANGE,
            Status::Unknown,
            "no /proc/sys/kernel/osrelease under this root",
        )
        .with_reason(Reason::FACT_UNREADABLE);
    };
    if let Some(e) = &f.state_error {
        return Check::new(
            CHANGE,
            Status::Unknown,
            format!(
                "kernel {release}; cannot tell whether it changed since the last run: the agent's state does not parse ({e}); remove the file and run `rdma-node-agent apply` to record this kernel"
            ),
        )
        .with_reason(Reason::AGENT_STATE_UNREADABLE);
    }
    let changed_from = changed_from(f);
    let details = json!({"release": release, "boot_id": f.boot_id, "recorded": f.state, "changed_from": changed_from});
    match &f.state {
        None => Check::new(CHANGE, Status::Ok, format!("kernel {release}; first run, nothing to compare with")),
        Some(s) if &s.release != release => Check::new(
            CHANGE,
            Status::Warn,
            format!(
                "kernel changed from {} to {release} since the last run: the host preparation is re-applied at the next apply",
                s.release
            ),
        )
        .with_reason(reasons::KERNEL_CHANGED),
        Some(s) if s.previous.is_some() && f.boot_id.as_deref() == Some(s.boot_id.as_str()) => Check::new(
            CHANGE,
            Status::Ok,
            format!(
                "kernel changed from {} to {release} at this boot; host preparation re-applied",
                s.previous.as_deref().unwrap_or_default()
            ),
        ),
        Some(_) => Check::new(CHANGE, Status::Ok, format!("kernel {release}, unchanged")),
    }
    .with_details(details)
}
