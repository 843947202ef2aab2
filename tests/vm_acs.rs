//! The ACS tier: `[gpudirect] acs = "disable"` on a real kernel's PCI config
//! space. One run of `tests/vm/run.sh` with tests/vm/acs-guest.sh boots the VM
//! image twice as a q35 machine with an emulated Intel IOMMU (so Debian's kernel
//! turns ACS on, as on a node with an IOMMU), three PCIe root ports, a switch
//! (x3130-upstream + two xio3130-downstream) and three e1000e functions. QEMU
//! cannot be a GPU or an RDMA NIC: two e1000e stand in for GPUs (their vendor
//! and class files bind-mounted over with NVIDIA's) and one for mlx5_0 (a tmpfs
//! over /sys/class/infiniband links to it); config space is the kernel's own.
//! What is read back is read with setpci (the host's pciutils, copied in).
//! The agent is the product as installed: the .deb installed in the guest
//! (systemd is PID 1 there), `check`/`plan`/`apply`/`revert` run by its binary
//! as an operator runs them, and the daemon its shipped unit, started with
//! systemctl and at boot, read over /status, /readyz and its journal.
//!
//! The same boots carry the AER proof (`pcie.aer`): after the ACS steps of
//! boot 2, QEMU's monitor command `pcie_aer_inject_error` (sent by
//! tests/vm/aer-inject.sh on the host when the guest asks on its serial
//! console) records correctable, non-fatal and fatal errors in the emulated
//! e1000e functions' AER registers and signals them to their root ports, as
//! hardware does; the guest kernel's AER driver counts them in sysfs, and the
//! unit's daemon says so in /status and /metrics.
//!
//! Needs root and QEMU like tests/vm_rxe.rs (the same cached image), and
//! setpci on the host (Debian's pciutils). `RDMA_AGENT_VM=0` turns it off (each
//! test says so); otherwise a VM that cannot run fails every test with the
//! reason. `RDMA_AGENT_VM_RESULTS_ACS=DIR` asserts on an earlier run's records.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

/// The machine: q35 with an IOMMU, rp1 → switch → {gpu0, nic}, rp2 → gpu1, rp3 empty.
const QEMU_ARGS: &str = "-machine q35 -device intel-iommu,intremap=off \
    -device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x10 \
    -device x3130-upstream,id=usp,bus=rp1 \
    -device xio3130-downstream,id=dsp1,bus=usp,chassis=2,slot=0,addr=0x0 \
    -device xio3130-downstream,id=dsp2,bus=usp,chassis=3,slot=1,addr=0x1 \
    -device e1000e,bus=dsp1,id=gpu0 -device e1000e,bus=dsp2,id=nic \
    -device pcie-root-port,id=rp2,bus=pcie.0,chassis=4,addr=0x11 -device e1000e,bus=rp2,id=gpu1 \
    -device pcie-root-port,id=rp3,bus=pcie.0,chassis=5,addr=0x12";

#[path = "vm/harness.rs"]
mod harness;

const TIER: harness::Tier = harness::Tier {
    name: "vm_acs",
    what: "the ACS tier",
    guest: "acs-guest.sh",
    results: "last-acs-results",
    results_env: "RDMA_AGENT_VM_RESULTS_ACS",
    env: &[
        ("VM_QEMU_ARGS", QEMU_ARGS),
        ("VM_APPEND", "intel_iommu=on"),
        ("VM_BOOTS", "2"),
        ("VM_INJECT", "aer-inject.sh"),
    ],
    payload: setpci,
};

fn vm() -> Option<&'static Path> {
    static RUN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    harness::results(&TIER, &RUN)
}

/// The host's setpci and its library, to read config space back in the guest.
fn setpci(p: &Path) -> Result<(), String> {
    let setpci = Path::new("/usr/bin/setpci");
    let libpci = Path::new("/lib/x86_64-linux-gnu/libpci.so.3");
    if !setpci.exists() || !libpci.exists() {
        return Err(
            "setpci is not installed on the host (Debian package pciutils): run scripts/test.sh"
                .into(),
        );
    }
    fs::create_dir_all(p.join("lib")).map_err(|e| e.to_string())?;
    for (from, to) in [(setpci, "setpci"), (libpci, "lib/libpci.so.3")] {
        fs::copy(from, p.join(to)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    Ok(())
}

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("the guest did not record {name}: {e}"))
}

