//! The fleet's answers from the query results: pure, so every rule is unit-tested
//! here and matches the recording rules in packaging/prometheus/.

use std::collections::{BTreeMap, BTreeSet};

use super::cohort::{Tally, natural_cmp, quantile};
use super::{
    FirmwareOutlier, Flapper, Input, KubeletZero, MtuOutlier, ReasonGroup, Report, SettingOutlier,
    Settings, SlowPort,
};
use crate::host::prometheus::Sample;

/// The node settings compared with the fleet's majority (labels of `rdma_node_agent_node_info`).
pub const SETTINGS: [&str; 3] = ["netns_mode", "memlock_target", "gpu_driver"];
/// The MTUs compared within a fabric (labels of `rdma_node_agent_port_info`).
pub const MTUS: [&str; 2] = ["port_mtu", "netdev_mtu"];
/// kubelet.devices' reason for a kubelet that advertises none of the RDMA resources.
pub const KUBELET_ZERO_REASON: &str = "kubelet_resources_zero";

fn label<'a>(s: &'a Sample, name: &str) -> &'a str {
    s.labels.get(name).map_or("", String::as_str)
}

/// The node a series belongs to: the configured label, else the scrape target.
pub fn node_name(s: &Sample, node_label: &str) -> String {
    [node_label, "instance"]
        .iter()
        .map(|l| label(s, l))
        .find(|v| !v.is_empty())
        .unwrap_or("(no instance label)")
        .to_owned()
}

type PortKey = (String, String, String);

