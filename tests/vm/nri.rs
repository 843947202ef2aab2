//! `memlock_via = "nri"` on the real kernel (boot 1 of the VM tier), as
//! installed: the agent's unit (the .deb's, started with `systemctl`) and its
//! NRI plugin alone, on a containerd 2.1 run by a unit of its own, let
//! ib_write_bw in a pod container register its 8 MiB buffer over Soft-RoCE; the
//! same container once the unit stopped fails with the kernel's refusal. The
//! guest side is tests/vm/guest.sh (the units) and tests/vm/nri_guest.rs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{MR_FAILURE, assert_no_ipc_lock, step, vm};

/// Puts the guest driver, the real containerd 2.1 and a static busybox (its
/// pods' image) into the payload.
pub fn payload(dir: &Path) -> Result<(), String> {
    let cache = std::env::var_os("RDMA_AGENT_CONTAINERD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/rdma-node-agent/containerd".into());
    let containerd = cache.join("2.1/containerd");
    let busybox = Path::new("/bin/busybox");
    let driver = build_driver()?;
    for (from, to, what) in [
        (
            containerd.as_path(),
            "containerd-2.1",
            "run scripts/fetch-containerd.sh",
        ),
        (busybox, "busybox", "install busybox-static"),
        (
            driver.as_path(),
            "vm-nri-guest",
            "cargo build --example vm-nri-guest",
        ),
    ] {
        fs::copy(from, dir.join(to)).map_err(|e| format!("{}: {e} ({what})", from.display()))?;
    }
    Ok(())
}

/// `cargo build --example vm-nri-guest` (the same cargo, profile and target dir
/// as this test); the executable cargo reports. Without the variables cargo
/// set for this test process (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, `OUT_DIR`, …):
/// ring's build script reads them, so with them the build would rebuild ring and the
/// library, and the next cargo run beside the other tests (scripts/test.sh's
/// ACS tier) would relink `target/debug/rdma-node-agent` under the tests
/// running it.
fn build_driver() -> Result<PathBuf, String> {
    let mut cargo = Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let set_for_tests = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_EXE_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
                    | "RUST_RECURSION_COUNT"
            );
        if set_for_tests {
            cargo.env_remove(key);
        }
    }
    let out = cargo
        .args(["build", "--quiet", "--example", "vm-nri-guest"])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err("cargo build --example vm-nri-guest failed (see above)".into());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "vm-nri-guest")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built no vm-nri-guest executable".into())
}

/// (soft, hard) of "Max locked memory" in a recorded /proc/…/limits.
fn memlock(limits: &str) -> (String, String) {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap_or_else(|| panic!("no memlock line in:\n{limits}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_owned(), f[4].to_owned())
}

#[test]
#[ignore = "needs root and QEMU (minutes under TCG): run via scripts/test.sh"]
fn nri_alone_lets_ib_write_bw_in_a_pod_register_its_buffer() {
    let Some(d) = vm() else { return };
    let started = step(d, "nri-containerd-start");
    assert!(started.ok().out.contains("containerd"), "{}", started.out);
    step(d, "nri-agent-config").ok();
    // The driver ran: it started and stopped the agent's unit with systemctl.
    step(d, "nri-driver").ok();
    // containerd itself, and so every container nothing adjusts, has 64 KiB.
    let containerd = step(d, "nri-containerd-limits");
    assert_eq!(
        memlock(&containerd.ok().out).0,
        "65536",
        "{}",
        containerd.out
    );
    let registered: Value = serde_json::from_str(&step(d, "nri-registered").ok().out).unwrap();
    assert_eq!(registered["status"], "ok", "{registered}");
    assert_eq!(registered["details"]["registered"], true, "{registered}");
    // The unit's own daemon registered, on the socket of the node's containerd.
    let journal = step(d, "nri-agent-journal");
    assert!(
        registered["message"]
            .as_str()
            .is_some_and(|m| m.contains("/run/nri/nri.sock")),
        "{registered}\n{}",
        journal.text()
    );

    // The plugin gave the RDMA container the target; runc applied it, with no
    // CAP_IPC_LOCK, and both sides of ib_write_bw registered 8 MiB.
    let with = step(d, "nri-bw-plugin");
    assert_eq!(with.rc, 0, "{}", with.text());
    assert_eq!(
        memlock(&with.out),
        ("unlimited".into(), "unlimited".into()),
        "{}",
        with.out
    );
    assert_no_ipc_lock(&with.out);
    assert!(with.text().contains("8388608"), "{}", with.text());
    assert!(
        !with.text().contains("Couldn't allocate MR"),
        "{}",
        with.text()
    );

    // The control: the same container after the agent stopped keeps containerd's
    // 64 KiB, and the kernel refuses to pin the buffer on both sides.
    let without = step(d, "nri-bw-without-plugin");
    assert_ne!(without.rc, 0, "{}", without.text());
    assert_eq!(memlock(&without.out).0, "65536", "{}", without.out);
    assert_no_ipc_lock(&without.out);
    assert_eq!(
        without.text().matches(MR_FAILURE).count(),
        2,
        "{}",
        without.text()
    );
}
