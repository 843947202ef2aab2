//! The return-to-service gate (`[peers] gate = true`), pure: after a boot, a
//! kernel or driver change, or an operator's reset, the node is closed (not
//! ready for RDMA jobs) until its loopback selftest passed and a round of peer
//! probes passed, both after that event. Open, it stays open for this boot,
//! kernel and driver until the next reset: a later fault is `rdma.peers`'s
//! own verdict to give, not the gate's.
//!
//! The check that carries it is `rdma.gate` (`gate_check.rs`).

use serde::{Deserialize, Serialize};

use crate::engine::check::Status;

/// Where the gate's state lives (agent state, kept by the daemon each cycle).
pub const FILE: &str = "/var/lib/rdma-node-agent/peers-gate.json";

/// Where `rdma-node-agent gate reset` leaves its request for the daemon (it
/// watches the file): under /run, since a boot closes the gate anyway.
pub const RESET_FILE: &str = "/run/rdma-node-agent/gate-reset.json";

/// An operator's request to close the gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRequest {
    pub requested_unix: u64,
}

/// What a gate opening holds for: the boot, kernel and RDMA driver it saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub boot_id: String,
    pub kernel: String,
    /// The RDMA driver's version (the kernel module's, or the OFED's).
    pub driver: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateState {
    pub identity: Identity,
    /// When the gate opened for this identity; `None` while closed.
    pub opened_unix: Option<u64>,
    /// Since when it is closed (the event that closed it).
    pub closed_since_unix: u64,
    /// Why it closed, as shown.
    pub closed_why: String,
}

/// What the gate is decided from, this reconcile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub identity: Identity,
    /// When the selftest last passed on this identity (`None`: never, or failed since).
    pub selftest_passed_unix: Option<u64>,
    /// When the newest round in which every ACTIVE port reached its quorum finished.
    pub peers_passed_unix: Option<u64>,
    /// The operator's last `rdma-node-agent gate reset`.
    pub reset_unix: Option<u64>,
    pub now: u64,
}

/// The gate's status and message, and the state to keep.
pub fn decide(prev: Option<&GateState>, i: &Inputs) -> (Status, String, GateState) {
    let mut next = match prev {
        Some(p) if p.identity == i.identity => p.clone(),
        Some(p) => closed(i, changed(&p.identity, &i.identity), i.now),
        None => closed(i, "the agent's first reading of this node".into(), i.now),
    };
    // A reset after the gate opened (or after it closed) closes it again.
    if let Some(r) = i.reset_unix
        && r > next.opened_unix.unwrap_or(0).max(next.closed_since_unix)
    {
        next = closed(
            i,
            "reset by the operator (`rdma-node-agent gate reset`)".into(),
            r,
        );
    }
    if let Some(t) = next.opened_unix {
        return (Status::Ok, format!("open since {}", utc(t)), next);
    }
    let since = next.closed_since_unix;
    let selftest = i.selftest_passed_unix.is_some_and(|t| t >= since);
    let peers = i.peers_passed_unix.is_some_and(|t| t >= since);
    if selftest && peers {
        next.opened_unix = Some(i.now);
        return (
            Status::Ok,
            format!(
                "open since {}: the selftest and a round of peer probes passed after {}",
                utc(i.now),
                next.closed_why
            ),
            next,
        );
    }
    let mut waiting = Vec::new();
    if !selftest {
        waiting.push("the loopback selftest (the daemon runs `rdma-node-agent selftest`)");
    }
    if !peers {
        waiting.push("a round of peer probes every ACTIVE port passes (`rdma.peers`)");
    }
    (
        Status::Fail,
        format!(
            "closed since {} ({}): not ready for RDMA jobs until {} pass",
            utc(since),
            next.closed_why,
            waiting.join(" and ")
        ),
        next,
    )
}

/// While the gate stays closed for one event, how long after a selftest run
/// that did not pass (or could not start) the daemon tries again: a repair
/// usually comes with `gate reset`, a new event, which tries at once.
pub const SELFTEST_RETRY_SECS: u64 = 3600;

/// A selftest run the daemon started for the gate: for which closing event, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    pub closed_since_unix: u64,
    pub at_unix: u64,
}

/// Whether the daemon owes the gate a selftest run now: the gate of this boot
/// is closed, no selftest passed since the event that closed it, and none was
/// tried for that event within the retry period. `passed_unix`: when the
/// selftest last passed on this boot.
pub fn selftest_owed(
    state: Option<&GateState>,
    boot_id: &str,
    passed_unix: Option<u64>,
    tried: Option<Tried>,
    now: u64,
) -> bool {
    let Some(s) = state.filter(|s| s.opened_unix.is_none() && s.identity.boot_id == boot_id) else {
        return false;
    };
    let since = s.closed_since_unix;
    if passed_unix.is_some_and(|t| t >= since) {
        return false;
    }
    match tried {
        Some(t) if t.closed_since_unix == since => {
            now.saturating_sub(t.at_unix) >= SELFTEST_RETRY_SECS
        }
        _ => true,
    }
}

fn closed(i: &Inputs, why: String, at: u64) -> GateState {
    GateState {
        identity: i.identity.clone(),
        opened_unix: None,
        closed_since_unix: at,
        closed_why: why,
    }
}

fn changed(old: &Identity, new: &Identity) -> String {
    if old.boot_id != new.boot_id {
        "a boot".into()
    } else if old.kernel != new.kernel {
        format!("the kernel changed from {} to {}", old.kernel, new.kernel)
    } else {
        format!(
            "the RDMA driver changed from {} to {}",
            old.driver, new.driver
        )
    }
}

