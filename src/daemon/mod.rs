//! `serve`: keeps the node converged. Reconciles at start, when a watched file
//! changes (inotify, debounced), on SIGHUP and on a timer; tells systemd when it
//! is ready and pings its watchdog; one daemon per host (lock file).

mod worker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use sd_notify::NotifyState;

mod cycle;
pub mod gate_selftest;
mod link_events;
mod machine;
mod nri;
mod persist;
mod prober;
pub mod probes;
mod sandbox;
mod state_copy;
mod wakeups;

use crate::agent::Connection;
use crate::concerns::registry::SECTIONS;
use crate::config::Config;
use crate::engine::holds::Holds;
use crate::host::Host;
use crate::host::lock::{self, LockError};
use crate::host::stop::Stop;
use crate::outputs::Cycle;
use crate::outputs::http::{self, Board, Published};
use crate::outputs::listen::{self, Limits, Listen};
use crate::outputs::metrics::{self, Totals};
use cycle::{Outcome, Timing};
use machine::{Machine, Next, Trigger};
use state_copy::{StateCopy, WriteBack};
use wakeups::Wakeups;
use worker::Worker;

pub const DAEMON_LOCK: &str = "/run/rdma-node-agent/daemon.lock";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("a daemon is already running on this host")]
    Running(#[source] LockError),
    #[error(transparent)]
    Http(#[from] listen::HttpError),
    #[error("{0}: restarting")]
    StaleMounts(String),
    #[error("cannot set up {what}: {source}")]
    Setup {
        what: &'static str,
        source: std::io::Error,
    },
}

pub struct Daemon {
    pub root: PathBuf,
    pub config_path: PathBuf,
    /// `serve --listen`, over the config's `http.listen`.
    pub listen: Option<String>,
    board: Board,
    /// Unix time the running reconcile started, 0 when idle (for the watchdog).
    busy_since: Arc<AtomicU64>,
    /// Set on SIGTERM/SIGINT: a running reconcile stops waiting and returns.
    stop: Stop,
    /// The state directory's files, written back if it is removed.
    state: Arc<StateCopy>,
    /// The last config that loaded: while a later edit does not, the checks
    /// go on with it (reporting only) instead of defaults.
    last_good: Arc<Mutex<Option<Config>>>,
    /// The NRI plugin task's state, read by each reconcile (`containerd.nri`).
    nri: Arc<crate::host::nri::State>,
    /// The live host's capabilities, one bus connection for the daemon's life.
    live: Arc<Mutex<Option<Connection>>>,
}

/// After SIGTERM, how long the daemon waits for a running reconcile to return
/// before it exits anyway (systemd's stop budget is 10 s; ours is 2 s in all).
const STOP_GRACE: Duration = Duration::from_millis(1500);

/// A reconcile longer than this is stuck: two restarts with verification at the
/// longest sensible timeout, and margin.
const STUCK_SECS: u64 = 15 * 60;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Daemon {
    pub fn new(root: PathBuf, config_path: PathBuf, listen: Option<String>) -> Self {
        Daemon {
            root,
            config_path,
            listen,
            board: Arc::default(),
            busy_since: Arc::default(),
            stop: Stop::new(),
            state: Arc::default(),
            last_good: Arc::default(),
            nri: Arc::default(),
            live: Arc::default(),
        }
    }

    pub async fn run(self) -> Result<(), DaemonError> {
        let host = Host::new(&self.root);
        let _instance = lock::acquire(&host, Path::new(DAEMON_LOCK), Duration::ZERO)
            .map_err(DaemonError::Running)?;
        let mut wake = Wakeups::new(&host)?;
        let worker = Worker::start().map_err(|source| DaemonError::Setup {
            what: "the reconcile thread",
            source,
        })?;
        self.start_http(&host).await?;
        // Started once a loaded config enables `[peers]`, dropped (its
        // responders stopped) when one turns it off, and with this loop: off
        // (the default), the daemon has no prober thread and no wake-up.
        let mut prober: Option<prober::ProberThread> = None;
        // Lives as long as this loop: its end stops the NRI task.
        let (_nri_stop, nri_stop) = tokio::sync::watch::channel(false);
        tokio::spawn(nri::supervise(
            host.clone(),
            self.config_path.clone(),
            self.nri.clone(),
            nri_stop,
        ));
        self.start_watchdog();

        let mut totals = Totals::default();
        let mut machine = Machine::default();
        let mut trigger = Trigger::Start;
        let mut holds = Holds::default();
        loop {
            let reload = machine.reconcile(trigger.clone());
            if reload {
                // `systemctl reload`: the operator asks for failed actions to be tried now.
                holds.actions.clear();
            }
            let run = self.reconcile(&worker, trigger.to_string(), std::mem::take(&mut holds));
            tokio::pin!(run);
            let out = tokio::select! {
                out = &mut run => out,
                _ = wake.sigterm.recv() => return self.stop_during(&mut machine, run).await,
                _ = wake.sigint.recv() => return self.stop_during(&mut machine, run).await,
            };
            holds = out.holds;
            match (prober::wanted(&self.last_good), &prober) {
                (true, None) => {
                    let selftest = prober::SelftestRunner {
                        live: self.live.clone(),
                        config_path: self.config_path.clone(),
                    };
                    prober = Some(prober::start(
                        host.clone(),
                        self.last_good.clone(),
                        selftest,
                    ))
                }
                (false, Some(_)) => prober = None,
                // With the config this reconcile loaded: the peer list too.
                (true, Some(p)) if reload => p.nudge(),
                _ => {}
            }
            if let Some(why) = &out.cycle.stale_mounts {
                return self.exit_for_mounts(&host, &mut machine, why);
            }
            let status = self.publish(&out.cycle, &mut totals);
            let new_watches = wake.watch(&host, &out.watch);
            let next = machine.reconciled(None, new_watches);
            let mut states = vec![NotifyState::Status(&status)];
            if machine.report_published() {
                states.push(NotifyState::Ready);
            }
            let _ = sd_notify::notify(&states);
            trigger = match next {
                Next::Reconcile(t) => t,
                _ => match wake.next_trigger(&mut machine, out.timing).await {
                    Some(t) => t,
                    None => return self.stop(&mut machine),
                },
            };
        }
    }

    /// Pings systemd's watchdog from its own task, since a reconcile may wait
    /// minutes for a restart and rollback; but not for a reconcile stuck beyond
    /// any bound it sets itself.
    fn start_watchdog(&self) {
        let busy = self.busy_since.clone();
        if let Some(w) = sd_notify::watchdog_enabled() {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(w / 2);
                loop {
                    tick.tick().await;
                    let started = busy.load(Ordering::Relaxed);
                    let stuck = started != 0 && unix_now().saturating_sub(started) > STUCK_SECS;
                    if !stuck {
                        let _ = sd_notify::notify(&[NotifyState::Watchdog]);
                    }
                }
            });
        }
    }

    /// The service's mounts went stale: what only this process still knows goes
    /// to the host first, then the daemon exits so that systemd
    /// (Restart=on-failure) starts it again with the host's mounts;
    /// StartLimitBurst bounds it.
    fn exit_for_mounts(
        &self,
        host: &Host,
        machine: &mut Machine,
        why: &str,
    ) -> Result<(), DaemonError> {
        machine.reconciled(Some(why.to_owned()), false);
        match self.state.write_back(host) {
            WriteBack::Nothing => {}
            WriteBack::Restored(what) | WriteBack::RestartNeeded(what) => {
                tracing::warn!("{what}")
            }
        }
        tracing::error!("{why}: exiting so that systemd restarts the service with the host's view");
        Err(DaemonError::StaleMounts(why.to_owned()))
    }

    /// Counts the cycle and puts it on the board (`/status`, `/metrics`).
    /// Returns the status line for systemd.
    fn publish(&self, cycle: &Cycle, totals: &mut Totals) -> String {
        let status = match (&cycle.error, &cycle.report) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(r)) => r.summary.clone(),
            (None, None) => String::new(),
        };
        totals.reconciles += 1;
        totals.changes += cycle.changed.len() as u64;
        totals.errors += u64::from(cycle.error.is_some());
        let published = Published::new(cycle, metrics::render(cycle, *totals));
        *self.board.write().expect("board lock") = Some(Arc::new(published));
        status
    }

    /// Binds the endpoint before the first reconcile, so a taken port fails the
    /// start (and systemd says why) instead of a silent daemon without health.
    async fn start_http(&self, host: &Host) -> Result<(), DaemonError> {
        // Settings come from the config at start; a config that does not parse
        // yet still gets the default endpoint, which then reports the error.
        let config = match Config::load(host, &self.config_path, SECTIONS) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    "agent config invalid: {e}; the health endpoint starts with its defaults \
                     and the daemon does not act until the config is fixed"
                );
                Config::default()
            }
        };
        if !config.http.enabled && self.listen.is_none() {
            return Ok(());
        }
        let listen = Listen::parse(self.listen.as_deref().unwrap_or(&config.http.listen));
        let listener = listen::bind(&listen).await.map_err(DaemonError::Http)?;
        let d = &config.daemon;
        let stale_after =
            Duration::from_secs(d.interval_secs * 3 + d.restart_timeout_secs * 2 + 60);
        let app = http::router(self.board.clone(), stale_after);
        let (max_connections, note) = listen::connection_limit(config.http.max_connections);
        if let Some(note) = note {
            tracing::warn!("{note}");
        }
        let limits = Limits {
            max_connections,
            header_timeout: Duration::from_secs(5),
            // A request head (request line and headers) over 8 KiB is refused
            // with 431 when the buffer fills: hyper's smallest buffer, so an
            // abusive connection holds one 8 KiB read buffer, never more.
            // Prometheus and the kubelet send a few hundred bytes.
            max_header_bytes: 8 * 1024,
        };
        tracing::info!(listen = ?listen, "health endpoint listening");
        tokio::spawn(listen::serve(listener, app, limits));
        Ok(())
    }

    fn stop(&self, machine: &mut Machine) -> Result<(), DaemonError> {
        machine.stop();
        let _ = sd_notify::notify(&[NotifyState::Stopping]);
        tracing::info!("stopping");
        Ok(())
    }

    /// SIGTERM while a reconcile runs: tell it to stop waiting (a restart job it
    /// waits on may itself wait for this daemon's stop job), give it a moment to
    /// leave its files consistent, then exit whatever it does.
    async fn stop_during(
        &self,
        machine: &mut Machine,
        run: std::pin::Pin<&mut impl std::future::Future<Output = Outcome>>,
    ) -> Result<(), DaemonError> {
        machine.stop();
        let _ = sd_notify::notify(&[NotifyState::Stopping]);
        tracing::info!("stopping during a reconcile");
        self.stop.request();
        match tokio::time::timeout(STOP_GRACE, run).await {
            Ok(out) => {
                if let Some(e) = out.cycle.error {
                    tracing::info!("the reconcile ended: {e}");
                }
            }
            Err(_) => tracing::warn!(
                "the reconcile did not return within {STOP_GRACE:?}; exiting (its writes are atomic)"
            ),
        }
        machine.stopped();
        Ok(())
    }

    /// One cycle on the reconcile thread: the core is synchronous (file I/O, D-Bus
    /// waits). Returns the cycle, the paths to watch and the timings to use next.
    async fn reconcile(&self, worker: &Worker, trigger: String, holds: Holds) -> Outcome {
        let root = self.root.clone();
        let config_path = self.config_path.clone();
        let stop = self.stop.clone();
        let last_good = self.last_good.clone();
        let state = self.state.clone();
        let nri = self.nri.clone();
        let live = self.live.clone();
        let started = Instant::now();
        self.busy_since.store(unix_now(), Ordering::Relaxed);
        let out = worker
            .run(move || {
                let life = cycle::Life {
                    last_good: &last_good,
                    state: &state,
                    live: &live,
                    nri: &nri,
                };
                cycle::reconcile_once(root, config_path, trigger, holds, stop, life)
            })
            .await;
        self.busy_since.store(0, Ordering::Relaxed);
        let mut out = out.unwrap_or_else(|e| Outcome {
            cycle: Cycle::failed("panic".into(), format!("reconcile panicked: {e}")),
            watch: Vec::new(),
            timing: Timing::FALLBACK,
            holds: Holds::default(),
        });
        out.cycle.duration_ms = started.elapsed().as_millis() as u64;
        out.cycle.finished_unix = unix_now();
        out
    }
}
