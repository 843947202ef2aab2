//! systemd: the LimitMEMLOCK drop-in concern, and the live service manager the
//! agent restarts units through (D-Bus in production, a fake in unit tests).

pub mod dbus;
pub mod dropin;

use std::time::{Duration, SystemTime};

#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("cannot reach systemd over D-Bus: {0}")]
    Connect(String),
    #[error("D-Bus call {call} failed: {message}")]
    Call { call: String, message: String },
    #[error("{unit}: {job} job finished with result {result:?}")]
    JobFailed {
        unit: String,
        job: &'static str,
        result: String,
    },
    #[error("{unit}: {job} job did not finish within {timeout:?}")]
    JobTimeout {
        unit: String,
        job: &'static str,
        timeout: Duration,
    },
}

/// What the agent needs to know of a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStatus {
    pub active_state: String,
    pub main_pid: u32,
    /// systemd's `LimitMEMLOCK` for the unit (u64::MAX is infinity).
    pub limit_memlock: Option<u64>,
    /// When the unit's main process was started (`ExecMainStartTimestamp`).
    pub started: Option<SystemTime>,
}

/// The live actions on systemd, kept narrow so the orchestration is testable.
pub trait ServiceManager: Send + Sync {
    fn reload(&self) -> Result<(), SystemdError>;
    /// Restarts a unit and waits for its job to finish with result `done`.
    fn restart(&self, unit: &str, timeout: Duration) -> Result<(), SystemdError>;
    fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError>;
    /// Runs `argv` to completion as a transient oneshot service named `unit`: a
    /// host command that must not inherit the agent's sandbox (an initramfs
    /// rebuild writes /boot and reads every module). Its output is in the journal.
    fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        timeout: Duration,
    ) -> Result<(), SystemdError>;
}
