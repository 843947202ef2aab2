//! The executor's paths with a fake service manager that fails jobs, times
//! out, reports units inactive and interleaves a stop, on a temporary root.

use std::sync::Arc;

use super::*;
use crate::engine::fakes::{FailingEffect, FakeHost, FakeManager, FakeProbe, Job};
use crate::engine::plan::FileChange;

const CONFIG: &str = "/etc/app/app.toml";
const UNIT: &str = "app.service";

struct Setup {
    _dir: tempfile::TempDir,
    host: Host,
    plan: Plan,
    /// How the restarted unit's health answers.
    probe: Arc<FakeProbe>,
}

/// A root with a daemon's config at "old", and a plan that makes it "new".
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new(dir.path());
    host.write_atomic(Path::new(CONFIG), b"old\n", 0o644)
        .unwrap();
    let mut plan = Plan::default();
    plan.push_change(FileChange {
        path: CONFIG.into(),
        old: Some(b"old\n".to_vec()),
        new: Some(b"new\n".to_vec()),
        mode: 0o644,
        owner: "app",
        reason: "base spec".into(),
        restart: vec![UNIT.into()],
    });
    let probe = Arc::new(FakeProbe::default());
    plan.verify.push((UNIT.into(), probe.clone()));
    Setup {
        _dir: dir,
        host,
        plan,
        probe,
    }
}

fn content(host: &Host) -> String {
    String::from_utf8(host.read(Path::new(CONFIG)).unwrap().unwrap().bytes).unwrap()
}

fn live(manager: &Arc<FakeManager>, host: FakeHost) -> Live {
    Live {
        manager: Some(manager.clone()),
        host: Box::new(host),
    }
}

fn executor<'a>(s: &'a Setup, live: Option<&'a Live>, stop: &'a Stop) -> Executor<'a> {
    Executor {
        host: &s.host,
        live,
        restart_timeout: Duration::from_millis(400),
        stop,
        legacy_readers: |_, _| Vec::new(),
    }
}

#[test]
fn restart_ok_restarts_the_reader_once_after_one_reload() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[Job::Done], &stop));
    let l = live(&m, FakeHost::default());
    let out = executor(&s, Some(&l), &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap();
    assert_eq!(content(&s.host), "new\n");
    assert_eq!(out.changed, vec![PathBuf::from(CONFIG)]);
    assert_eq!(out.actions.len(), 1);
    assert_eq!(out.actions[0].status, ActionStatus::Done);
    assert_eq!(out.actions[0].action, "restart app.service");
    assert_eq!(m.calls(), ["reload", "restart app.service"]);
    // The ledger knows who reads the file, for revert.
    let ledger = Ledger::load(&s.host.reader()).unwrap();
    assert_eq!(
        ledger.files[Path::new(CONFIG)].readers(Path::new(CONFIG), |_, _| Vec::new()),
        [UNIT]
    );
}

fn assert_rolled_back(s: &Setup, m: &FakeManager, err: ExecError, why: &str) {
    match err {
        ExecError::RolledBack {
            unit,
            reason,
            after,
            digest,
        } => {
            assert_eq!(unit, UNIT);
            assert!(reason.contains(why), "{reason}");
            assert_eq!(after, "it is healthy again");
            assert_eq!(digest, s.plan.digest());
        }
        e => panic!("expected a rollback, got {e}"),
    }
    assert_eq!(content(&s.host), "old\n", "the previous bytes are back");
    let calls = m.calls();
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("restart")).count(),
        2,
        "restarted again on the old files: {calls:?}"
    );
}

/// An apply whose restart goes wrong as the fake is told, then rolls back.
fn rolled_back(jobs: &[Job], states: &[&'static str], cri: usize, why: &str) {
    let s = setup();
    let stop = Stop::new();
    let m = FakeManager::new(jobs, &stop);
    *m.states.lock().unwrap() = states.iter().copied().collect();
    let m = Arc::new(m);
    *s.probe.answers.lock().unwrap() =
        std::iter::repeat_n(Err("CRI plugin is \"error\"".to_owned()), cri).collect();
    let l = live(&m, FakeHost::default());
    let e = executor(&s, Some(&l), &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap_err();
    assert_rolled_back(&s, &m, e, why);
}

#[test]
fn failed_job_rolls_back_and_restarts_again() {
    rolled_back(&[Job::Failed, Job::Done], &[], 0, "result \"failed\"");
}

#[test]
fn job_timeout_rolls_back() {
    rolled_back(&[Job::Timeout, Job::Done], &[], 0, "did not finish");
}

#[test]
fn unit_inactive_after_restart_rolls_back() {
    // Failed for longer than the timeout, then active after the rollback.
    rolled_back(
        &[Job::Done, Job::Done],
        &["failed"; 3],
        0,
        "app.service is failed after the restart",
    );
}

#[test]
fn cri_plugin_not_loaded_rolls_back() {
    rolled_back(&[Job::Done, Job::Done], &[], 3, "CRI plugin");
}

#[test]
fn a_plan_rolled_back_before_is_held_back() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[], &stop));
    let l = live(&m, FakeHost::default());
    let mut holds = Holds::default();
    holds.record_rollback(
        s.plan.digest(),
        "CRI did not load".into(),
        std::time::SystemTime::now(),
        std::time::Duration::from_secs(60),
    );
    let e = executor(&s, Some(&l), &stop)
        .apply(&s.plan, true, &holds)
        .unwrap_err();
    assert!(matches!(e, ExecError::HeldBack { .. }), "{e}");
    assert_eq!(content(&s.host), "old\n");
    assert!(m.calls().is_empty());
}

