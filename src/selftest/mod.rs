//! `rdma-node-agent selftest`: for each ACTIVE RDMA port, perftest's
//! `ib_write_bw` loopback (server and client on the port, as admins run it by
//! hand) with the locked-memory limit a pod gets from the base spec and without
//! CAP_IPC_LOCK, as a container runtime starts it; then the same with 64 KiB, the
//! limit pods have without the base spec, as a control. The average bandwidth
//! is compared with the port's rate. Run by hand (or Ansible), never by the daemon.

pub mod perftest;
pub mod run;

use serde::Serialize;

use crate::concerns::rdma::devices::{Device, Kind};
use crate::host::limit::Limit;
use perftest::{Bandwidth, Failure};

/// 0: every port passed; 1: a port failed; 2: nothing could be tested (no RDMA,
/// no ACTIVE port, no perftest), node-problem-detector's "could not tell".
pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_UNABLE: i32 = 2;

/// The locked-memory limit of the control run: what containerd gives a pod
/// without a base spec on a stock systemd host.
pub const CONTROL_MEMLOCK: Limit = Limit(64 << 10);

/// Debian, Ubuntu and RHEL all call the package `perftest`.
pub const MISSING_PERFTEST: &str = "ib_write_bw not found: install perftest \
    (Debian/Ubuntu: apt-get install perftest; RHEL: dnf install perftest)";

/// CAP_IPC_LOCK's bit in the capability sets of /proc/<pid>/status.
const CAP_IPC_LOCK: u32 = 14;

/// Whether the test's children would hold CAP_IPC_LOCK (with it the kernel
/// ignores the memlock under test) unless `setpriv` drops it, from this
/// process's /proc/self/status: held now (CapEff), passed on at exec (CapAmb),
/// or regained at exec by an effective uid 0 (from CapBnd). Not from who owns
/// /proc/self: a non-root caller may hold the capability.
pub fn children_keep_ipc_lock(status: &str) -> Result<bool, String> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .ok_or_else(|| format!("/proc/self/status has no {name} line"))
    };
    let caps = |name: &str| -> Result<bool, String> {
        let v = field(name)?;
        u64::from_str_radix(v, 16)
            .map(|c| c & (1 << CAP_IPC_LOCK) != 0)
            .map_err(|e| format!("/proc/self/status {name} {v:?}: {e}"))
    };
    let uid = field("Uid:")?;
    let euid = uid
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| format!("/proc/self/status Uid: {uid:?} has no effective uid"))?;
    Ok(caps("CapEff:")? || caps("CapAmb:")? || (euid == "0" && caps("CapBnd:")?))
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub device: String,
    pub port: u32,
    pub rate_gbps: Option<f64>,
    pub link_layer: Option<String>,
    /// A software device (Soft-RoCE, siw): its rate is the netdev's, its
    /// bandwidth the CPU's, so the share of the rate proves nothing.
    pub software: bool,
}

/// The ports to test, or why there is none.
pub fn targets(devices: &[Device], only: Option<&str>) -> Result<Vec<Target>, String> {
    if devices.is_empty() {
        return Err(
            "no RDMA device on this host (/sys/class/infiniband is empty or absent): \
                    nothing to test"
                .to_owned(),
        );
    }
    let chosen: Vec<&Device> = devices
        .iter()
        .filter(|d| only.is_none_or(|o| d.name == o))
        .collect();
    if chosen.is_empty() {
        let have: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        return Err(format!(
            "no RDMA device {} (this host has {})",
            only.unwrap_or_default(),
            have.join(", ")
        ));
    }
    let out: Vec<Target> = chosen
        .iter()
        .flat_map(|d| {
            d.ports.iter().filter(|p| p.is_active()).map(|p| Target {
                device: d.name.clone(),
                port: p.port,
                rate_gbps: p.rate_gbps,
                link_layer: p.link_layer.map(|l| l.as_str().to_owned()),
                software: d.kind == Kind::Software,
            })
        })
        .collect();
    if out.is_empty() {
        let states: Vec<String> = chosen
            .iter()
            .flat_map(|d| {
                d.ports.iter().map(|p| {
                    format!(
                        "{}/{} {}",
                        d.name,
                        p.port,
                        p.state.map_or("unreadable", |s| s.name())
                    )
                })
            })
            .collect();
        return Err(format!(
            "no ACTIVE RDMA port to test ({})",
            if states.is_empty() {
                "no ports".to_owned()
            } else {
                states.join(", ")
            }
        ));
    }
    Ok(out)
}

/// What one run of server and client printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOutput {
    pub client: String,
    pub server: String,
    /// The runner's own trouble (could not start, timed out), if any.
    pub error: Option<String>,
}

/// Runs one loopback test (a live action: it starts processes).
pub trait Runner {
    fn run(&self, target: &Target, memlock: Limit, size: u64, tcp_port: u16) -> RunOutput;
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    #[serde(serialize_with = "display")]
    pub memlock: Limit,
    pub bandwidth: Option<Bandwidth>,
    pub failure: Option<Failure>,
    /// Average as a percentage of the port's rate.
    pub percent_of_rate: Option<f64>,
}

