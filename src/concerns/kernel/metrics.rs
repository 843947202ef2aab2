//! `kernel.change`'s family (registered in `concerns::registry::METRICS`).

use crate::exposition::{Families, bool01};
use crate::observe::Observation;

pub fn families(m: &mut Families, seen: &[Observation]) {
    let any = |f: fn(&Observation) -> bool| bool01(seen.iter().any(f));
    m.gauge(
        "kernel_changed",
        "1 when the kernel changed at this boot or since the last run, 0 otherwise",
        any(|o| matches!(o, Observation::KernelChanged { .. })),
    );
}
