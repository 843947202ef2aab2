//! `pods.rdma` on the real kernel (boot 1 of the VM tier): ib_write_bw's server
//! and client over rxe0, each in a pod container's cgroup, found by the
//! kernel's RDMA resource tracking (NLDEV dumps) while they run; the descriptor
//! scan of the same processes and iproute2's `rdma resource show` agree.

use rdma_node_agent::host::netlink::restrack::{self, CM_ID, CTX, PD};
use serde_json::Value;

use super::{check, step, vm};

#[path = "../support/restrack_recording.rs"]
mod recording;

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn restrack_finds_the_perftest_pids_and_the_fd_scan_agrees() {
    let Some(d) = vm() else { return };
    step(d, "restrack-start").ok();
    let iproute2 = step(d, "restrack-iproute2");
    iproute2.ok();
    let c = check(d, "restrack-check");
    assert_eq!(c["status"], "ok", "{c}");
    let by = &c["details"]["found_by"];
    assert_eq!(by["by"], "restrack", "{c}");
    assert_eq!(by["devices"], serde_json::json!(["rxe0"]), "{c}");
    // cgroup v2 in the guest: the pods from the unified tree's cgroup.procs.
    assert_eq!(
        c["details"]["pods_from"],
        serde_json::json!({"by": "cgroup_tree", "at": "/sys/fs/cgroup/kubepods"}),
        "{c}"
    );
    let found: Vec<&Value> = c["details"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["pod_uid"] == "vm-restrack")
        .collect();
    assert_eq!(found.len(), 2, "server and client: {c}");
    assert_eq!(by["holders"], 2, "{c}");
    for f in found {
        let p = &f["process"];
        let pid = p["pid"].as_u64().unwrap();
        assert_eq!(p["comm"], "ib_write_bw", "{f}");
        // The kernel's answer: the ucontext and the PD of this very process.
        let holds: Vec<&str> = p["holds"]
            .as_array()
            .unwrap_or_else(|| panic!("no holds: {f}"))
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert!(holds.contains(&"rxe0 pd"), "{f}");
        assert!(holds.contains(&"rxe0 ctx"), "{f}");
        // The control: its descriptors, read because the kernel named it.
        assert_eq!(
            p["opened"],
            serde_json::json!(["/dev/infiniband/uverbs0"]),
            "{f}"
        );
        assert_eq!(f["evidence"], "opens /dev/infiniband/uverbs0", "{f}");
        // And iproute2's view of the same kernel.
        assert!(
            iproute2
                .out
                .lines()
                .any(|l| l.starts_with("dev rxe0 ") && l.contains(&format!(" pid {pid} "))),
            "pid {pid} not in `rdma resource show pd`:\n{}",
            iproute2.out
        );
        assert_eq!(
            f["problems"],
            serde_json::json!([]),
            "root keeps CAP_IPC_LOCK: {f}"
        );
    }
    // The kernel's bytes, read by the agent's own decoder: the device, and
    // the owners iproute2 printed, in the ctx and pd dumps alike.
    let rec = step(d, "restrack-record");
    rec.ok();
    let devices: Vec<(u32, String)> = recording::payloads(&rec.out, restrack::RDMA_NLDEV_CMD_GET)
        .iter()
        .filter_map(|p| restrack::parse_device(p).unwrap())
        .collect();
    assert_eq!(devices.len(), 1, "{devices:?}");
    assert_eq!(devices[0].1, "rxe0");
    let listed = recording::iproute2_pids(&iproute2.out);
    assert_eq!(listed.len(), 2, "{}", iproute2.out);
    assert_eq!(recording::pids(&rec.out, PD), listed, "{}", rec.out);
    assert_eq!(recording::pids(&rec.out, CTX), listed, "{}", rec.out);
    // ib_write_bw without -R does not use rdma_cm: the dump answers, empty.
    assert!(recording::pids(&rec.out, CM_ID).is_empty(), "{}", rec.out);

    let stop = step(d, "restrack-stop");
    stop.ok();
    assert_eq!(stop.out.matches("exit 0").count(), 2, "{}", stop.out);
}
