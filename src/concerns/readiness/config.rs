//! The `[kubelet]` section: what the kubelet should advertise of this node's
//! RDMA devices (the `kubelet.devices` cross-check).

use crate::config::section::{Invalid, Section, absolute};
use std::path::PathBuf;

use serde::Deserialize;

use crate::config::Severity;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeletConfig {
    /// Cross-check what the kubelet advertises at all.
    pub enabled: bool,
    /// The kubelet's device-plugin directory: its checkpoint and the plugins' sockets.
    pub device_plugins_dir: PathBuf,
    /// Resource names (globs) that stand for RDMA devices.
    #[serde(deserialize_with = "crate::config::globs::rdma_resources")]
    pub rdma_resources: Vec<String>,
    /// Other resources to report (their device counts), e.g. GPUs.
    #[serde(deserialize_with = "crate::config::globs::report_resources")]
    pub report_resources: Vec<String>,
    /// Resources that must be registered with at least one healthy device.
    #[serde(deserialize_with = "crate::config::globs::expected_resources")]
    pub expected_resources: Vec<String>,
    /// How a mismatch between the host's RDMA ports and the kubelet's RDMA
    /// resources is reported (ports up but no resource, or the reverse).
    pub mismatch: Severity,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            enabled: true,
            device_plugins_dir: "/var/lib/kubelet/device-plugins".into(),
            rdma_resources: vec!["rdma/*".into()],
            report_resources: vec!["nvidia.com/gpu".into()],
            expected_resources: Vec::new(),
            mismatch: Severity::Warn,
        }
    }
}

impl Section for KubeletConfig {
    const NAME: &'static str = "kubelet";
    fn validate(&self) -> Result<(), Invalid> {
        absolute("device_plugins_dir", &self.device_plugins_dir)
    }
}
