//! `containerd.nri`'s families (registered in `concerns::registry::METRICS`).

use crate::exposition::{Families, bool01};
use crate::observe::Observation;

/// The daemon's NRI plugin (`containerd.nri`); no series where none runs
/// (`memlock_via = "base-spec"`, or outside the daemon).
pub fn families(m: &mut Families, seen: &[Observation]) {
    let Some((registered, adjusted, kept_lower)) = seen.iter().find_map(|o| match o {
        Observation::Nri {
            registered,
            adjusted,
            kept_lower,
        } => Some((*registered, *adjusted, *kept_lower)),
        _ => None,
    }) else {
        return;
    };
    m.gauge(
        "nri_registered",
        "1 when the agent's NRI plugin is registered with the running containerd, 0 otherwise",
        bool01(registered),
    );
    m.counter(
        "nri_adjusted_containers",
        "Containers whose RLIMIT_MEMLOCK the NRI plugin raised since the daemon started",
        adjusted,
    );
    m.counter(
        "nri_kept_lower_containers",
        "RDMA containers the NRI plugin left with their explicit lower RLIMIT_MEMLOCK since the daemon started",
        kept_lower,
    );
}
