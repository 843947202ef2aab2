//! The RDMA concerns: the device and port inventory (`rdma.devices`, with the
//! GPUDirect modules) and the subsystem's network-namespace mode (`rdma.netns`).
//!
//! gather (sysfs, /proc, modprobe.d under the root) → decide (pure) → checks + plan.

pub mod devices;
pub mod gpudirect;
pub mod netns;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::check::{Check, Status};
use crate::host::{Host, HostError};
use crate::netlink::NetnsMode;
use crate::plan::Plan;
use crate::systemd::ServiceManager;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaConfig {
    /// Report the inventory and netns mode at all.
    pub enabled: bool,
    /// Ports that must be ACTIVE (optionally at a minimum rate).
    pub expect_port: Vec<ExpectPort>,
    /// Link layer (`InfiniBand`, `Ethernet`) → minimum number of ACTIVE ports.
    pub min_active_ports: BTreeMap<String, u32>,
    /// GPUDirect modules that must be loaded when NVIDIA GPUs are present.
    pub gpudirect_required: Vec<GpuDirectModule>,
    pub netns_mode: NetnsSetting,
    /// The agent's own modprobe.d file persisting the mode.
    pub modprobe_file: PathBuf,
    /// What to do when exclusive mode is wanted while the shared device plugin runs.
    pub shared_plugin: PluginPolicy,
    /// File-name globs of the RDMA shared device plugin's sockets (`<resource>.sock`).
    pub shared_plugin_sockets: Vec<String>,
    pub initramfs: InitramfsPolicy,
    /// Also require `ib_core.netns_mode=` on the kernel command line.
    pub check_cmdline: bool,
    /// Create kured's reboot sentinel when only a reboot can apply the mode.
    pub reboot_sentinel: bool,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            enabled: true,
            expect_port: Vec::new(),
            min_active_ports: BTreeMap::new(),
            gpudirect_required: Vec::new(),
            netns_mode: NetnsSetting::Unmanaged,
            modprobe_file: "/etc/modprobe.d/rdma-node-agent.conf".into(),
            shared_plugin: PluginPolicy::Refuse,
            shared_plugin_sockets: vec!["*shared_device*.sock".into(), "*rdma*shared*.sock".into()],
            initramfs: InitramfsPolicy::Report,
            check_cmdline: false,
            reboot_sentinel: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectPort {
    /// A device name or glob (`mlx5_0`, `mlx5_*`).
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

/// Both RDMA checks, the plan, and why a reboot is needed (if it is).
pub struct Assessment {
    pub checks: Vec<Check>,
    pub plan: Result<Plan, HostError>,
    pub reboot_reasons: Vec<String>,
}

pub fn assess(host: &Host, cfg: &RdmaConfig) -> Assessment {
    if !cfg.enabled {
        let off = |id| Check::new(id, Status::Skipped, "disabled in the agent config");
        return Assessment {
            checks: vec![off(devices::CHECK_ID), off(netns::CHECK_ID)],
            plan: Ok(Plan::default()),
            reboot_reasons: Vec::new(),
        };
    }
    let inventory =
        devices::gather(host).map(|raw| raw.into_iter().map(devices::parse).collect::<Vec<_>>());
    let gpu = gpudirect::gather(host).map(|f| gpudirect::decide(&f, &cfg.gpudirect_required));
    let devices_check = match (inventory, gpu) {
        (Ok(devs), Ok(gpu)) => devices::check(&devs, cfg, &gpu),
        (Err(e), _) | (_, Err(e)) => Check::new(devices::CHECK_ID, Status::Unknown, e.to_string()),
    };
    let (netns_check, plan, reboot_reasons) = match netns::gather(host, cfg) {
        Ok(facts) => {
            let d = netns::decide(&facts, cfg);
            (d.check, Ok(d.plan), d.reboot_reason.into_iter().collect())
        }
        Err(e) => (
            Check::new(netns::CHECK_ID, Status::Unknown, e.to_string()),
            Err(e),
            Vec::new(),
        ),
    };
    Assessment {
        checks: vec![devices_check, netns_check],
        plan,
        reboot_reasons,
    }
}

/// Live RDMA actions run only on the live root; elsewhere they are reported as skipped.
fn off_root(host: &Host, reason: &str) -> Option<(&'static str, String)> {
    (!host.is_live()).then(|| {
        (
            "skipped",
            format!(
                "--root {} is not the live host ({reason})",
                host.root().display()
            ),
        )
    })
}

/// Switches the live mode over a real netlink socket. Returns (status, detail).
pub fn set_netns_mode(
    host: &Host,
    cfg: &RdmaConfig,
    mode: NetnsMode,
    reason: &str,
) -> (&'static str, String) {
    if let Some(skipped) = off_root(host, reason) {
        return skipped;
    }
    match crate::netlink::Socket::open() {
        Ok(mut socket) => netns::set_live(host, cfg, &mut socket, mode),
        Err(e) => ("failed", e.to_string()),
    }
}

/// The transient unit an initramfs rebuild runs as; its output is in its journal.
pub const INITRAMFS_UNIT: &str = "rdma-node-agent-initramfs.service";

/// Generous: dracut with every module of a kernel takes minutes on a slow disk.
const INITRAMFS_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `update-initramfs -u` or `dracut -f` (as the decision chose). With systemd,
/// as a transient unit of its own: in the agent's sandbox (read-only /boot, no
/// chown in the system call filter) it cannot write the image. Returns (status, detail).
pub fn rebuild_initramfs(
    host: &Host,
    manager: Option<&dyn ServiceManager>,
    command: &[String],
    reason: &str,
) -> (&'static str, String) {
    if let Some(skipped) = off_root(host, reason) {
        return skipped;
    }
    let Some((program, args)) = command.split_first() else {
        return ("failed", "empty initramfs command".into());
    };
    let shown = command.join(" ");
    let Some(path) = host.which(program) else {
        return ("failed", format!("{program} is not installed"));
    };
    if let Some(m) = manager {
        let mut argv = vec![path.display().to_string()];
        argv.extend(args.iter().cloned());
        return match m.run_transient(INITRAMFS_UNIT, &argv, INITRAMFS_TIMEOUT) {
            Ok(()) => ("done", reason.to_owned()),
            Err(e) => (
                "failed",
                format!("`{shown}`: {e}; see `journalctl -u {INITRAMFS_UNIT}`"),
            ),
        };
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match host.run(program, &args) {
        Some(Ok(o)) if o.status.success() => ("done", reason.to_owned()),
        Some(Ok(o)) => (
            "failed",
            format!(
                "`{shown}` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ),
        Some(Err(e)) => ("failed", format!("`{shown}`: {e}")),
        None => ("failed", format!("{program} is not installed")),
    }
}
