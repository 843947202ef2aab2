//! The Prometheus exposition of one reconcile, rendered once per cycle (in both
//! formats) so that a scrape is a copy of bytes, never host work. Built from the
//! report's statuses and the concerns' typed observations only.
//!
//! Names follow Prometheus conventions: base units (`_seconds`,
//! `_bytes_per_second`), `_total` counters, and a HELP on every family that says
//! what its values mean. A concern's families live in its folder's
//! `metrics.rs`, listed in `concerns::registry::METRICS`; this file holds the
//! engine's own (build, readiness, checks, reconciles).

use crate::concerns::registry::{METRICS, MetricFamilies};
use crate::exposition::{Families, Format, Kind, bool01};
use crate::outputs::Cycle;

/// Counters that live across cycles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub reconciles: u64,
    pub changes: u64,
    pub errors: u64,
}

/// One cycle's exposition in both formats.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub text: String,
    pub openmetrics: String,
}

impl Rendered {
    pub fn get(&self, format: Format) -> &str {
        match format {
            Format::Text => &self.text,
            Format::OpenMetrics => &self.openmetrics,
        }
    }
}

pub fn render(cycle: &Cycle, totals: Totals) -> Rendered {
    let f = families(cycle, totals, METRICS);
    Rendered {
        text: f.render(Format::Text),
        openmetrics: f.render(Format::OpenMetrics),
    }
}

