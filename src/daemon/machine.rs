//! The daemon's life as a small state machine: named states, and transitions
//! that assert where they start from (as zincati's update agent does), so a
//! change to the loop that reorders them fails its tests, not a node.
//!
//! The triggers and the one debounce live here too: while idle, the daemon's
//! loop hands each wake-up to `event`, which says whether to wait on, gather a
//! burst (the debounce, state `Settling`) or reconcile now.
//!
//! ```text
//! Starting ─reconcile(Start)─▶ Reconciling ─reconciled─▶ Idle ─reconcile(t)─▶ Reconciling …
//!                                  │  └─ stale mounts ─▶ Exited(StaleMounts)
//!                                  └─ stop ─▶ Stopping ─stopped─▶ Exited(Stopped)
//!                      Idle ─event(timer, reload)─▶ Idle, Step::Reconcile
//!                      Idle ─event(file, link)─▶ Settling ─event(quiet)─▶ Idle, Step::Reconcile
//!                      Idle, Settling ─stop─▶ Exited(Stopped)
//! ```

use std::fmt;

/// Why a reconcile runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    Start,
    Timer,
    /// `systemctl reload` (SIGHUP): failed actions are tried now.
    Reload,
    /// Directories to watch appeared: a change made before the watch existed
    /// would go unseen until the timer.
    NewWatches,
    /// A watched file changed (the first name of the burst).
    FileChange(String),
    /// A network device went down (rtnetlink): read the RDMA ports now.
    LinkDown,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Start => f.write_str("start"),
            Trigger::Timer => f.write_str("timer"),
            Trigger::Reload => f.write_str("SIGHUP"),
            Trigger::NewWatches => f.write_str("new watches"),
            Trigger::FileChange(name) => write!(f, "file change ({name})"),
            Trigger::LinkDown => f.write_str("link down"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM or SIGINT.
    Stopped,
    /// The service's mounts no longer show the host's file systems: only a
    /// restart by systemd gives them back.
    StaleMounts(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The host is locked and the endpoint bound; nothing reconciled yet.
    Starting,
    Reconciling(Trigger),
    /// Waiting for the timer, a reload, a file change or a link going down.
    Idle,
    /// A file changed or a link went down: the rest of its burst (an editor's
    /// temp file, rename, chmod; a bond's ports going down one by one) joins
    /// it until the debounce's quiet time ends, then one reconcile runs.
    Settling(Trigger),
    /// Asked to stop while a reconcile runs: it is told to stop waiting.
    Stopping,
    Exited(Exit),
}

/// What to do after a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Reconcile again at once.
    Reconcile(Trigger),
    /// Wait for the next trigger.
    Wait,
    Exit(Exit),
}

/// What woke the idle daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The interval ran out.
    Timer,
    /// SIGHUP.
    Reload,
    /// inotify: a name changed in a watched directory (empty when unnamed).
    FileChanged(String),
    /// rtnetlink: a network device went down.
    LinkDown,
    /// The debounce's quiet time ended.
    Quiet,
}

/// Where a burst comes from: while one settles, only its own source is read,
/// so a reload or the timer is not swallowed by it but seen after the reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Files,
    Links,
}

/// What the idle daemon listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// The timer, SIGHUP, file changes and link events.
    All,
    /// A burst's own source and the quiet time's end.
    Burst(Source),
}

/// What to do after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Keep listening.
    Wait,
    /// Start the debounce's quiet time.
    Settle,
    /// Reconcile now (`reconcile` follows).
    Reconcile(Trigger),
}

/// The agent's own atomic writes leave temporary names with this in them: the
/// reconcile that made them already ran, so they trigger nothing.
const OWN_WRITE: &str = ".rdma-node-agent.";

#[derive(Debug)]
pub struct Machine {
    state: State,
    /// systemd was told READY (after the first report).
    ready: bool,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            state: State::Starting,
            ready: false,
        }
    }
}

impl Machine {
    #[cfg(test)]
    pub fn state(&self) -> &State {
        &self.state
    }

    /// A reconcile starts. Returns whether the failed actions' holds are
    /// dropped (a reload asks for them to be tried now).
    pub fn reconcile(&mut self, trigger: Trigger) -> bool {
        match (&self.state, &trigger) {
            (State::Starting, Trigger::Start) => {}
            (State::Idle, t) if *t != Trigger::Start => {}
            (s, t) => panic!("reconcile({t}) from {s:?}"),
        }
        let retry_now = trigger == Trigger::Reload;
        self.state = State::Reconciling(trigger);
        retry_now
    }

    /// The running reconcile ended: what comes next.
    pub fn reconciled(&mut self, stale_mounts: Option<String>, new_watches: bool) -> Next {
        assert!(
            matches!(self.state, State::Reconciling(_)),
            "reconciled() from {:?}",
            self.state
        );
        if let Some(why) = stale_mounts {
            self.state = State::Exited(Exit::StaleMounts(why.clone()));
            return Next::Exit(Exit::StaleMounts(why));
        }
        self.state = State::Idle;
        if new_watches {
            Next::Reconcile(Trigger::NewWatches)
        } else {
            Next::Wait
        }
    }

    /// Whether to tell systemd READY now: once, after the first report.
    pub fn report_published(&mut self) -> bool {
        assert!(
            matches!(self.state, State::Idle),
            "report_published() from {:?}",
            self.state
        );
        !std::mem::replace(&mut self.ready, true)
    }

    /// What to listen to while waiting for the next reconcile.
    pub fn listening(&self) -> Listen {
        match &self.state {
            State::Idle => Listen::All,
            State::Settling(Trigger::LinkDown) => Listen::Burst(Source::Links),
            State::Settling(_) => Listen::Burst(Source::Files),
            s => panic!("listening() from {s:?}"),
        }
    }

    /// A wake-up while idle or settling: what to do next.
    pub fn event(&mut self, event: Event) -> Step {
        let settling = match (&self.state, event) {
            (State::Idle, Event::Timer) => return Step::Reconcile(Trigger::Timer),
            (State::Idle, Event::Reload) => return Step::Reconcile(Trigger::Reload),
            (State::Idle, Event::FileChanged(name)) if name.contains(OWN_WRITE) => {
                return Step::Wait;
            }
            (State::Idle, Event::FileChanged(name)) => Trigger::FileChange(name),
            (State::Idle, Event::LinkDown) => Trigger::LinkDown,
            // The rest of the burst joins it, our own writes included.
            (State::Settling(Trigger::LinkDown), Event::LinkDown) => return Step::Wait,
            (State::Settling(Trigger::FileChange(_)), Event::FileChanged(_)) => {
                return Step::Wait;
            }
            (State::Settling(t), Event::Quiet) => {
                let t = t.clone();
                self.state = State::Idle;
                return Step::Reconcile(t);
            }
            (s, e) => panic!("event({e:?}) from {s:?}"),
        };
        self.state = State::Settling(settling);
        Step::Settle
    }

    /// SIGTERM or SIGINT. Returns whether a reconcile must be told to stop
    /// (then `stopped` follows once it returned or its grace ran out).
    pub fn stop(&mut self) -> bool {
        match self.state {
            State::Reconciling(_) => {
                self.state = State::Stopping;
                true
            }
            State::Starting | State::Idle | State::Settling(_) => {
                self.state = State::Exited(Exit::Stopped);
                false
            }
            ref s => panic!("stop() from {s:?}"),
        }
    }

    pub fn stopped(&mut self) {
        assert_eq!(
            self.state,
            State::Stopping,
            "stopped() from {:?}",
            self.state
        );
        self.state = State::Exited(Exit::Stopped);
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
