//! `rdma.devices`: the inventory against the expectations in `[rdma]`.
//!
//! Without expectations the check judges what every RDMA node needs: devices
//! present with no ACTIVE port is `fail`, a port not ACTIVE (and not in
//! `rdma.ignore_ports`) a warning. It never reads `ok` on what it could not
//! see: no RDMA device at all is `skipped` (with expectations, `fail`); a broken
//! class link, a device without ports or an unreadable field is a warning; a
//! port whose state is unknown is `unknown`, not `fail`.

use crate::concerns::rdma::devices::reasons;
use crate::engine::check::CheckId;
use std::collections::BTreeMap;

use serde_json::json;

use super::{Device, Kind, Port, Problem};
use crate::concerns::rdma::gpudirect::Finding;
use crate::config::rdma::{ExpectPort, RdmaConfig};
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

pub const CHECK_ID: CheckId = CheckId::new("rdma.devices");
/// Errors listed in the message; the rest are in `details`.
const SHOWN_ERRORS: usize = 3;

fn rate(r: f64) -> String {
    format!("{r} Gb/s")
}

/// What the expectations found: failures, and ports they could not judge.
#[derive(Debug, Default, PartialEq)]
pub struct Unmet {
    pub failures: Vec<String>,
    pub unknown: Vec<String>,
    /// The reason of the first failure.
    pub reason: Option<Reason>,
}

impl Unmet {
    fn fail(&mut self, reason: Reason, message: String) {
        self.reason.get_or_insert(reason);
        self.failures.push(message);
    }
}

/// A port the kernel names in a state other than ACTIVE: DOWN (no link), or
/// up but not ACTIVE (INIT, ARMED: an IB port waiting for its subnet manager).
fn not_active(state: super::PortState) -> Reason {
    if state.name() == "DOWN" {
        reasons::PORT_DOWN
    } else {
        reasons::PORT_NOT_ACTIVE
    }
}

/// Failures of the configured expectations, each naming `device/port`.
pub fn unmet(devices: &[Device], cfg: &RdmaConfig) -> Unmet {
    let mut out = Unmet::default();
    for e in &cfg.expect_port {
        out.expect_port(devices, e);
    }
    let active = active_by_link_layer(devices);
    for (layer, min) in &cfg.min_active_ports {
        let have = active.get(layer.as_str()).copied().unwrap_or(0);
        if have < *min {
            out.too_few_active(devices, layer, have, *min);
        }
    }
    out
}

impl Unmet {
    /// One `[[rdma.expect_port]]`: every device it matches, and their ports.
    fn expect_port(&mut self, devices: &[Device], e: &ExpectPort) {
        let pattern = glob::Pattern::new(&e.device).ok();
        let matched: Vec<&Device> = devices
            .iter()
            .filter(|d| match &pattern {
                Some(p) => p.matches(&d.name),
                None => d.name == e.device,
            })
            .collect();
        if matched.is_empty() {
            self.fail(
                Reason::NO_RDMA_DEVICES,
                format!("no RDMA device matches {:?}", e.device),
            );
        }
        for d in matched {
            if let Some(Problem::BrokenLink(why)) = &d.problem {
                self.fail(
                    reasons::DEVICE_BROKEN_LINK,
                    format!("{}: broken link ({why})", d.name),
                );
                continue;
            }
            let ports: Vec<&Port> = d
                .ports
                .iter()
                .filter(|p| e.port.is_none_or(|n| p.port == n))
                .collect();
            if ports.is_empty() {
                let what = match e.port {
                    Some(n) => format!("{} has no port {n}", d.name),
                    None => format!("{} has no ports", d.name),
                };
                self.fail(reasons::DEVICE_WITHOUT_PORTS, what);
            }
            for p in ports {
                self.expected_port(&format!("{}/{}", d.name, p.port), p, e);
            }
        }
    }

    /// One port an expectation names: ACTIVE, then at the least rate.
    fn expected_port(&mut self, at: &str, p: &Port, e: &ExpectPort) {
        let phys = p.phys_state.map_or("phys_state unknown", |s| s.name());
        match (p.active(), p.state) {
            (Some(true), _) => {}
            (Some(false), Some(s)) => {
                self.fail(
                    not_active(s),
                    format!("{at} is {} ({phys}), expected ACTIVE", s.name()),
                );
                return;
            }
            (_, Some(s)) => {
                self.unknown.push(format!(
                    "{at} state is {}: {} (the kernel does not name it), expected ACTIVE",
                    s.0,
                    s.name()
                ));
                return;
            }
            (_, None) => {
                self.unknown
                    .push(format!("{at} state is unreadable, expected ACTIVE"));
                return;
            }
        }
        if let Some(min) = e.min_rate_gbps {
            match p.rate_gbps {
                Some(r) if r >= f64::from(min) => {}
                Some(r) => self.fail(
                    reasons::PORT_RATE_BELOW_EXPECTED,
                    format!("{at} runs at {}, expected at least {min} Gb/s", rate(r)),
                ),
                None => self.unknown.push(format!(
                    "{at} rate is unreadable, expected at least {min} Gb/s"
                )),
            }
        }
    }