pub fn analyse(input: &Input, set: &Settings) -> Report {
    let node = |s: &Sample| node_name(s, &set.node_label);
    let port_key = |s: &Sample| {
        (
            node(s),
            label(s, "device").to_owned(),
            label(s, "port").to_owned(),
        )
    };

    // A node scraped twice (two jobs) counts once, at its worst.
    let mut ready: BTreeMap<String, bool> = BTreeMap::new();
    for s in &input.ready {
        let r = s.value == 1.0;
        ready.entry(node(s)).and_modify(|v| *v &= r).or_insert(r);
    }
    let (not_ready, warnings) = reasons(input, set, &ready);
    let not_reporting: BTreeSet<String> = input
        .gone
        .iter()
        .map(node)
        .filter(|n| !ready.contains_key(n))
        .collect();

    let active: BTreeMap<PortKey, bool> = input
        .port_active
        .iter()
        .map(|s| (port_key(s), s.value == 1.0))
        .collect();
    let is_active = |k: &PortKey| active.get(k).copied().unwrap_or(false);

    // Firmware: a board id's devices, by version.
    let devices: Vec<(String, String, String, String)> = input
        .devices
        .iter()
        .filter(|s| !label(s, "fw_ver").is_empty())
        .map(|s| {
            (
                node(s),
                label(s, "device").to_owned(),
                label(s, "board_id").to_owned(),
                label(s, "fw_ver").to_owned(),
            )
        })
        .collect();
    let mut fw: BTreeMap<&str, Tally> = BTreeMap::new();
    for (_, _, board, ver) in &devices {
        fw.entry(board).or_default().add(ver);
    }
    let mut firmware_minority: Vec<FirmwareOutlier> = devices
        .iter()
        .filter(|(_, _, board, ver)| fw[board.as_str()].is_minority(ver))
        .map(|(n, d, board, ver)| FirmwareOutlier {
            node: n.clone(),
            device: d.clone(),
            board_id: board.clone(),
            fw_ver: ver.clone(),
            majority: fw[board.as_str()].majority(),
        })
        .collect();

    // Rates: ACTIVE ports of devices with a board id, by (board id, link layer).
    let boards: BTreeMap<(String, String), String> = input
        .devices
        .iter()
        .map(|s| {
            (
                (node(s), label(s, "device").to_owned()),
                label(s, "board_id").to_owned(),
            )
        })
        .collect();
    let mut rated: Vec<(PortKey, String, String, f64)> = Vec::new();
    for s in &input.port_rate {
        let k = port_key(s);
        if !is_active(&k) {
            continue;
        }
        if let Some(board) = boards.get(&(k.0.clone(), k.1.clone())) {
            let ll = label(s, "link_layer").to_owned();
            rated.push((k, board.clone(), ll, s.value));
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
    let mut ports_below_cohort_rate: Vec<SlowPort> = rated
        .iter()
        .filter(|(_, board, ll, v)| *v < medians[&(board.as_str(), ll.as_str())])
        .map(|((n, d, p), board, ll, v)| SlowPort {
            node: n.clone(),
            device: d.clone(),
            port: p.clone(),
            board_id: board.clone(),
            link_layer: ll.clone(),
            rate_gbps: gbps(*v),
            cohort_gbps: gbps(medians[&(board.as_str(), ll.as_str())]),
        })
        .collect();

    // MTUs of ACTIVE ports that share a fabric label.
    let labelled: Vec<&Sample> = input
        .port_info
        .iter()
        .filter(|s| !label(s, "fabric").is_empty() && is_active(&port_key(s)))
        .collect();
    let mut mtu_mismatch = Vec::new();
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
                let (n, d, p) = port_key(s);
                mtu_mismatch.push(MtuOutlier {
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

    // Node settings against the whole fleet's.
    let mut setting_minority = Vec::new();
    for setting in SETTINGS {
        let mut t = Tally::default();
        let known: Vec<&Sample> = input
            .node_info
            .iter()
            .filter(|s| !label(s, setting).is_empty())
            .collect();
        for s in &known {
            t.add(label(s, setting));
        }
        for s in known.iter().filter(|s| t.is_minority(label(s, setting))) {
            setting_minority.push(SettingOutlier {
                node: node(s),
                setting: setting.to_owned(),
                value: label(s, setting).to_owned(),
                majority: t.majority(),
            });
        }
    }

    // The kubelet advertises no RDMA device while ports are up: its checkpoint's
    // RDMA resources sum to 0, or the agent's kubelet.devices says so (it also
    // knows a kubelet by its socket, before any checkpoint exists).
    let mut active_ports: BTreeMap<String, usize> = BTreeMap::new();
    for ((n, _, _), a) in &active {
        if *a {
            *active_ports.entry(n.clone()).or_default() += 1;
        }
    }
    let mut kubelet: BTreeMap<String, f64> = BTreeMap::new();
    for s in &input.kubelet {
        let rdma = if label(s, "rdma") == "true" {
            s.value
        } else {
            0.0
        };
        *kubelet.entry(node(s)).or_default() += rdma;
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
            .map(node),
    );
    let kubelet_rdma_zero: Vec<KubeletZero> = sorted(zero)
        .into_iter()
        .filter_map(|n| {
            active_ports.get(&n).map(|a| KubeletZero {
                active_ports: *a,
                node: n,
            })
        })
        .collect();

    let last: BTreeMap<PortKey, f64> = input
        .last_flap
        .iter()
        .map(|s| (port_key(s), s.value))
        .collect();
    let mut link_flapping: Vec<Flapper> = input
        .flaps
        .iter()
        .filter(|s| s.value > set.flap_threshold)
        .map(|s| {
            let k = port_key(s);
            Flapper {
                last_flap_timestamp_seconds: last.get(&k).copied().filter(|t| *t > 0.0),
                node: k.0,
                device: k.1,
                port: k.2,
                flaps: s.value,
            }
        })
        .collect();

    let by_port = |a: (&str, &str, &str), b: (&str, &str, &str)| {
        natural_cmp(a.0, b.0)
            .then_with(|| natural_cmp(a.1, b.1))
            .then_with(|| natural_cmp(a.2, b.2))
    };
    firmware_minority.sort_by(|a, b| by_port((&a.node, &a.device, ""), (&b.node, &b.device, "")));
    ports_below_cohort_rate
        .sort_by(|a, b| by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port)));
    mtu_mismatch.sort_by(|a, b| {
        by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port))
            .then_with(|| a.which.cmp(&b.which))
    });
    setting_minority.sort_by(|a, b| by_port((&a.node, &a.setting, ""), (&b.node, &b.setting, "")));
    link_flapping
        .sort_by(|a, b| by_port((&a.node, &a.device, &a.port), (&b.node, &b.device, &b.port)));

    let mut problems: BTreeSet<&str> = BTreeSet::new();
    problems.extend(
        not_ready
            .iter()
            .flat_map(|g| g.nodes.iter().map(String::as_str)),
    );
    problems.extend(not_reporting.iter().map(String::as_str));
    problems.extend(firmware_minority.iter().map(|o| o.node.as_str()));
    problems.extend(ports_below_cohort_rate.iter().map(|o| o.node.as_str()));
    problems.extend(mtu_mismatch.iter().map(|o| o.node.as_str()));
    problems.extend(setting_minority.iter().map(|o| o.node.as_str()));
    problems.extend(kubelet_rdma_zero.iter().map(|o| o.node.as_str()));
    problems.extend(link_flapping.iter().map(|o| o.node.as_str()));
    let problem_nodes = sorted(problems.into_iter().map(str::to_owned));

    Report {
        nodes: ready.len(),
        ready: ready.values().filter(|r| **r).count(),
        not_ready,
        not_reporting: sorted(not_reporting),
        firmware_minority,
        ports_below_cohort_rate,
        mtu_mismatch,
        setting_minority,
        kubelet_rdma_zero,
        link_flapping,
        warnings,
        problem_nodes,
    }
}