/// The exposition: the engine's families, each concern's (`metrics`, in
/// order: `concerns::registry::METRICS` for the agent), then the counters.
pub fn families(cycle: &Cycle, totals: Totals, metrics: &[MetricFamilies]) -> Families {
    let mut m = Families::new("rdma_node_agent");
    let seen = &cycle.observations;

    m.family(
        "build_info",
        Kind::Gauge,
        "The agent's version, in the version label; always 1",
    )
    .sample(vec![("version", env!("CARGO_PKG_VERSION").into())], 1.0);

    m.gauge(
        "ready",
        "1 when no check fails or is unknown (warn and skipped are ready; what /readyz answers 200 for), 0 otherwise",
        bool01(cycle.report.as_ref().is_some_and(|r| r.ok)),
    );

    let checks = m.family(
        "check_status",
        Kind::Gauge,
        "1 with the check's status in the last reconcile (one series per check: its other statuses have none, and a change of status makes the old series stale)",
    );
    for c in cycle.report.iter().flat_map(|r| &r.checks) {
        // Only the current status: four constant zeros per check were most of
        // a healthy node's series (docs/fleet.md); `== 1` alerts read the same.
        checks.sample(
            vec![
                ("check", c.id.clone()),
                ("status", c.status.as_str().into()),
            ],
            1.0,
        );
    }

    let reasons = m.family(
        "check_reason",
        Kind::Gauge,
        "1 for the reason code of each check that is warn, fail or unknown (docs/reasons.md); no series for ok and skipped checks",
    );
    for c in cycle.report.iter().flat_map(|r| &r.checks) {
        if let Some(r) = c.reason {
            reasons.sample(
                vec![("check", c.id.clone()), ("reason", r.as_str().into())],
                1.0,
            );
        }
    }

    // Each concern's families, in the registry's order.
    for families in metrics {
        families(&mut m, seen);
    }

    m.counter(
        "reconciles",
        "Reconciles since the daemon started",
        totals.reconciles,
    );
    m.counter(
        "changes_applied",
        "Files the agent changed since the daemon started",
        totals.changes,
    );
    m.counter(
        "reconcile_errors",
        "Reconciles that could not converge since the daemon started",
        totals.errors,
    );
    m.gauge(
        "reconcile_duration_seconds",
        "Duration of the last reconcile in seconds",
        cycle.duration_ms as f64 / 1000.0,
    );
    m.gauge(
        "last_reconcile_timestamp_seconds",
        "When the last reconcile finished, in seconds since the Unix epoch",
        cycle.finished_unix as f64,
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::check::Status;
    use crate::engine::check::{Check, Report};
    use crate::observe::{Observation, RdmaProblem};

    fn cycle(observations: Vec<Observation>) -> Cycle {
        Cycle {
            report: Some(Report::new(vec![
                Check::new(
                    crate::engine::check::CheckId::new("containerd.memlock"),
                    Status::Ok,
                    "",
                ),
                Check::new(
                    crate::engine::check::CheckId::new("pods.memlock"),
                    Status::Warn,
                    "",
                )
                .with_reason(crate::reason::Reason::MEMLOCK_BELOW_TARGET),
            ])),
            mode: Some(crate::config::Mode::Enforce),
            config_sha256: None,
            finished_unix: 1_700_000_000,
            duration_ms: 12,
            trigger: "start".into(),
            changed: vec![],
            actions: vec![],
            error: None,
            observations,
            stale_mounts: None,
        }
    }

    #[test]
    fn gpudirect_pairs_and_links() {
        let text = render(
            &cycle(vec![
                Observation::GpuDirectPair {
                    gpu: "0000:03:00.0".into(),
                    nic: "mlx5_0".into(),
                    mechanism: "peermem",
                    distance: "PIX",
                    ready: Some(false),
                    reasons: vec!["acs_redirect"],
                },
                Observation::PcieLink {
                    device: "0000:04:00.0".into(),
                    speed_tenths_gts: Some(160),
                    max_speed_tenths_gts: Some(320),
                    width: Some(8),
                    max_width: None,
                },
            ]),
            Totals::default(),
        )
        .text;
        for line in [
            "rdma_node_agent_gpudirect_pair_ready{gpu=\"0000:03:00.0\",nic=\"mlx5_0\",mechanism=\"peermem\",distance=\"PIX\"} 0",
            "rdma_node_agent_gpudirect_pair_problem{gpu=\"0000:03:00.0\",nic=\"mlx5_0\",reason=\"acs_redirect\"} 1",
            "rdma_node_agent_pcie_link_speed_transfers_per_second{device=\"0000:04:00.0\",which=\"current\"} 16000000000",
            "rdma_node_agent_pcie_link_speed_transfers_per_second{device=\"0000:04:00.0\",which=\"max\"} 32000000000",
            "rdma_node_agent_pcie_link_width_lanes{device=\"0000:04:00.0\",which=\"current\"} 8",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // A reason the pair does not have is no series.
        assert!(!text.contains("reason=\"mechanism_unknown\""));
        // An unreadable maximum is no series, not 0.
        assert!(!text.contains("pcie_link_width_lanes{device=\"0000:04:00.0\",which=\"max\"}"));
    }

    #[test]
    fn check_status_has_the_current_status_only_and_counters() {
        let r = render(
            &cycle(vec![]),
            Totals {
                reconciles: 3,
                changes: 2,
                errors: 0,
            },
        );
        let text = &r.text;
        assert!(
            text.contains(
                "rdma_node_agent_check_status{check=\"pods.memlock\",status=\"warn\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("rdma_node_agent_check_status{check=\"pods.memlock\",status=\"ok\"}"),
            "{text}"
        );
        assert!(text.contains("rdma_node_agent_ready 1\n"));
        assert!(text.contains(
            "rdma_node_agent_check_reason{check=\"pods.memlock\",reason=\"memlock_below_target\"} 1\n"
        ));
        assert!(!text.contains("check_reason{check=\"containerd.memlock\""));
        assert!(text.contains(
            "# TYPE rdma_node_agent_reconciles_total counter\nrdma_node_agent_reconciles_total 3\n"
        ));
        assert!(text.contains("rdma_node_agent_reconcile_duration_seconds 0.012\n"));
        assert!(!text.contains("# EOF"));
        assert!(r.openmetrics.ends_with("# EOF\n"));
    }

    #[test]
    fn ports_from_observations_unknown_is_no_series() {
        let port = |device: &str, active, rate_gbps, link_layer| {
            Observation::Port(crate::observe::Port {
                device: device.into(),
                port: 1,
                vf: false,
                active,
                rate_gbps,
                width: None,
                link_layer,
                netdev: None,
                netdev_mtu: None,
                port_mtu: None,
                fabric: None,
            })
        };
        let r = render(
            &cycle(vec![
                port(
                    "mlx5_0",
                    Some(false),
                    Some(200.0),
                    Some(crate::host::inventory::port::LinkLayer::InfiniBand),
                ),
                port("mlx5_1", None, None, None),
                Observation::RebootHeldBack("rebooting into 6.1 would lose x".into()),
            ]),
            Totals::default(),
        );
        let t = &r.text;
        assert!(t.contains("rdma_node_agent_port_active{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} 0\n"), "{t}");
        assert!(t.contains("rdma_node_agent_port_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} 25000000000\n"), "{t}");
        // An unknown port must not read as down: no state, no rate; the
        // fleet's port_info still lists it, its link layer `unknown`.
        for family in ["port_active", "port_rate_bytes_per_second"] {
            assert!(
                !t.contains(&format!("rdma_node_agent_{family}{{device=\"mlx5_1\"")),
                "an unknown port must not read as down:\n{t}"
            );
        }
        assert!(
            t.contains("rdma_node_agent_port_info{device=\"mlx5_1\",port=\"1\",link_layer=\"unknown\",rate=\"\""),
            "{t}"
        );
        assert!(t.contains("rdma_node_agent_reboot_held_back 1\n"));
        assert!(t.contains("rdma_node_agent_reboot_required 0\n"));
    }

    #[test]
    fn rdma_containers_by_problem() {
        let r = render(
            &cycle(vec![
                Observation::RdmaContainer {
                    pod_uid: Some("a".into()),
                    container_id: None,
                    problems: vec![RdmaProblem::NoIpcLock, RdmaProblem::LowMemlock],
                },
                Observation::RdmaContainer {
                    pod_uid: Some("b".into()),
                    container_id: None,
                    problems: vec![RdmaProblem::NoIpcLock],
                },
                Observation::RdmaContainer {
                    pod_uid: Some("c".into()),
                    container_id: None,
                    problems: vec![],
                },
                Observation::KubeletResource {
                    name: "rdma/hca".into(),
                    devices: 4,
                    rdma: true,
                },
            ]),
            Totals::default(),
        );
        for line in [
            "rdma_node_agent_rdma_containers{problem=\"no_ipc_lock\"} 2\n",
            "rdma_node_agent_rdma_containers{problem=\"low_memlock\"} 1\n",
            "rdma_node_agent_rdma_containers{problem=\"none\"} 1\n",
            "rdma_node_agent_kubelet_resource_devices{resource=\"rdma/hca\",rdma=\"true\"} 4\n",
        ] {
            assert!(r.text.contains(line), "{line} not in {}", r.text);
        }
    }
}