    /// Fewer ACTIVE ports of a link layer than `rdma.min_active_ports` asks:
    /// a failure, or unknown where ports of unknown state might make up the
    /// difference.
    fn too_few_active(&mut self, devices: &[Device], layer: &str, have: u32, min: u32) {
        // Ports of this (or an unreadable) link layer whose state is unknown.
        let unknown_ports = devices
            .iter()
            .flat_map(|d| &d.ports)
            .filter(|p| p.active().is_none())
            .filter(|p| {
                p.link_layer
                    .is_none_or(|l| l.as_str() == layer || l == super::LinkLayer::Unknown)
            })
            .count();
        if have + u32::try_from(unknown_ports).unwrap_or(u32::MAX) >= min {
            self.unknown.push(format!(
                "{have} ACTIVE {layer} port(s) and {unknown_ports} of unknown state, expected at least {min}"
            ));
        } else {
            self.fail(
                reasons::TOO_FEW_ACTIVE_PORTS,
                format!("{have} ACTIVE {layer} port(s), expected at least {min}"),
            );
        }
    }
}

/// Without expectations, what an RDMA node needs anyway.
#[derive(Debug, Default, PartialEq)]
pub struct Defaults {
    /// No port ACTIVE and none of unknown state: the node cannot run RDMA jobs.
    pub none_active: Option<String>,
    /// Ports not ACTIVE (and not in `rdma.ignore_ports`), each named.
    pub down: Vec<String>,
    /// The reason of the first of `down`.
    pub down_reason: Option<Reason>,
    /// No port known ACTIVE, some of unknown state.
    pub unknown: Vec<String>,
}

/// Some ACTIVE port (else the node cannot run RDMA jobs), and every port
/// ACTIVE unless listed in `rdma.ignore_ports` (down by design). Applies only
/// when `[rdma]` has no expectations: those decide otherwise.
pub fn defaults(devices: &[Device], cfg: &RdmaConfig) -> Defaults {
    let mut out = Defaults::default();
    if devices.is_empty() || !cfg.expect_port.is_empty() || !cfg.min_active_ports.is_empty() {
        return out;
    }
    // Validated at config load.
    let ignored: Vec<glob::Pattern> = cfg
        .ignore_ports
        .iter()
        .filter_map(|p| glob::Pattern::new(p).ok())
        .collect();
    let mut unknown = Vec::new();
    let mut active = 0;
    for d in devices {
        for p in &d.ports {
            let at = format!("{}/{}", d.name, p.port);
            match (p.active(), p.state) {
                (Some(true), _) => active += 1,
                _ if ignored.iter().any(|g| g.matches(&at)) => {}
                (Some(false), Some(s)) => {
                    let phys = p.phys_state.map_or("phys_state unknown", |s| s.name());
                    out.down_reason.get_or_insert(not_active(s));
                    out.down.push(format!("{at} is {} ({phys})", s.name()));
                }
                _ => unknown.push(at),
            }
        }
    }
    if active > 0 {
        return out;
    }
    if unknown.is_empty() {
        out.none_active = Some(format!(
            "no ACTIVE port on any of {} RDMA device(s): this node cannot run RDMA jobs{}",
            devices.len(),
            if out.down.is_empty() {
                String::new()
            } else {
                format!(" ({})", listed(&out.down))
            }
        ));
        out.down.clear();
        out.down_reason = None;
    } else {
        out.unknown.push(format!(
            "no port is known to be ACTIVE: the state of {} is unknown",
            unknown.join(", ")
        ));
    }
    out
}

fn active_by_link_layer(devices: &[Device]) -> BTreeMap<&'static str, u32> {
    let mut m = BTreeMap::new();
    for p in devices
        .iter()
        .flat_map(|d| &d.ports)
        .filter(|p| p.is_active())
    {
        *m.entry(p.link_layer.map_or("unknown", |l| l.as_str()))
            .or_default() += 1;
    }
    m
}

