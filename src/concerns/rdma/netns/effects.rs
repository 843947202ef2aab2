//! rdma.netns's live effects: the switch over RDMA netlink and the initramfs
//! rebuild. Each is one `Effect`; the executor only runs them.

use std::time::Duration;

use super::*;
use crate::engine::effect::{CommandError, Effect, EffectError, EffectKey, LiveCtx, Ran};
use crate::host::service::SystemdError;

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

    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError> {
        let mut nl = cx.host.rdma_netlink().map_err(EffectError::new)?;
        // A fresh snapshot: on EBUSY it names what holds a namespace now.
        let snap = cx.host.files().snapshot();
        set_live(&snap, &self.cfg, nl.as_mut(), self.mode).map_err(EffectError::new)
    }
}

/// Why the initramfs was not rebuilt, and by which command.
#[derive(Debug, thiserror::Error)]
pub enum InitramfsError {
    #[error("empty initramfs command")]
    Empty,
    #[error("{program} is not installed")]
    NotInstalled { program: String },
    #[error("`{shown}`: {source}; see `journalctl -u {INITRAMFS_UNIT}`")]
    Unit {
        shown: String,
        #[source]
        source: SystemdError,
    },
    #[error("`{shown}` {source}")]
    Command {
        shown: String,
        #[source]
        source: CommandError,
    },
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
    fn run(&self, cx: &LiveCtx) -> Result<Ran, EffectError> {
        self.rebuild(cx).map_err(EffectError::new)
    }
}

impl RebuildInitramfs {
    fn rebuild(&self, cx: &LiveCtx) -> Result<Ran, InitramfsError> {
        let Some((program, args)) = self.command.split_first() else {
            return Err(InitramfsError::Empty);
        };
        let shown = self.command.join(" ");
        let Some(path) = cx.host.which(program) else {
            return Err(InitramfsError::NotInstalled {
                program: program.clone(),
            });
        };
        let mut argv = vec![path.display().to_string()];
        argv.extend(args.iter().cloned());
        match cx.manager {
            Some(m) => m
                .run_transient(INITRAMFS_UNIT, &argv, INITRAMFS_TIMEOUT, cx.stop)
                .map_err(|source| InitramfsError::Unit {
                    shown: shown.clone(),
                    source,
                })?,
            None => {
                cx.host
                    .run(&argv)
                    .map_err(|source| InitramfsError::Command {
                        shown: shown.clone(),
                        source,
                    })?;
            }
        }
        Ok(Ran::done(format!("`{shown}` succeeded")))
    }
}
