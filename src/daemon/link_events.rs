//! The daemon's count of link-down events between reconciles: a thread reads
//! rtnetlink link messages (`host::rtnetlink`), keeps a tally of downs per
//! netdev since this daemon started, writes it to the state file `rdma.link`
//! reads (`/run/rdma-node-agent/link-events.json`, with this daemon's instance,
//! so a restarted daemon's tally counts from zero), and asks for a reconcile.
//! Live host only: a tree under `--root` has no kernel to listen to.

use std::collections::BTreeMap;
use std::path::Path;

use tokio::sync::mpsc::UnboundedSender;

use crate::concerns::rdma::link::{EVENTS_PATH, Events};
use crate::host::Host;
use crate::host::rtnetlink::LinkEvents;

fn write(host: &Host, events: &Events) -> bool {
    let mut bytes = serde_json::to_vec(events).expect("events serialize");
    bytes.push(b'\n');
    match host.state_write(Path::new(EVENTS_PATH), &bytes, 0o644) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "cannot keep the link-down tally ({EVENTS_PATH}): {e}; flaps are counted by polling only"
            );
            false
        }
    }
}

/// Starts listening; a failure to listen is logged, and flaps are then
/// counted by polling alone.
pub(super) fn spawn(host: Host, wake: UnboundedSender<()>) {
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
    let mut events = Events {
        instance: format!("{}-{started}", std::process::id()),
        downs: BTreeMap::new(),
    };
    if !write(&host, &events) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("link-events".into())
        .spawn(move || {
            loop {
                let down = match socket.wait_downs() {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(
                            "rtnetlink link events ended: {e}; flaps are counted by polling only"
                        );
                        return;
                    }
                };
                if down.is_empty() {
                    continue;
                }
                for name in down {
                    tracing::info!(netdev = %name, "link down");
                    *events.downs.entry(name).or_default() += 1;
                }
                if write(&host, &events) && wake.send(()).is_err() {
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