/// `3 RDMA device(s) (2 VFs; 1 without ports), 2/3 port(s) ACTIVE`.
fn summary(devices: &[Device], active: u32, gpu: &Finding) -> String {
    let ports: usize = devices.iter().map(|d| d.ports.len()).sum();
    let count = |f: &dyn Fn(&Device) -> bool| devices.iter().filter(|d| f(d)).count();
    let notes: Vec<String> = [
        (count(&|d| d.kind == Kind::Vf), "VFs"),
        (
            count(&|d| d.problem == Some(Problem::NoPorts)),
            "without ports",
        ),
        (
            count(&|d| matches!(d.problem, Some(Problem::BrokenLink(_)))),
            "broken link(s)",
        ),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let mut s = format!(
        "{} RDMA device(s){}, {active}/{ports} port(s) ACTIVE",
        devices.len(),
        if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        },
    );
    if let Some(g) = gpu.summary() {
        s.push_str(&format!("; {g}"));
    }
    s
}

fn listed(items: &[String]) -> String {
    let shown: Vec<&str> = items
        .iter()
        .take(SHOWN_ERRORS)
        .map(String::as_str)
        .collect();
    let more = items.len().saturating_sub(SHOWN_ERRORS);
    format!(
        "{}{}",
        shown.join("; "),
        if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        }
    )
}

pub fn check(devices: &[Device], cfg: &RdmaConfig, gpu: &Finding) -> Check {
    let Unmet {
        mut failures,
        mut unknown,
        reason: fail_reason,
    } = unmet(devices, cfg);
    unknown.extend(gpu.unknown.iter().cloned());
    // Without expectations: none ACTIVE fails; a port not ACTIVE warns.
    let d = defaults(devices, cfg);
    let fail_reason = fail_reason
        .or(d.none_active.as_ref().map(|_| reasons::NO_ACTIVE_PORT))
        .or((!gpu.missing.is_empty()).then_some(reasons::GPUDIRECT_MODULE_MISSING));
    failures.extend(d.none_active);
    unknown.extend(d.unknown);
    failures.extend(gpu.missing.iter().map(|m| {
        format!(
            "GPUDirect module {m} is not loaded ({} NVIDIA GPU(s) present; required by gpudirect.required_modules)",
            gpu.gpus
        )
    }));
    let errors: Vec<String> = devices.iter().flat_map(|d| d.errors.clone()).collect();
    let problems = warnings(devices, &d.down);
    let active = active_by_link_layer(devices);
    let details = json!({
        "devices": devices,
        "active_ports": active,
        "gpudirect": gpu,
        "errors": errors,
        "unknown": unknown,
    });
    let summary = summary(devices, active.values().sum(), gpu);
    let warn_reason = warn_reason(devices, d.down_reason);
    let (status, message, reason) = if !failures.is_empty() {
        (
            Status::Fail,
            [failures, unknown].concat().join("; "),
            fail_reason.unwrap_or(Reason::FACT_UNREADABLE),
        )
    } else if !unknown.is_empty() {
        (Status::Unknown, unknown.join("; "), Reason::FACT_UNREADABLE)
    } else if devices.is_empty() {
        (
            Status::Skipped,
            "no RDMA device (/sys/class/infiniband is empty or absent): nothing to check; \
             declare [[rdma.expect_port]] to require one"
                .to_owned(),
            Reason::NO_RDMA_DEVICES,
        )
    } else if !problems.is_empty() || !errors.is_empty() {
        let all: Vec<String> = problems.into_iter().chain(errors).collect();
        (
            Status::Warn,
            format!("{summary}; {}", listed(&all)),
            warn_reason,
        )
    } else {
        (Status::Ok, summary, Reason::FACT_UNREADABLE)
    };
    // Ok and skipped carry none (`with_reason` drops it).
    Check::new(CHECK_ID, status, message)
        .with_reason(reason)
        .with_details(details)
}

/// The devices' problems and the ports not ACTIVE, each a warning.
fn warnings(devices: &[Device], down: &[String]) -> Vec<String> {
    devices
        .iter()
        .filter_map(|d| match &d.problem {
            Some(Problem::NoPorts) => Some(format!("{} has no ports", d.name)),
            Some(Problem::BrokenLink(why)) => Some(format!("{}: broken link ({why})", d.name)),
            None => None,
        })
        .chain(
            down.iter()
                .map(|p| format!("{p}; list it in rdma.ignore_ports if it is down by design")),
        )
        .collect()
}

/// Which problem names the warning: the first device problem, a port not
/// ACTIVE, or an unreadable field.
fn warn_reason(devices: &[Device], down_reason: Option<Reason>) -> Reason {
    devices
        .iter()
        .find_map(|d| match &d.problem {
            Some(Problem::NoPorts) => Some(reasons::DEVICE_WITHOUT_PORTS),
            Some(Problem::BrokenLink(_)) => Some(reasons::DEVICE_BROKEN_LINK),
            None => None,
        })
        .or(down_reason)
        .unwrap_or(Reason::FACT_UNREADABLE)
}
