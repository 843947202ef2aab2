//! The reboot-required sentinel that kured (and unattended-upgrades) use: when a
//! concern can only take effect after a reboot, the agent creates the file so the
//! node is drained and rebooted in turn. Any concern can hold a reboot back (e.g.
//! a kernel whose RDMA modules are missing), which wins over every request.

use std::path::Path;

use crate::config::Config;
use crate::engine::check::CheckId;
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::engine::ledger::Ledger;
use crate::engine::plan::FileChange;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, ObservationKind, Observations};
use crate::reason::Reason;

pub const SENTINEL: &str = "/var/run/reboot-required";
pub const OWNER: &str = "reboot";

/// Why concerns want a reboot, and why some want none now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub reasons: Vec<String>,
    pub hold_back: Vec<String>,
}

/// The change to the sentinel, if any. Pure.
/// `owned`: the agent created the current file (so it may remove it).
pub fn decide(
    enabled: bool,
    req: &Request,
    current: Option<Vec<u8>>,
    owned: bool,
) -> Option<FileChange> {
    let wanted = enabled && !req.reasons.is_empty() && req.hold_back.is_empty();
    match (wanted, current) {
        // kured only tests existence: someone else's sentinel already asks for it.
        (true, Some(_)) => None,
        (true, None) => Some(FileChange {
            path: SENTINEL.into(),
            old: None,
            new: Some(
                format!(
                    "*** System restart required (rdma-node-agent: {}) ***\n",
                    req.reasons.join("; ")
                )
                .into_bytes(),
            ),
            mode: 0o644,
            owner: OWNER,
            reason: format!("reboot required: {}", req.reasons.join("; ")),
            restart: Vec::new(),
        }),
        (false, Some(old)) if owned => Some(FileChange {
            path: SENTINEL.into(),
            old: Some(old),
            new: None,
            mode: 0o644,
            owner: OWNER,
            reason: if req.hold_back.is_empty() {
                "no reboot needed any more".into()
            } else {
                format!("reboot held back: {}", req.hold_back.join("; "))
            },
            restart: Vec::new(),
        }),
        (false, _) => None,
    }
}

/// The sentinel as a concern: registered after the concerns that ask for a
/// reboot or hold one back, whose observations it reads.
pub struct Sentinel;

pub struct Current {
    file: Option<Vec<u8>>,
    owned: bool,
}

impl Concern for Sentinel {
    type Facts = Current;

    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    fn ids(&self) -> &'static [CheckId] {
        &[]
    }

    /// Whoever asks for a reboot or holds one back (`rdma.netns`, `kernel.dkms`).
    fn needs(&self) -> &'static [ObservationKind] {
        &[
            ObservationKind::RebootRequired,
            ObservationKind::RebootHeldBack,
        ]
    }

    /// Always: a sentinel the agent created goes once it is turned off.
    fn enabled(&self, _cfg: &Config) -> bool {
        true
    }

    fn writes(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, _cfg: &Config) -> Result<Current, GatherError> {
        let file = snap
            .read(Path::new(SENTINEL))
            .map_err(GatherError::unknown)?
            .map(|d| d.bytes);
        let owned = Ledger::load(snap)
            .map_err(GatherError::unknown)?
            .created_by(OWNER)
            .contains(Path::new(SENTINEL));
        Ok(Current { file, owned })
    }

    fn decide(&self, c: &Current, ctx: &Ctx) -> Decision {
        let req = Request {
            reasons: ctx.observations.reboot_reasons(),
            hold_back: ctx.observations.reboot_hold_backs(),
        };
        Decision {
            changes: decide(
                ctx.config.rdma.reboot_sentinel,
                &req,
                c.file.clone(),
                c.owned,
            )
            .into_iter()
            .collect(),
            ..Decision::default()
        }
    }
}

/// Its families (registered in `concerns::registry::METRICS`): a reboot
/// needed, or held back.
pub fn families(m: &mut crate::exposition::Families, seen: &[Observation]) {
    let any = |f: fn(&Observation) -> bool| crate::exposition::bool01(seen.iter().any(f));
    m.gauge(
        "reboot_required",
        "1 when only a reboot can apply what the agent set (e.g. the netns mode), 0 otherwise",
        any(|o| matches!(o, Observation::RebootRequired(_))),
    );
    m.gauge(
        "reboot_held_back",
        "1 when a reboot now would lose RDMA (a newer installed kernel lacks its DKMS builds), 0 otherwise",
        any(|o| matches!(o, Observation::RebootHeldBack(_))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(reasons: &[&str], hold: &[&str]) -> Request {
        Request {
            reasons: reasons.iter().map(|s| s.to_string()).collect(),
            hold_back: hold.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn requested_only_when_enabled() {
        let r = req(&["RDMA netns mode exclusive"], &[]);
        assert!(decide(false, &r, None, false).is_none());
        let c = decide(true, &r, None, false).unwrap();
        assert!(
            String::from_utf8(c.new.unwrap())
                .unwrap()
                .contains("RDMA netns mode exclusive")
        );
        // Someone else's sentinel is left as it is.
        assert!(decide(true, &r, Some(b"x".to_vec()), false).is_none());
    }

    #[test]
    fn hold_back_wins_and_removes_only_our_sentinel() {
        let r = req(
            &["RDMA netns mode"],
            &["kernel 6.8 lacks the DKMS mlx5 build"],
        );
        assert!(decide(true, &r, None, false).is_none());
        let c = decide(true, &r, Some(b"x".to_vec()), true).unwrap();
        assert_eq!(c.new, None);
        assert!(c.reason.contains("held back: kernel 6.8"));
        assert!(decide(true, &r, Some(b"x".to_vec()), false).is_none());
        // Nothing wanted any more: our sentinel goes.
        assert!(
            decide(true, &Request::default(), Some(b"x".to_vec()), true)
                .unwrap()
                .new
                .is_none()
        );
    }
}
