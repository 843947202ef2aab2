//! The `[gpudirect]` section: whether `gpudirect.path` runs, which GPUs
//! must have a working GPUDirect RDMA path to their nearest NIC, and whether
//! `apply` clears the ACS redirect bits on those paths.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuDirectConfig {
    /// Report the GPU↔NIC paths at all (on by default; skipped without GPUs).
    pub enabled: bool,
    /// Every GPU must have a ready path: otherwise the check fails, not warns.
    pub required: bool,
    /// Only these GPUs (PCI addresses, `0000:1b:00.0`) must.
    pub required_gpus: Vec<String>,
    /// `report` (default): only say where ACS redirects peer-to-peer;
    /// `disable`: `apply` (and the daemon, after every boot) clears ACSCtl on
    /// the bridges of each GPU↔NIC path, `revert` writes the old values back.
    pub acs: AcsMode,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcsMode {
    #[default]
    Report,
    Disable,
}

impl Default for GpuDirectConfig {
    fn default() -> Self {
        GpuDirectConfig {
            enabled: true,
            required: false,
            required_gpus: Vec::new(),
            acs: AcsMode::Report,
        }
    }
}
