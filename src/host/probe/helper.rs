//! Running `rdma-node-agent-probe ping` and reading its one JSON line into a
//! `record::Probe`. The helper's own failures (not installed, a library
//! missing, killed past its budget, unreadable output) are `Stage::Helper`
//! with why: a probe that did not run is never `Done`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
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
        Err(e) => p.error = e.to_string(),
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
    );
    to_probe(
        local,
        peer,
        started_unix,
        said.and_then(|out| parse_ping(&out)),
    )
}

/// Runs the helper with a hard deadline; its stdout when it exited 0.
fn run(helper: &Path, args: &[String], budget: Duration) -> Result<String, HelperFailure> {
    let path = helper.display().to_string();
    if !helper.exists() {
        return Err(HelperFailure::Missing(path));
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
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let reader = std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        if let Some(s) = out.as_mut() {
            let _ = s.take(MAX_OUTPUT).read_to_string(&mut o);
        }
        if let Some(s) = err.as_mut() {
            let _ = s.take(MAX_OUTPUT).read_to_string(&mut e);
        }
        (o, e)
    });
    let deadline = Instant::now() + budget;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let (stdout, _) = reader.join().unwrap_or_default();
                // It printed its result and then did not exit in time (its
                // RDMA teardown in the kernel): the probe's answer stands.
                // Dropping it made a path that failed one probe disappear
                // from the port's count (the fabric tier's MTU fault: "2 of
                // 2 peers answered" on a node whose third probe timed out).
                if parse_ping(&stdout).is_ok() {
                    return Ok(stdout);
                }
                return Err(HelperFailure::Killed(budget));
            }
        }
    };
    let (stdout, stderr) = reader.join().unwrap_or_default();
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
