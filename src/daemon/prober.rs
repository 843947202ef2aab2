//! The prober's thread in the daemon (`[peers] enabled`, report mode too:
//! probing changes nothing on the host). Each round takes `[peers]` from the
//! config the last reconcile loaded, so SIGHUP and config edits apply from the
//! next round on; reads the peer list from the configured source (bounded:
//! size, count, time); runs a round (`probes::Prober`). A source that fails is
//! recorded with the round, so `rdma.peers` says `unknown` and why, never ok.
//! Disabled, no responder runs. The thread ends with the daemon, and its
//! responders with it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::gate_selftest::GateSelftest;
use super::probes::Prober;
use crate::agent::Connection;
use crate::concerns::rdma::peers::config::{PeerSource, PeersConfig};
use crate::config::Config;
use crate::host::Host;
use crate::host::probe::record::Peer;
use crate::host::probe::settings::ProberSettings;
use crate::host::probe::sources::{file, prometheus};
use crate::host::stop::Stop;

/// While `[peers]` is off (or no config has loaded yet), how often the thread
/// looks again.
const IDLE: Duration = Duration::from_secs(10);
/// How often a waiting thread looks for a changed `[peers]` or a nudge.
const LOOK: Duration = Duration::from_secs(1);
/// The Prometheus source's budget per round, at most (a quarter of the
/// interval when that is shorter): a slow server must not eat the round.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);
/// At shutdown, how long the daemon waits for a round in flight to end.
const JOIN_GRACE: Duration = Duration::from_millis(1500);

/// The running thread; dropping it stops the prober and its responders.
pub struct ProberThread {
    stop: Stop,
    /// Bumped by `nudge`: the waiting thread runs a round at once.
    nudged: Arc<AtomicU64>,
    ended: Receiver<()>,
    handle: Option<JoinHandle<()>>,
}

/// What the prober needs to run the return-to-service gate's selftest
/// (`[peers] gate`): the daemon's bus connection and the config it reads.
pub struct SelftestRunner {
    pub live: Arc<Mutex<Option<Connection>>>,
    pub config_path: PathBuf,
}

/// Whether the config the last reconcile loaded enables peer probes.
pub fn wanted(config: &Mutex<Option<Config>>) -> bool {
    config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|c| c.section::<PeersConfig>().enabled)
}

/// Starts the thread. Under `--root` the helper and the key are the tree's
/// (`host.path`), like every other file the agent reads there.
pub fn start(
    host: Host,
    config: Arc<Mutex<Option<Config>>>,
    selftest: SelftestRunner,
) -> ProberThread {
    let stop = Stop::new();
    let nudged = Arc::new(AtomicU64::new(0));
    let (ended_tx, ended) = mpsc::channel::<()>();
    let (s, n) = (stop.clone(), nudged.clone());
    let handle = std::thread::Builder::new()
        .name("prober".into())
        .spawn(move || {
            let _ended = ended_tx;
            run(&host, &config, &s, &n, None, Some(&selftest));
        })
        .map_err(|e| tracing::error!("peer probes: cannot start the prober thread: {e}"))
        .ok();
    ProberThread {
        stop,
        nudged,
        ended,
        handle,
    }
}

impl ProberThread {
    /// After a SIGHUP reconcile (`systemctl reload`): the peer source is read
    /// again and a round runs now, not at the next interval.
    pub fn nudge(&self) {
        self.nudged.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for ProberThread {
    fn drop(&mut self) {
        self.stop.request();
        match self.ended.recv_timeout(JOIN_GRACE) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(h) = self.handle.take() {
                    let _ = h.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => tracing::warn!(
                "peer probes: a round still runs after {JOIN_GRACE:?}; exiting (the responders die with the prober thread)"
            ),
        }
    }
}

/// The loop: a round every interval while enabled, until `stop`; a changed
/// `[peers]` or a nudge (a reload) starts a round at once. `helper` replaces
/// the installed probe helper (tests only: the config cannot name one).
/// With `[peers] gate`, each round starts the gate's selftest when it owes
/// one (`gate_selftest`), on a thread of its own.
pub fn run(
    host: &Host,
    config: &Mutex<Option<Config>>,
    stop: &Stop,
    nudged: &AtomicU64,
    helper: Option<&Path>,
    selftest: Option<&SelftestRunner>,
) {
    let section = || {
        config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.section::<PeersConfig>().clone())
            .filter(|p| p.enabled)
    };
    let mut prober: Option<Prober> = None;
    let mut last: Option<(PeerSource, Vec<Peer>)> = None;
    let mut gate = GateRuns::default();
    loop {
        let seen = nudged.load(Ordering::SeqCst);
        // Rounds start every interval, however long one takes.
        let began = Instant::now();
        let used = section();
        let wait = match &used {
            // Dropping the prober stops its responders.
            None => {
                prober = None;
                IDLE
            }
            Some(cfg) => {
                let p = prober.get_or_insert_with(Prober::default);
                let mut s = cfg.settings();
                s.helper = helper.map_or_else(|| host.path(&s.helper), Path::to_owned);
                s.key_file = host.path(&s.key_file);
                round(host, p, cfg, &s, &mut last);
                if let Some(r) = selftest.filter(|_| cfg.gate) {
                    gate.maybe_start(host, r, stop);
                }
                Duration::from_secs(cfg.interval_secs)
            }
        };
        let until = began + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if stop.sleep(left.min(LOOK)) {
                return;
            }
            if left <= LOOK || section() != used || nudged.load(Ordering::SeqCst) != seen {
                break;
            }
        }
    }
}

