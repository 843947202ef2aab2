//! The daemon's count of link-down events between reconciles: a thread reads
//! rtnetlink link messages (`host::rtnetlink`), keeps a tally of downs per
//! netdev since this daemon started, writes it to the state file `rdma.link`
//! reads (`/run/rdma-node-agent/link-events.json`, with this daemon's instance,
//! so a restarted daemon's tally counts from zero), and asks for a reconcile.
//! Live host only: a tree under `--root` has no kernel to listen to.
//!
//! Bounded against pod churn (every pod's veth comes and goes through the same
//! messages): only netdevs that back an RDMA port are counted (read from
//! sysfs, re-read at most once a second when another netdev goes down), a
//! deleted netdev is no down and its entry goes, and the tally is written (and
//! a reconcile asked for) at most once per [`MIN_INTERVAL`]: a burst is one
//! write, and the daemon's debounce makes it one reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::concerns::rdma::link::{EVENTS_PATH, Events};
use crate::host::Host;
use crate::host::rtnetlink::{Change, LinkEvents};
use crate::host::state::Record;
use crate::host::state_writer::{Access, StateWriter};

/// The least time between two writes of the tally (and two wakes): a down
/// after a quiet spell is written at once, the rest of its burst gathered.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The least time between two reads of which netdevs back RDMA ports.
const REFRESH_MIN: Duration = Duration::from_secs(1);
const CLASS: &str = "/sys/class/infiniband";

/// The netdevs that back RDMA ports, named as `rdma.link` names them: a port's
/// `gid_attrs/ndevs/0` (RoCE), else the device's `parent` (Soft-RoCE).
pub fn rdma_netdevs(host: &Host) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let read = |p: &Path| {
        host.read_string(p)
            .ok()
            .flatten()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    for dev in host.list_dir(Path::new(CLASS)).unwrap_or_default() {
        let base = Path::new(CLASS).join(&dev);
        out.extend(read(&base.join("parent")));
        for port in host.list_dir(&base.join("ports")).unwrap_or_default() {
            out.extend(read(
                &base.join("ports").join(port).join("gid_attrs/ndevs/0"),
            ));
        }
    }
    out
}

/// The tally: pure, but for the read of RDMA netdevs it is handed.
pub struct Tally {
    pub events: Events,
    rdma: BTreeSet<String>,
    refreshed: Option<Instant>,
}

/// What folding a batch of changes did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Folded {
    /// The tally differs from what was last written.
    pub changed: bool,
    /// Downs of RDMA netdevs counted (each worth a reconcile).
    pub downs: u64,
}

impl Tally {
    pub fn new(instance: String) -> Tally {
        Tally {
            events: Events {
                instance,
                downs: BTreeMap::new(),
            },
            rdma: BTreeSet::new(),
            refreshed: None,
        }
    }

    pub fn fold(
        &mut self,
        changes: Vec<Change>,
        now: Instant,
        refresh: &mut dyn FnMut() -> BTreeSet<String>,
    ) -> Folded {
        let mut out = Folded::default();
        for c in changes {
            match c {
                Change::Gone(name) => {
                    out.changed |= self.events.downs.remove(&name).is_some();
                }
                Change::Down(name) => {
                    // A netdev not known to back a port may have just become
                    // one (an rxe added): look again, but not for every veth.
                    if !self.rdma.contains(&name)
                        && self
                            .refreshed
                            .is_none_or(|t| now.saturating_duration_since(t) >= REFRESH_MIN)
                    {
                        self.rdma = refresh();
                        self.refreshed = Some(now);
                    }
                    if self.rdma.contains(&name) {
                        tracing::info!(netdev = %name, "link down");
                        *self.events.downs.entry(name).or_default() += 1;
                        out.changed = true;
                        out.downs += 1;
                    }
                }
            }
        }
        out
    }
}

/// When a change first seen at `first` is written.
fn due(first: Instant, last_write: Instant) -> Instant {
    first.max(last_write + MIN_INTERVAL)
}

/// The tally as the record `rdma.link` reads.
pub fn record(events: &Events) -> Record {
    let mut bytes = serde_json::to_vec(events).expect("events serialize");
    bytes.push(b'\n');
    Record {
        path: EVENTS_PATH.into(),
        bytes,
        note: None,
    }
}

fn write(host: &Host, events: &Events) -> bool {
    match StateWriter::new(host).keep(&record(events), Access::Public) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "cannot keep the link-down tally ({EVENTS_PATH}): {e}; flaps are counted by polling only"
            );
            false
        }
    }
}

/// Starts listening (in the calling thread's network namespace); a failure to
/// listen is logged, and flaps are then counted by polling alone.
pub fn spawn(host: Host, wake: UnboundedSender<()>) {
    let mut socket = match LinkEvents::open() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "cannot listen to rtnetlink link events: {e}; flaps are counted by polling only"
            );
            return;
        }
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut tally = Tally::new(format!("{}-{started}", std::process::id()));
    if !write(&host, &tally.events) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("link-events".into())
        .spawn(move || {
            let mut last_write = Instant::now();
            // The first change not yet written, and whether a down is among them.
            let mut dirty: Option<Instant> = None;
            let mut wake_owed = false;
            loop {
                let timeout =
                    dirty.map(|d| due(d, last_write).saturating_duration_since(Instant::now()));
                let changes = match socket.wait(timeout) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(
                            "rtnetlink link events ended: {e}; flaps are counted by polling only"
                        );
                        return;
                    }
                };
                let now = Instant::now();
                let folded = tally.fold(changes, now, &mut || rdma_netdevs(&host));
                if folded.changed {
                    dirty.get_or_insert(now);
                }
                wake_owed |= folded.downs > 0;
                let Some(first) = dirty else { continue };
                if now < due(first, last_write) {
                    continue;
                }
                let written = write(&host, &tally.events);
                (last_write, dirty) = (now, None);
                if written && std::mem::take(&mut wake_owed) && wake.send(()).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(
            "cannot start the link event thread: {e}; flaps are counted by polling only"
        );
    }
}

#[cfg(test)]
#[path = "link_events_tests.rs"]
mod tests;
