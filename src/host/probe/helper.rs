//! Running `rdma-node-agent-probe ping` and reading its one JSON line into a
//! `record::Probe`. The helper's own failures (not installed, a library
//! missing, killed past its budget, unreadable output) are `Stage::Helper`
//! with why: a probe that did not run is never `Done`.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::local::LocalPort;
use super::record::{Peer, Probe, Stage};
use super::settings::{HELPER_GRACE, ProberSettings};

/// The most the helper may print for one probe (its line is under 1 KiB).
const MAX_OUTPUT: u64 = 16 << 10;

/// What `ping` prints (probe/ping.c, `print`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PingLine {
    pub stage: Stage,
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub reject_why: Option<String>,
    #[serde(default)]
    pub rtt_us: Option<u64>,
    #[serde(default)]
    pub path_mtu: Option<u32>,
    #[serde(default)]
    pub gid_index: Option<u32>,
    #[serde(default)]
    pub gid_type: Option<String>,
    #[serde(default)]
    pub answered_node: Option<String>,
    #[serde(default)]
    pub answered_rail: Option<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HelperFailure {
    #[error(
        "the probe helper {0} is not installed (the package ships it; without it peers cannot be probed)"
    )]
    Missing(String),
    #[error("cannot run the probe helper {path}: {why}")]
    Spawn { path: String, why: String },
    #[error("the probe helper gave no answer within {0:?} and was killed")]
    Killed(Duration),
    #[error(
        "the probe helper (pid {pid}) gave no answer within {budget:?}, was killed and has not exited: \
         it is stuck in the kernel (look for a soft lockup or hung task in dmesg); it is reaped when it exits"
    )]
    Stuck { pid: u32, budget: Duration },
    #[error(
        "{0} probe helpers killed earlier have not exited (stuck in the kernel; see dmesg): \
         no probe runs until they do"
    )]
    TooManyStuck(usize),
    #[error("the probe helper exited with {status} and printed no result: {stderr}")]
    Failed { status: String, stderr: String },
    #[error("the probe helper's output does not parse ({why}): {line}")]
    Garbled { why: String, line: String },
}

/// The helper's stdout: its last non-empty line, as a `PingLine`.
pub fn parse_ping(stdout: &str) -> Result<PingLine, HelperFailure> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line).map_err(|e| HelperFailure::Garbled {
        why: e.to_string(),
        line: line.chars().take(200).collect(),
    })
}

/// A probe that got nowhere yet (`Stage::Helper`, no error).
fn blank(local: &LocalPort, peer: &Peer, started_unix: u64) -> Probe {
    Probe {
        device: local.device.clone(),
        port: local.port,
        src: local.addr.clone().unwrap_or_default(),
        peer: peer.clone(),
        stage: Stage::Helper,
        error: String::new(),
        reject_why: None,
        rtt_us: None,
        path_mtu: None,
        gid_index: None,
        gid_type: None,
        answered_node: None,
        answered_rail: None,
        started_unix,
    }
}

/// The record of one probe from what the helper said (or why it said nothing).
pub fn to_probe(
    local: &LocalPort,
    peer: &Peer,
    started_unix: u64,
    said: Result<PingLine, HelperFailure>,
) -> Probe {
    let mut p = blank(local, peer, started_unix);
    match said {
        Ok(l) => {
            p.stage = l.stage;
            p.error = l.error;
            p.reject_why = l.reject_why;
            p.rtt_us = l.rtt_us;
            p.path_mtu = l.path_mtu;
            p.gid_index = l.gid_index;
            p.gid_type = l.gid_type;
            p.answered_node = l.answered_node;
            p.answered_rail = l.answered_rail;
        }
        Err(e) => {
            if matches!(
                e,
                HelperFailure::Stuck { .. } | HelperFailure::TooManyStuck(_)
            ) {
                p.stage = Stage::Stuck;
            }
            p.error = e.to_string();
        }
    }
    p
}