/// The gate's selftest on a thread of its own: perftest runs up to 10
/// minutes, and probe rounds (and the inbound answers the peers judge this
/// node by) must go on meanwhile. One run at a time.
#[derive(Default)]
struct GateRuns {
    idle: Option<GateSelftest>,
    running: Option<JoinHandle<GateSelftest>>,
}

impl GateRuns {
    fn maybe_start(&mut self, host: &Host, runner: &SelftestRunner, stop: &Stop) {
        if let Some(h) = self.running.take_if(|h| h.is_finished()) {
            self.idle = Some(h.join().unwrap_or_default());
        }
        if self.running.is_some() {
            return;
        }
        let mut gate = self.idle.take().unwrap_or_default();
        let (host, stop) = (host.clone(), stop.clone());
        let (live, config_path) = (runner.live.clone(), runner.config_path.clone());
        let spawned = std::thread::Builder::new()
            .name("gate-selftest".into())
            .spawn(move || {
                gate.maybe_run(&host, &live, &config_path, &stop);
                gate
            });
        match spawned {
            Ok(h) => self.running = Some(h),
            Err(e) => {
                tracing::error!("return-to-service gate: cannot start the selftest's thread: {e}")
            }
        }
    }
}

/// One round with this config: the node's name, the peer list (or the last
/// one this source gave, with the error), the probes and the record.
pub fn round(
    host: &Host,
    prober: &mut Prober,
    cfg: &PeersConfig,
    s: &ProberSettings,
    last: &mut Option<(PeerSource, Vec<Peer>)>,
) {
    let node = node_name(host, cfg);
    let loaded = match &node {
        Some(_) => load_peers(host, cfg),
        None => Err(
            "this node's name is unknown (/proc/sys/kernel/hostname is empty or unreadable): set [peers] node"
                .into(),
        ),
    };
    let (peers, source_error) = match loaded {
        Ok(p) => {
            *last = Some((cfg.source.clone(), p.clone()));
            (p, None)
        }
        Err(e) => {
            tracing::warn!("peer probes: {e}");
            let kept = last
                .as_ref()
                .filter(|(src, _)| *src == cfg.source)
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            (kept, Some(e))
        }
    };
    let node = node.unwrap_or_default();
    if let Err(e) = prober.tick(host, s, &node, &peers, source_error) {
        tracing::warn!("peer probes: cannot write the probe record: {e}");
    }
}

/// This node's name in the peer source: `[peers] node`, else the hostname.
pub fn node_name(host: &Host, cfg: &PeersConfig) -> Option<String> {
    if !cfg.node.is_empty() {
        return Some(cfg.node.clone());
    }
    let name = host
        .read_string(Path::new("/proc/sys/kernel/hostname"))
        .ok()
        .flatten()?
        .trim()
        .to_owned();
    (!name.is_empty()).then_some(name)
}

/// The peers the configured source lists, or why it cannot say.
pub fn load_peers(host: &Host, cfg: &PeersConfig) -> Result<Vec<Peer>, String> {
    match &cfg.source {
        PeerSource::File { path } => file::load(host, path).map_err(|e| e.to_string()),
        PeerSource::Prometheus {
            url,
            query,
            bearer_token_file,
        } => {
            let timeout = SOURCE_TIMEOUT
                .min(Duration::from_secs(cfg.interval_secs / 4).max(Duration::from_secs(1)));
            prometheus::load(url, query, bearer_token_file.as_deref(), timeout)
                .map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
#[path = "prober_tests.rs"]
mod tests;
