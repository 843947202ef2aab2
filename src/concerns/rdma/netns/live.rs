//! rdma.netns: the live switch over RDMA netlink.

use super::*;
use crate::engine::effect::Ran;

/// Why the live switch did not take.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("the kernel acknowledged {asked} but reports {found}")]
    NotTaken { asked: NetnsMode, found: NetnsMode },
    #[error("set {mode}, but cannot read it back: {source}")]
    Unverified {
        mode: NetnsMode,
        #[source]
        source: NetlinkError,
    },
    #[error(transparent)]
    Refused(NetlinkError),
}

/// Switches the live mode and verifies it. On EBUSY names what blocks it: the
/// mode is persisted by the same apply, so it takes effect at the next boot.
pub fn set_live(
    host: &Snapshot,
    cfg: &RdmaConfig,
    nl: &mut dyn RdmaNetlink,
    mode: NetnsMode,
) -> Result<Ran, SwitchError> {
    match nl.set_netns_mode(mode) {
        Ok(()) => match nl.get_netns_mode() {
            Ok(m) if m == mode => Ok(Ran::done(format!("the RDMA netns mode is now {mode}"))),
            Ok(found) => Err(SwitchError::NotTaken { asked: mode, found }),
            Err(source) => Err(SwitchError::Unverified { mode, source }),
        },
        Err(e @ NetlinkError::Busy(_)) => {
            let blockers = namespaces(host)
                .map(|n| describe(&n))
                .unwrap_or_else(|e| format!("cannot list them: {e}"));
            Ok(Ran::pending(format!(
                "pending reboot: {e}: {}; {mode} is persisted in {} and applies at the next boot",
                if blockers.is_empty() {
                    "none visible in /proc or /run/netns (held by open files or bind mounts elsewhere)".to_owned()
                } else {
                    blockers
                },
                cfg.modprobe_file.display()
            )))
        }
        Err(e) => Err(SwitchError::Refused(e)),
    }
}
