//! rdma.netns's live effects: the switch over RDMA netlink and the initramfs
//! rebuild. Each is one `Effect`; the executor only runs them.

use std::time::Duration;

use super::*;
use crate::engine::effect::{Effect, EffectKey, LiveCtx};

/// The transient unit an initramfs rebuild runs as; its output is in its journal.
pub const INITRAMFS_UNIT: &str = "rdma-node-agent-initramfs.service";

/// Generous: dracut with every module of a kernel takes minutes on a slow disk.
const INITRAMFS_TIMEOUT: Duration = Duration::from_secs(600);

/// Switch the RDMA subsystem's netns mode (the kernel refuses while other
/// network namespaces exist: then the persisted mode waits for the reboot).
#[derive(Debug)]
pub struct SetMode {
    pub mode: NetnsMode,
    pub cfg: RdmaConfig,
}

impl Effect for SetMode {
    fn key(&self) -> EffectKey {
        EffectKey::new("set_rdma_netns_mode", "")
    }

    fn describe(&self) -> String {
        format!("set the RDMA netns mode to {}", self.mode)
    }

    fn run(&self, cx: &LiveCtx) -> (ActionStatus, String) {
        match cx.host.rdma_netlink() {
            // A fresh snapshot: on EBUSY it names what holds a namespace now.
            Ok(mut nl) => set_live(
                &Snapshot::new(cx.host.host().clone()),
                &self.cfg,
                nl.as_mut(),
                self.mode,
            ),
            Err(e) => (ActionStatus::Failed, e),
        }
    }
}

/// Rebuild the initramfs so it carries the agent's modprobe.d options.
#[derive(Debug)]
pub struct RebuildInitramfs {
    pub command: Vec<String>,
}

impl Effect for RebuildInitramfs {
    fn key(&self) -> EffectKey {
        EffectKey::new("rebuild_initramfs", "")
    }

    fn describe(&self) -> String {
        format!("rebuild the initramfs ({})", self.command.join(" "))
    }

    /// With systemd, as a transient unit of its own: in the agent's sandbox
    /// (read-only /boot, no chown in the system call filter) it cannot write the image.
    fn run(&self, cx: &LiveCtx) -> (ActionStatus, String) {
        let Some((program, args)) = self.command.split_first() else {
            return (ActionStatus::Failed, "empty initramfs command".into());
        };
        let shown = self.command.join(" ");
        let Some(path) = cx.host.which(program) else {
            return (ActionStatus::Failed, format!("{program} is not installed"));
        };
        let mut argv = vec![path.display().to_string()];
        argv.extend(args.iter().cloned());
        let result = match cx.manager {
            Some(m) => m
                .run_transient(INITRAMFS_UNIT, &argv, INITRAMFS_TIMEOUT, cx.stop)
                .map_err(|e| format!("`{shown}`: {e}; see `journalctl -u {INITRAMFS_UNIT}`")),
            None => cx
                .host
                .run(&argv)
                .map(|_| ())
                .map_err(|e| format!("`{shown}` {e}")),
        };
        match result {
            Ok(()) => (ActionStatus::Done, format!("`{shown}` succeeded")),
            Err(e) => (ActionStatus::Failed, e),
        }
    }
}
