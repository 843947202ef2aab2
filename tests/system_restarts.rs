//! One containerd restart per change, whatever happens to the agent meanwhile:
//! ten `systemctl restart rdma-node-agent` at moments spread over ten drift
//! repairs (real systemd as PID 1 in systemd-nspawn, the real containerd.service)
//! start containerd at most ten times. A new instance of the agent finds the
//! restart an earlier one left queued in systemd's job queue, or the start that
//! already read the files, and queues no other.

mod support;

use std::time::Duration;

use support::nspawn::Machine;
use support::service::{containerd_starts, cri_ok, prepared_and_hand_edited};

const CONFIG: &str = "/etc/containerd/config.toml";

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn agent_restarts_during_repairs_restart_containerd_once_per_change() {
    let m = Machine::boot();
    let (repaired, edited) = prepared_and_hand_edited(&m);
    let before = containerd_starts(&m);
    let delays = [0u64, 100, 200, 300, 400, 500, 650, 800, 1000, 1300];
    for delay_ms in delays {
        m.sh(&format!(
            "logger -t rdma-test 'edit, then restart after {delay_ms} ms'"
        ));
        m.write(CONFIG, &edited);
        std::thread::sleep(Duration::from_millis(delay_ms));
        m.sh("logger -t rdma-test 'systemctl restart rdma-node-agent'");
        m.sh_ok("systemctl restart rdma-node-agent");
        m.wait("the repair", Duration::from_secs(60), |m| {
            m.read(CONFIG) == repaired && cri_ok(m)
        });
    }
    // Whatever was left queued has run by now.
    m.wait("no job left", Duration::from_secs(30), |m| {
        m.sh("systemctl list-jobs --no-legend").trim().is_empty()
    });
    let starts = containerd_starts(&m) - before;
    let journal = m.sh(
        "journalctl -b --no-pager -o short-monotonic | grep -E 'rdma-node-agent|containerd|rdma-test' | grep -v 'level='",
    );
    println!(
        "{} repairs with an agent restart each: containerd started {starts} times",
        delays.len()
    );
    assert!(
        starts <= delays.len(),
        "{starts} containerd starts for {} changes:\n{journal}",
        delays.len()
    );
}