/// A step's stdout, asserting it exited 0.
fn ok(dir: &Path, name: &str) -> String {
    let rc = read(dir, &format!("{name}.rc"));
    let out = read(dir, &format!("{name}.out"));
    assert_eq!(
        rc.trim(),
        "0",
        "step {name} failed:\n{out}{}",
        read(dir, &format!("{name}.err"))
    );
    out
}

/// Every bridge's ACSCtl as setpci read it (`None`: no ACS capability).
fn acs(dir: &Path, name: &str) -> BTreeMap<String, Option<u16>> {
    ok(dir, name)
        .lines()
        .map(|l| {
            let (b, v) = l.split_once(' ').unwrap();
            (b.to_owned(), u16::from_str_radix(v.trim(), 16).ok())
        })
        .collect()
}

/// gpu0, gpu1, nic → their PCI addresses (from the guest's layout).
fn who(dir: &Path, boot: u32) -> BTreeMap<String, String> {
    ok(dir, &format!("boot{boot}-identities"))
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

fn gpudirect(dir: &Path, name: &str) -> Value {
    let v: Value = serde_json::from_str(&read(dir, &format!("{name}.out")))
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e})"));
    v["checks"][0].clone()
}

/// The bridges the fix must clear: on a PIX/PXB/PHB pair's path, with a
/// redirect or egress-control bit set (ReqRedir 0x4, CmpltRedir 0x8, EgressCtrl 0x20).
fn expected_targets(dir: &Path, before: &BTreeMap<String, Option<u16>>) -> Vec<String> {
    let c = gpudirect(dir, "check-report");
    let mut t: Vec<String> = c["details"]["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| ["PIX", "PXB", "PHB"].contains(&p["distance"].as_str().unwrap()))
        .flat_map(|p| p["bridges"].as_array().unwrap().clone())
        .map(|b| b.as_str().unwrap().to_owned())
        .filter(|b| {
            before
                .get(b)
                .copied()
                .flatten()
                .is_some_and(|v| v & 0x2c != 0)
        })
        .collect();
    t.sort();
    t.dedup();
    t
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn the_agent_reads_the_acs_the_real_kernel_set_on_each_path() {
    let Some(dir) = vm() else { return };
    let before = acs(dir, "boot1-acs-before");
    harness::say(&format!("vm_acs: ACSCtl as the kernel set it: {before:?}"));
    let ids = who(dir, 1);
    // QEMU's pcie-root-port has ACS (hw/pci-bridge/pcie_root_port.c, unless
    // disable-acs): with an IOMMU the kernel sets SrcValid ReqRedir CmpltRedir
    // UpstreamFwd on each, as far as the capability has them (pci_std_enable_acs).
    let roots: Vec<&String> = before
        .keys()
        .filter(|b| b.starts_with("0000:00:1"))
        .collect();
    assert_eq!(roots.len(), 3, "{before:?}");
    for r in roots {
        // At least the two redirect bits, where the capability has them.
        assert!(
            before[r].is_some_and(|v| v & 0x000c == 0x000c),
            "{r}: {before:?}"
        );
    }
    let c = gpudirect(dir, "check-report");
    let pairs = c["details"]["pairs"].as_array().unwrap();
    let find = |gpu: &str| {
        pairs
            .iter()
            .find(|p| p["gpu"] == ids[gpu].as_str())
            .unwrap_or_else(|| panic!("no pair for {gpu} ({}): {c}", ids[gpu]))
    };
    assert_eq!(find("gpu0")["distance"], "PIX", "{c}");
    assert_eq!(find("gpu1")["distance"], "PHB", "{c}");
    assert_eq!(find("gpu0")["nic_pci"], ids["nic"].as_str());
    // Every bridge the fix will clear is named with the remedy (in the pairs'
    // problems; the message lists the first three).
    for t in expected_targets(dir, &before) {
        assert!(
            c.to_string()
                .contains(&format!("setpci -s {t} ECAP_ACS+6.w=0000")),
            "{t} not named: {c}"
        );
    }
    assert_eq!(c["status"], "warn", "{c}");
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn apply_clears_exactly_the_path_bridges_and_revert_puts_them_back() {
    let Some(dir) = vm() else { return };
    let before = acs(dir, "boot1-acs-before");
    let targets = expected_targets(dir, &before);
    assert!(!targets.is_empty(), "{before:?}");
    let plan: Value = serde_json::from_str(&ok(dir, "plan")).unwrap();
    let planned: Vec<&str> = plan["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "clear_acs")
        .map(|a| a["target"].as_str().unwrap())
        .collect();
    assert_eq!(planned, targets, "{plan}");
    ok(dir, "apply");
    let after = acs(dir, "acs-after-apply");
    for (b, v) in &before {
        let want = if targets.contains(b) { Some(0) } else { *v };
        assert_eq!(after[b], want, "{b}: before {v:?}, after {:?}", after[b]);
    }
    let c = gpudirect(dir, "check-after-apply");
    for p in c["details"]["pairs"].as_array().unwrap() {
        assert!(
            !p["reasons"].to_string().contains("acs_redirect"),
            "ACS still redirects after apply: {p}"
        );
    }
    let rec: Value = serde_json::from_str(&ok(dir, "record-after-apply")).unwrap();
    assert_eq!(rec["boot_id"], read(dir, "boot1-boot_id").trim());
    for t in &targets {
        assert_eq!(
            rec["ports"][t]["original"].as_u64(),
            before[t].map(u64::from),
            "{rec}"
        );
    }
    ok(dir, "revert");
    assert_eq!(acs(dir, "acs-after-revert"), before);
    assert!(
        !ok(dir, "record-after-revert").contains("gpudirect-acs.json"),
        "the record stays after revert"
    );
    ok(dir, "apply-again");
    assert_eq!(acs(dir, "acs-after-apply-again"), after);
}

#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn a_reboot_brings_acs_back_and_the_daemon_clears_it_again() {
    let Some(dir) = vm() else { return };
    let before = acs(dir, "boot1-acs-before");
    let targets = expected_targets(dir, &before);
    assert_ne!(
        read(dir, "boot1-boot_id"),
        read(dir, "boot2-boot_id"),
        "not a new boot"
    );
    // The reset put back what the kernel sets at boot.
    assert_eq!(acs(dir, "boot2-acs-before"), before);
    let rec: Value = serde_json::from_str(&ok(dir, "record-before-daemon")).unwrap();
    assert_eq!(rec["boot_id"], read(dir, "boot1-boot_id").trim());
    // The package enabled the unit; systemd started it at boot.
    assert_eq!(ok(dir, "unit-boot2"), "enabled\nactive\n");
    let report = ok(dir, "unit-daemon");
    let after = acs(dir, "acs-after-daemon");
    for (b, v) in &before {
        let want = if targets.contains(b) { Some(0) } else { *v };
        assert_eq!(
            after[b],
            want,
            "{b}: the unit's daemon did not clear ACS: {after:?}\nits /status and /readyz:\n{report}\nits journal:\n{}",
            read(dir, "unit-journal.out")
        );
    }
    let log = ok(dir, "unit-journal");
    for t in &targets {
        let said = format!(
            "{t}: ACSCtl {:#06x} → 0x0000 (recorded for revert); ACS had come back with the reboot",
            before[t].unwrap()
        );
        assert!(
            log.contains(&said),
            "the daemon did not say {said:?}:\n{log}"
        );
    }
    let rec: Value = serde_json::from_str(&ok(dir, "record-after-daemon")).unwrap();
    let boot2 = read(dir, "boot2-boot_id");
    assert_eq!(rec["boot_id"], boot2.trim());
    for t in &targets {
        assert_eq!(rec["ports"][t]["boot_id"], boot2.trim(), "{rec}");
        assert_eq!(
            rec["ports"][t]["original"].as_u64(),
            before[t].map(u64::from),
            "{rec}"
        );
    }
    ok(dir, "revert2");
    assert_eq!(acs(dir, "acs-after-revert2"), before);
}

/// The unit's gpudirect.path check in a recorded `/status` extract (unit_check
/// in acs-guest.sh), and /readyz's code.
fn unit_check(dir: &Path, name: &str) -> (Value, String) {
    let out = ok(dir, name);
    let (json, readyz) = out
        .rsplit_once("readyz ")
        .unwrap_or_else(|| panic!("{name}: no readyz line:\n{out}"));
    let v: Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{name}: not JSON ({e}):\n{out}"));
    (v["checks"][0].clone(), readyz.trim().to_owned())
}

/// The pairs as (gpu, nic, distance, bridges), for comparing two reports.
fn pairs(c: &Value) -> Vec<(String, String, String, String)> {
    c["details"]["pairs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["gpu"].to_string(),
                        p["nic_pci"].to_string(),
                        p["distance"].to_string(),
                        p["bridges"].to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The daemon as installed (the package's unit, its sandbox and capabilities)
/// reads every path's ACS as `check` run by root does: the same pairs, the
/// same distances and bridges, the same warn with the remedy; never unknown.
#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn the_units_daemon_reads_acs_as_check_does() {
    let Some(dir) = vm() else { return };
    let install = ok(dir, "install");
    assert!(
        install.contains("enabled: enabled active: inactive"),
        "{install}"
    );
    ok(dir, "unit-start");
    let (unit, readyz) = unit_check(dir, "unit-report");
    let cli = gpudirect(dir, "check-report");
    let journal = read(dir, "unit-journal-report.out");
    assert_ne!(
        unit["status"], "unknown",
        "the unit's daemon cannot read what `check` reads: {unit}\nits journal:\n{journal}"
    );
    for p in unit["details"]["pairs"].as_array().into_iter().flatten() {
        assert!(
            !p["reasons"].to_string().contains("acs_unknown"),
            "the unit's daemon cannot read ACS on the path of {} (its sandbox): {}\nits journal:\n{journal}",
            p["gpu"],
            p["problems"]
        );
    }
    assert_eq!(unit["status"], cli["status"], "unit: {unit}\ncheck: {cli}");
    assert_eq!(pairs(&unit), pairs(&cli), "unit: {unit}\ncheck: {cli}");
    assert!(!pairs(&unit).is_empty(), "{unit}");
    harness::say(&format!(
        "vm_acs: the unit's gpudirect.path in report mode: {}; /readyz {readyz}",
        unit["status"]
    ));
}

/// The unit's pcie.aer as aer_wait in acs-guest.sh recorded it.
fn aer_check(dir: &Path, name: &str) -> Value {
    let out = ok(dir, name);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{name}: not JSON ({e}):\n{out}"))
}

/// BDF → (correctable, nonfatal, fatal) as the guest kernel counted them.
fn kernel_counts(dir: &Path, name: &str) -> BTreeMap<String, Option<[u64; 3]>> {
    ok(dir, name)
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let bdf = w.next().unwrap().to_owned();
            let n: Vec<u64> = w.take(3).filter_map(|x| x.parse().ok()).collect();
            (bdf, n.try_into().ok())
        })
        .collect()
}

/// AER on a real kernel: a clean boot is ok; a non-fatal error injected by
/// QEMU into the switch port above the NIC warns naming the port and what it
/// is on the path to; four correctable errors on the NIC's function (the
/// kernel's aer_inject) are named as rising (threshold 3) with the counter; a
/// fatal one into the root port above a GPU fails naming it, by its own count
/// and its root port totals. Each error is first seen in the guest kernel's
/// own counters.
#[test]
#[ignore = "boots a VM: run by scripts/test.sh (--include-ignored)"]
fn injected_aer_errors_reach_the_kernels_counters_and_the_units_verdict() {
    let Some(dir) = vm() else { return };
    let ids = who(dir, 2);
    let (nic, gpu1) = (&ids["nic"], &ids["gpu1"]);
    // Uncorrectable errors go to the ports above them (QEMU's e1000e cannot
    // signal its own: no writable reporting enables): the switch port above
    // the NIC, the root port above gpu1; correctable ones to the NIC itself
    // through the kernel's aer_inject (QEMU sends none up).
    let ports = read(dir, "aer-ports");
    let (dsp2, rp2) = ports.trim().split_once(' ').unwrap();
    let clean = kernel_counts(dir, "aer-counts-clean");
    for f in [nic, gpu1, &ids["gpu0"], &dsp2.to_owned(), &rp2.to_owned()] {
        assert_eq!(clean[f], Some([0, 0, 0]), "{f}: {clean:?}");
    }
    let c = aer_check(dir, "aer-clean");
    assert_eq!(c["status"], "ok", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("8 PCIe function(s)"),
        "{c}"
    );
    ok(dir, "aer-inject-nonfatal");
    let c = aer_check(dir, "aer-nonfatal");
    assert_eq!(c["reason"], "aer_nonfatal", "{c}");
    assert!(
        c["message"].as_str().unwrap().contains(&format!(
            "{dsp2} (bridge on the path to NIC mlx5_0 ({nic})): aer_dev_nonfatal TOTAL_ERR_NONFATAL 1 since boot (UnsupReq 1)"
        )),
        "{c}"
    );
    for i in 1..=4 {
        ok(dir, &format!("aer-inject-cor{i}"));
    }
    let c = aer_check(dir, "aer-correctable");
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["message"].as_str().unwrap().contains(&format!(
            "{nic} (NIC mlx5_0): aer_dev_correctable TOTAL_ERR_COR rose by 4 in the last 1h (more than pcie.correctable_threshold = 3; 4 since boot (RxErr 4))"
        )),
        "{c}"
    );
    let rising = &c["details"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == nic.as_str())
        .unwrap()["findings"];
    assert!(rising.to_string().contains("aer_correctable_rising"), "{c}");
    ok(dir, "aer-inject-unload");
    ok(dir, "aer-inject-fatal");
    let c = aer_check(dir, "aer-fatal");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("fail"), Some("aer_fatal")),
        "{c}"
    );
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "{rp2} (root port on the path to GPU {gpu1}): aer_dev_fatal TOTAL_ERR_FATAL 1 since boot (DLP 1)"
        )),
        "{c}"
    );
    assert!(
        msg.contains(&format!(
            "{rp2} (root port on the path to GPU {gpu1}): aer_rootport_total_err_fatal 1 since boot"
        )),
        "{c}"
    );
    let after = kernel_counts(dir, "aer-counts-after");
    assert_eq!(after[nic], Some([4, 0, 0]), "{after:?}");
    assert_eq!(after[dsp2], Some([0, 1, 0]), "{after:?}");
    assert_eq!(after[rp2], Some([0, 0, 1]), "{after:?}");
    let metrics = ok(dir, "aer-metrics");
    for want in [
        format!(
            "rdma_node_agent_pcie_aer_errors_total{{function=\"{nic}\",severity=\"correctable\"}} 4"
        ),
        format!("rdma_node_agent_pcie_aer_errors_total{{function=\"{rp2}\",severity=\"fatal\"}} 1"),
        format!(
            "rdma_node_agent_pcie_aer_errors_total{{function=\"{dsp2}\",severity=\"nonfatal\"}} 1"
        ),
        "rdma_node_agent_pcie_aer_functions{state=\"without_aer\"} 0".to_owned(),
    ] {
        assert!(metrics.contains(&want), "{want} not in:\n{metrics}");
    }
    harness::say(&format!(
        "vm_acs: pcie.aer after the fatal injection: {msg}"
    ));
}