fn display<S: serde::Serializer>(l: &Limit, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(l)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortReport {
    #[serde(flatten)]
    pub target: Target,
    pub verdict: Verdict,
    pub message: String,
    pub test: RunResult,
    pub control: Option<RunResult>,
}

fn result(t: &Target, memlock: Limit, out: &RunOutput) -> RunResult {
    match perftest::parse(&out.client) {
        Ok(b) => RunResult {
            memlock,
            percent_of_rate: t
                .rate_gbps
                .filter(|r| *r > 0.0)
                .map(|r| b.average_gbps / r * 100.0),
            bandwidth: Some(b),
            failure: None,
        },
        Err(f) => {
            // The client's error first; the server's, or the runner's, when it has none.
            let f = match f {
                Failure::Other(l) if l.is_empty() => match perftest::failure(&out.server) {
                    Failure::Other(s) if s.is_empty() => {
                        Failure::Other(out.error.clone().unwrap_or_default())
                    }
                    other => other,
                },
                f => f,
            };
            RunResult {
                memlock,
                bandwidth: None,
                failure: Some(f),
                percent_of_rate: None,
            }
        }
    }
}

/// Pass when the test run reaches `min_percent` of the port's rate.
pub fn judge(
    t: &Target,
    test: RunResult,
    control: Option<RunResult>,
    min_percent: f64,
) -> PortReport {
    let name = format!("{}/{}", t.device, t.port);
    let (verdict, mut message) = match (&test.bandwidth, test.percent_of_rate) {
        (Some(b), _) if t.software => (
            Verdict::Pass,
            format!(
                "{name}: {:.2} Gb/s with memlock {} (a software device: its rate is not compared)",
                b.average_gbps, test.memlock
            ),
        ),
        (Some(b), Some(pct)) if pct >= min_percent => (
            Verdict::Pass,
            format!(
                "{name}: {:.2} Gb/s of {} Gb/s ({pct:.1}%, at least {min_percent}%) with memlock {}",
                b.average_gbps,
                t.rate_gbps.unwrap_or_default(),
                test.memlock
            ),
        ),
        (Some(b), Some(pct)) => (
            Verdict::Fail,
            format!(
                "{name}: {:.2} Gb/s of {} Gb/s ({pct:.1}%, below {min_percent}%): check the link \
                 (ibstat, error counters), PCIe width and speed, and the NUMA placement",
                b.average_gbps,
                t.rate_gbps.unwrap_or_default()
            ),
        ),
        (Some(b), None) => (
            Verdict::Fail,
            format!(
                "{name}: {:.2} Gb/s, but the port's rate is unreadable: cannot compare",
                b.average_gbps
            ),
        ),
        (None, _) => (
            Verdict::Fail,
            format!(
                "{name}: ib_write_bw with memlock {} failed: {}",
                test.memlock,
                test.failure
                    .as_ref()
                    .map(Failure::describe)
                    .unwrap_or_default()
            ),
        ),
    };
    if let Some(c) = &control {
        let said = match (&c.failure, &c.bandwidth) {
            (Some(Failure::AllocateMr), _) => {
                "failed as expected (Couldn't allocate MR): the raised memlock is what lets pods register memory".to_owned()
            }
            (Some(f), _) => format!("failed: {}", f.describe()),
            (None, Some(b)) => format!(
                "passed too ({:.2} Gb/s): messages this small fit in it",
                b.average_gbps
            ),
            (None, None) => "gave no result".to_owned(),
        };
        message.push_str(&format!("; control with memlock {}: {said}", c.memlock));
    }
    PortReport {
        target: t.clone(),
        verdict,
        message,
        test,
        control,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub ok: bool,
    pub summary: String,
    /// Why nothing was tested, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unable: Option<String>,
    pub ports: Vec<PortReport>,
    #[serde(skip)]
    pub exit_code: i32,
}

impl Report {
    pub fn unable(why: String) -> Report {
        Report {
            ok: false,
            summary: format!("selftest not run: {why}"),
            unable: Some(why),
            ports: Vec::new(),
            exit_code: EXIT_UNABLE,
        }
    }

    pub fn to_text(&self) -> String {
        let mut s = format!("{}\n", self.summary);
        for p in &self.ports {
            let v = match p.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
            };
            s.push_str(&format!("{v:<5} {}\n", p.message));
        }
        s
    }
}

/// The options of one selftest.
#[derive(Debug, Clone)]
pub struct Options {
    pub size: u64,
    /// The memlock a pod gets from the base spec (containerd.memlock).
    pub memlock: Limit,
    pub min_percent: f64,
    /// Also run the low-memlock control.
    pub control: bool,
}

/// Tests every target, one after the other (they share the HCA's bandwidth).
pub fn run(targets: &[Target], runner: &dyn Runner, o: &Options) -> Report {
    let mut ports = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        // A TCP port of its own per run: a server that has not exited yet never collides.
        let base = 18515 + (i as u16) * 2;
        let test = result(t, o.memlock, &runner.run(t, o.memlock, o.size, base));
        let control = o.control.then(|| {
            result(
                t,
                CONTROL_MEMLOCK,
                &runner.run(t, CONTROL_MEMLOCK, o.size, base + 1),
            )
        });
        ports.push(judge(t, test, control, o.min_percent));
    }
    let passed = ports.iter().filter(|p| p.verdict == Verdict::Pass).count();
    let ok = passed == ports.len();
    Report {
        ok,
        summary: format!(
            "selftest {}: {passed} of {} ACTIVE port(s) pass (ib_write_bw loopback, {} byte messages, \
             memlock {} and no CAP_IPC_LOCK, as pods get them)",
            if ok { "passed" } else { "FAILED" },
            ports.len(),
            o.size,
            o.memlock
        ),
        unable: None,
        ports,
        exit_code: if ok { EXIT_PASS } else { EXIT_FAIL },
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
