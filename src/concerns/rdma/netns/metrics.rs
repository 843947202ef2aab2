//! `rdma.netns`' family: the live RDMA netns mode (registered in
//! `concerns::registry::METRICS`).

use crate::exposition::{Families, Kind, bool01};
use crate::observe::Observation;

pub fn families(m: &mut Families, seen: &[Observation]) {
    let mode = m.family(
        "netns_mode",
        Kind::Gauge,
        "1 for the RDMA subsystem's live network namespace mode (shared or exclusive), 0 for the other; no series when ib_core is not loaded",
    );
    let live = seen.iter().find_map(|o| match o {
        Observation::NetnsMode(m) => *m,
        _ => None,
    });
    if let Some(live) = live {
        for s in ["shared", "exclusive"] {
            mode.sample(vec![("mode", s.into())], bool01(live.as_str() == s));
        }
    }
}
