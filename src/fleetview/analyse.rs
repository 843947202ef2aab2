//! The fleet's answers from the query results: pure, so every rule is unit-tested
//! here and matches the recording rules in packaging/prometheus/. The grouping
//! by reason is here, the cohort outliers in `outliers`.

use std::collections::{BTreeMap, BTreeSet};

use super::cohort::natural_cmp;
use super::outliers;
use super::{Input, ReasonGroup, Report, Settings};
use crate::host::prometheus::Sample;

pub(super) fn label<'a>(s: &'a Sample, name: &str) -> &'a str {
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

pub type PortKey = (String, String, String);

/// What every rule needs: how a series names its node, and which ports are ACTIVE.
pub(super) struct Ctx<'a> {
    node_label: &'a str,
    active: BTreeMap<PortKey, bool>,
}

impl Ctx<'_> {
    pub(super) fn node(&self, s: &Sample) -> String {
        node_name(s, self.node_label)
    }

    pub(super) fn port(&self, s: &Sample) -> PortKey {
        (
            self.node(s),
            label(s, "device").to_owned(),
            label(s, "port").to_owned(),
        )
    }

    pub(super) fn is_active(&self, k: &PortKey) -> bool {
        self.active.get(k).copied().unwrap_or(false)
    }

    /// ACTIVE ports per node.
    pub(super) fn active_ports(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        for ((n, _, _), a) in &self.active {
            if *a {
                *out.entry(n.clone()).or_default() += 1;
            }
        }
        out
    }
}

/// Orders rows by node, then device or setting, then port, as people read them.
pub(super) fn by_port(a: (&str, &str, &str), b: (&str, &str, &str)) -> std::cmp::Ordering {
    natural_cmp(a.0, b.0)
        .then_with(|| natural_cmp(a.1, b.1))
        .then_with(|| natural_cmp(a.2, b.2))
}

pub fn analyse(input: &Input, set: &Settings) -> Report {
    let mut c = Ctx {
        node_label: &set.node_label,
        active: BTreeMap::new(),
    };
    c.active = input
        .port_active
        .iter()
        .map(|s| (c.port(s), s.value == 1.0))
        .collect();

    // A node scraped twice (two jobs) counts once, at its worst.
    let mut ready: BTreeMap<String, bool> = BTreeMap::new();
    for s in &input.ready {
        let r = s.value == 1.0;
        ready.entry(c.node(s)).and_modify(|v| *v &= r).or_insert(r);
    }
    let (not_ready, warnings) = reasons(input, set, &ready);
    let not_reporting: BTreeSet<String> = input
        .gone
        .iter()
        .map(|s| c.node(s))
        .filter(|n| !ready.contains_key(n))
        .collect();
    let firmware_minority = outliers::firmware(input, &c);
    let ports_below_cohort_rate = outliers::slow_ports(input, &c);
    let mtu_mismatch = outliers::mtus(input, &c);
    let setting_minority = outliers::settings(input, &c);
    let kubelet_rdma_zero = outliers::kubelet_zero(input, &c);
    let link_flapping = outliers::flappers(input, &c, set.flap_threshold);
    let (port_error_offenders, node_error_offenders) = super::offenders::ports_and_nodes(input, &c);
    let aer_rising = super::offenders::aer_rising(input, &c);
    let peer_matrix =
        super::matrix::analyse(&super::matrix::edges(&input.peer_probes, &set.node_label));

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
    problems.extend(peer_matrix.culprits.iter().map(|c| c.node.as_str()));
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
        port_error_offenders,
        node_error_offenders,
        aer_rising,
        warnings,
        peer_matrix,
        problem_nodes,
    }
}

pub(super) fn sorted(names: impl IntoIterator<Item = String>) -> Vec<String> {
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
