//! What can go wrong clearing or restoring ACS, each error naming the bridge
//! and the file or register it concerns; the texts are the ones `apply` and
//! `revert` print.

use std::path::PathBuf;

use crate::host::HostError;
use crate::host::live_files::PciAccessError;

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

/// Why an ACS effect failed, on which bridge.
#[derive(Debug, thiserror::Error)]
pub enum AcsError {
    #[error("{bdf}: {source}")]
    Record {
        bdf: String,
        #[source]
        source: Box<RecordError>,
    },
    #[error("{bdf}: {source}")]
    Access {
        bdf: String,
        #[source]
        source: PciAccessError,
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
        source: Box<SaveError>,
    },
    /// The identity-checked write itself (its error names the bridge).
    #[error("{source}")]
    Write {
        bdf: String,
        #[source]
        source: PciAccessError,
    },
    /// Restored, but the record could not be brought up to date.
    #[error("{done}; {source}")]
    RecordAfter {
        done: String,
        #[source]
        source: Box<RecordError>,
    },
    #[error("{done}; cannot update {}: {source}", .path.display())]
    NotUpdated {
        done: String,
        path: PathBuf,
        #[source]
        source: Box<SaveError>,
    },
    /// `revert` facing a record it cannot read (why, as it was found).
    #[error("{0}")]
    Broken(String),
}
