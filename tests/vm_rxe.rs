//! The real-kernel tier: the agent on Debian's kernel with Soft-RoCE (rdma_rxe) in
//! a QEMU VM. One run of `tests/vm/run.sh` (three boots of the same disk: two of
//! bookworm's kernel, then a reboot into the newer bookworm-backports kernel
//! installed next to it) does everything in `tests/vm/guest.sh` and records what
//! the kernel, Debian's dkms and the agent said; each test here asserts one claim
//! on those records. The agent is the product as installed: the .deb, installed
//! in the guest (systemd is PID 1 there), its binary run as an operator runs it,
//! its daemon the shipped unit, driven with systemctl and read over its endpoints.
//!
//! Needs root, QEMU (qemu-system-x86, qemu-utils), mmdebstrap and a Debian mirror
//! the first time (the image is cached under /var/cache/rdma-node-agent/vm). Run
//! by scripts/test.sh (`--include-ignored`). Where QEMU cannot run the tests fail
//! with the reason; `RDMA_AGENT_VM=0` turns the tier off, and each test says so.
//! `RDMA_AGENT_DEB` names the package to test (scripts/test.sh builds it with
//! scripts/package.sh); without it the tests fail and say how to build it.
//! `RDMA_AGENT_VM_RESULTS=DIR`
//! asserts on the records of an earlier run (e.g. /var/cache/rdma-node-agent/vm/
//! last-results) without booting, to work on the assertions.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

// The kernel change and the DKMS gate across the reboot into the newer kernel.
#[path = "vm/kernel.rs"]
mod kernel;
// rdma.link's flap history across a daemon restart and a reboot.
#[path = "vm/link.rs"]
mod link;

// pods.rdma found by the kernel's RDMA resource tracking.
#[path = "vm/restrack.rs"]
mod restrack;
// memlock_via = "nri": the agent's NRI plugin on containerd 2.1, with ib_write_bw.
#[path = "vm/nri.rs"]
mod nri;
// rdma.counters: rxe's retransmission counters under tc netem, and the verdict.
#[path = "vm/counters.rs"]
mod counters;

const MODPROBE: &str = "/etc/modprobe.d/rdma-node-agent.conf";

#[path = "vm/harness.rs"]
mod harness;

const TIER: harness::Tier = harness::Tier {
    name: "vm_rxe",
    what: "the real-kernel tier",
    guest: "guest.sh",
    results: "last-results",
    results_env: "RDMA_AGENT_VM_RESULTS",
    env: &[],
    payload: counters::payload,
};

/// The results directory of the one VM run of this test binary, or None when the
/// tier is turned off.
fn vm() -> Option<&'static Path> {
    static RUN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    harness::results(&TIER, &RUN)
}

/// One recorded step: its stdout (with stderr after it) and exit code.
struct Step {
    name: String,
    out: String,
    err: String,
    rc: i32,
}

impl Step {
    fn text(&self) -> String {
        format!("{}{}", self.out, self.err)
    }
    fn ok(&self) -> &Self {
        assert_eq!(self.rc, 0, "step {} failed:\n{}", self.name, self.text());
        self
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.out)
            .unwrap_or_else(|e| panic!("step {}: not JSON ({e}):\n{}", self.name, self.text()))
    }
}

fn step(dir: &Path, name: &str) -> Step {
    let read = |ext: &str| {
        fs::read_to_string(dir.join(format!("{name}.{ext}")))
            .unwrap_or_else(|e| panic!("the guest did not record step {name} ({ext}): {e}"))
    };
    Step {
        name: name.to_owned(),
        out: read("out"),
        err: read("err"),
        rc: read("rc").trim().parse().unwrap(),
    }
}

/// The one check of a `check --json --only ID` step.
fn check(dir: &Path, name: &str) -> Value {
    let s = step(dir, name);
    s.json()["checks"][0].clone()
}

