//! `rdma.link`'s families: each port's persisted link history (registered in
//! `concerns::registry::METRICS`).

use crate::exposition::{Families, Kind};
use crate::fleet::Fact;
use crate::observe::Observation;

fn facts(seen: &[Observation]) -> impl Iterator<Item = &Fact> {
    seen.iter().filter_map(|o| match o {
        Observation::Fleet(f) => Some(f),
        _ => None,
    })
}

/// Each port's persisted link history: flaps, the kernel's counters
/// since first seen, and the last flap's time.
pub fn families(m: &mut Families, seen: &[Observation]) {
    let links: Vec<_> = facts(seen)
        .filter_map(|f| match f {
            Fact::Link {
                device,
                port,
                flaps_total,
                link_downed_total,
                link_error_recovery_total,
                last_flap_unix,
            } => Some((
                vec![("device", device.clone()), ("port", port.to_string())],
                [*flaps_total, *link_downed_total, *link_error_recovery_total],
                *last_flap_unix,
            )),
            _ => None,
        })
        .collect();
    for (i, (name, help)) in [
        (
            "port_flaps",
            "Times the RDMA port went down (left ACTIVE, or the kernel's link_downed counter rose; the larger of the two per reconcile), kept across agent restarts and reboots",
        ),
        (
            "port_link_downed",
            "Increase of the port's sysfs counters/link_downed since the agent first saw it, kept across restarts and reboots (a counter reset is a reset)",
        ),
        (
            "port_link_error_recovery",
            "Increase of the port's sysfs counters/link_error_recovery since the agent first saw it, kept across restarts and reboots",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let f = m.family(name, Kind::Counter, help);
        for (labels, values, _) in &links {
            f.sample(labels.clone(), values[i] as f64);
        }
    }
    let f = m.family(
        "port_last_flap_timestamp_seconds",
        Kind::Gauge,
        "When the port last flapped, in seconds since the Unix epoch; no series before its first flap",
    );
    for (labels, _, last) in &links {
        if let Some(t) = last {
            f.sample(labels.clone(), *t as f64);
        }
    }
}
