//! `rdma-node-agent fleet`: the fleet's questions asked of Prometheus (or
//! Thanos/Mimir) that scrapes every agent. Which nodes cannot run RDMA jobs
//! and why, and which differ from their peers. The queries are instant vectors
//! of the agents' own series (no recording rule needed); the grouping, cohorts
//! and outliers are pure functions over them (`analyse`), so the shipped
//! recording rules (packaging/prometheus/) can define the same outliers.

pub mod analyse;
pub mod cli;
pub mod cohort;
pub mod duration;
pub mod matrix;
#[cfg(test)]
mod matrix_tests;
pub mod offenders;
pub mod outliers;
pub mod render;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::host::prometheus::{PromError, Prometheus, Sample};

/// What `fleet` is told on its command line, besides how to reach Prometheus.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The label that names a node (`node` by relabeling); `instance` where absent.
    pub node_label: String,
    /// A port flapping more often than this within the window is a flapper (as `rdma.link` warns).
    pub flap_threshold: f64,
    pub flap_window: Duration,
}

/// The answers to every query, one instant vector each.
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub ready: Vec<Sample>,
    /// Nodes that answered within the window but give no sample now.
    pub gone: Vec<Sample>,
    pub status: Vec<Sample>,
    pub reasons: Vec<Sample>,
    pub devices: Vec<Sample>,
    pub port_info: Vec<Sample>,
    pub port_active: Vec<Sample>,
    pub port_rate: Vec<Sample>,
    pub node_info: Vec<Sample>,
    pub kubelet: Vec<Sample>,
    pub flaps: Vec<Sample>,
    pub last_flap: Vec<Sample>,
    /// Per port and class, the errors' rise over the last day (`offenders`).
    pub port_errors: Vec<Sample>,
    /// Per node, function and severity, the AER errors' rise over the last day.
    pub aer: Vec<Sample>,
    /// Every node's newest peer probes, one series per probed peer (`matrix`).
    pub peer_probes: Vec<Sample>,
}

/// Where a query's answer goes.
type Field = fn(&mut Input) -> &mut Vec<Sample>;

/// The queries, each with the `Input` field it fills. Instant queries of the
/// agents' series only, so any Prometheus-compatible API answers them.
pub fn queries(window: Duration, threshold: f64) -> [(Field, String); 15] {
    let w = duration::promql(window);
    [
        (|i| &mut i.ready, "rdma_node_agent_ready".into()),
        (
            |i| &mut i.gone,
            format!("max_over_time(rdma_node_agent_ready[{w}]) unless rdma_node_agent_ready"),
        ),
        // Only what a reason belongs to: ok and skipped checks give no reason.
        (
            |i| &mut i.status,
            "rdma_node_agent_check_status{status=~\"warn|fail|unknown\"} == 1".into(),
        ),
        (
            |i| &mut i.reasons,
            "rdma_node_agent_check_reason == 1".into(),
        ),
        (|i| &mut i.devices, "rdma_node_agent_device_info".into()),
        (|i| &mut i.port_info, "rdma_node_agent_port_info".into()),
        (|i| &mut i.port_active, "rdma_node_agent_port_active".into()),
        (
            |i| &mut i.port_rate,
            "rdma_node_agent_port_rate_bytes_per_second".into(),
        ),
        (|i| &mut i.node_info, "rdma_node_agent_node_info".into()),
        (
            |i| &mut i.kubelet,
            "rdma_node_agent_kubelet_resource_devices".into(),
        ),
        // The counter's rise since the window's oldest sample: exact, where
        // increase() extrapolates 4 flaps to 4.5 on a young series. Only the
        // flappers: a fleet's every port would be most of the answer.
        (
            |i| &mut i.flaps,
            format!(
                "(rdma_node_agent_port_flaps_total - min_over_time(rdma_node_agent_port_flaps_total[{w}])) > {threshold}"
            ),
        ),
        (
            |i| &mut i.last_flap,
            "rdma_node_agent_port_last_flap_timestamp_seconds".into(),
        ),
        (|i| &mut i.port_errors, offenders::port_errors_query()),
        (|i| &mut i.aer, offenders::aer_query()),
        (
            |i| &mut i.peer_probes,
            "rdma_node_agent_peer_probe_ok".into(),
        ),
    ]
}

