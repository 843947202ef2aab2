//! Fakes of the live host for unit tests: a service manager that fails jobs,
//! times out, reports units inactive and interleaves a stop; a live host; a
//! health probe that answers as told; an effect that fails.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::effect::{
    CommandError, Effect, EffectError, EffectKey, LiveCtx, LiveHost, Probe, Ran, Unhealthy,
};
use crate::host::Host;
use crate::host::live_files::LiveFiles;
use crate::host::netlink::{NetlinkError, RdmaNetlink};
use crate::host::service::{ServiceManager, SystemdError, UnitReader, UnitState, UnitStatus};
use crate::host::stop::Stop;

/// What the fake does with the next restart job.
#[derive(Debug, Clone, Copy)]
pub enum Job {
    Done,
    Failed,
    Timeout,
    /// A stop is requested while the job is queued behind the agent's own stop.
    StopWhileQueued,
    /// A stop is requested while the job runs.
    StopWhileRunning,
}

pub struct FakeManager {
    pub jobs: Mutex<VecDeque<Job>>,
    /// Active states reported after each restart, in order (then "active").
    pub states: Mutex<VecDeque<&'static str>>,
    pub calls: Mutex<Vec<String>>,
    pub stop: Stop,
    /// Request a stop at the first status query (during verification).
    pub stop_on_status: bool,
}

impl FakeManager {
    pub fn new(jobs: &[Job], stop: &Stop) -> Self {
        FakeManager {
            jobs: Mutex::new(jobs.iter().copied().collect()),
            states: Mutex::default(),
            calls: Mutex::default(),
            stop: stop.clone(),
            stop_on_status: false,
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl UnitReader for FakeManager {
    fn status(&self, _unit: &str) -> Result<UnitStatus, SystemdError> {
        if self.stop_on_status {
            self.stop.request();
        }
        let state = self.states.lock().unwrap().pop_front().unwrap_or("active");
        Ok(UnitStatus {
            active_state: UnitState::parse(state),
            main_pid: 42,
            limit_memlock: None,
            started: None,
        })
    }
}

impl ServiceManager for FakeManager {
    fn reload(&self) -> Result<(), SystemdError> {
        self.calls.lock().unwrap().push("reload".into());
        Ok(())
    }

    fn restart(&self, unit: &str, timeout: Duration, stop: &Stop) -> Result<(), SystemdError> {
        self.calls.lock().unwrap().push(format!("restart {unit}"));
        let job = self.jobs.lock().unwrap().pop_front().unwrap_or(Job::Done);
        let unit = unit.to_owned();
        match job {
            Job::Done => Ok(()),
            Job::Failed => Err(SystemdError::JobFailed {
                unit,
                job: "restart",
                result: "failed".into(),
            }),
            Job::Timeout => Err(SystemdError::JobTimeout {
                unit,
                job: "restart",
                timeout,
            }),
            Job::StopWhileQueued | Job::StopWhileRunning => {
                self.stop.request();
                assert!(stop.requested(), "the executor passes its stop token");
                Err(SystemdError::Stopped {
                    unit,
                    job: "restart",
                    cancelled: matches!(job, Job::StopWhileQueued),
                })
            }
        }
    }

    fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        _timeout: Duration,
        _stop: &Stop,
    ) -> Result<(), SystemdError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("run {unit}: {}", argv.join(" ")));
        Ok(())
    }

    fn run_privileged_helper(
        &self,
        helper: crate::host::service::PrivilegedHelper,
        unit: &str,
        argv: &[String],
        _timeout: Duration,
        _stop: &Stop,
    ) -> Result<(), SystemdError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("helper {helper:?} {unit}: {}", argv.join(" ")));
        Ok(())
    }
}

/// The live host's generic capabilities: programs are found under /usr/sbin;
/// each run prints the next of `outputs`, then `stdout`; no RDMA netlink.
pub struct FakeHost {
    pub host: Host,
    pub outputs: Mutex<VecDeque<Result<Vec<u8>, CommandError>>>,
    pub stdout: Vec<u8>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost {
            host: Host::new("/nonexistent-fake-root"),
            outputs: Mutex::default(),
            stdout: Vec::new(),
        }
    }
}

impl LiveHost for FakeHost {
    fn files(&self) -> LiveFiles<'_> {
        LiveFiles::new(&self.host)
    }
    fn rdma_netlink(&self) -> Result<Box<dyn RdmaNetlink>, NetlinkError> {
        Err(NetlinkError::Unavailable(
            nix::errno::Errno::EPROTONOSUPPORT,
        ))
    }
    fn which(&self, program: &str) -> Option<PathBuf> {
        Some(PathBuf::from("/usr/sbin").join(program))
    }
    fn run(&self, _argv: &[String]) -> Result<Vec<u8>, CommandError> {
        let next = self.outputs.lock().unwrap().pop_front();
        next.unwrap_or_else(|| Ok(self.stdout.clone()))
    }
}

/// What a fake was told to answer, as an error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Told(pub String);

/// A restarted unit's health, answered as told, in order (then healthy).
#[derive(Debug, Default)]
pub struct FakeProbe {
    pub answers: Mutex<VecDeque<Result<(), String>>>,
}

impl Probe for FakeProbe {
    fn healthy(&self, _cx: &LiveCtx) -> Result<(), Unhealthy> {
        let next = self.answers.lock().unwrap().pop_front();
        next.unwrap_or(Ok(())).map_err(|e| Unhealthy::new(Told(e)))
    }
}

/// An effect that always fails, as a refused kernel switch does.
#[derive(Debug)]
pub struct FailingEffect;

impl Effect for FailingEffect {
    fn key(&self) -> EffectKey {
        EffectKey::new("failing", "")
    }
    fn describe(&self) -> String {
        "switch something the kernel refuses".into()
    }
    fn run(&self, _cx: &LiveCtx) -> Result<Ran, EffectError> {
        Err(EffectError::new(Told("EBUSY".into())))
    }
}
