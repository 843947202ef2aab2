//! The cohort outliers, one function per section of the report; the rules
//! themselves (minority, median) are in `cohort`.

use std::collections::{BTreeMap, BTreeSet};

use super::analyse::{Ctx, PortKey, by_port, label, sorted};
use super::cohort::{Tally, quantile};
use super::{FirmwareOutlier, Flapper, Input, KubeletZero, MtuOutlier, SettingOutlier, SlowPort};
use crate::host::prometheus::Sample;

/// The node settings compared with the fleet's majority (labels of `rdma_node_agent_node_info`).
pub const SETTINGS: [&str; 3] = ["netns_mode", "memlock_target", "gpu_driver"];
/// The MTUs compared within a fabric (labels of `rdma_node_agent_port_info`).
pub const MTUS: [&str; 2] = ["port_mtu", "netdev_mtu"];
/// kubelet.devices' reason for a kubelet that advertises none of the RDMA resources.
pub const KUBELET_ZERO_REASON: &str = "kubelet_resources_zero";

/// Per board id, the devices on a version fewer devices run than the most common one.
pub(super) fn firmware(input: &Input, c: &Ctx) -> Vec<FirmwareOutlier> {
    let devices: Vec<(String, &str, &str, &str)> = input
        .devices
        .iter()
        .filter(|s| !label(s, "fw_ver").is_empty())
        .map(|s| {
            (
                c.node(s),
                label(s, "device"),
                label(s, "board_id"),
                label(s, "fw_ver"),
            )
        })
        .collect();
    let mut fw: BTreeMap<&str, Tally> = BTreeMap::new();
    for (_, _, board, ver) in &devices {
        fw.entry(board).or_default().add(ver);
    }
    let mut out: Vec<FirmwareOutlier> = devices
        .iter()
        .filter(|(_, _, board, ver)| fw[board].is_minority(ver))
        .map(|(n, d, board, ver)| FirmwareOutlier {
            node: n.clone(),
            device: (*d).to_owned(),
            board_id: (*board).to_owned(),
            fw_ver: (*ver).to_owned(),
            majority: fw[board].majority(),
        })
        .collect();
    out.sort_by(|a, b| by_port((&a.node, &a.device, ""), (&b.node, &b.device, "")));
    out
}

/// ACTIVE ports of devices with a board id, under the median of their
/// (board id, link layer) cohort.
pub(super) fn slow_ports(input: &Input, c: &Ctx) -> Vec<SlowPort> {
    let boards: BTreeMap<(String, &str), &str> = input
        .devices
        .iter()
        .map(|s| ((c.node(s), label(s, "device")), label(s, "board_id")))
        .collect();
    let mut rated: Vec<(PortKey, &str, &str, f64)> = Vec::new();
    for s in &input.port_rate {
        let k = c.port(s);
        if !c.is_active(&k) {
            continue;
        }
        if let Some(board) = boards.get(&(k.0.clone(), label(s, "device"))) {
            rated.push((k, board, label(s, "link_layer"), s.value));
        }
    }
    let mut cohorts: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for (_, board, ll, v) in &rated {
        cohorts.entry((board, ll)).or_default().push(*v);
    }
    let medians: BTreeMap<(&str, &str), f64> = cohorts
        .iter()
        .map(|(k, v)| (*k, quantile(0.5, v)))
        .collect();
    let gbps = |bytes: f64| bytes * 8.0 / 1e9;
    let mut out: Vec<SlowPort> = rated
        .iter()
        .filter(|(_, board, ll, v)| *v < medians[&(*board, *ll)])
        .map(|((n, d, p), board, ll, v)| SlowPort {
            node: n.clone(),
            device: d.clone(),
            port: p.clone(),
            board_id: (*board).to_owned(),
            link_layer: (*ll).to_owned(),
            rate_gbps: gbps(*v),
            cohort_gbps: gbps(medians[&(*board, *ll)]),
        })
        .collect();
    out.sort_by(|a, b| by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port)));
    out
}

