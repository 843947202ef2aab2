//! The daemon's life as a small state machine: named states, and transitions
//! that assert where they start from (as zincati's update agent does), so a
//! change to the loop that reorders them fails its tests, not a node.
//!
//! ```text
//! Starting ─reconcile(Start)─▶ Reconciling ─reconciled─▶ Idle ─reconcile(t)─▶ Reconciling …
//!                                  │  └─ stale mounts ─▶ Exited(StaleMounts)
//!                                  └─ stop ─▶ Stopping ─stopped─▶ Exited(Stopped)
//!                      Idle ─stop─▶ Exited(Stopped)
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
    /// Waiting for the timer, a reload or a file change.
    Idle,
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

    /// SIGTERM or SIGINT. Returns whether a reconcile must be told to stop
    /// (then `stopped` follows once it returned or its grace ran out).
    pub fn stop(&mut self) -> bool {
        match self.state {
            State::Reconciling(_) => {
                self.state = State::Stopping;
                true
            }
            State::Starting | State::Idle => {
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
mod tests {
    use super::*;

    #[test]
    fn a_life_of_reconciles_then_a_stop() {
        let mut m = Machine::default();
        assert!(!m.reconcile(Trigger::Start));
        assert_eq!(m.state(), &State::Reconciling(Trigger::Start));
        assert_eq!(
            m.reconciled(None, true),
            Next::Reconcile(Trigger::NewWatches)
        );
        assert!(m.report_published(), "READY after the first report");
        assert!(!m.reconcile(Trigger::NewWatches));
        assert_eq!(m.reconciled(None, false), Next::Wait);
        assert!(!m.report_published(), "READY once");
        assert!(
            m.reconcile(Trigger::Reload),
            "a reload retries held actions"
        );
        assert_eq!(m.reconciled(None, false), Next::Wait);
        assert!(!m.stop(), "idle: nothing to interrupt");
        assert_eq!(m.state(), &State::Exited(Exit::Stopped));
    }

    #[test]
    fn a_stop_during_a_reconcile_waits_for_it() {
        let mut m = Machine::default();
        m.reconcile(Trigger::Start);
        assert!(m.stop());
        assert_eq!(m.state(), &State::Stopping);
        m.stopped();
        assert_eq!(m.state(), &State::Exited(Exit::Stopped));
    }

    #[test]
    fn stale_mounts_end_the_life_for_a_restart() {
        let mut m = Machine::default();
        m.reconcile(Trigger::Start);
        m.reconciled(None, false);
        m.reconcile(Trigger::FileChange("config.toml".into()));
        let next = m.reconciled(Some("/etc is read-only here".into()), true);
        assert_eq!(
            next,
            Next::Exit(Exit::StaleMounts("/etc is read-only here".into()))
        );
        assert!(matches!(m.state(), State::Exited(Exit::StaleMounts(_))));
    }

    #[test]
    #[should_panic(expected = "reconcile(timer) from Reconciling")]
    fn reconciles_never_overlap() {
        let mut m = Machine::default();
        m.reconcile(Trigger::Start);
        m.reconcile(Trigger::Timer);
    }

    #[test]
    #[should_panic(expected = "reconcile(start) from Idle")]
    fn start_is_only_the_first() {
        let mut m = Machine::default();
        m.reconcile(Trigger::Start);
        m.reconciled(None, false);
        m.reconcile(Trigger::Start);
    }

    #[test]
    #[should_panic(expected = "reconciled() from Idle")]
    fn a_reconcile_ends_once() {
        let mut m = Machine::default();
        m.reconcile(Trigger::Start);
        m.reconciled(None, false);
        m.reconciled(None, false);
    }

    #[test]
    #[should_panic(expected = "stop() from Exited")]
    fn nothing_after_the_exit() {
        let mut m = Machine::default();
        m.stop();
        m.stop();
    }

    #[test]
    fn triggers_read_as_before_in_the_journal_and_status() {
        let shown: Vec<String> = [
            Trigger::Start,
            Trigger::Timer,
            Trigger::Reload,
            Trigger::NewWatches,
            Trigger::FileChange("x.toml".into()),
        ]
        .iter()
        .map(Trigger::to_string)
        .collect();
        assert_eq!(
            shown,
            [
                "start",
                "timer",
                "SIGHUP",
                "new watches",
                "file change (x.toml)"
            ]
        );
    }
}
