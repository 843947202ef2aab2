//! What wakes the idle daemon: the timer, SIGHUP, watched files (inotify) and
//! link-down events; SIGTERM and SIGINT end the wait. Which of them are read,
//! and how a burst becomes one reconcile (the debounce), the state machine
//! decides (`machine::Machine::event`); this file only turns them into events.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use futures_util::StreamExt;
use inotify::{EventStream, Inotify, WatchMask};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Sleep;

use super::DaemonError;
use super::cycle::Timing;
use super::link_events;
use super::machine::{Event, Listen, Machine, Source, Step, Trigger};
use crate::host::Host;

pub(super) struct Wakeups {
    sighup: Signal,
    pub sigterm: Signal,
    pub sigint: Signal,
    files: EventStream<[u8; 4096]>,
    /// The directories watched so far (a watch is never removed).
    watched: BTreeSet<PathBuf>,
    /// Link-down events between reconciles (live host only), for rdma.link.
    links: UnboundedReceiver<()>,
    /// Off the live host nothing sends; kept so that the channel stays open
    /// and waits instead of ending.
    _no_links: Option<UnboundedSender<()>>,
}

impl Wakeups {
    pub fn new(host: &Host) -> Result<Wakeups, DaemonError> {
        let setup = |what| move |source| DaemonError::Setup { what, source };
        let sighup = signal(SignalKind::hangup()).map_err(setup("SIGHUP"))?;
        let sigterm = signal(SignalKind::terminate()).map_err(setup("SIGTERM"))?;
        let sigint = signal(SignalKind::interrupt()).map_err(setup("SIGINT"))?;
        let inotify = Inotify::init().map_err(setup("inotify"))?;
        let files = inotify
            .into_event_stream([0u8; 4096])
            .map_err(setup("inotify"))?;
        let (link_tx, links) = unbounded_channel::<()>();
        let no_links = if host.is_live() {
            link_events::spawn(host.clone(), link_tx);
            None
        } else {
            Some(link_tx)
        };
        Ok(Wakeups {
            sighup,
            sigterm,
            sigint,
            files,
            watched: BTreeSet::new(),
            links,
            _no_links: no_links,
        })
    }

    /// Watches the directories of these files. Returns whether a new one was
    /// added (a change made before its watch existed needs a reconcile).
    pub fn watch(&mut self, host: &Host, files: &[PathBuf]) -> bool {
        let mut new_watches = false;
        for dir in watch_dirs(host, files) {
            if self.watched.insert(dir.clone()) {
                new_watches = true;
                let mask = WatchMask::CLOSE_WRITE
                    | WatchMask::MOVED_TO
                    | WatchMask::MOVED_FROM
                    | WatchMask::CREATE
                    | WatchMask::DELETE;
                if let Err(e) = self.files.watches().add(host.path(&dir), mask) {
                    tracing::warn!(dir = %dir.display(), "cannot watch: {e}");
                }
            }
        }
        new_watches
    }

    /// The next trigger, after the debounce where one applies; `None` on
    /// SIGTERM or SIGINT. The machine is idle when this is called.
    pub async fn next_trigger(&mut self, machine: &mut Machine, timing: Timing) -> Option<Trigger> {
        let timer = tokio::time::sleep(timing.interval);
        tokio::pin!(timer);
        // The one debounce: armed when a burst starts, read while it settles.
        let mut quiet: Option<Pin<Box<Sleep>>> = None;
        loop {
            let listen = machine.listening();
            let event = self
                .next(listen, timer.as_mut(), quiet.as_mut().map(|q| q.as_mut()))
                .await?;
            match machine.event(event) {
                Step::Wait => {}
                Step::Settle => quiet = Some(Box::pin(tokio::time::sleep(timing.debounce))),
                Step::Reconcile(t) => return Some(t),
            }
        }
    }

    /// One wake-up from what `listen` names; `None` on SIGTERM or SIGINT.
    async fn next(
        &mut self,
        listen: Listen,
        timer: Pin<&mut Sleep>,
        quiet: Option<Pin<&mut Sleep>>,
    ) -> Option<Event> {
        let all = listen == Listen::All;
        let files = listen != Listen::Burst(Source::Links);
        let links = listen != Listen::Burst(Source::Files);
        let quiet = async {
            match quiet {
                Some(q) => q.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = timer, if all => Some(Event::Timer),
            _ = self.sighup.recv(), if all => Some(Event::Reload),
            _ = self.sigterm.recv() => None,
            _ = self.sigint.recv() => None,
            _ = quiet, if !all => Some(Event::Quiet),
            Some(()) = self.links.recv(), if links => Some(Event::LinkDown),
            Some(ev) = self.files.next(), if files => {
                let name = ev
                    .ok()
                    .and_then(|e| e.name.map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_default();
                Some(Event::FileChanged(name))
            }
        }
    }
}

/// The directories to watch for the given files: a file is replaced by rename, so
/// its directory is watched; a directory that does not exist yet is watched
/// through its nearest existing ancestor, so its creation is noticed.
fn watch_dirs(host: &Host, files: &[PathBuf]) -> BTreeSet<PathBuf> {
    files
        .iter()
        .flat_map(|f| {
            // A linked file (or one in a linked directory) is edited at its
            // target: watch where that lives too.
            let target = host
                .resolve_managed(f)
                .ok()
                .map(|r| r.real)
                .filter(|real| real != f);
            std::iter::once(f.clone()).chain(target)
        })
        .filter_map(|f| {
            f.ancestors()
                .skip(1)
                .find(|d| host.path(d).is_dir())
                .map(Path::to_path_buf)
        })
        .collect()
}