/// The live mode as sysfs (`Y`/`N`) and RDMA netlink (`rdma system show`) give it,
/// asserting that both say the same.
fn live_mode(dir: &Path, name: &str) -> &'static str {
    let s = step(dir, name);
    s.ok();
    let sysfs = s.out.lines().find_map(|l| l.strip_prefix("sysfs "));
    let netlink = s.out.lines().find_map(|l| l.strip_prefix("netlink "));
    match (sysfs, netlink) {
        (Some("Y"), Some(n)) if n.starts_with("netns shared") => "shared",
        (Some("N"), Some(n)) if n.starts_with("netns exclusive") => "exclusive",
        _ => panic!(
            "{name}: sysfs and netlink disagree or are unreadable:\n{}",
            s.text()
        ),
    }
}

/// The netns switch of an `apply --json` step: (status, detail).
fn netns_action(dir: &Path, name: &str) -> (String, String) {
    let s = step(dir, name);
    let v = s.json();
    let a = v["actions"]
        .as_array()
        .and_then(|a| {
            a.iter().find(|a| {
                a["action"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("set the RDMA netns mode"))
            })
        })
        .unwrap_or_else(|| panic!("{name}: no netns switch among the actions:\n{}", s.text()))
        .clone();
    (
        a["status"].as_str().unwrap().to_owned(),
        a["detail"].as_str().unwrap().to_owned(),
    )
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn soft_roce_comes_up_on_debians_kernel() {
    let Some(d) = vm() else { return };
    assert!(step(d, "uname").ok().out.starts_with("6."));
    step(d, "rxe-up").ok();
    let link = step(d, "rdma-link");
    link.ok();
    assert!(
        link.out.contains("link rxe0/1 state ACTIVE"),
        "{}",
        link.out
    );
    assert!(link.out.contains("netdev veth0"), "{}", link.out);
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn rdma_devices_on_real_rxe_sysfs() {
    let Some(d) = vm() else { return };
    let live = check(d, "devices-live");
    assert_eq!(live["id"], "rdma.devices");
    let devices = live["details"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{live:#}");
    let rxe = &devices[0];
    assert_eq!(rxe["name"], "rxe0", "{live:#}");
    let port = &rxe["ports"][0];
    assert_eq!(port["port"], 1, "{live:#}");
    assert_eq!(port["state"], "ACTIVE", "{live:#}");
    assert_eq!(port["phys_state"], "LinkUp", "{live:#}");
    assert_eq!(port["link_layer"], "Ethernet", "{live:#}");
    // The RoCE netdev: rxe has no `device` link, only gid_attrs/ndevs.
    assert_eq!(port["netdev"], "veth0", "{live:#}");
    // The node GUID is the kernel's (EUI-64 from veth0's MAC), as sysfs has it.
    let guid =
        fs::read_to_string(d.join("fixture-rxe/sys/devices/virtual/infiniband/rxe0/node_guid"))
            .unwrap();
    assert_eq!(rxe["node_guid"].as_str(), Some(guid.trim()), "{live:#}");
    // The captured tree says to the agent what the live sysfs said.
    let fixture = check(d, "devices-fixture");
    assert_eq!(fixture["status"], live["status"]);
    assert_eq!(fixture["message"], live["message"]);
    assert_eq!(fixture["details"], live["details"]);
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn rdma_netns_reads_the_mode_sysfs_and_netlink_agree_on() {
    let Some(d) = vm() else { return };
    assert_eq!(live_mode(d, "mode-initial"), "shared");
    let c = check(d, "netns-initial");
    assert_eq!(c["details"]["live"], "shared", "{c:#}");
    // And exclusive, as the next boot brings it up.
    assert_eq!(live_mode(d, "boot2-mode"), "exclusive");
    let c = check(d, "boot2-netns");
    assert_eq!(c["details"]["live"], "exclusive", "{c:#}");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn apply_switches_live_both_ways_without_other_namespaces() {
    let Some(d) = vm() else { return };
    let (status, detail) = netns_action(d, "apply-exclusive");
    assert_eq!(status, "done", "{detail}");
    assert_eq!(detail, "the RDMA netns mode is now exclusive");
    assert_eq!(live_mode(d, "mode-after-apply-exclusive"), "exclusive");
    assert_eq!(
        step(d, "modprobe-after-apply-exclusive")
            .ok()
            .out
            .lines()
            .last(),
        Some("options ib_core netns_mode=0")
    );
    let (status, detail) = netns_action(d, "apply-shared");
    assert_eq!(status, "done", "{detail}");
    assert_eq!(live_mode(d, "mode-after-apply-shared"), "shared");
}

/// The kernel itself refused the switch while the blocker existed (iproute2's
/// `rdma system set netns exclusive`: EBUSY), the live mode stayed shared, and
/// once the blocker was gone the kernel allowed it again (so it was the blocker).
fn assert_kernel_busy(d: &Path, kind: &str) {
    let k = step(d, &format!("kernel-{kind}"));
    assert_ne!(
        k.rc, 0,
        "the kernel allowed the switch with a {kind} namespace"
    );
    assert!(
        k.err.contains("Device or resource busy"),
        "{kind}: {}",
        k.text()
    );
    assert_eq!(live_mode(d, &format!("mode-after-{kind}")), "shared");
    step(d, &format!("settle-{kind}")).ok();
}

/// A namespace the agent can see: it does not ask the kernel, persists the mode
/// and its check fails "pending reboot", naming the namespace (and its holder).
fn assert_pending_named(d: &Path, kind: &str, named: &str) {
    let apply = format!("apply-{kind}");
    let s = step(d, &apply);
    s.ok();
    let v = s.json();
    assert_eq!(v["actions"], serde_json::json!([]), "{apply}: {}", s.out);
    let c = check(d, &format!("netns-{kind}"));
    assert_eq!(c["status"], "fail", "{c:#}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!("pending reboot: exclusive is persisted in {MODPROBE}, but the live mode is shared and the kernel refuses to switch while other network namespaces exist: ")),
        "{m}"
    );
    assert!(m.contains(named), "{named:?} not named in: {m}");
    assert_eq!(c["details"]["reboot_required"], true, "{c:#}");
    assert_kernel_busy(d, kind);
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn ebusy_with_an_ip_netns_names_it() {
    let Some(d) = vm() else { return };
    assert_pending_named(d, "ipnetns", "/run/netns/blocker");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn ebusy_with_an_unshared_process_names_the_process() {
    let Some(d) = vm() else { return };
    let pid = fs::read_to_string(d.join("unshare-pid")).unwrap();
    // `unshare --net sleep` execs sleep in the new namespace: same pid; under
    // systemd the agent also names the unit it runs in (the guest's steps).
    assert_pending_named(
        d,
        "unshare",
        &format!("(pid {} sleep in vm-guest.service)", pid.trim()),
    );
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn ebusy_with_a_namespace_bind_mounted_elsewhere_names_the_mount() {
    let Some(d) = vm() else { return };
    // `unshare --net=/run/bound-ns`: no process, nothing in /run/netns; PID 1's
    // mount table names it.
    assert_pending_named(d, "bindmount", "/run/bound-ns");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn ebusy_from_the_kernel_with_an_invisible_namespace_becomes_pending_reboot() {
    let Some(d) = vm() else { return };
    // Held only by an open file: the agent sees no namespace, asks the kernel,
    // and turns its real EBUSY into "pending reboot" without inventing a holder.
    let (status, detail) = netns_action(d, "apply-fd");
    assert_eq!(status, "pending", "{detail}");
    assert_eq!(
        detail,
        format!(
            "pending reboot: the kernel refused to switch the RDMA netns mode because other network \
             namespaces exist (EBUSY): none visible in /proc or /run/netns (held by open files or \
             bind mounts elsewhere); exclusive is persisted in {MODPROBE} and applies at the next boot"
        )
    );
    assert_kernel_busy(d, "fd");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn persisted_exclusive_applies_at_the_next_boot_then_revert_and_shared_again() {
    let Some(d) = vm() else { return };
    assert_eq!(
        step(d, "modprobe-persisted").ok().out.lines().last(),
        Some("options ib_core netns_mode=0")
    );
    assert_eq!(live_mode(d, "mode-before-reboot"), "shared");
    // Boot 2: ib_core loads with the modprobe.d options alone.
    assert_eq!(live_mode(d, "boot2-mode"), "exclusive");
    let c = check(d, "boot2-netns");
    assert_eq!(c["details"]["live"], "exclusive", "{c:#}");
    // Debian's initrd carries ib_core, so the agent warns that the initramfs
    // lacks its file. Here nothing loads ib_core that early (rxe is added from
    // the root filesystem), so the mode came from the root's modprobe.d; with
    // an RDMA driver bound in early boot the warning is what matters.
    assert_eq!(c["status"], "warn", "{c:#}");
    assert_eq!(c["details"]["initramfs_has_ib_core"], true, "{c:#}");
    let m = c["message"].as_str().unwrap();
    assert!(m.starts_with(&format!("exclusive (live), persisted in {MODPROBE}; ib_core loads from the initramfs, which lacks {MODPROBE}")), "{m}");
    let revert = step(d, "boot2-revert");
    revert.ok();
    let listing = step(d, "boot2-modprobe-after-revert");
    assert!(
        !listing.ok().out.contains("rdma-node-agent.conf"),
        "{}",
        listing.out
    );
    // revert restores files only: the live mode stays exclusive until the next
    // boot (the kernel default, shared, with the file gone) or an apply of
    // "shared", which switches it back live.
    assert_eq!(live_mode(d, "boot2-mode-after-revert"), "exclusive");
    let (status, detail) = netns_action(d, "boot2-apply-shared");
    assert_eq!(status, "done", "{detail}");
    assert_eq!(live_mode(d, "boot2-mode-after-apply-shared"), "shared");
}

/// ib_write_bw's two sides, as recorded: (exit code, text).
fn bandwidth(d: &Path, name: &str) -> (i32, String) {
    let s = step(d, name);
    (s.rc, s.text())
}

/// The lines perftest (Debian bookworm's 4.5) prints when the kernel refuses to
/// pin the buffer (rxe: `rxe_mr_init_user: Unable to pin memory region err = -12`).
const MR_FAILURE: &str =
    "Couldn't allocate MR\nfailed to create mr\nFailed to create MR\n Couldn't create IB resources";

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn memlock_decides_whether_ib_write_bw_registers_its_buffer() {
    let Some(d) = vm() else { return };
    // Root keeps CAP_IPC_LOCK, which bypasses RLIMIT_MEMLOCK: 64 KiB works.
    let (rc, text) = bandwidth(d, "bw-root");
    assert_eq!(rc, 0, "{text}");
    assert!(text.contains("8388608"), "{text}");
    // Without it (as in a container), 64 KiB and 8 MiB (the CI hosts' hard limit)
    // fail registering the 8 MiB buffer, on both sides.
    for name in ["bw-nolock-64k", "bw-nolock-8m"] {
        let (rc, text) = bandwidth(d, name);
        assert_ne!(rc, 0, "{name}: {text}");
        assert_eq!(text.matches(MR_FAILURE).count(), 2, "{name}: {text}");
    }
    let (rc, text) = bandwidth(d, "bw-nolock-unlimited");
    assert_eq!(rc, 0, "{text}");
    assert!(!text.contains("Couldn't allocate MR"), "{text}");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn runc_from_the_agents_base_spec_registers_memory() {
    let Some(d) = vm() else { return };
    let spec: Value = serde_json::from_str(&step(d, "base-spec").ok().out).unwrap();
    let memlock = spec["process"]["rlimits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "RLIMIT_MEMLOCK")
        .unwrap_or_else(|| panic!("no RLIMIT_MEMLOCK in the base spec: {spec:#}"));
    assert_eq!(memlock["hard"].as_u64(), Some(u64::MAX), "{memlock}");
    assert_eq!(memlock["soft"].as_u64(), Some(u64::MAX), "{memlock}");
    step(d, "runc-bundle-agent").ok();
    let run = step(d, "runc-agent-spec");
    run.ok();
    let limits = run
        .out
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap();
    assert_eq!(
        limits.split_whitespace().collect::<Vec<_>>(),
        ["Max", "locked", "memory", "unlimited", "unlimited", "bytes"]
    );
    assert_no_ipc_lock(&run.out);
    assert!(
        !run.text().contains("Couldn't allocate MR"),
        "{}",
        run.text()
    );
    // The control: the same spec with 64 KiB.
    step(d, "runc-bundle-64k").ok();
    let control = step(d, "runc-64k");
    assert_ne!(control.rc, 0, "{}", control.text());
    assert!(
        control
            .out
            .contains("Max locked memory         65536                65536"),
        "{}",
        control.out
    );
    assert_no_ipc_lock(&control.out);
    assert_eq!(
        control.text().matches(MR_FAILURE).count(),
        2,
        "{}",
        control.text()
    );
}

/// CAP_IPC_LOCK (bit 14) is in none of the container's capability sets.
fn assert_no_ipc_lock(status: &str) {
    for l in status.lines().filter(|l| l.starts_with("Cap")) {
        let bits = u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(bits & (1 << 14), 0, "CAP_IPC_LOCK in {l}");
    }
}

/// driver.health under the installed unit on Debian's kernel: netdevsim's
/// dummy health reporter (module built by the image) healthy, then broken with
/// its recovery failing; the kernel log read through the agent's kernel-log
/// helper unit (the daemon's own unit hides /dev/kmsg).
#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn driver_health_sees_netdevsims_reporter_break_under_the_unit() {
    let Some(d) = vm() else { return };
    step(d, "driver-nsim-up").ok();
    // The forged line is in the log, as userspace's (facility LOG_USER, as dmesg -x decodes it).
    let forged = step(d, "driver-forged");
    assert!(
        forged.ok().out.starts_with("user  :err"),
        "{}",
        forged.text()
    );
    let watch = step(d, "driver-watch");
    watch.ok();
    // The daemon's own unit has no way to the log: no CAP_SYSLOG, /dev/kmsg hidden.
    assert!(!watch.out.contains("cap_syslog"), "{}", watch.text());
    assert!(
        watch.out.contains("ProtectKernelLogs=yes"),
        "{}",
        watch.text()
    );
    let before: Value = serde_json::from_str(step(d, "driver-before").ok().out.trim()).unwrap();
    assert_eq!(before["status"], "ok", "{before}");
    assert_eq!(before["details"]["kernel_log_read"], true, "{before}");
    assert_eq!(
        before["details"]["kernel_log"],
        serde_json::json!({}),
        "{before}"
    );
    // So the log it read came through its kernel-log helper units, which ran and ended.
    let helper = step(d, "driver-helper");
    helper.ok();
    assert!(
        helper.out.contains("rdma-node-agent-kernel-log-")
            && helper.out.contains("Deactivated successfully"),
        "{}",
        helper.text()
    );
    let brk = step(d, "driver-break");
    brk.ok();
    assert!(brk.out.contains("error"), "{}", brk.text());
    let after: Value = serde_json::from_str(step(d, "driver-after").ok().out.trim()).unwrap();
    assert_eq!(after["status"], "fail", "{after}");
    assert_eq!(after["reason"], "devlink_reporter_error", "{after}");
    let msg = after["message"].as_str().unwrap();
    assert!(
        msg.starts_with("netdevsim/netdevsim10: health reporter dummy is in error state"),
        "{msg}"
    );
    let metrics = step(d, "driver-metrics").out;
    assert!(
        metrics.contains(
            "rdma_node_agent_driver_health_reporter_in_error{instance=\"netdevsim/netdevsim10\",reporter=\"netdevsim/netdevsim10/dummy\"} 1"
        ),
        "{metrics}"
    );
}
