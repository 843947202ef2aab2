//! One reconcile of the daemon, on a blocking thread: load the config (or keep
//! the last good one), write back a removed state directory, assess, apply in
//! enforce mode, and assess again when the host changed.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::state_copy::{StateCopy, WriteBack};
use crate::agent::{Agent, AgentError, Connection};
use crate::concerns::registry::SECTIONS;
use crate::config::{Config, Mode};
use crate::engine::check::Report;
use crate::engine::executor::{ApplyOutcome, ExecError};
use crate::engine::holds::Holds;
use crate::engine::outcome::{ActionOutcome, ActionStatus};
use crate::engine::{Assessment, Scope};
use crate::host::Host;
use crate::host::stop::Stop;
use crate::observe::Observation;
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

/// What one reconcile gives the daemon's loop.
pub(super) struct Outcome {
    pub cycle: Cycle,
    /// Files whose change should trigger the next reconcile.
    pub watch: Vec<PathBuf>,
    pub timing: Timing,
    pub holds: Holds,
}

/// The daemon's timer interval and debounce, from the config this cycle used.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub interval: Duration,
    pub debounce: Duration,
}

impl Timing {
    /// When no config is at hand (none loaded yet, or the cycle panicked).
    pub const FALLBACK: Timing = Timing {
        interval: Duration::from_secs(60),
        debounce: Duration::from_millis(200),
    };
}

/// What the apply of an enforcing cycle did.
#[derive(Default)]
struct Applied {
    changed: Vec<PathBuf>,
    actions: Vec<ActionOutcome>,
    error: Option<String>,
    /// The apply was refused as on a read-only file system.
    not_writable: bool,
}

impl Applied {
    /// Whether the host may differ from what the first assessment saw.
    fn changed_host(&self) -> bool {
        !self.changed.is_empty()
            || self
                .actions
                .iter()
                .any(|a| a.status == ActionStatus::Done || a.status == ActionStatus::Failed)
    }
}

pub(super) fn reconcile_once(
    root: PathBuf,
    config_path: PathBuf,
    trigger: String,
    mut holds: Holds,
    stop: Stop,
    life: Life,
) -> Outcome {
    let host = Host::new(&root);
    let written_back = match write_back_state(life.state, &host) {
        Ok(w) => w,
        Err(StaleMounts(what)) => return stale_mounts(trigger, what, holds),
    };
    let mut watch = vec![config_path.clone()];
    let (config, config_error) = match load_config(&host, &config_path, life.last_good) {
        Ok(loaded) => loaded,
        Err(message) => {
            return Outcome {
                cycle: Cycle::failed(trigger, message),
                watch,
                timing: Timing::FALLBACK,
                holds,
            };
        }
    };
    let timing = Timing {
        interval: Duration::from_secs(config.daemon.interval_secs.max(1)),
        debounce: Duration::from_millis(config.daemon.debounce_ms),
    };
    let mode = config.mode;
    let config_sha256 = config.sha256.clone();
    let mut agent = make_agent(host, config, life.live);
    agent.stop = stop;
    agent.nri = Some(life.nri.clone());
    let mut applied = Applied {
        error: config_error,
        ..Applied::default()
    };
    // One snapshot serves the plan and the report, unless the apply changed the host.
    let first = agent.assess(Scope::All, mode == Mode::Enforce);
    if mode == Mode::Enforce {
        apply(
            &agent,
            &first,
            &trigger,
            &mut holds,
            timing.interval,
            &mut applied,
        );
    }
    let (report, observations) = finish(&agent, first, &applied, &trigger, life.nri, &mut watch);
    // Remembered after this cycle's writes; and said once if it had to be written back.
    life.state.refresh(&agent.host);
    let error = match (applied.error, written_back) {
        (Some(e), Some(w)) => Some(format!("{e}; {w}")),
        (e, w) => e.or(w),
    };
    let cycle = Cycle {
        report,
        mode: Some(mode),
        config_sha256,
        finished_unix: 0,
        duration_ms: 0,
        trigger,
        changed: applied.changed,
        actions: applied.actions,
        error,
        observations,
        stale_mounts: None,
    };
    Outcome {
        cycle,
        watch,
        timing,
        holds,
    }
}

/// The report and observations of the cycle, from the first assessment or,
/// when the apply changed the host, a second one; none when stopping: the
/// cycle reports what happened, without another pass over the host.
fn finish(
    agent: &Agent,
    first: Assessment,
    applied: &Applied,
    trigger: &str,
    nri: &crate::host::nri::State,
    watch: &mut Vec<PathBuf>,
) -> (Option<Report>, Vec<Observation>) {
    if agent.stop.requested() {
        return (None, Vec::new());
    }
    let assessment = if applied.changed_host() {
        agent.assess(Scope::All, false)
    } else {
        first
    };
    watch.extend(assessment.watch.iter().cloned());
    let (report, observations) = report(agent, assessment, applied, trigger, nri);
    (Some(report), observations)
}

/// The state directory was written back as the host sees it, but only a
/// restart of the service gives it the new one (its mounts are stale): what.
struct StaleMounts(String);

/// Writes back a removed state directory: what was restored, if anything.
fn write_back_state(state: &StateCopy, host: &Host) -> Result<Option<String>, StaleMounts> {
    match state.write_back(host) {
        WriteBack::Nothing => Ok(None),
        WriteBack::Restored(what) => {
            tracing::warn!("{what}");
            Ok(Some(what))
        }
        WriteBack::RestartNeeded(what) => Err(StaleMounts(what)),
    }
}

