//! The `[rdma]` section of the agent config: what the RDMA concerns expect of
//! the devices and which netns mode they keep.

use crate::config::section::Invalid;
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::host::netlink::NetnsMode;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaConfig {
    /// Report the inventory and netns mode at all.
    pub enabled: bool,
    /// Ports that must be ACTIVE (optionally at a minimum rate).
    pub expect_port: Vec<ExpectPort>,
    /// Ports that are down by design (one cable on a dual-port card), as
    /// `device/port` globs (`mlx5_1/2`, `mlx5_bond_*/*`): not warned about when
    /// no expectations are configured.
    #[serde(deserialize_with = "super::globs::ignore_ports")]
    pub ignore_ports: Vec<String>,
    /// Link layer (`InfiniBand`, `Ethernet`) → minimum number of ACTIVE ports.
    pub min_active_ports: BTreeMap<String, u32>,
    /// No longer read: `[gpudirect] required_modules` (taken from here, with
    /// a warning, by `Config::migrate`).
    pub gpudirect_required: Option<Vec<GpuDirectModule>>,
    pub netns_mode: NetnsSetting,
    /// The agent's own modprobe.d file persisting the mode.
    pub modprobe_file: PathBuf,
    /// What to do when exclusive mode is wanted while the shared device plugin runs.
    pub shared_plugin: PluginPolicy,
    /// File-name globs of the RDMA shared device plugin's sockets (`<resource>.sock`).
    #[serde(deserialize_with = "super::globs::shared_plugin_sockets")]
    pub shared_plugin_sockets: Vec<String>,
    pub initramfs: InitramfsPolicy,
    /// Also require `ib_core.netns_mode=` on the kernel command line.
    pub check_cmdline: bool,
    /// Create kured's reboot sentinel when only a reboot can apply the mode.
    pub reboot_sentinel: bool,
    /// `rdma.link` warns when a port flapped more than this many times…
    pub flap_threshold: u32,
    /// …within this window (`"1h"`, `"30m"`, `"1d"`, `"90s"`), in seconds.
    #[serde(rename = "flap_window", deserialize_with = "window")]
    pub flap_window_secs: u64,
}

/// `"<n>s"`, `"<n>m"`, `"<n>h"` or `"<n>d"`, at least a second.
fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    parse_window(&text).map_err(serde::de::Error::custom)
}

pub fn parse_window(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (n, unit) = t.split_at(t.len().saturating_sub(1));
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => 0,
    };
    match n.parse::<u64>() {
        Ok(n) if scale > 0 && n > 0 => n
            .checked_mul(scale)
            .ok_or_else(|| format!("flap_window {text:?} is too long")),
        _ => Err(format!(
            "flap_window {text:?} is not a duration: a whole number with s, m, h or d (\"1h\")"
        )),
    }
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            enabled: true,
            expect_port: Vec::new(),
            ignore_ports: Vec::new(),
            min_active_ports: BTreeMap::new(),
            gpudirect_required: None,
            netns_mode: NetnsSetting::Unmanaged,
            modprobe_file: "/etc/modprobe.d/rdma-node-agent.conf".into(),
            shared_plugin: PluginPolicy::Refuse,
            shared_plugin_sockets: vec!["*shared_device*.sock".into(), "*rdma*shared*.sock".into()],
            initramfs: InitramfsPolicy::Report,
            check_cmdline: false,
            reboot_sentinel: false,
            flap_threshold: 3,
            flap_window_secs: 3600,
        }
    }
}

#[cfg(test)]
mod window_tests {
    #[test]
    fn windows_parse_with_their_unit() {
        use super::parse_window as p;
        assert_eq!(p("1h"), Ok(3600));
        assert_eq!(p("30m"), Ok(1800));
        assert_eq!(p("90s"), Ok(90));
        assert_eq!(p("2d"), Ok(172_800));
        for bad in ["", "h", "0h", "1", "1w", "-1h", "1.5h"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectPort {
    /// A device name or glob (`mlx5_0`, `mlx5_*`).
    #[serde(deserialize_with = "super::globs::expect_port_device")]
    pub device: String,
    /// One port; every port of the device when absent.
    pub port: Option<u32>,
    /// In Gb/s.
    pub min_rate_gbps: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetnsSetting {
    Exclusive,
    Shared,
    Unmanaged,
}

impl NetnsSetting {
    pub fn wanted(self) -> Option<NetnsMode> {
        match self {
            NetnsSetting::Exclusive => Some(NetnsMode::Exclusive),
            NetnsSetting::Shared => Some(NetnsMode::Shared),
            NetnsSetting::Unmanaged => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginPolicy {
    Refuse,
    Warn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitramfsPolicy {
    Report,
    Rebuild,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuDirectModule {
    NvidiaPeermem,
    Gdrdrv,
}

impl GpuDirectModule {
    pub fn name(self) -> &'static str {
        match self {
            GpuDirectModule::NvidiaPeermem => "nvidia_peermem",
            GpuDirectModule::Gdrdrv => "gdrdrv",
        }
    }
}

impl super::section::Section for RdmaConfig {
    const NAME: &'static str = "rdma";
    fn validate(&self) -> Result<(), Invalid> {
        super::section::absolute("modprobe_file", &self.modprobe_file)?;
        // modprobe reads only *.conf under modprobe.d (modprobe.d(5)): any
        // other name would persist nothing, silently.
        if self.modprobe_file.extension().is_none_or(|e| e != "conf") {
            return Err(Invalid::new(
                "modprobe_file",
                format!(
                    "{} must end in .conf: modprobe reads no other file in modprobe.d",
                    self.modprobe_file.display()
                ),
            ));
        }
        if let Some(p) = self.expect_port.iter().find(|p| p.device.is_empty()) {
            return Err(Invalid::new(
                "expect_port",
                format!("an entry has no device (port {:?})", p.port),
            ));
        }
        Ok(())
    }
}
