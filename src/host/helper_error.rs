//! Why the daemon got no answer from one of its privileged helpers (the
//! transient units systemd runs for it: `host::pci_helper`), or what the
//! helper itself refused.

use std::path::PathBuf;

use super::HostError;
use super::service::SystemdError;

/// Why a helper's run gave no answer, or what the helper said.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("cannot tell its own program: {0}")]
    OwnExe(#[source] std::io::Error),
    #[error("cannot create {}: {source}", .dir.display())]
    AnswerDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the helper unit {unit} failed: {source} (see `journalctl -u {unit}`)")]
    Unit {
        unit: String,
        #[source]
        source: SystemdError,
    },
    #[error("the helper unit {unit} left no answer")]
    NoAnswer { unit: String },
    #[error("cannot read the helper's answer: {0}")]
    Unreadable(#[source] HostError),
    #[error("the helper's answer does not parse: {0}")]
    Garbled(#[source] serde_json::Error),
    /// The helper's own refusal (it crossed the process boundary as text).
    #[error("{0}")]
    Refused(String),
}
