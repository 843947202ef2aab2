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
    #[error("{unit}: restart job finished with result {result:?}")]
    JobFailed { unit: String, result: String },
    #[error("{unit}: restart job did not finish within {0:?}", .timeout)]
    JobTimeout { unit: String, timeout: Duration },
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
}
