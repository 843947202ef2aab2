//! Why a check is not `ok`, as a stable machine-readable code: one per non-ok
//! check result, in `--json`, `/status` and the `rdma_node_agent_check_reason`
//! series, so a fleet can be grouped by it. Codes are never renamed; each is
//! documented in docs/reasons.md (`tests/docs.rs` holds that).

use serde::{Deserialize, Serialize};

macro_rules! reasons {
    ($($variant:ident => $code:literal,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Reason {
            $($variant,)*
        }

        impl Reason {
            /// Every code, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The code as `--json` and the metrics label spell it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $code,)*
                }
            }
        }
    };
}

reasons! {
    // Catch-alls.
    FactUnreadable => "fact_unreadable",
    AgentStateUnreadable => "agent_state_unreadable",
    DependencyUnknown => "dependency_unknown",
    PathNotWritable => "path_not_writable",
    // containerd.memlock
    ConfigUnreadable => "config_unreadable",
    ContainerdAbsent => "containerd_absent",
    HandlerNotDefined => "handler_not_defined",
    CriDisabled => "cri_disabled",
    NoBaseSpec => "no_base_spec",
    BaseSpecNotApplied => "base_spec_not_applied",
    ContainerdUnconfirmed => "containerd_unconfirmed",
    ContainerdNotRestarted => "containerd_not_restarted",
    ContainerdNotRunning => "containerd_not_running",
    HandlerUnmanaged => "handler_unmanaged",
    ContainerdConfigWarning => "containerd_config_warning",
    // containerd.nri
    NriUnavailable => "nri_unavailable",
    NriPluginNotRunning => "nri_plugin_not_running",
    NriPluginNotRegistered => "nri_plugin_not_registered",
    NriBaseSpecUnknown => "nri_base_spec_unknown",
    // systemd.memlock, pods.memlock
    DropinMissing => "dropin_missing",
    DaemonReloadPending => "daemon_reload_pending",
    UnitNotActive => "unit_not_active",
    MemlockBelowTarget => "memlock_below_target",
    // pods.rdma
    RdmaPodNoIpcLock => "rdma_pod_no_ipc_lock",
    RdmaPodLowMemlock => "rdma_pod_low_memlock",
    // rdma.devices
    NoRdmaDevices => "no_rdma_devices",
    NoActivePort => "no_active_port",
    PortDown => "port_down",
    PortNotActive => "port_not_active",
    PortRateBelowExpected => "port_rate_below_expected",
    TooFewActivePorts => "too_few_active_ports",
    DeviceWithoutPorts => "device_without_ports",
    DeviceBrokenLink => "device_broken_link",
    GpudirectModuleMissing => "gpudirect_module_missing",
    // rdma.link
    LinkFlapping => "link_flapping",
    // gpudirect.path
    NoGpu => "no_gpu",
    AcsRedirect => "acs_redirect",
    PcieLinkDegraded => "pcie_link_degraded",
    GpuNicDistance => "gpu_nic_distance",
    GpudirectNoMechanism => "gpudirect_no_mechanism",
    // kubelet.devices
    KubeletResourcesZero => "kubelet_resources_zero",
    KubeletResourcesMismatch => "kubelet_resources_mismatch",
    DevicePluginGone => "device_plugin_gone",
    KubeletCheckpointInvalid => "kubelet_checkpoint_invalid",
    // rdma.netns
    NetnsUnsupported => "netns_unsupported",
    NetnsPluginConflict => "netns_plugin_conflict",
    NetnsModeMismatch => "netns_mode_mismatch",
    NetnsBusy => "netns_busy",
    NetnsNotPersisted => "netns_not_persisted",
    NetnsInitramfsStale => "netns_initramfs_stale",
    // kernel.change, kernel.modules, kernel.dkms
    KernelChanged => "kernel_changed",
    ModuleNotLoaded => "module_not_loaded",
    ModuleMismatch => "module_mismatch",
    DkmsNotInstalled => "dkms_not_installed",
    DkmsNotInstalledForPendingKernel => "dkms_not_installed_for_pending_kernel",
    DkmsStatusDisagrees => "dkms_status_disagrees",
    DkmsStatusTimeout => "dkms_status_timeout",
    DkmsStatusFailed => "dkms_status_failed",
    // driver.health
    DevlinkReporterError => "devlink_reporter_error",
    DevlinkErrorsRising => "devlink_errors_rising",
    DevlinkUnavailable => "devlink_unavailable",
    DriverFatalLog => "driver_fatal_log",
    DriverLogWarning => "driver_log_warning",
    KernelLogUnreadable => "kernel_log_unreadable",
    // pcie.aer
    AerFatal => "aer_fatal",
    AerNonfatal => "aer_nonfatal",
    AerCorrectableRising => "aer_correctable_rising",
    PcieLinkRetrainedDown => "pcie_link_retrained_down",
    AerUnavailable => "aer_unavailable",
    // rdma.counters
    SymbolErrors => "symbol_errors",
    LinkIntegrity => "link_integrity",
    RcvErrors => "rcv_errors",
    XmitDiscards => "xmit_discards",
    Retransmits => "retransmits",
    Congestion => "congestion",
    CountersSaturated => "counters_saturated",
    CountersUnreadable => "counters_unreadable",
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_serde_names_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Reason::ALL {
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::Value::String(r.as_str().into())
            );
            assert!(seen.insert(r.as_str()), "{r} twice");
            assert!(
                r.as_str()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
            );
        }
    }
}
