//! The agent state concerns ask to keep every cycle (the link history),
//! written by the daemon after the reconcile whatever the mode: it records
//! what the host did, it changes nothing on it. A write that fails turns the
//! check that relies on it to `unknown`, saying why.

use crate::engine::check::{Check, Status};
use crate::fleet::Fact;
use crate::host::Host;
use crate::host::state_writer::{Access, StateWriter};
use crate::observe::Observation;
use crate::reason::Reason;

pub(super) fn persist(host: &Host, observations: &[Observation], checks: &mut [Check]) {
    for o in observations {
        let Observation::Fleet(Fact::Persist { record, check }) = o else {
            continue;
        };
        if let Err(e) = StateWriter::new(host).keep(record, Access::Public) {
            tracing::warn!(path = %record.path.display(), "cannot keep the agent's state: {e}");
            for c in checks.iter_mut().filter(|c| c.id == *check) {
                c.status = Status::Unknown;
                c.message = format!(
                    "{}; but {} cannot be written, so this reading is forgotten: {e}",
                    c.message,
                    record.path.display()
                );
                c.reason = Some(Reason::FACT_UNREADABLE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::state::Record;

    #[test]
    fn written_or_the_check_says_it_is_not() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        let seen = vec![Observation::Fleet(Fact::Persist {
            record: Record {
                path: "/var/lib/rdma-node-agent/link-history.json".into(),
                bytes: b"{}\n".to_vec(),
                note: None,
            },
            check: "rdma.link",
        })];
        let mut checks = vec![Check::new(
            crate::engine::check::CheckId::new("rdma.link"),
            Status::Ok,
            "1 port(s)",
        )];
        persist(&host, &seen, &mut checks);
        assert_eq!(
            std::fs::read(t.path().join("var/lib/rdma-node-agent/link-history.json")).unwrap(),
            b"{}\n"
        );
        assert_eq!(checks[0].status, Status::Ok);
        // The state directory is a file: the write fails, and the check says so.
        std::fs::remove_dir_all(t.path().join("var/lib/rdma-node-agent")).unwrap();
        std::fs::write(t.path().join("var/lib/rdma-node-agent"), "x").unwrap();
        persist(&host, &seen, &mut checks);
        assert_eq!(checks[0].status, Status::Unknown);
        assert_eq!(checks[0].reason, Some(Reason::FACT_UNREADABLE));
        assert!(
            checks[0].message.contains("cannot be written"),
            "{}",
            checks[0].message
        );
    }
}
