//! What the daemon holds back from one reconcile to the next, so that a failure
//! does not repeat on every trigger: a plan that was rolled back (it would restart
//! a service in a loop), and live effects that failed (rebuilding a boot image
//! takes minutes of CPU; a refused kernel switch only fills the journal). Pure: the
//! daemon records outcomes and the time, the agent asks before acting.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::effect::EffectKey;
use super::outcome::{ActionOutcome, ActionStatus};

/// The longest wait between two tries of a failing action.
pub const MAX_BACKOFF: Duration = Duration::from_secs(6 * 3600);

#[derive(Debug, Clone, Default)]
pub struct Holds {
    /// A plan that was rolled back: not applied again until the plan changes or
    /// its backoff ends (the cause, say a unit that hangs at start, may have been
    /// fixed: each retry costs restarts, so the waits double).
    pub plan: Option<PlanHold>,
    /// Failing effects, by their key.
    pub actions: BTreeMap<EffectKey, ActionHold>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanHold {
    pub digest: String,
    pub reason: String,
    pub failures: u32,
    pub until: SystemTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionHold {
    pub failures: u32,
    /// Not tried again before this.
    pub until: SystemTime,
}

/// The wait after the `failures`-th failure in a row: the reconcile interval,
/// doubling, at most `MAX_BACKOFF`.
pub fn backoff(failures: u32, interval: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    interval.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

impl Holds {
    /// The hold on the plan with `digest` when it must wait at `now`.
    pub fn plan_held(&self, digest: &str, now: SystemTime) -> Option<&PlanHold> {
        self.plan
            .as_ref()
            .filter(|h| h.digest == digest && h.until > now)
    }

    /// A plan was rolled back at `now`: hold it, longer each time in a row.
    pub fn record_rollback(
        &mut self,
        digest: String,
        reason: String,
        now: SystemTime,
        interval: Duration,
    ) {
        let failures = self
            .plan
            .as_ref()
            .filter(|h| h.digest == digest)
            .map_or(0, |h| h.failures)
            + 1;
        self.plan = Some(PlanHold {
            digest,
            reason,
            failures,
            until: now + backoff(failures, interval),
        });
    }

    /// The hold on `action` when it must wait at `now`.
    pub fn deferred(&self, key: &EffectKey, now: SystemTime) -> Option<&ActionHold> {
        self.actions.get(key).filter(|h| h.until > now)
    }

    /// Learns from a reconcile's action outcomes: a failure pushes the next try
    /// back, a success forgets the action's failures.
    pub fn record(&mut self, outcomes: &[ActionOutcome], now: SystemTime, interval: Duration) {
        for o in outcomes {
            let Some(key) = &o.key else { continue };
            match o.status {
                ActionStatus::Failed => {
                    let failures = self.actions.get(key).map_or(0, |h| h.failures) + 1;
                    self.actions.insert(
                        key.clone(),
                        ActionHold {
                            failures,
                            until: now + backoff(failures, interval),
                        },
                    );
                }
                ActionStatus::Done => {
                    self.actions.remove(key);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn outcome(key: &EffectKey, status: ActionStatus) -> ActionOutcome {
        ActionOutcome::new(key.to_string(), status, "").keyed(key.clone())
    }

    #[test]
    fn backoff_doubles_from_the_interval_up_to_six_hours() {
        assert_eq!(backoff(1, 5 * MIN), 5 * MIN);
        assert_eq!(backoff(2, 5 * MIN), 10 * MIN);
        assert_eq!(backoff(4, 5 * MIN), 40 * MIN);
        assert_eq!(backoff(10, 5 * MIN), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX, 5 * MIN), MAX_BACKOFF);
        assert_eq!(backoff(1, 24 * 60 * MIN), MAX_BACKOFF);
    }

    #[test]
    fn a_rolled_back_plan_waits_longer_each_time_then_is_tried_again() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut h = Holds::default();
        h.record_rollback("d1".into(), "hung".into(), t0, MIN);
        assert!(h.plan_held("d1", t0 + MIN / 2).is_some());
        assert!(h.plan_held("d1", t0 + MIN).is_none(), "due again");
        assert!(h.plan_held("d2", t0).is_none(), "another plan is not held");
        h.record_rollback("d1".into(), "hung".into(), t0 + MIN, MIN);
        let hold = h.plan_held("d1", t0 + MIN).unwrap();
        assert_eq!((hold.failures, hold.until), (2, t0 + 3 * MIN));
        // Another plan starts counting again.
        h.record_rollback("d2".into(), "hung".into(), t0 + 3 * MIN, MIN);
        assert_eq!(h.plan.as_ref().unwrap().failures, 1);
    }

    #[test]
    fn failures_defer_successes_forget() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut h = Holds::default();
        let rebuild = &EffectKey::new("rebuild_image", "");
        h.record(&[outcome(rebuild, ActionStatus::Failed)], t0, MIN);
        assert!(h.deferred(rebuild, t0 + MIN / 2).is_some());
        assert!(h.deferred(rebuild, t0 + MIN).is_none(), "due again");
        let switch = EffectKey::new("set_mode", "");
        assert!(h.deferred(&switch, t0).is_none());
        // An outcome without a key (a restart) is never held here.
        let restart = ActionOutcome::new("restart x", ActionStatus::Failed, "");
        h.record(&[restart], t0, MIN);
        assert_eq!(h.actions.len(), 1);

        h.record(&[outcome(rebuild, ActionStatus::Failed)], t0 + MIN, MIN);
        let hold = h.deferred(rebuild, t0 + MIN).unwrap();
        assert_eq!(hold.failures, 2);
        assert_eq!(hold.until, t0 + 3 * MIN);

        // Deferred and skipped outcomes change nothing; a success clears.
        h.record(
            &[outcome(rebuild, ActionStatus::Deferred)],
            t0 + 2 * MIN,
            MIN,
        );
        assert_eq!(h.deferred(rebuild, t0 + 2 * MIN).unwrap().failures, 2);
        h.record(&[outcome(rebuild, ActionStatus::Done)], t0 + 3 * MIN, MIN);
        assert!(h.actions.is_empty());
    }
}
