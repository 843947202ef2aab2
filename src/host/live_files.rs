//! What an effect may do to the host beyond running programs: read its files,
//! write the agent's own state and journal, and reach PCI config space. Handed
//! to effects in place of the whole `Host`, so an effect cannot write a
//! managed file behind the ledger's back (those go through the plan) nor
//! anything else the host layer can.

use super::Host;
use super::helper_error::HelperError;
use super::pci_config::{AcsRequest, AcsWrite, PciConfigError};
use super::pci_helper::{self, Helper};
use super::read::ReadHost;
use super::service::ServiceManager;
use super::snapshot::Snapshot;
use super::state_writer::StateWriter;

/// The live host's files as an effect sees them.
#[derive(Clone, Copy)]
pub struct LiveFiles<'a> {
    host: &'a Host,
}

impl<'a> LiveFiles<'a> {
    pub fn new(host: &'a Host) -> Self {
        LiveFiles { host }
    }

    /// A read-only view, for a fact read fresh at the moment of acting.
    pub fn reader(&self) -> ReadHost {
        self.host.reader()
    }

    /// A fresh snapshot (what holds a namespace now, say).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.host.clone())
    }

    /// The agent's own state (a record of what it changed, its journal).
    pub fn state(&self) -> StateWriter<'a> {
        StateWriter::new(self.host)
    }

    /// PCI config space: by this process where it may (root with
    /// CAP_SYS_ADMIN, or a tree), else by the privileged helper systemd runs.
    pub fn pci(
        &self,
        manager: Option<&'a dyn ServiceManager>,
    ) -> std::result::Result<PciAccess<'a>, PciAccessError> {
        let host = self.host;
        let cap = pci_helper::has_cap_sys_admin();
        // A manager on a tree is a test's systemd: it runs the helper on the tree.
        match manager {
            Some(m) if !cap || !host.is_live() => Helper::new(m, host)
                .map(PciAccess::Helper)
                .map_err(PciAccessError::Helper),
            _ if cap || !host.is_live() => Ok(PciAccess::Direct(host)),
            _ => Err(PciAccessError::NoPrivilege),
        }
    }
}

/// Why PCI config space could not be reached, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PciAccessError {
    #[error(
        "writing PCI config space needs CAP_SYS_ADMIN, and there is no systemd to run the agent's helper: run it as root"
    )]
    NoPrivilege,
    #[error(transparent)]
    Direct(#[from] PciConfigError),
    #[error(transparent)]
    Helper(#[from] HelperError),
}

/// How config space is reached.
pub enum PciAccess<'a> {
    Direct(&'a Host),
    Helper(Helper<'a>),
}

impl PciAccess<'_> {
    /// The whole config space of one function.
    pub fn read(&self, bdf: &str) -> std::result::Result<Vec<u8>, PciAccessError> {
        match self {
            PciAccess::Direct(h) => Ok(h.pci_config_of(bdf)?),
            PciAccess::Helper(h) => h.read(&[bdf.to_owned()])?.remove(bdf).map_or_else(
                || Err(HelperError::Refused("no answer".into()).into()),
                |one| one.map_err(|e| HelperError::Refused(e).into()),
            ),
        }
    }

    /// One identity-checked ACSCtl write.
    pub fn write_acs(&self, r: &AcsRequest) -> std::result::Result<AcsWrite, PciAccessError> {
        match self {
            PciAccess::Direct(h) => Ok(h.write_acs_checked(r)?),
            PciAccess::Helper(h) => Ok(h.write_acs(r)?),
        }
    }
}