/// The `ping` command line for one probe.
pub fn ping_args(
    s: &ProberSettings,
    node: &str,
    local: &LocalPort,
    src: &str,
    peer: &Peer,
) -> Vec<String> {
    let rail = local.rail.map_or(-1, i64::from);
    [
        "ping",
        "--src",
        src,
        "--dst",
        &peer.addr,
        "--port",
        &s.port.to_string(),
        "--key-file",
        &s.key_file.to_string_lossy(),
        "--node",
        node,
        "--rail",
        &rail.to_string(),
        "--timeout-ms",
        &s.probe_timeout.as_millis().to_string(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// Runs one probe. A port without an address is `Stage::Source` without
/// running anything.
pub fn ping(
    s: &ProberSettings,
    node: &str,
    local: &LocalPort,
    peer: &Peer,
    started_unix: u64,
) -> Probe {
    let Some(src) = local.addr.as_deref() else {
        let mut p = blank(local, peer, started_unix);
        p.stage = Stage::Source;
        p.error = format!(
            "{} port {} has no IPv4 address (no RoCE v2 IPv4 GID)",
            local.device, local.port
        );
        return p;
    };
    let said = run(
        &s.helper,
        &ping_args(s, node, local, src, peer),
        s.probe_timeout + HELPER_GRACE,
        &REAPER,
    );
    to_probe(
        local,
        peer,
        started_unix,
        said.and_then(|out| parse_ping(&out)),
    )
}

/// Helpers killed past their budget that have not exited (yet): a task
/// inside the kernel (e.g. an RDMA teardown under a soft lockup) cannot die
/// until it leaves it. Each is waited for by a thread of its own so the
/// prober goes on; past `MAX_STUCK` no helper is started, so a kernel that
/// keeps swallowing them costs a bounded number of processes and threads
/// (at most `MAX_STUCK` plus the probes of a round run at once, less one:
/// each checks the count before it starts).
#[derive(Debug, Default, Clone)]
pub struct Reaper {
    stuck: Arc<AtomicUsize>,
}

/// The prober's own reaper (one per process: stuck tasks are the host's).
pub static REAPER: LazyLock<Reaper> = LazyLock::new(Reaper::default);

/// Stuck helpers held at once before no new one starts.
pub const MAX_STUCK: usize = 4;
/// How long a killed helper has to exit before it counts as stuck.
const EXIT_WAIT: Duration = Duration::from_millis(500);

impl Reaper {
    /// Helpers killed and not exited, now.
    pub fn stuck(&self) -> usize {
        self.stuck.load(Ordering::SeqCst)
    }

    /// Waits for a child (and its output reader) that has not exited, on a
    /// thread of its own.
    fn hand_over(&self, mut child: Child, reader: JoinHandle<()>) {
        self.stuck.fetch_add(1, Ordering::SeqCst);
        let stuck = self.stuck.clone();
        let waited = std::thread::Builder::new()
            .name("probe-reaper".into())
            .spawn(move || {
                let _ = child.wait();
                let _ = reader.join();
                stuck.fetch_sub(1, Ordering::SeqCst);
            });
        if waited.is_err() {
            // No thread for it: it stays counted (and unreaped) for good,
            // which is what stops further spawns; nothing else leaks.
            tracing::warn!("cannot start a thread to reap a stuck probe helper");
        }
    }
}

/// What the helper printed so far, filled while it runs so a line printed
/// before a hang is not lost with the process.
type Printed = Arc<Mutex<(Vec<u8>, Vec<u8>)>>;

fn read_into(mut from: impl Read, into: &Printed, stderr: bool) {
    let mut buf = [0u8; 4096];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut g = into.lock().unwrap_or_else(|e| e.into_inner());
                let v = if stderr { &mut g.1 } else { &mut g.0 };
                let room = (MAX_OUTPUT as usize).saturating_sub(v.len());
                v.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn printed(p: &Printed) -> (String, String) {
    let g = p.lock().unwrap_or_else(|e| e.into_inner());
    (
        String::from_utf8_lossy(&g.0).into_owned(),
        String::from_utf8_lossy(&g.1).into_owned(),
    )
}

/// Polls a child until it exits or `wait` passes; its status if it exited.
fn exit_within(child: &mut Child, wait: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + wait;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// Gives the reader of an exited helper's pipes `EXIT_WAIT` to see them
/// close. They stay open only if something the helper started holds them;
/// then the reader is left to finish on its own (what it read so far is
/// in `Printed`).
fn settle(reader: &JoinHandle<()>) {
    let until = Instant::now() + EXIT_WAIT;
    while !reader.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the helper with a hard deadline; its stdout when it exited 0.
fn run(
    helper: &Path,
    args: &[String],
    budget: Duration,
    reaper: &Reaper,
) -> Result<String, HelperFailure> {
    run_killing_with(helper, args, budget, reaper, |c| {
        let _ = c.kill();
    })
}

/// `run`, with how a helper past its budget is killed as a parameter: the
/// tests stand in for a task the kernel does not let die with one that was
/// never sent the signal (from outside the two look the same: still there).
fn run_killing_with(
    helper: &Path,
    args: &[String],
    budget: Duration,
    reaper: &Reaper,
    kill: impl FnOnce(&mut Child),
) -> Result<String, HelperFailure> {
    let path = helper.display().to_string();
    if !helper.exists() {
        return Err(HelperFailure::Missing(path));
    }
    let held = reaper.stuck();
    if held >= MAX_STUCK {
        return Err(HelperFailure::TooManyStuck(held));
    }
    let mut child = Command::new(helper)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| HelperFailure::Spawn {
            path: path.clone(),
            why: e.to_string(),
        })?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let said: Printed = Arc::default();
    let into = said.clone();
    // One thread drains both pipes (stdout first: the helper writes its
    // line and little else), into `said` as it goes.
    let reader = std::thread::spawn(move || {
        if let Some(o) = out {
            read_into(o, &into, false);
        }
        if let Some(e) = err {
            read_into(e, &into, true);
        }
    });
    let Some(status) = exit_within(&mut child, budget) else {
        kill(&mut child);
        let exited = exit_within(&mut child, EXIT_WAIT).is_some();
        let pid = child.id();
        if exited {
            settle(&reader);
        } else {
            reaper.hand_over(child, reader);
        }
        let (stdout, _) = printed(&said);
        // It printed its result and then did not exit in time (its RDMA
        // teardown in the kernel): the probe's answer stands. Dropping it
        // made a path that failed one probe disappear from the port's count
        // (the fabric tier's MTU fault: "2 of 2 peers answered" on a node
        // whose third probe timed out).
        if parse_ping(&stdout).is_ok() {
            return Ok(stdout);
        }
        if exited {
            return Err(HelperFailure::Killed(budget));
        }
        return Err(HelperFailure::Stuck { pid, budget });
    };
    settle(&reader);
    let (stdout, stderr) = printed(&said);
    if status.success() {
        return Ok(stdout);
    }
    // A missing shared library: the loader says so on stderr, exit 127.
    Err(HelperFailure::Failed {
        status: status.to_string(),
        stderr: stderr.trim().chars().take(300).collect(),
    })
}

#[cfg(test)]
#[path = "helper_tests.rs"]
mod tests;
