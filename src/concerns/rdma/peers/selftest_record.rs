//! The selftest's verdict kept as agent state (`selftest.json`): what the
//! return-to-service gate (`rdma.gate`) waits on, so it is declared here, by
//! the gate that reads it. Written by `rdma-node-agent selftest` through the
//! state writer; read back through the snapshot. Only a pass on this boot counts.

use serde::{Deserialize, Serialize};

use crate::host::state::Record;

pub const FILE: &str = "/var/lib/rdma-node-agent/selftest.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelftestRecord {
    pub boot_id: String,
    pub finished_unix: u64,
    /// Every ACTIVE port passed (exit 0); `false` for a failure and for
    /// "could not test" (exit 2) alike: neither proves the node.
    pub passed: bool,
    pub summary: String,
}

impl SelftestRecord {
    pub fn record(&self) -> Record {
        let mut bytes = serde_json::to_vec_pretty(self).expect("record serializes");
        bytes.push(b'\n');
        Record {
            path: FILE.into(),
            bytes,
            note: None,
        }
    }

    /// When it passed on the boot `boot_id` names; `None` otherwise.
    pub fn passed_on(&self, boot_id: Option<&str>) -> Option<u64> {
        (self.passed && boot_id == Some(self.boot_id.as_str())).then_some(self.finished_unix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pass_of_this_boot_counts() {
        let mut r = SelftestRecord {
            boot_id: "b1".into(),
            finished_unix: 100,
            passed: false,
            summary: "selftest not run: no ACTIVE RDMA port to test".into(),
        };
        assert_eq!(r.passed_on(Some("b1")), None, "no pass, no opening");
        r.passed = true;
        assert_eq!(r.passed_on(Some("b1")), Some(100));
        assert_eq!(r.passed_on(Some("b2")), None);
        assert_eq!(r.passed_on(None), None);
        let back: SelftestRecord = serde_json::from_slice(&r.record().bytes).unwrap();
        assert_eq!(back, r);
    }
}