/// Asks every query, all at once (each is one round trip; at 200 nodes the
/// slowest decides the wall time). The first failure is the answer.
pub fn ask(prom: &Prometheus, set: &Settings) -> Result<(Input, Duration), PromError> {
    let start = Instant::now();
    let qs = queries(set.flap_window, set.flap_threshold);
    let results: Vec<Result<Vec<Sample>, PromError>> = std::thread::scope(|s| {
        let handles: Vec<_> = qs
            .iter()
            .map(|(_, q)| s.spawn(move || prom.query(q)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a query thread panicked"))
            .collect()
    });
    let mut input = Input::default();
    for ((field, _), r) in qs.iter().zip(results) {
        *field(&mut input) = r?;
    }
    Ok((input, start.elapsed()))
}

/// Nodes that are not ready, under one reason code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasonGroup {
    pub reason: String,
    /// The checks that gave this reason.
    pub checks: Vec<String>,
    pub count: usize,
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FirmwareOutlier {
    pub node: String,
    pub device: String,
    pub board_id: String,
    pub fw_ver: String,
    /// The most common version(s) of the board id.
    pub majority: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowPort {
    pub node: String,
    pub device: String,
    pub port: String,
    pub board_id: String,
    pub link_layer: String,
    pub rate_gbps: f64,
    /// The median rate of the ACTIVE ports with the same board id and link layer.
    pub cohort_gbps: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtuOutlier {
    pub node: String,
    pub device: String,
    pub port: String,
    pub fabric: String,
    /// `port_mtu` (the RDMA port's active MTU) or `netdev_mtu`.
    pub which: String,
    pub mtu: String,
    pub majority: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettingOutlier {
    pub node: String,
    /// `netns_mode`, `memlock_target` or `gpu_driver`.
    pub setting: String,
    pub value: String,
    pub majority: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KubeletZero {
    pub node: String,
    pub active_ports: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flapper {
    pub node: String,
    pub device: String,
    pub port: String,
    /// How much the counter rose within the window (a reset of the agent's history
    /// counts from the reset on).
    pub flaps: f64,
    pub last_flap_timestamp_seconds: Option<f64>,
}

/// Everything `fleet` found; `--json` prints it as is.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub ready: usize,
    pub not_ready: Vec<ReasonGroup>,
    /// Nodes with a sample within the flap window but none now (agent or scrape down).
    pub not_reporting: Vec<String>,
    pub firmware_minority: Vec<FirmwareOutlier>,
    pub ports_below_cohort_rate: Vec<SlowPort>,
    pub mtu_mismatch: Vec<MtuOutlier>,
    pub setting_minority: Vec<SettingOutlier>,
    pub kubelet_rdma_zero: Vec<KubeletZero>,
    pub link_flapping: Vec<Flapper>,
    /// Ports by errors over the last day (rdma.counters), most first: shown,
    /// not counted as problems (the check judges the thresholds).
    pub port_error_offenders: Vec<offenders::PortOffender>,
    /// Their nodes, summed.
    pub node_error_offenders: Vec<offenders::NodeOffender>,
    /// Nodes whose PCIe AER errors rose over the last day (pcie.aer), fatal first.
    pub aer_rising: Vec<offenders::AerRising>,
    /// Reasons of `warn` checks on ready nodes: shown, not counted as problems.
    pub warnings: Vec<ReasonGroup>,
    /// The peer probes' rail × node matrix: bad rails, culprits, their victims.
    pub peer_matrix: matrix::PeerMatrix,
    /// Every node named above except under `warnings`, once.
    pub problem_nodes: Vec<String>,
}

/// `fleet`'s exit codes: every node fine, a node is not, Prometheus could not tell.
pub const EXIT_FINE: u8 = 0;
pub const EXIT_PROBLEM: u8 = 1;
pub const EXIT_CANNOT_ASK: u8 = 2;

impl Report {
    pub fn exit_code(&self) -> u8 {
        if self.problem_nodes.is_empty() {
            EXIT_FINE
        } else {
            EXIT_PROBLEM
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_query_fills_a_field_of_its_own_with_the_window_and_threshold_in_it() {
        let qs = queries(Duration::from_secs(5400), 2.5);
        let mut input = Input::default();
        for (k, (field, _)) in qs.iter().enumerate() {
            field(&mut input).push(Sample {
                labels: Default::default(),
                value: k as f64,
            });
        }
        let Input {
            ready,
            gone,
            status,
            reasons,
            devices,
            port_info,
            port_active,
            port_rate,
            node_info,
            kubelet,
            flaps,
            last_flap,
            port_errors,
            aer,
            peer_probes,
        } = input;
        let mut seen: Vec<f64> = [
            ready,
            gone,
            status,
            reasons,
            devices,
            port_info,
            port_active,
            port_rate,
            node_info,
            kubelet,
            flaps,
            last_flap,
            port_errors,
            aer,
            peer_probes,
        ]
        .iter()
        .map(|v| {
            assert_eq!(v.len(), 1, "a field filled twice or never");
            v[0].value
        })
        .collect();
        seen.sort_by(f64::total_cmp);
        assert_eq!(seen, (0..15).map(f64::from).collect::<Vec<_>>());
        let flaps = &qs
            .iter()
            .find(|(_, q)| q.contains("flaps_total"))
            .unwrap()
            .1;
        assert!(
            flaps.contains("[5400s]") && flaps.ends_with(") > 2.5"),
            "{flaps}"
        );
    }
}
