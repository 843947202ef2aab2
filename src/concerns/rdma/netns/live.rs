//! rdma.netns: the live switch over RDMA netlink.

use super::*;

/// Switches the live mode and verifies it. On EBUSY names what blocks it: the
/// mode is persisted by the same apply, so it takes effect at the next boot.
pub fn set_live(
    host: &Snapshot,
    cfg: &RdmaConfig,
    nl: &mut dyn RdmaNetlink,
    mode: NetnsMode,
) -> (ActionStatus, String) {
    match nl.set_netns_mode(mode) {
        Ok(()) => match nl.get_netns_mode() {
            Ok(m) if m == mode => (
                ActionStatus::Done,
                format!("the RDMA netns mode is now {mode}"),
            ),
            Ok(m) => (
                ActionStatus::Failed,
                format!("the kernel acknowledged {mode} but reports {m}"),
            ),
            Err(e) => (
                ActionStatus::Failed,
                format!("set {mode}, but cannot read it back: {e}"),
            ),
        },
        Err(e @ NetlinkError::Busy(_)) => {
            let blockers = namespaces(host)
                .map(|n| describe(&n))
                .unwrap_or_else(|e| format!("cannot list them: {e}"));
            (
                ActionStatus::Pending,
                format!(
                    "pending reboot: {e}: {}; {mode} is persisted in {} and applies at the next boot",
                    if blockers.is_empty() {
                        "none visible in /proc or /run/netns (held by open files or bind mounts elsewhere)".to_owned()
                    } else {
                        blockers
                    },
                    cfg.modprobe_file.display()
                ),
            )
        }
        Err(e) => (ActionStatus::Failed, e.to_string()),
    }
}