/// ACTIVE ports sharing a fabric label whose port or netdev MTU is a minority there.
pub(super) fn mtus(input: &Input, c: &Ctx) -> Vec<MtuOutlier> {
    let labelled: Vec<&Sample> = input
        .port_info
        .iter()
        .filter(|s| !label(s, "fabric").is_empty() && c.is_active(&c.port(s)))
        .collect();
    let mut out = Vec::new();
    for which in MTUS {
        let mut by_fabric: BTreeMap<&str, Tally> = BTreeMap::new();
        for s in labelled.iter().filter(|s| !label(s, which).is_empty()) {
            by_fabric
                .entry(label(s, "fabric"))
                .or_default()
                .add(label(s, which));
        }
        for s in &labelled {
            let (fabric, v) = (label(s, "fabric"), label(s, which));
            if by_fabric.get(fabric).is_some_and(|t| t.is_minority(v)) {
                let (n, d, p) = c.port(s);
                out.push(MtuOutlier {
                    node: n,
                    device: d,
                    port: p,
                    fabric: fabric.to_owned(),
                    which: which.to_owned(),
                    mtu: v.to_owned(),
                    majority: by_fabric[fabric].majority(),
                });
            }
        }
    }
    out.sort_by(|a, b| {
        by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port))
            .then_with(|| a.which.cmp(&b.which))
    });
    out
}

/// Node settings fewer nodes have than the whole fleet's most common one.
pub(super) fn settings(input: &Input, c: &Ctx) -> Vec<SettingOutlier> {
    let mut out = Vec::new();
    for setting in SETTINGS {
        let known: Vec<&Sample> = input
            .node_info
            .iter()
            .filter(|s| !label(s, setting).is_empty())
            .collect();
        let mut t = Tally::default();
        for s in &known {
            t.add(label(s, setting));
        }
        for s in known.iter().filter(|s| t.is_minority(label(s, setting))) {
            out.push(SettingOutlier {
                node: c.node(s),
                setting: setting.to_owned(),
                value: label(s, setting).to_owned(),
                majority: t.majority(),
            });
        }
    }
    out.sort_by(|a, b| by_port((&a.node, &a.setting, ""), (&b.node, &b.setting, "")));
    out
}

/// The kubelet advertises no RDMA device while ports are up: its checkpoint's
/// RDMA resources sum to 0, or the agent's kubelet.devices says so (it also
/// knows a kubelet by its socket, before any checkpoint exists).
pub(super) fn kubelet_zero(input: &Input, c: &Ctx) -> Vec<KubeletZero> {
    let mut kubelet: BTreeMap<String, f64> = BTreeMap::new();
    for s in &input.kubelet {
        let rdma = if label(s, "rdma") == "true" {
            s.value
        } else {
            0.0
        };
        *kubelet.entry(c.node(s)).or_default() += rdma;
    }
    let mut zero: BTreeSet<String> = kubelet
        .into_iter()
        .filter(|(_, rdma)| *rdma == 0.0)
        .map(|(n, _)| n)
        .collect();
    zero.extend(
        input
            .reasons
            .iter()
            .filter(|s| {
                label(s, "check") == "kubelet.devices" && label(s, "reason") == KUBELET_ZERO_REASON
            })
            .map(|s| c.node(s)),
    );
    let active = c.active_ports();
    sorted(zero)
        .into_iter()
        .filter_map(|n| {
            active.get(&n).map(|a| KubeletZero {
                active_ports: *a,
                node: n,
            })
        })
        .collect()
}

/// Ports that flapped more than `threshold` times in the window, with their last flap.
pub(super) fn flappers(input: &Input, c: &Ctx, threshold: f64) -> Vec<Flapper> {
    let last: BTreeMap<PortKey, f64> = input
        .last_flap
        .iter()
        .map(|s| (c.port(s), s.value))
        .collect();
    let mut out: Vec<Flapper> = input
        .flaps
        .iter()
        .filter(|s| s.value > threshold)
        .map(|s| {
            let k = c.port(s);
            Flapper {
                last_flap_timestamp_seconds: last.get(&k).copied().filter(|t| *t > 0.0),
                node: k.0,
                device: k.1,
                port: k.2,
                flaps: s.value,
            }
        })
        .collect();
    out.sort_by(|a, b| by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port)));
    out
}
