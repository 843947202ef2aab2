//! What can go wrong clearing or restoring ACS, each error naming the bridge
//! and the file or register it concerns; the texts are the ones `apply` and
//! `revert` print.

use std::path::PathBuf;

use crate::host::HostError;
use crate::host::pci_config::PciConfigError;

/// The record's bytes do not hold a record.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0:?} is not a PCI address")]
    NotBdf(String),
}

/// The record (`gpudirect-acs.json`) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(
        "{} does not parse ({source}): it says what to restore, so nothing is written; fix it, or remove it once the bridges are as they should be",
        .path.display()
    )]
    Unparsable {
        path: PathBuf,
        #[source]
        source: ParseError,
    },
    #[error("cannot read the ACS record: {0}")]
    Unreadable(#[source] HostError),
}

/// The record could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Write(#[from] HostError),
}

/// Config space could not be reached, read or written.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(
        "writing PCI config space needs CAP_SYS_ADMIN, and there is no systemd to run the agent's helper: run it as root"
    )]
    NoPrivilege,
    #[error(transparent)]
    Direct(#[from] PciConfigError),
    /// What the privileged helper's run said (its unit, its answer).
    #[error("{0}")]
    Helper(String),
}

/// Why an ACS effect failed, on which bridge.
#[derive(Debug, thiserror::Error)]
pub enum AcsError {
    #[error("{bdf}: {source}")]
    Record {
        bdf: String,
        #[source]
        source: RecordError,
    },
    #[error("{bdf}: {source}")]
    Access {
        bdf: String,
        #[source]
        source: AccessError,
    },
    #[error(
        "{bdf}: cannot record ACSCtl {ctl:#06x} for revert in {}: {source}; nothing written",
        .path.display()
    )]
    NotRecorded {
        bdf: String,
        ctl: u16,
        path: PathBuf,
        #[source]
        source: SaveError,
    },
    /// The identity-checked write itself (its error names the bridge).
    #[error("{source}")]
    Write {
        bdf: String,
        #[source]
        source: AccessError,
    },
    /// Restored, but the record could not be brought up to date.
    #[error("{done}; {source}")]
    RecordAfter {
        done: String,
        #[source]
        source: RecordError,
    },
    #[error("{done}; cannot update {}: {source}", .path.display())]
    NotUpdated {
        done: String,
        path: PathBuf,
        #[source]
        source: SaveError,
    },
    /// `revert` facing a record it cannot read (why, as it was found).
    #[error("{0}")]
    Broken(String),
}