fn sorted(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = names.into_iter().collect();
    v.sort_by(|a, b| natural_cmp(a, b));
    v.dedup();
    v
}

/// Not-ready nodes by the reasons of their failing (`fail`, `unknown`) checks, and
/// ready nodes by the reasons of their `warn` checks. A node whose agent exports
/// no status gives all its reasons; one with no reason at all is `unspecified`.
fn reasons(
    input: &Input,
    set: &Settings,
    ready: &BTreeMap<String, bool>,
) -> (Vec<ReasonGroup>, Vec<ReasonGroup>) {
    let node = |s: &Sample| node_name(s, &set.node_label);
    let mut status: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for s in &input.status {
        status
            .entry(node(s))
            .or_default()
            .insert(label(s, "check").into(), label(s, "status").into());
    }
    let mut given: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for s in &input.reasons {
        given
            .entry(node(s))
            .or_default()
            .push((label(s, "check").into(), label(s, "reason").into()));
    }
    type Groups = BTreeMap<String, (BTreeSet<String>, Vec<String>)>;
    let (mut bad, mut warn): (Groups, Groups) = Default::default();
    let none = Vec::new();
    let no_status = BTreeMap::new();
    for (n, is_ready) in ready {
        let st = status.get(n).unwrap_or(&no_status);
        let rs = given.get(n).unwrap_or(&none);
        let of = |want: &[&str]| -> Vec<&(String, String)> {
            rs.iter()
                .filter(|(c, _)| {
                    st.is_empty() || st.get(c).is_some_and(|s| want.contains(&s.as_str()))
                })
                .collect()
        };
        let (groups, mine) = if *is_ready {
            (&mut warn, of(&["warn"]))
        } else {
            (&mut bad, of(&["fail", "unknown"]))
        };
        let mut add = |reason: &str, check: Option<&str>| {
            let g = groups.entry(reason.to_owned()).or_default();
            g.0.extend(check.map(str::to_owned));
            if g.1.last() != Some(n) {
                g.1.push(n.clone());
            }
        };
        if mine.is_empty() && !is_ready {
            let failing: Vec<&str> = st
                .iter()
                .filter(|(_, s)| matches!(s.as_str(), "fail" | "unknown"))
                .map(|(c, _)| c.as_str())
                .collect();
            add("unspecified", None);
            for c in failing {
                add("unspecified", Some(c));
            }
        }
        for (check, reason) in mine {
            add(reason, Some(check));
        }
    }
    let finish = |g: Groups| -> Vec<ReasonGroup> {
        let mut v: Vec<ReasonGroup> = g
            .into_iter()
            .map(|(reason, (checks, nodes))| {
                let nodes = sorted(nodes);
                ReasonGroup {
                    reason,
                    checks: checks.into_iter().collect(),
                    count: nodes.len(),
                    nodes,
                }
            })
            .collect();
        // Most nodes first: the reason to fix first.
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.reason.cmp(&b.reason)));
        v
    };
    (finish(bad), finish(warn))
}

#[cfg(test)]
#[path = "analyse_tests.rs"]
mod tests;
