//! The Prometheus exposition of one reconcile, rendered once per cycle (in both
//! formats) so that a scrape is a copy of bytes, never host work. Built from the
//! report's statuses and the concerns' typed observations only.
//!
//! Names follow Prometheus conventions: base units (`_seconds`,
//! `_bytes_per_second`), `_total` counters, and a HELP on every family that says
//! what its values mean. To add a family: one `families(..)` block below.

use crate::observe::{Observation, RdmaProblem};
use crate::outputs::Cycle;
use crate::outputs::exposition::{Families, Format, Kind};

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
    let f = families(cycle, totals);
    Rendered {
        text: f.render(Format::Text),
        openmetrics: f.render(Format::OpenMetrics),
    }
}

fn bool01(b: bool) -> f64 {
    f64::from(u8::from(b))
}

pub fn families(cycle: &Cycle, totals: Totals) -> Families {
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

    let ports: Vec<_> = seen
        .iter()
        .filter_map(|o| match o {
            Observation::Port {
                device,
                port,
                active,
                rate_bytes_per_second,
                link_layer,
            } => Some((
                vec![
                    ("device", device.clone()),
                    ("port", port.to_string()),
                    ("link_layer", link_layer.unwrap_or("unknown").to_owned()),
                ],
                *active,
                *rate_bytes_per_second,
            )),
            _ => None,
        })
        .collect();
    let active = m.family(
        "port_active",
        Kind::Gauge,
        "1 when the RDMA port's state is ACTIVE, 0 when the kernel names another state (DOWN, INIT, ARMED...); no series when the state cannot be read",
    );
    for (labels, a, _) in &ports {
        if let Some(a) = a {
            active.sample(labels.clone(), bool01(*a));
        }
    }
    let rate = m.family(
        "port_rate_bytes_per_second",
        Kind::Gauge,
        "RDMA port rate in bytes per second (sysfs rate x 10^9 / 8, as node_exporter's node_infiniband_rate_bytes_per_second); no series when unreadable",
    );
    for (labels, _, r) in &ports {
        if let Some(r) = r {
            rate.sample(labels.clone(), *r as f64);
        }
    }

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

    let any = |f: fn(&Observation) -> bool| bool01(seen.iter().any(f));
    m.gauge(
        "kernel_changed",
        "1 when the kernel changed at this boot or since the last run, 0 otherwise",
        any(|o| matches!(o, Observation::KernelChanged { .. })),
    );
    m.gauge(
        "reboot_required",
        "1 when only a reboot can apply what the agent set (e.g. the netns mode), 0 otherwise",
        any(|o| matches!(o, Observation::RebootRequired(_))),
    );
    m.gauge(
        "reboot_held_back",
        "1 when a reboot now would lose RDMA (a newer installed kernel lacks its DKMS builds), 0 otherwise",
        any(|o| matches!(o, Observation::RebootHeldBack(_))),
    );

    readiness(&mut m, seen);
    super::gpudirect_metrics::gpudirect(&mut m, seen);
    super::aer_metrics::aer(&mut m, seen);
    super::driver_health_metrics::driver_health(&mut m, seen);
    nri(&mut m, seen);
    super::fleet_metrics::fleet(&mut m, seen);
    super::counters_metrics::counters(&mut m, seen);

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

/// The daemon's NRI plugin (`containerd.nri`); no series where none runs
/// (`memlock_via = "base-spec"`, or outside the daemon).
fn nri(m: &mut Families, seen: &[Observation]) {
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

/// RDMA pod containers by problem (`none` for those that can register memory)
/// and the kubelet's device-plugin resources, from `pods.rdma`'s and
/// `kubelet.devices`' typed observations. Every problem value is always
/// present, so an alert needs no `absent()`.
fn readiness(m: &mut Families, seen: &[Observation]) {
    let names: Vec<&'static str> = RdmaProblem::ALL
        .map(RdmaProblem::as_str)
        .into_iter()
        .chain(["none"])
        .collect();
    let mut counts = vec![0u64; names.len()];
    for o in seen {
        if let Observation::RdmaContainer { problems, .. } = o {
            if problems.is_empty() {
                counts[names.len() - 1] += 1;
            }
            for p in problems {
                if let Some(i) = names.iter().position(|n| *n == p.as_str()) {
                    counts[i] += 1;
                }
            }
        }
    }
    let containers = m.family(
        "rdma_containers",
        Kind::Gauge,
        "Running pod containers with RDMA devices, by what keeps them from registering memory (no_ipc_lock, low_memlock...; none: nothing, they can)",
    );
    for (name, n) in names.iter().zip(counts) {
        containers.sample(vec![("problem", (*name).to_owned())], n as f64);
    }
    let resources = m.family(
        "kubelet_resource_devices",
        Kind::Gauge,
        "Healthy devices the kubelet has registered per device-plugin resource (from its checkpoint); rdma=\"true\" for RDMA resources",
    );
    for o in seen {
        if let Observation::KubeletResource {
            name,
            devices,
            rdma,
        } = o
        {
            resources.sample(
                vec![("resource", name.clone()), ("rdma", rdma.to_string())],
                *devices as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::check::Status;
    use crate::engine::check::{Check, Report};

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
        let port = |device: &str, active, rate, link_layer| Observation::Port {
            device: device.into(),
            port: 1,
            active,
            rate_bytes_per_second: rate,
            link_layer,
        };
        let r = render(
            &cycle(vec![
                port(
                    "mlx5_0",
                    Some(false),
                    Some(25_000_000_000),
                    Some("InfiniBand"),
                ),
                port("mlx5_1", None, None, None),
                Observation::RebootHeldBack("rebooting into 6.1 would lose x".into()),
            ]),
            Totals::default(),
        );
        let t = &r.text;
        assert!(t.contains("rdma_node_agent_port_active{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} 0\n"), "{t}");
        assert!(t.contains("rdma_node_agent_port_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\"} 25000000000\n"), "{t}");
        assert!(
            !t.contains("device=\"mlx5_1\""),
            "an unknown port must not read as down:\n{t}"
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