/// The cycle that ends the daemon for a restart by systemd.
fn stale_mounts(trigger: String, what: String, holds: Holds) -> Outcome {
    let mut cycle = Cycle::failed(trigger, what.clone());
    cycle.stale_mounts = Some(format!(
        "{what}, as the host sees it; this service still holds the removed directory"
    ));
    let d = crate::config::DaemonConfig::default();
    Outcome {
        cycle,
        watch: Vec::new(),
        timing: Timing {
            interval: Duration::from_secs(d.interval_secs),
            debounce: Duration::from_millis(d.debounce_ms),
        },
        holds,
    }
}

/// The config to use, with the error to report when it is the last good one
/// (then in report mode); `Err` with the message when none ever loaded.
fn load_config(
    host: &Host,
    config_path: &Path,
    last_good: &Mutex<Option<Config>>,
) -> Result<(Config, Option<String>), String> {
    let loaded = Config::load(host, config_path, SECTIONS);
    let kept = last_good.lock().expect("config lock").clone();
    match (loaded, kept) {
        (Ok(c), _) => {
            *last_good.lock().expect("config lock") = Some(c.clone());
            Ok((c, None))
        }
        // Checks go on with the last config that loaded; nothing is changed
        // on the host until the new one is fixed.
        (Err(e), Some(mut c)) => {
            tracing::error!(
                "agent config invalid, reporting with the last good one, not acting: {e}"
            );
            let error = format!(
                "agent config invalid: {e}; reporting with the last config that loaded, not acting until it is fixed"
            );
            c.mode = Mode::Report;
            Ok((c, Some(error)))
        }
        (Err(e), None) => {
            tracing::error!("agent config invalid, not acting: {e}");
            Err(format!("agent config invalid: {e}"))
        }
    }
}

/// The daemon acts on the host it runs on (`--root` only in tests, then with
/// no live action). The bus connection is kept across cycles and made again
/// only while systemd did not answer.
fn make_agent(host: Host, config: Config, live: &Mutex<Option<Connection>>) -> Agent {
    if host.is_live() {
        let mut kept = live.lock().expect("live lock");
        if !kept.as_ref().is_some_and(Connection::has_manager) {
            *kept = Some(Connection::open(&host));
        }
        let c = kept.as_ref().expect("just made");
        Agent::connected(host, config, c)
    } else {
        Agent::new(host, config)
    }
}

/// Carries out the first assessment's plan and records what it did (and the
/// holds for what failed or rolled back).
fn apply(
    agent: &Agent,
    first: &Assessment,
    trigger: &str,
    holds: &mut Holds,
    interval: Duration,
    applied: &mut Applied,
) {
    let result = match first.plan.clone() {
        Ok(plan) => agent.execute(&plan, true, holds),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(out) => {
            log_applied(&out, trigger);
            holds.plan = None;
            holds.record(&out.actions, SystemTime::now(), interval);
            applied.changed = out.changed;
            applied.actions = out.actions;
        }
        Err(AgentError::Exec(e @ ExecError::RolledBack { .. })) => {
            tracing::error!(trigger = %trigger, "apply rolled back: {e}");
            applied.error = Some(e.to_string());
            if let ExecError::RolledBack { digest, reason, .. } = e {
                holds.record_rollback(digest, reason, SystemTime::now(), interval);
            }
        }
        Err(AgentError::Exec(e @ ExecError::Interrupted(_))) => {
            tracing::info!(trigger = %trigger, "{e}");
            applied.error = Some(e.to_string());
        }
        Err(e) => {
            tracing::error!(trigger = %trigger, "apply failed: {e}");
            applied.error = Some(apply_failure(agent, first, &e, &mut applied.not_writable));
        }
    }
}

fn log_applied(out: &ApplyOutcome, trigger: &str) {
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
}

/// The message for a failed apply. A file read-only to this service but
/// writable on the host means its sandbox, not the host: the service is
/// settled (restarted with the host's view) where it can be.
fn apply_failure(
    agent: &Agent,
    first: &Assessment,
    e: &AgentError,
    not_writable: &mut bool,
) -> String {
    let mut message = e.to_string();
    if let Some(p) = read_only_here(e) {
        *not_writable = true;
        if agent.host.writable_for_pid1(&p) {
            let what = match &first.plan {
                Ok(plan) => super::sandbox::settle(agent, plan)
                    .unwrap_or_else(|why| format!("cannot restart this service: {why}")),
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
    message
}

/// The report of the cycle's last assessment, with its persisted facts and
/// the apply's failure; tells the NRI plugin each handler's base-spec memlock
/// (containerd does not show it to plugins).
fn report(
    agent: &Agent,
    assessment: Assessment,
    applied: &Applied,
    trigger: &str,
    nri: &crate::host::nri::State,
) -> (Report, Vec<Observation>) {
    let mut checks = assessment.checks;
    super::persist::persist(&agent.host, &assessment.observations, &mut checks);
    if let Some(e) = &applied.error {
        let reason = applied
            .not_writable
            .then_some(crate::reason::Reason::PATH_NOT_WRITABLE);
        crate::engine::check::note_apply_failure(&mut checks, e, reason);
    }
    let report = Report::new(checks);
    tracing::info!(trigger = %trigger, ok = report.ok, "{}", report.summary);
    nri.set_base_specs(assessment.observations.iter().filter_map(|o| match o {
        Observation::BaseSpecMemlock {
            handler,
            default,
            memlock,
        } => Some((handler.clone(), *default, *memlock)),
        _ => None,
    }));
    (report, assessment.observations)
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
