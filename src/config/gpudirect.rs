//! The `[gpudirect]` section, the one place that says GPUDirect is required:
//! whether `gpudirect.path` runs, which GPUs must have a working GPUDirect
//! RDMA path to their nearest NIC, which GPUDirect modules must be loaded, and
//! whether `apply` clears the ACS redirect bits on those paths.

use crate::config::section::Invalid;
use serde::Deserialize;

use super::rdma::GpuDirectModule;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuDirectConfig {
    /// Report the GPU↔NIC paths at all (on by default; skipped without GPUs).
    pub enabled: bool,
    /// Every GPU must have a ready path: otherwise the check fails, not warns.
    pub required: bool,
    /// Only these GPUs (PCI addresses, `0000:1b:00.0`) must.
    pub required_gpus: Vec<String>,
    /// GPUDirect modules that must be loaded when NVIDIA GPUs are present
    /// (`rdma.devices` fails without them).
    pub required_modules: Vec<GpuDirectModule>,
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
            required_modules: Vec::new(),
            acs: AcsMode::Report,
        }
    }
}

impl super::section::Section for GpuDirectConfig {
    const NAME: &'static str = "gpudirect";
    fn validate(&self) -> Result<(), Invalid> {
        // Compared with sysfs' names: the full, lowercase form, or never matched.
        let full = |g: &str| {
            let b = g.as_bytes();
            b.len() == 12
                && [4, 7].iter().all(|&i| b[i] == b':')
                && b[10] == b'.'
                && (b'0'..=b'7').contains(&b[11])
                && b.iter()
                    .enumerate()
                    .filter(|(i, _)| ![4, 7, 10, 11].contains(i))
                    .all(|(_, c)| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        };
        match self.required_gpus.iter().find(|g| !full(g)) {
            Some(g) => Err(Invalid::new(
                "required_gpus",
                format!(
                    "{g:?} is not a PCI address as sysfs writes it: domain:bus:device.function in lowercase hex, e.g. \"0000:1b:00.0\""
                ),
            )),
            None => Ok(()),
        }
    }
}
