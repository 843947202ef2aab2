//! The `[gpudirect]` section: whether `gpudirect.path` runs and which GPUs
//! must have a working GPUDirect RDMA path to their nearest NIC.

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
}

impl Default for GpuDirectConfig {
    fn default() -> Self {
        GpuDirectConfig {
            enabled: true,
            required: false,
            required_gpus: Vec::new(),
        }
    }
}