#[test]
fn failing_live_action_is_deferred_until_due() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[], &stop));
    let l = live(&m, FakeHost::default());
    let mut plan = Plan::default();
    plan.push_action(Action {
        kind: ActionKind::Effect(Arc::new(FailingEffect)),
        reason: "the kernel runs another mode".into(),
    });
    let ex = executor(&s, Some(&l), &stop);
    let first = ex.apply(&plan, true, &Holds::default()).unwrap();
    assert_eq!(first.actions[0].status, ActionStatus::Failed);
    let mut holds = Holds::default();
    holds.record(&first.actions, SystemTime::now(), Duration::from_secs(60));
    let second = ex.apply(&plan, true, &holds).unwrap();
    assert_eq!(second.actions[0].status, ActionStatus::Deferred);
    assert!(second.actions[0].detail.contains("next try in"));
}

#[test]
fn stop_while_the_restart_is_queued_cancels_it_and_rolls_back() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[Job::StopWhileQueued], &stop));
    let l = live(&m, FakeHost::default());
    let e = executor(&s, Some(&l), &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap_err();
    assert!(
        matches!(&e, ExecError::Interrupted(m) if m.contains("rolled back")),
        "{e}"
    );
    // Files agree with the daemon that never restarted; no second restart.
    assert_eq!(content(&s.host), "old\n");
    assert_eq!(m.calls(), ["reload", "restart app.service"]);
}

#[test]
fn stop_while_the_restart_runs_keeps_the_complete_change() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[Job::StopWhileRunning], &stop));
    let l = live(&m, FakeHost::default());
    let e = executor(&s, Some(&l), &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap_err();
    assert!(
        matches!(&e, ExecError::Interrupted(m) if m.contains("left to systemd")),
        "{e}"
    );
    assert_eq!(content(&s.host), "new\n");
}

#[test]
fn stop_during_verification_returns_at_once() {
    let s = setup();
    let stop = Stop::new();
    let mut m = FakeManager::new(&[Job::Done], &stop);
    m.stop_on_status = true;
    *m.states.lock().unwrap() = ["activating"; 100].into_iter().collect();
    let m = Arc::new(m);
    let l = live(&m, FakeHost::default());
    let mut ex = executor(&s, Some(&l), &stop);
    ex.restart_timeout = Duration::from_secs(60);
    let start = Instant::now();
    let e = ex.apply(&s.plan, true, &Holds::default()).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(e, ExecError::Interrupted(_)), "{e}");
    assert_eq!(content(&s.host), "new\n");
}

#[test]
fn stop_before_the_first_write_writes_nothing() {
    let s = setup();
    let stop = Stop::new();
    stop.request();
    let e = executor(&s, None, &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap_err();
    assert!(matches!(e, ExecError::Interrupted(_)), "{e}");
    assert_eq!(content(&s.host), "old\n");
}

#[test]
fn without_the_live_host_or_systemd_restarts_are_reported_not_run() {
    let s = setup();
    let stop = Stop::new();
    let out = executor(&s, None, &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap();
    assert_eq!(out.actions[0].status, ActionStatus::Skipped);
    assert!(out.actions[0].detail.contains("is not the live host"));

    let s = setup();
    let no_systemd = Live {
        manager: None,
        host: Box::new(FakeHost::default()),
    };
    let out = executor(&s, Some(&no_systemd), &stop)
        .apply(&s.plan, true, &Holds::default())
        .unwrap();
    assert_eq!(out.actions[0].status, ActionStatus::Pending);
    assert!(out.actions[0].detail.contains("systemctl daemon-reload"));

    let s = setup();
    let m = Arc::new(FakeManager::new(&[], &stop));
    let l = live(&m, FakeHost::default());
    let out = executor(&s, Some(&l), &stop)
        .apply(&s.plan, false, &Holds::default())
        .unwrap();
    assert_eq!(out.actions[0].status, ActionStatus::Skipped);
    assert!(m.calls().is_empty());
}

#[test]
fn revert_restarts_exactly_the_recorded_readers() {
    let s = setup();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[Job::Done, Job::Done], &stop));
    let l = live(&m, FakeHost::default());
    let ex = executor(&s, Some(&l), &stop);
    ex.apply(&s.plan, true, &Holds::default()).unwrap();
    let r = ex.revert(false, &s.plan.verify).unwrap();
    assert_eq!(r.files.restored, vec![PathBuf::from(CONFIG)]);
    assert_eq!(content(&s.host), "old\n");
    assert_eq!(r.actions.len(), 1);
    assert_eq!(r.actions[0].action, "restart app.service");
    assert_eq!(r.actions[0].status, ActionStatus::Done);
}
