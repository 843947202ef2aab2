//! The responders: one `rdma-node-agent-probe respond` per ACTIVE port
//! address, restarted with backoff when it exits, its events folded into
//! `record::Inbound` tallies and its state into `record::Responder`.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::local::LocalPort;
use super::record::{Inbound, Responder};
use super::settings::ProberSettings;

/// One line the responder prints (probe/respond.c, `event`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Ready {
        addr: String,
    },
    Answered {
        unix: u64,
        from: String,
        node: String,
    },
    Refused {
        unix: u64,
        from: String,
        why: String,
    },
    Error {
        error: String,
    },
}

/// The tallies kept at most (senders × ports): a fabric's k peers per round
/// are few; a flood of forged senders must not grow the record without bound.
pub const MAX_INBOUND: usize = 1024;
/// A line longer than this is not the helper's.
const MAX_LINE: u64 = 4096;
/// The most events kept between two drains (one round): a flood of refused
/// connections from the fabric must not grow the daemon's memory; past it the
/// events are dropped (the tallies then undercount, and the responder's own
/// rate limit already refuses the flood).
const MAX_PENDING: usize = 16_384;
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Folds one event of the responder on `device`/`port` into the tallies.
pub fn fold(inbound: &mut Vec<Inbound>, device: &str, port: u32, ev: &Event) {
    let (from, unix) = match ev {
        Event::Answered { from, unix, .. } | Event::Refused { from, unix, .. } => (from, *unix),
        _ => return,
    };
    let i = match inbound
        .iter()
        .position(|t| t.device == device && t.port == port && &t.from == from)
    {
        Some(i) => i,
        None if inbound.len() >= MAX_INBOUND => return,
        None => {
            inbound.push(Inbound {
                device: device.to_owned(),
                port,
                from: from.clone(),
                from_node: None,
                answered_total: 0,
                refused_total: 0,
                last_answered_unix: None,
                last_refused_unix: None,
                last_refused_why: None,
            });
            inbound.len() - 1
        }
    };
    let t = &mut inbound[i];
    match ev {
        Event::Answered { node, .. } => {
            t.answered_total += 1;
            t.last_answered_unix = Some(unix);
            t.from_node = Some(node.clone());
        }
        Event::Refused { why, .. } => {
            t.refused_total += 1;
            t.last_refused_unix = Some(unix);
            t.last_refused_why = Some(why.clone());
        }
        _ => {}
    }
}

/// The supervised responder of one port address.
struct Running {
    child: Option<Child>,
    /// When it may be started again, and the wait after the next exit.
    next_start: Instant,
    backoff: Duration,
    error: Option<String>,
    /// When this child said `ready` (seen at a drain); none before, or once it exited.
    ready_unix: Option<u64>,
}

type Key = (String, u32, String);

/// Keeps one responder per wanted port address.
pub struct Supervisor {
    running: BTreeMap<Key, Running>,
    events: Arc<Mutex<Vec<(Key, Event)>>>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervisor {
    pub fn new() -> Self {
        Supervisor {
            running: BTreeMap::new(),
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Starts what is wanted and not running (past its backoff), stops what is
    /// no longer wanted, notes what exited; the responders' states.
    pub fn reconcile(
        &mut self,
        s: &ProberSettings,
        node: &str,
        ports: &[LocalPort],
        now: Instant,
    ) -> Vec<Responder> {
        let wanted: HashMap<Key, &LocalPort> = ports
            .iter()
            .filter_map(|p| Some(((p.device.clone(), p.port, p.addr.clone()?), p)))
            .collect();
        self.running.retain(|k, r| {
            let keep = wanted.contains_key(k);
            if !keep {
                stop(r);
            }
            keep
        });
        for (key, port) in &wanted {
            let r = self.running.entry(key.clone()).or_insert_with(|| Running {
                child: None,
                next_start: now,
                backoff: BACKOFF_MIN,
                error: None,
                ready_unix: None,
            });
            if let Some(c) = r.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                r.child = None;
                r.ready_unix = None;
                r.error
                    .get_or_insert_with(|| format!("the responder exited ({status})"));
                r.next_start = now + r.backoff;
                r.backoff = (r.backoff * 2).min(BACKOFF_MAX);
            }
            if r.child.is_none() && now >= r.next_start {
                match spawn(&self.events, s, node, port, key) {
                    Ok(c) => r.child = Some(c),
                    Err(e) => {
                        r.error = Some(e);
                        r.next_start = now + r.backoff;
                        r.backoff = (r.backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
        }
        self.running
            .iter()
            .map(|((device, port, addr), r)| Responder {
                device: device.clone(),
                port: *port,
                addr: addr.clone(),
                running: r.child.is_some(),
                error: r.error.clone(),
                ready_since_unix: r.ready_unix.filter(|_| r.child.is_some()),
            })
            .collect()
    }

    /// The events since the last call, per port; a `ready` clears the port's error.
    pub fn drain(&mut self, inbound: &mut Vec<Inbound>) {
        let events = std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()));
        for ((device, port, addr), ev) in events {
            if let Some(r) = self.running.get_mut(&(device.clone(), port, addr)) {
                match &ev {
                    Event::Ready { .. } => {
                        r.error = None;
                        r.backoff = BACKOFF_MIN;
                        r.ready_unix = Some(unix_now());
                    }
                    Event::Error { error } => r.error = Some(error.clone()),
                    _ => {}
                }
            }
            fold(inbound, &device, port, &ev);
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Starts one responder and a thread that queues its events.
fn spawn(
    events: &Arc<Mutex<Vec<(Key, Event)>>>,
    s: &ProberSettings,
    node: &str,
    port: &LocalPort,
    key: &Key,
) -> Result<Child, String> {
    let rail = port.rail.map_or(-1, i64::from);
    let mut cmd = Command::new(&s.helper);
    // Killed with the thread that supervises it (the prober's), so a daemon
    // that exits mid-round leaves no responder holding the service port.
    // SAFETY: between fork and exec only prctl(2) runs: async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .args(["respond", "--addr", &key.2, "--port", &s.port.to_string()])
        .args(["--key-file", &s.key_file.to_string_lossy(), "--node", node])
        .args(["--rail", &rail.to_string(), "--rate", &s.rate.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run the probe helper {}: {e}", s.helper.display()))?;
    let out = child.stdout.take().ok_or("the responder has no stdout")?;
    let (events, key) = (events.clone(), key.clone());
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out);
        let mut line = String::new();
        loop {
            line.clear();
            match (&mut lines).take(MAX_LINE).read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let ev = serde_json::from_str(line.trim()).unwrap_or_else(|e| Event::Error {
                error: format!("unreadable responder line ({e})"),
            });
            let mut pending = events.lock().unwrap_or_else(|e| e.into_inner());
            if pending.len() < MAX_PENDING {
                pending.push((key.clone(), ev));
            }
        }
    });
    Ok(child)
}

fn stop(r: &mut Running) {
    if let Some(mut c) = r.child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.running.values_mut().for_each(stop);
    }
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod tests;
