//! The live service manager the agent restarts units through: systemd over
//! D-Bus in production (`dbus`), a fake in unit tests. Kept narrow so that the
//! executor's orchestration is testable.

use std::time::{Duration, SystemTime};

use super::stop::Stop;

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
    /// The agent is stopping: it stopped waiting for the job. A job still
    /// waiting to run (typically on the agent's own stop job, since the agent is
    /// ordered after containerd) was cancelled; one already running was left to
    /// systemd.
    #[error("{unit}: stopped waiting for its {job} job: the agent is stopping{}", if *.cancelled { " (the queued job was cancelled)" } else { " (the job runs on under systemd)" })]
    Stopped {
        unit: String,
        job: &'static str,
        cancelled: bool,
    },
}

/// A unit's `ActiveState`, as systemd names it (org.freedesktop.systemd1(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitState {
    Active,
    Reloading,
    Inactive,
    Failed,
    Activating,
    Deactivating,
    Maintenance,
    Refreshing,
    /// A state this agent does not know (a newer systemd's).
    Other(String),
}

impl UnitState {
    pub fn parse(s: &str) -> UnitState {
        match s {
            "active" => UnitState::Active,
            "reloading" => UnitState::Reloading,
            "inactive" => UnitState::Inactive,
            "failed" => UnitState::Failed,
            "activating" => UnitState::Activating,
            "deactivating" => UnitState::Deactivating,
            "maintenance" => UnitState::Maintenance,
            "refreshing" => UnitState::Refreshing,
            other => UnitState::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            UnitState::Active => "active",
            UnitState::Reloading => "reloading",
            UnitState::Inactive => "inactive",
            UnitState::Failed => "failed",
            UnitState::Activating => "activating",
            UnitState::Deactivating => "deactivating",
            UnitState::Maintenance => "maintenance",
            UnitState::Refreshing => "refreshing",
            UnitState::Other(s) => s,
        }
    }

    /// Running, or on its way there: its process reads its config at start.
    pub fn is_up(&self) -> bool {
        matches!(self, UnitState::Active | UnitState::Activating)
    }
}

impl std::fmt::Display for UnitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the agent needs to know of a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStatus {
    pub active_state: UnitState,
    pub main_pid: u32,
    /// systemd's `LimitMEMLOCK` for the unit (u64::MAX is infinity).
    pub limit_memlock: Option<u64>,
    /// When the unit's main process was started (`ExecMainStartTimestamp`).
    pub started: Option<SystemTime>,
}

/// systemd as a gather may see it: what units are, never an action on them.
/// The snapshot hands concerns only this.
/// The agent's privileged helpers, each a transient unit with only what its
/// job needs (`src/host/dbus.rs` has their sandboxes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrivilegedHelper {
    /// `pci-config`: CAP_SYS_ADMIN, for PCI config space past 64 bytes and ACS writes.
    PciConfig,
    /// `kernel-log`: CAP_SYSLOG and /dev/kmsg, read-only.
    KernelLog,
    /// `selftest` for the return-to-service gate: the RDMA devices, the
    /// network, CAP_SYS_RESOURCE to give perftest the pods' rlimits, and the
    /// agent's state directory for its verdict.
    Selftest,
}

pub trait UnitReader: Send + Sync {
    fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError>;
}

/// The live actions on systemd, kept narrow so the orchestration is testable:
/// only the executor, the effects it runs and the daemon hold one.
pub trait ServiceManager: UnitReader {
    fn reload(&self) -> Result<(), SystemdError>;
    /// Restarts a unit and waits for its job to finish with result `done`; gives
    /// up (cancelling the job while it is still queued) when `stop` is requested.
    fn restart(&self, unit: &str, timeout: Duration, stop: &Stop) -> Result<(), SystemdError>;
    /// Queues a restart of `unit` and returns without waiting for it: how the
    /// agent restarts its own unit (the job stops this very process).
    fn queue_restart(&self, unit: &str) -> Result<(), SystemdError> {
        Err(SystemdError::Call {
            call: "RestartUnit".into(),
            message: format!("{unit}: not supported by this service manager"),
        })
    }
    /// Runs `argv` to completion as a transient oneshot service named `unit`: a
    /// host command that must not inherit the agent's sandbox (an initramfs
    /// rebuild writes /boot and reads every module). Its output is in the journal.
    fn run_transient(
        &self,
        unit: &str,
        argv: &[String],
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), SystemdError>;
    /// `run_transient` for one of the agent's own privileged helpers: systemd
    /// runs it sandboxed, with the one capability and device its job needs.
    fn run_privileged_helper(
        &self,
        helper: PrivilegedHelper,
        unit: &str,
        argv: &[String],
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(), SystemdError> {
        let _ = helper;
        self.run_transient(unit, argv, timeout, stop)
    }
}
