//! The `gpudirect.path` families of the exposition (see `metrics`).

use crate::exposition::{Families, Kind};
use crate::observe::Observation;

fn bool01(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// `gpudirect.path`'s pairs and links. A pair has a `problem` series for each
/// reason it has (value 1), none for the others: `ready` already says 0 or 1
/// for every pair, and a healthy 8-GPU node then spends no 48 series of zeros
/// (the node's budget is 150 series). A pair whose readiness cannot be told
/// has no `ready` series.
pub fn gpudirect(m: &mut Families, seen: &[Observation]) {
    pairs(m, seen);
    links(m, seen);
}

/// Each GPU-NIC pair's readiness and problems.
fn pairs(m: &mut Families, seen: &[Observation]) {
    let pairs: Vec<_> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::GpuDirectPair {
                gpu,
                nic,
                mechanism,
                distance,
                ready,
                reasons,
            } => Some((gpu, nic, *mechanism, *distance, *ready, reasons)),
            _ => None,
        })
        .collect();
    let ready = m.family(
        "gpudirect_pair_ready",
        Kind::Gauge,
        "1 when GPUDirect RDMA between the GPU and its nearest NIC can work without staging through host memory (a mechanism, no ACS redirect, distance PIX or PXB), 0 when not; no series when it cannot be told",
    );
    for (gpu, nic, mech, dist, r, _) in &pairs {
        if let Some(r) = r {
            ready.sample(
                vec![
                    ("gpu", (*gpu).clone()),
                    ("nic", (*nic).clone()),
                    ("mechanism", (*mech).into()),
                    ("distance", (*dist).into()),
                ],
                bool01(*r),
            );
        }
    }
    let problem = m.family(
        "gpudirect_pair_problem",
        Kind::Gauge,
        "1 for each reason a GPU-NIC pair is not ready or slowed down (acs_redirect, acs_unknown, link_degraded, distance, no_mechanism, mechanism_unknown); no series for the reasons it does not have",
    );
    for (gpu, nic, _, _, _, reasons) in &pairs {
        for r in *reasons {
            problem.sample(
                vec![
                    ("gpu", (*gpu).clone()),
                    ("nic", (*nic).clone()),
                    ("reason", (*r).into()),
                ],
                1.0,
            );
        }
    }
}

/// The PCIe links on the pairs' paths: speed and width.
fn links(m: &mut Families, seen: &[Observation]) {
    let links: Vec<_> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::PcieLink {
                device,
                speed_tenths_gts,
                max_speed_tenths_gts,
                width,
                max_width,
            } => Some((
                device,
                [*speed_tenths_gts, *max_speed_tenths_gts],
                [*width, *max_width],
            )),
            _ => None,
        })
        .collect();
    let speed = m.family(
        "pcie_link_speed_transfers_per_second",
        Kind::Gauge,
        "Speed of a PCIe link on a GPU-NIC path, named by the function below it: which=current as trained; which=max what both ends support, only for a link trained below it; no series when unreadable",
    );
    for (device, s, _) in &links {
        for (which, v) in ["current", "max"].into_iter().zip(below_max(s)) {
            if let Some(v) = v {
                speed.sample(
                    vec![("device", (*device).clone()), ("which", which.into())],
                    f64::from(v) * 1e8,
                );
            }
        }
    }
    let width = m.family(
        "pcie_link_width_lanes",
        Kind::Gauge,
        "Width of a PCIe link on a GPU-NIC path in lanes: which=current as trained; which=max what both ends support, only for a link trained below it; no series when unreadable",
    );
    for (device, _, w) in &links {
        for (which, v) in ["current", "max"].into_iter().zip(below_max(w)) {
            if let Some(v) = v {
                width.sample(
                    vec![("device", (*device).clone()), ("which", which.into())],
                    f64::from(v),
                );
            }
        }
    }
}

/// [current, max], with max left out where the link runs at it: a healthy
/// node's hops then cost one series each, and the max's presence says "below".
fn below_max<T: PartialEq + Copy>(pair: &[Option<T>; 2]) -> [Option<T>; 2] {
    match pair {
        [Some(c), Some(m)] if c == m => [Some(*c), None],
        p => *p,
    }
}
