//! `rdma.peers` when a probe helper was killed and did not exit (a task stuck
//! in the kernel's RDMA code, as a soft lockup in rxe's send path left one in
//! the fabric tier). Records hand-made (labelled so), in the shape tests.rs
//! builds, with the error the helper runner writes; the last test has the
//! rounds of the fabric tier's MTU fault on node1 (stages as it recorded them:
//! `full,full,full` then `full,full,stuck`).

use super::tests::{all, healthy, probe, record, says};
use super::*;
use crate::host::probe::record::Stage;

fn stuck(node: &str) -> crate::host::probe::record::Probe {
    let mut p = probe(node, Stage::Stuck);
    p.error = "the probe helper (pid 4242) gave no answer within 5s, was killed and has not \
               exited: it is stuck in the kernel (look for a soft lockup or hung task in dmesg); \
               it is reaped when it exits"
        .into();
    p
}

fn judge(rec: PeersRecord) -> Check {
    evaluate(
        &super::tests::facts(Some(rec), Some(0)),
        &PeersConfig::default(),
    )
    .0
}

/// Two peers answered, the third probe's helper cannot die: the port's own
/// stack did not finish a probe, so the two answers prove nothing for it.
#[test]
fn a_stuck_helper_is_unknown_never_ok_even_with_a_quorum() {
    let mut now = healthy();
    now[2] = stuck("node-d");
    let c = judge(record(vec![healthy(), now]));
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["did not finish", "stuck in the kernel", "dmesg"],
    );
    // Earlier ones still stuck, so none started this round: the same.
    let mut refused = all(Stage::Stuck);
    for p in &mut refused {
        p.error =
            "4 probe helpers killed earlier have not exited (stuck in the kernel; see dmesg): \
                   no probe runs until they do"
                .into();
    }
    let c = judge(record(vec![healthy(), refused]));
    says(
        &c,
        Status::Unknown,
        Some(reasons::PEERS_UNPROVEN),
        &["no probe runs until they do"],
    );
    // Once reaped and probing again, the port is judged on its probes.
    let c = judge(record(vec![all(Stage::Stuck), healthy()]));
    says(&c, Status::Ok, None, &[]);
}

/// A stuck probe keeps `ok` away; it does not hide a fault the probes that
/// finished show: the MTU fault stays `fail` `mtu_mismatch` on its port.
#[test]
fn a_fault_the_other_probes_show_stands_beside_a_stuck_one() {
    let mut now = all(Stage::Full);
    now[2] = stuck("node-d");
    let c = judge(record(vec![all(Stage::Full), now]));
    says(
        &c,
        Status::Fail,
        Some(reasons::MTU_MISMATCH),
        &["0 of 2 peers answered"],
    );
}
