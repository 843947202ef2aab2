//! One reconcile of the daemon, on a blocking thread: load the config (or keep
//! the last good one), write back a removed state directory, assess, apply in
//! enforce mode, and assess again when the host changed.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::ReconcileOut;
use super::state_copy::{StateCopy, WriteBack};
use crate::agent::{Agent, AgentError, Connection};
use crate::config::{Config, Mode};
use crate::engine::Scope;
use crate::engine::check::Report;
use crate::engine::executor::ExecError;
use crate::engine::holds::Holds;
use crate::engine::outcome::ActionStatus;
use crate::host::Host;
use crate::host::stop::Stop;
use crate::outputs::Cycle;

/// What outlives a cycle, kept by the daemon.
pub(super) struct Life<'a> {
    /// The last config that loaded.
    pub last_good: &'a Mutex<Option<Config>>,
    /// The state directory's files, written back if it is removed.
    pub state: &'a StateCopy,
    /// The live host's capabilities: made at the first cycle on the live host,
    /// made again only while systemd did not answer.
    pub live: &'a Mutex<Option<Connection>>,
    /// The daemon's NRI plugin, read by `containerd.nri`.
    pub nri: &'a std::sync::Arc<crate::host::nri::State>,
}

pub(super) fn reconcile_once(
    root: PathBuf,
    config_path: PathBuf,
    trigger: String,
    holds: Holds,
    stop: Stop,
    life: Life,
) -> ReconcileOut {
    let Life {
        last_good,
        state,
        live,
        nri,
    } = life;
    let host = Host::new(&root);
    let mut written_back = None;
    match state.write_back(&host) {
        WriteBack::Nothing => {}
        WriteBack::Restored(what) => {
            tracing::warn!("{what}");
            written_back = Some(what);
        }
        WriteBack::RestartNeeded(what) => {
            let mut cycle = Cycle::failed(trigger, what.clone());
            cycle.stale_mounts = Some(format!(
                "{what}, as the host sees it; this service still holds the removed directory"
            ));
            let d = crate::config::DaemonConfig::default();
            return (
                cycle,
                Vec::new(),
                Duration::from_secs(d.interval_secs),
                Duration::from_millis(d.debounce_ms),
                holds,
            );
        }
    }
    let mut watch = vec![config_path.clone()];
    let mut config_error = None;
    let loaded = Config::load(&host, &config_path);
    let kept = last_good.lock().expect("config lock").clone();
    let config = match (loaded, kept) {
        (Ok(c), _) => {
            *last_good.lock().expect("config lock") = Some(c.clone());
            c
        }
        // Checks go on with the last config that loaded; nothing is changed
        // on the host until the new one is fixed.
        (Err(e), Some(mut c)) => {
            tracing::error!(
                "agent config invalid, reporting with the last good one, not acting: {e}"
            );
            config_error = Some(format!(
                "agent config invalid: {e}; reporting with the last config that loaded, not acting until it is fixed"
            ));
            c.mode = Mode::Report;
            c
        }
        (Err(e), None) => {
            tracing::error!("agent config invalid, not acting: {e}");
            let cycle = Cycle::failed(trigger, format!("agent config invalid: {e}"));
            return (
                cycle,
                watch,
                Duration::from_secs(60),
                Duration::from_millis(200),
                holds,
            );
        }
    };
    let interval = Duration::from_secs(config.daemon.interval_secs.max(1));
    let debounce = Duration::from_millis(config.daemon.debounce_ms);
    let mode = config.mode;
    let config_sha256 = config.sha256.clone();
    // The daemon acts on the host it runs on (`--root` only in tests, then with
    // no live action).
    let mut agent = if host.is_live() {
        let mut kept = live.lock().expect("live lock");
        if !kept.as_ref().is_some_and(Connection::has_manager) {
            *kept = Some(Connection::open(&host));
        }
        let c = kept.as_ref().expect("just made");
        Agent::connected(host, config, c)
    } else {
        Agent::new(host, config)
    };
    agent.stop = stop;
    agent.nri = Some(nri.clone());
    let mut changed = Vec::new();
    let mut actions = Vec::new();
    let mut error = config_error;
    let mut holds = holds;
    let stale_mounts = None;
    let mut not_writable = false;
    // One snapshot serves the plan and the report, unless the apply changed the host.
    let first = agent.assess(Scope::All, mode == Mode::Enforce);
    if mode == Mode::Enforce {
        let applied = match first.plan.clone() {
            Ok(plan) => agent.execute(&plan, true, &holds),
            Err(e) => Err(e.into()),
        };
        match applied {
            Ok(out) => {
                for p in &out.changed {
                    tracing::info!(path = %p.display(), trigger = %trigger, "changed");
                }
                for a in &out.actions {
                    let line = format!("{} {}: {}", a.action, a.status, a.detail);
                    if a.status == ActionStatus::Failed {
                        tracing::warn!(action = %a.action, status = a.status.as_str(), trigger = %trigger, "{line}");
                    } else {
                        tracing::info!(action = %a.action, status = a.status.as_str(), trigger = %trigger, "{line}");
                    }
                }
                holds.plan = None;
                holds.record(&out.actions, SystemTime::now(), interval);
                changed = out.changed;
                actions = out.actions;
            }
            Err(AgentError::Exec(e @ ExecError::RolledBack { .. })) => {
                tracing::error!(trigger = %trigger, "apply rolled back: {e}");
                error = Some(e.to_string());
                if let ExecError::RolledBack { digest, reason, .. } = e {
                    holds.record_rollback(digest, reason, SystemTime::now(), interval);
                }
            }
            Err(AgentError::Exec(e @ ExecError::Interrupted(_))) => {
                tracing::info!(trigger = %trigger, "{e}");
                error = Some(e.to_string());
            }
            Err(e) => {
                tracing::error!(trigger = %trigger, "apply failed: {e}");
                let mut message = e.to_string();
                if let Some(p) = read_only_here(&e) {
                    not_writable = true;
                    // Read-only to this service only: its sandbox, not the host.
                    if agent.host.writable_for_pid1(&p) {
                        let what = match &first.plan {
                            Ok(plan) => {
                                super::sandbox::settle(&agent, plan).unwrap_or_else(|why| {
                                    format!("cannot restart this service: {why}")
                                })
                            }
                            Err(_) => "no plan to act on".into(),
                        };
                        tracing::warn!(
                            "{} is read-only to this service but writable on the host: {what}",
                            p.display()
                        );
                        message = format!(
                            "{message}; it is read-only to this service but writable on the host: {what}"
                        );
                    }
                }
                error = Some(message);
            }
        }
    }
    let changed_host = !changed.is_empty()
        || actions
            .iter()
            .any(|a| a.status == ActionStatus::Done || a.status == ActionStatus::Failed);
    // Stopping: report what happened, without another pass over the host.
    let (report, observations) = if agent.stop.requested() {
        (None, Vec::new())
    } else {
        let assessment = if changed_host {
            agent.assess(Scope::All, false)
        } else {
            first
        };
        watch.extend(assessment.watch.iter().cloned());
        let mut checks = assessment.checks;
        super::persist::persist(&agent.host, &assessment.observations, &mut checks);
        if let Some(e) = &error {
            let reason = not_writable.then_some(crate::reason::Reason::PathNotWritable);
            crate::engine::check::note_apply_failure(&mut checks, e, reason);
        }
        let report = Report::new(checks);
        tracing::info!(trigger = %trigger, ok = report.ok, "{}", report.summary);
        // The NRI plugin learns each handler's base-spec memlock (containerd
        // does not show it to plugins).
        nri.set_base_specs(assessment.observations.iter().filter_map(|o| match o {
            crate::observe::Observation::BaseSpecMemlock {
                handler,
                default,
                memlock,
            } => Some((handler.clone(), *default, *memlock)),
            _ => None,
        }));
        (Some(report), assessment.observations)
    };
    // Remembered after this cycle's writes; and said once if it had to be written back.
    state.refresh(&agent.host);
    if let Some(w) = written_back {
        error = Some(match error {
            Some(e) => format!("{e}; {w}"),
            None => w,
        });
    }
    let cycle = Cycle {
        report,
        mode: Some(mode),
        config_sha256,
        finished_unix: 0,
        duration_ms: 0,
        trigger,
        changed,
        actions,
        error,
        observations,
        stale_mounts,
    };
    (cycle, watch, interval, debounce, holds)
}

/// The file a write was refused for as on a read-only file system.
fn read_only_here(e: &AgentError) -> Option<PathBuf> {
    use crate::engine::ledger::LedgerError;
    use crate::host::HostError;
    let w = match e {
        AgentError::Exec(ExecError::Host(w)) => w,
        AgentError::Exec(ExecError::Ledger(LedgerError::Host(w))) => w,
        AgentError::Exec(ExecError::Ledger(LedgerError::NotWritten { cause, .. })) => cause,
        _ => return None,
    };
    match w {
        HostError::Write { path, source } if source.raw_os_error() == Some(nix::libc::EROFS) => {
            Some(path.clone())
        }
        _ => None,
    }
}
