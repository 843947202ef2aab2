//! The `rdma.counters` families of the exposition (see `metrics`). Both have
//! series only for a port's class that counted something: a healthy 8-port
//! node spends none of its 150-series budget on them (the check's own
//! `check_status` series say it is ok).

use crate::exposition::{Families, Kind};
use crate::observe::Observation;

pub fn counters(m: &mut Families, seen: &[Observation]) {
    let rows: Vec<_> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::PortErrors {
                device,
                port,
                class,
                total,
                per_second,
            } => Some((device, port, *class, *total, *per_second)),
            _ => None,
        })
        .collect();
    let labels = |device: &String, port: &String, class: &str| {
        vec![
            ("device", device.clone()),
            ("port", port.clone()),
            ("class", class.to_owned()),
        ]
    };
    let total = m.family(
        "port_errors",
        Kind::Counter,
        "Errors (and congestion signals) an RDMA port's counters rose by since the agent first read them, by class (symbol_errors, link_integrity, rcv_errors, xmit_discards, retransmits, congestion), across counter resets and reboots (a reset counts nothing); no series for a class that has counted nothing",
    );
    for (device, port, class, t, _) in &rows {
        if *t > 0 {
            total.sample(labels(device, port, class), *t as f64);
        }
    }
    let rate = m.family(
        "port_errors_per_second",
        Kind::Gauge,
        "An RDMA port's errors of a class per second over rdma.counters' window ([counters] window); no series when none rose in it or the port has no baseline yet",
    );
    for (device, port, class, _, r) in &rows {
        if let Some(r) = r.filter(|r| *r > 0.0) {
            rate.sample(labels(device, port, class), r);
        }
    }
}
