//! The kernel checks across a real reboot into another kernel (boots 2 and 3 of
//! the VM tier): bookworm's kernel (A) and bookworm-backports' (B) installed side
//! by side, Debian's dkms with the tiny module rdma-probe built for both and
//! installed for A only by the image (tests/vm/customize.sh).

use std::fs;
use std::path::Path;

use serde_json::Value;

use super::{check, step, vm};

/// One check of a `check --json --only A --only B ...` step, by id.
fn check_id(dir: &Path, name: &str, id: &str) -> Value {
    let s = step(dir, name);
    s.json()["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id).cloned())
        .unwrap_or_else(|| panic!("{name}: no check {id}:\n{}", s.text()))
}

/// The two kernels: bookworm's (booted first, A) and the newer one the guest
/// rebooted into (B), as `uname -r` gave them.
fn kernels(d: &Path) -> (String, String) {
    let a = step(d, "uname").ok().out.trim().to_owned();
    let b = fs::read_to_string(d.join("kernel-b"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(step(d, "boot2-uname").ok().out.trim(), a);
    assert_ne!(a, b, "the image has one kernel");
    (a, b)
}

/// `probe_module` in the guest: modprobe loaded rdma_probe from the running
/// kernel's tree, from DKMS's place, and its vermagic names that kernel.
fn assert_probe_loaded(d: &Path, name: &str, release: &str) {
    let s = step(d, name);
    s.ok();
    let lines: Vec<&str> = s.out.lines().collect();
    assert!(lines[0].starts_with("rdma_probe "), "{name}: {}", s.text());
    assert!(
        lines[1].starts_with(&format!(
            "/lib/modules/{release}/updates/dkms/rdma_probe.ko"
        )),
        "{name}: {}",
        s.text()
    );
    assert_eq!(
        lines[2].split_whitespace().next(),
        Some(release),
        "{name}: vermagic: {}",
        s.text()
    );
}

/// The real `dkms status` line of rdma-probe for a kernel.
fn dkms_line(d: &Path, name: &str, release: &str) -> String {
    let s = step(d, name);
    s.ok();
    let prefix = format!("rdma-probe/1.0, {release}, x86_64: ");
    s.out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{name}: no line for {release}:\n{}", s.text()))
        .to_owned()
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn dkms_gate_holds_back_the_reboot_until_dkms_installs_for_the_newer_kernel() {
    let Some(d) = vm() else { return };
    let (a, b) = kernels(d);
    assert_probe_loaded(d, "gate-probe", &a);
    step(d, "gate-apply").ok();
    // As the image left it: dkms built the module for both kernels and
    // installed it for the running one only.
    assert_eq!(
        dkms_line(d, "gate-dkms-status", &a),
        format!("rdma-probe/1.0, {a}, x86_64: installed")
    );
    assert_eq!(
        dkms_line(d, "gate-dkms-status", &b),
        format!("rdma-probe/1.0, {b}, x86_64: built")
    );
    let s = step(d, "gate-built");
    assert_eq!(s.rc, 1, "check exits 1 on a failed check:\n{}", s.text());
    let c = check_id(d, "gate-built", "kernel.dkms");
    assert_eq!(c["status"], "fail", "{c:#}");
    assert_eq!(
        c["message"],
        format!(
            "rebooting into {b} would lose rdma-probe: built by DKMS but not installed: run `dkms install`"
        ),
        "{c:#}"
    );
    assert_eq!(
        c["details"]["newer_installed"],
        serde_json::json!([b]),
        "{c:#}"
    );
    assert_eq!(
        c["details"]["disagreements"],
        serde_json::json!([]),
        "{c:#}"
    );
    let m = check_id(d, "gate-built", "kernel.modules");
    assert_eq!(m["status"], "ok", "{m:#}");
    assert_eq!(
        m["message"],
        format!("rdma_probe loaded, files match {a}"),
        "{m:#}"
    );
    let k = check_id(d, "gate-built", "kernel.change");
    assert_eq!(k["status"], "ok", "{k:#}");
    assert_eq!(k["message"], format!("kernel {a}, unchanged"), "{k:#}");

    // `dkms install -k B` from the existing build: nothing compiled in the guest.
    let install = step(d, "gate-install");
    install.ok();
    assert!(
        !install.out.contains("Building module"),
        "{}",
        install.text()
    );
    assert!(
        install
            .out
            .contains(&format!("Installing to /lib/modules/{b}/updates/dkms/")),
        "{}",
        install.text()
    );
    assert_eq!(
        dkms_line(d, "gate-dkms-status-installed", &b),
        format!("rdma-probe/1.0, {b}, x86_64: installed")
    );
    let s = step(d, "gate-installed");
    assert_eq!(s.rc, 0, "{}", s.text());
    let c = check_id(d, "gate-installed", "kernel.dkms");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(
        c["message"],
        format!("DKMS builds installed for {a}, {b}, confirmed by dkms status"),
        "{c:#}"
    );
    // And the guest asked for the reboot into B, which happened (boot 3).
    assert_eq!(fs::read_to_string(d.join("boots")).unwrap().trim(), "3");
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn kernel_change_and_dkms_across_a_reboot_into_the_newer_kernel() {
    let Some(d) = vm() else { return };
    let (a, b) = kernels(d);
    assert_eq!(step(d, "boot3-uname").ok().out.trim(), b);
    assert_probe_loaded(d, "boot3-probe", &b);
    for k in [&a, &b] {
        assert_eq!(
            dkms_line(d, "boot3-dkms-status", k),
            format!("rdma-probe/1.0, {k}, x86_64: installed")
        );
    }
    // Before an apply on B: the change from the recorded A, another boot.
    let c = check_id(d, "boot3-kernel", "kernel.change");
    assert_eq!(c["status"], "warn", "{c:#}");
    assert_eq!(
        c["message"],
        format!(
            "kernel changed from {a} to {b} since the last run: the host preparation is re-applied at the next apply"
        ),
        "{c:#}"
    );
    assert_eq!(c["details"]["release"], b.as_str(), "{c:#}");
    assert_eq!(c["details"]["changed_from"], a.as_str(), "{c:#}");
    assert_eq!(c["details"]["recorded"]["release"], a.as_str(), "{c:#}");
    assert_ne!(
        c["details"]["boot_id"], c["details"]["recorded"]["boot_id"],
        "{c:#}"
    );
    // No kernel newer than B: the gate covers B alone.
    let k = check_id(d, "boot3-kernel", "kernel.dkms");
    assert_eq!(k["status"], "ok", "{k:#}");
    assert_eq!(
        k["message"],
        format!("DKMS builds installed for {b}, confirmed by dkms status"),
        "{k:#}"
    );
    assert_eq!(
        k["details"]["newer_installed"],
        serde_json::json!([]),
        "{k:#}"
    );
    let m = check_id(d, "boot3-kernel", "kernel.modules");
    assert_eq!(m["status"], "ok", "{m:#}");
    assert_eq!(
        m["message"],
        format!("rdma_probe loaded, files match {b}"),
        "{m:#}"
    );
    // apply records B (and A before it); the change is then reported once, as done.
    step(d, "boot3-apply").ok();
    let c = check(d, "boot3-change-after-apply");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(
        c["message"],
        format!("kernel changed from {a} to {b} at this boot; host preparation re-applied"),
        "{c:#}"
    );
    assert_eq!(c["details"]["recorded"]["release"], b.as_str(), "{c:#}");
    assert_eq!(c["details"]["recorded"]["previous"], a.as_str(), "{c:#}");
}
