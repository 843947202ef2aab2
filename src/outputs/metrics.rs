//! The Prometheus exposition of one reconcile, rendered once per cycle so that a
//! scrape is a copy of bytes, never host work.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::check::Status;
use crate::engine::observe::{Observation, RdmaProblem};
use crate::outputs::Cycle;

type Labels = Vec<(String, String)>;

const STATUSES: [Status; 5] = [
    Status::Ok,
    Status::Warn,
    Status::Fail,
    Status::Unknown,
    Status::Skipped,
];

/// Counters that live across cycles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub reconciles: u64,
    pub changes: u64,
    pub errors: u64,
}

pub fn render(cycle: &Cycle, totals: Totals) -> String {
    let mut r = Registry::with_prefix("rdma_node_agent");

    let build = Family::<Labels, Gauge>::default();
    build
        .get_or_create(&vec![("version".into(), env!("CARGO_PKG_VERSION").into())])
        .set(1);
    r.register("build_info", "The agent's version", build);

    let ready = Gauge::<i64>::default();
    ready.set(i64::from(cycle.report.as_ref().is_some_and(|r| r.ok)));
    r.register(
        "ready",
        "1 when every check is ok (what /readyz answers 200 for)",
        ready,
    );

    let checks = Family::<Labels, Gauge>::default();
    for c in cycle.report.iter().flat_map(|r| &r.checks) {
        // One series per possible status, 1 for the current one: alerts need no regex.
        for s in STATUSES {
            checks
                .get_or_create(&vec![
                    ("check".into(), c.id.clone()),
                    ("status".into(), s.as_str().into()),
                ])
                .set(i64::from(c.status == s));
        }
    }
    r.register(
        "check_status",
        "Status of each check in the last reconcile",
        checks,
    );

    render_rdma(&mut r, cycle);
    render_readiness(&mut r, &cycle.observations);

    let counter = |n: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(n);
        c
    };
    r.register(
        "reconciles",
        "Reconciles since the daemon started",
        counter(totals.reconciles),
    );
    r.register(
        "changes_applied",
        "Files the agent changed since it started",
        counter(totals.changes),
    );
    r.register(
        "reconcile_errors",
        "Reconciles that could not converge",
        counter(totals.errors),
    );

    let duration = Gauge::<f64, AtomicU64>::default();
    duration.set(cycle.duration_ms as f64 / 1000.0);
    r.register(
        "reconcile_duration_seconds",
        "Duration of the last reconcile",
        duration,
    );
    let last = Gauge::<i64>::default();
    last.set(cycle.finished_unix as i64);
    r.register(
        "last_reconcile_timestamp_seconds",
        "When the last reconcile finished (Unix time)",
        last,
    );

    let mut out = String::new();
    encode(&mut out, &r).expect("writing to a String cannot fail");
    out
}

/// Per-port state and rate, the netns mode and reboot-required, from the details
/// the RDMA and kernel concerns put in their checks.
fn render_rdma(r: &mut Registry, cycle: &Cycle) {
    let checks: Vec<&crate::check::Check> = cycle.report.iter().flat_map(|r| &r.checks).collect();
    let detail = |id: &str| checks.iter().find(|c| c.id == id).map(|c| &c.details);

    let active = Family::<Labels, Gauge>::default();
    let rate = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let devices = detail("rdma.devices")
        .and_then(|d| d.get("devices"))
        .and_then(|d| d.as_array())
        .cloned()
        .unwrap_or_default();
    for dev in &devices {
        let name = dev["name"].as_str().unwrap_or_default().to_owned();
        for port in dev["ports"].as_array().into_iter().flatten() {
            let labels = vec![
                ("device".to_owned(), name.clone()),
                ("port".to_owned(), port["port"].to_string()),
                (
                    "link_layer".to_owned(),
                    port["link_layer"].as_str().unwrap_or_default().to_owned(),
                ),
            ];
            active
                .get_or_create(&labels)
                .set(i64::from(port["state"] == "ACTIVE"));
            if let Some(g) = port["rate_gbps"].as_f64() {
                rate.get_or_create(&labels).set(g);
            }
        }
    }
    r.register("port_active", "1 when the RDMA port is ACTIVE", active);
    r.register("port_rate_gbps", "RDMA port rate in Gb/s", rate);

    let mode = Family::<Labels, Gauge>::default();
    if let Some(m) = detail("rdma.netns")
        .and_then(|d| d.get("mode"))
        .and_then(|m| m.as_str())
    {
        for s in ["shared", "exclusive"] {
            mode.get_or_create(&vec![("mode".to_owned(), s.to_owned())])
                .set(i64::from(m == s));
        }
    }
    r.register(
        "netns_mode",
        "The RDMA subsystem's live network namespace mode",
        mode,
    );

    let changed = Gauge::<i64>::default();
    let from = detail("kernel.change").and_then(|d| d.get("changed_from"));
    changed.set(i64::from(from.is_some_and(|v| !v.is_null())));
    r.register(
        "kernel_changed",
        "1 when the kernel changed at this boot (or since the last run)",
        changed,
    );

    let reboot = Gauge::<i64>::default();
    let required = checks
        .iter()
        .any(|c| c.details.get("reboot_required") == Some(&serde_json::Value::Bool(true)));
    reboot.set(i64::from(required));
    r.register(
        "reboot_required",
        "1 when only a reboot can apply what the agent set",
        reboot,
    );
}

