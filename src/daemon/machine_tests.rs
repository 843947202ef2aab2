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

/// An idle machine, after the first reconcile.
fn idle() -> Machine {
    let mut m = Machine::default();
    m.reconcile(Trigger::Start);
    m.reconciled(None, false);
    m
}

#[test]
fn a_burst_of_file_changes_is_one_reconcile_named_by_its_first() {
    let mut m = idle();
    assert_eq!(m.listening(), Listen::All);
    assert_eq!(
        m.event(Event::FileChanged("config.toml".into())),
        Step::Settle
    );
    assert_eq!(
        m.state(),
        &State::Settling(Trigger::FileChange("config.toml".into()))
    );
    assert_eq!(m.listening(), Listen::Burst(Source::Files));
    assert_eq!(
        m.event(Event::FileChanged("config.toml~".into())),
        Step::Wait
    );
    assert_eq!(
        m.event(Event::FileChanged(".x.rdma-node-agent.1".into())),
        Step::Wait,
        "an own write inside the burst joins it"
    );
    assert_eq!(
        m.event(Event::Quiet),
        Step::Reconcile(Trigger::FileChange("config.toml".into()))
    );
    assert_eq!(m.state(), &State::Idle);
    assert!(!m.reconcile(Trigger::FileChange("config.toml".into())));
}

#[test]
fn the_agents_own_writes_wake_nothing() {
    let mut m = idle();
    let own = Event::FileChanged("config.toml.rdma-node-agent.4711".into());
    assert_eq!(m.event(own), Step::Wait);
    assert_eq!(m.state(), &State::Idle);
    assert_eq!(m.listening(), Listen::All);
}

#[test]
fn links_going_down_settle_through_the_same_debounce() {
    let mut m = idle();
    assert_eq!(m.event(Event::LinkDown), Step::Settle);
    assert_eq!(m.listening(), Listen::Burst(Source::Links));
    assert_eq!(m.event(Event::LinkDown), Step::Wait);
    assert_eq!(m.event(Event::Quiet), Step::Reconcile(Trigger::LinkDown));
    assert!(!m.reconcile(Trigger::LinkDown));
}

#[test]
fn the_timer_and_a_reload_reconcile_at_once() {
    let mut m = idle();
    assert_eq!(m.event(Event::Timer), Step::Reconcile(Trigger::Timer));
    assert_eq!(m.event(Event::Reload), Step::Reconcile(Trigger::Reload));
    assert_eq!(m.state(), &State::Idle);
    assert!(m.reconcile(Trigger::Reload));
}

#[test]
fn a_stop_while_a_burst_settles_exits_without_a_reconcile() {
    let mut m = idle();
    m.event(Event::LinkDown);
    assert!(!m.stop(), "nothing runs: nothing to interrupt");
    assert_eq!(m.state(), &State::Exited(Exit::Stopped));
}

#[test]
#[should_panic(expected = "event(Reload) from Settling")]
fn a_burst_does_not_swallow_a_reload() {
    let mut m = idle();
    m.event(Event::FileChanged("config.toml".into()));
    m.event(Event::Reload);
}

#[test]
#[should_panic(expected = "event(FileChanged(\"a\")) from Settling(LinkDown)")]
fn a_link_burst_reads_only_links() {
    let mut m = idle();
    m.event(Event::LinkDown);
    m.event(Event::FileChanged("a".into()));
}

#[test]
#[should_panic(expected = "event(Quiet) from Idle")]
fn quiet_ends_only_a_burst() {
    let mut m = idle();
    m.event(Event::Quiet);
}

#[test]
#[should_panic(expected = "reconcile(timer) from Settling")]
fn no_reconcile_while_a_burst_settles() {
    let mut m = idle();
    m.event(Event::LinkDown);
    m.reconcile(Trigger::Timer);
}

#[test]
#[should_panic(expected = "event(Timer) from Reconciling")]
fn no_event_while_reconciling() {
    let mut m = Machine::default();
    m.reconcile(Trigger::Start);
    m.event(Event::Timer);
}

#[test]
fn triggers_read_as_before_in_the_journal_and_status() {
    let shown: Vec<String> = [
        Trigger::Start,
        Trigger::Timer,
        Trigger::Reload,
        Trigger::NewWatches,
        Trigger::FileChange("x.toml".into()),
        Trigger::LinkDown,
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
            "file change (x.toml)",
            "link down"
        ]
    );
}