fn utc(t: u64) -> String {
    crate::concerns::rdma::link::utc(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_795_678_000;

    fn id(boot: &str, kernel: &str) -> Identity {
        Identity {
            boot_id: boot.into(),
            kernel: kernel.into(),
            driver: "mlx5_core 24.10".into(),
        }
    }

    fn inputs(identity: Identity, selftest: Option<u64>, peers: Option<u64>, now: u64) -> Inputs {
        Inputs {
            identity,
            selftest_passed_unix: selftest,
            peers_passed_unix: peers,
            reset_unix: None,
            now,
        }
    }

    #[test]
    fn a_boot_closes_it_until_selftest_and_peers_both_pass_after_it() {
        let (s, m, st) = decide(None, &inputs(id("b1", "6.1"), None, None, T0));
        assert_eq!(s, Status::Fail);
        assert!(m.contains("until the loopback selftest (the daemon runs `rdma-node-agent selftest`) and a round of peer probes"), "{m}");
        // Peers pass, selftest not yet: still closed, naming only the selftest.
        let (s, m, st) = decide(
            Some(&st),
            &inputs(id("b1", "6.1"), None, Some(T0 + 60), T0 + 60),
        );
        assert_eq!(s, Status::Fail);
        assert!(
            m.contains(
                "until the loopback selftest (the daemon runs `rdma-node-agent selftest`) pass"
            ),
            "{m}"
        );
        let (s, m, st) = decide(
            Some(&st),
            &inputs(id("b1", "6.1"), Some(T0 + 90), Some(T0 + 120), T0 + 120),
        );
        assert_eq!(s, Status::Ok, "{m}");
        assert_eq!(st.opened_unix, Some(T0 + 120));
        // Open stays open for this identity, whatever the next rounds say.
        let (s, _, st2) = decide(
            Some(&st),
            &inputs(id("b1", "6.1"), Some(T0 + 90), None, T0 + 600),
        );
        assert_eq!(s, Status::Ok);
        assert_eq!(st2, st);
        // A reboot closes it; results from before it do not reopen it.
        let (s, m, _) = decide(
            Some(&st),
            &inputs(id("b2", "6.1"), Some(T0 + 90), Some(T0 + 120), T0 + 900),
        );
        assert_eq!(s, Status::Fail);
        assert!(m.contains("(a boot)"), "{m}");
    }

    #[test]
    fn a_selftest_is_owed_once_per_closing_event_and_retried_hourly() {
        let closed = GateState {
            identity: id("b1", "6.8"),
            opened_unix: None,
            closed_since_unix: T0,
            closed_why: "a boot".into(),
        };
        let s = Some(&closed);
        assert!(selftest_owed(s, "b1", None, None, T0 + 5));
        // A pass from before the event proves nothing about it.
        assert!(selftest_owed(s, "b1", Some(T0 - 1), None, T0 + 5));
        assert!(!selftest_owed(s, "b1", Some(T0 + 1), None, T0 + 5));
        let tried = Tried {
            closed_since_unix: T0,
            at_unix: T0 + 5,
        };
        assert!(!selftest_owed(s, "b1", None, Some(tried), T0 + 60));
        assert!(selftest_owed(
            s,
            "b1",
            None,
            Some(tried),
            T0 + 5 + SELFTEST_RETRY_SECS
        ));
        // A new event (a reset) is owed its own run at once.
        let reset = GateState {
            closed_since_unix: T0 + 100,
            ..closed.clone()
        };
        assert!(selftest_owed(
            Some(&reset),
            "b1",
            None,
            Some(tried),
            T0 + 101
        ));
        // Open, of another boot (not yet decided on this one), or no state: nothing owed.
        let open = GateState {
            opened_unix: Some(T0 + 50),
            ..closed.clone()
        };
        assert!(!selftest_owed(Some(&open), "b1", None, None, T0 + 60));
        assert!(!selftest_owed(s, "b2", None, None, T0 + 60));
        assert!(!selftest_owed(None, "b1", None, None, T0 + 60));
    }

    #[test]
    fn a_kernel_or_driver_change_and_a_reset_close_it() {
        let open = GateState {
            identity: id("b1", "6.1"),
            opened_unix: Some(T0),
            closed_since_unix: T0 - 100,
            closed_why: "a boot".into(),
        };
        let (s, m, _) = decide(
            Some(&open),
            &inputs(id("b1", "6.2"), Some(T0), Some(T0), T0 + 10),
        );
        assert_eq!(s, Status::Fail);
        assert!(m.contains("the kernel changed from 6.1 to 6.2"), "{m}");
        let mut other = id("b1", "6.1");
        other.driver = "mlx5_core 25.01".into();
        let (_, m, _) = decide(Some(&open), &inputs(other, None, None, T0 + 10));
        assert!(
            m.contains("the RDMA driver changed from mlx5_core 24.10 to mlx5_core 25.01"),
            "{m}"
        );
        let mut reset = inputs(id("b1", "6.1"), Some(T0), Some(T0 + 5), T0 + 20);
        reset.reset_unix = Some(T0 + 10);
        let (s, m, st) = decide(Some(&open), &reset);
        assert_eq!(s, Status::Fail);
        assert!(m.contains("reset by the operator"), "{m}");
        // Passing again after the reset opens it.
        let mut again = inputs(id("b1", "6.1"), Some(T0 + 30), Some(T0 + 40), T0 + 40);
        again.reset_unix = Some(T0 + 10);
        let (s, _, _) = decide(Some(&st), &again);
        assert_eq!(s, Status::Ok);
    }
}