/// RDMA pod containers by problem (`none` for those that can register memory)
/// and the kubelet's device-plugin resources, from `pods.rdma`'s and
/// `kubelet.devices`' typed observations. Every problem value is always
/// present, so an alert needs no `absent()`.
fn render_readiness(r: &mut Registry, observations: &[Observation]) {
    let containers = Family::<Labels, Gauge>::default();
    for problem in RdmaProblem::ALL
        .map(RdmaProblem::as_str)
        .into_iter()
        .chain(["none"])
    {
        let _ = containers.get_or_create(&vec![("problem".to_owned(), problem.to_owned())]);
    }
    for o in observations {
        if let Observation::RdmaContainer { problems, .. } = o {
            let names: Vec<&str> = if problems.is_empty() {
                vec!["none"]
            } else {
                problems.iter().map(|p| p.as_str()).collect()
            };
            for p in names {
                containers
                    .get_or_create(&vec![("problem".to_owned(), p.to_owned())])
                    .inc();
            }
        }
    }
    r.register(
        "rdma_containers",
        "Running pod containers with RDMA devices, by what keeps them from registering memory (none: nothing)",
        containers,
    );
    let resources = Family::<Labels, Gauge>::default();
    for o in observations {
        if let Observation::KubeletResource {
            name,
            devices,
            rdma,
        } = o
        {
            resources
                .get_or_create(&vec![
                    ("resource".to_owned(), name.clone()),
                    ("rdma".to_owned(), rdma.to_string()),
                ])
                .set(i64::try_from(*devices).unwrap_or(i64::MAX));
        }
    }
    r.register(
        "kubelet_resource_devices",
        "Healthy devices the kubelet has registered per device-plugin resource (its checkpoint)",
        resources,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Check, Report};

    #[test]
    fn one_hot_check_status_and_counters() {
        let cycle = Cycle {
            report: Some(Report::new(vec![
                Check::new("containerd.memlock", Status::Ok, ""),
                Check::new("pods.memlock", Status::Warn, ""),
            ])),
            mode: "enforce",
            finished_unix: 1_700_000_000,
            duration_ms: 12,
            trigger: "start".into(),
            changed: vec![],
            actions: vec![],
            error: None,
            observations: Vec::new(),
        };
        let text = render(
            &cycle,
            Totals {
                reconciles: 3,
                changes: 2,
                errors: 0,
            },
        );
        assert!(
            text.contains(
                "rdma_node_agent_check_status{check=\"pods.memlock\",status=\"warn\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("rdma_node_agent_check_status{check=\"pods.memlock\",status=\"ok\"} 0\n")
        );
        assert!(text.contains("rdma_node_agent_ready 1\n"));
        assert!(text.contains("rdma_node_agent_reconciles_total 3\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn rdma_containers_by_problem() {
        let cycle = Cycle {
            report: None,
            mode: "enforce",
            finished_unix: 0,
            duration_ms: 0,
            trigger: "start".into(),
            changed: vec![],
            actions: vec![],
            error: None,
            observations: vec![
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
            ],
        };
        let text = render(&cycle, Totals::default());
        for line in [
            "rdma_node_agent_rdma_containers{problem=\"no_ipc_lock\"} 2\n",
            "rdma_node_agent_rdma_containers{problem=\"low_memlock\"} 1\n",
            "rdma_node_agent_rdma_containers{problem=\"none\"} 1\n",
            "rdma_node_agent_kubelet_resource_devices{resource=\"rdma/hca\",rdma=\"true\"} 4\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
    }
}
