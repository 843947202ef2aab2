//! The kernel concern through the real binary on host trees the tests build:
//! several installed kernels, DKMS builds present or missing for the newer one,
//! modules compressed with the real `xz` and `zstd`, a vermagic mismatch, an
//! OFED/DKMS module shadowing the in-tree one, and a kernel change across runs.
//! The `.ko` files are minimal ELF files with a `.modinfo` section, written here.

mod support;

use std::path::Path;
use std::process::Command;

use rdma_node_agent::kernel::modinfo::elf_with_modinfo;
use support::*;

const RUNNING: &str = "6.8.0-40-generic";
const NEWER: &str = "6.8.0-51-generic";
const MODULES: &[&str] = &["ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm"];

fn ko(release: &str) -> Vec<u8> {
    elf_with_modinfo(&[
        ("version", "24.10-1.1.4"),
        ("srcversion", "3F1A2B3C4D5E6F708192A3B"),
        (
            "vermagic",
            &format!("{release} SMP preempt mod_unload modversions "),
        ),
    ])
}

fn put(root: &Path, path: &str, bytes: &[u8]) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// Compresses with the real tool, as distributions ship .ko.xz and .ko.zst.
fn compressed(tool: &str, bytes: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.ko");
    std::fs::write(&f, bytes).unwrap();
    let st = Command::new(tool)
        .args(["-q", "-k"])
        .arg(&f)
        .status()
        .unwrap_or_else(|e| panic!("{tool}: {e} (install xz-utils / zstd)"));
    assert!(st.success());
    let ext = if tool == "xz" { "xz" } else { "zst" };
    std::fs::read(dir.path().join(format!("m.ko.{ext}"))).unwrap()
}

/// A node running RUNNING with NEWER installed: in-tree modules (zstd) for both,
/// the OFED stack built by DKMS for RUNNING only (xz), all loaded.
fn node_with_kernels() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    write(
        r,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n\n[systemd]\nenabled = false\n",
    );
    write(r, "/proc/sys/kernel/osrelease", &format!("{RUNNING}\n"));
    write(
        r,
        "/proc/sys/kernel/random/boot_id",
        "0f2c7c7e-7d1e-4a8e-9d55-1b6c9b1f0a01\n",
    );
    let loaded: String = MODULES
        .iter()
        .map(|m| format!("{m} 1454080 3 - Live 0x0000000000000000\n"))
        .collect();
    write(r, "/proc/modules", &loaded);
    for k in [RUNNING, NEWER] {
        for m in MODULES {
            put(
                r,
                &format!("/lib/modules/{k}/kernel/drivers/infiniband/{m}.ko.zst"),
                &compressed("zstd", &ko(k)),
            );
        }
    }
    for m in ["mlx5_core", "mlx5_ib"] {
        put(
            r,
            &format!("/lib/modules/{RUNNING}/updates/dkms/{m}.ko.xz"),
            &compressed("xz", &ko(RUNNING)),
        );
        put(
            r,
            &format!("/var/lib/dkms/mlnx-ofed-kernel/24.10/{RUNNING}/x86_64/module/{m}.ko.xz"),
            &compressed("xz", &ko(RUNNING)),
        );
    }
    t
}

fn kernel_check(root: &Path, id: &str) -> (i32, serde_json::Value) {
    let o = agent(root, &["check", "--json", "--only", id]);
    (o.status.code().unwrap(), json(&o)["checks"][0].clone())
}

#[test]
fn newer_kernel_without_dkms_build_fails_until_the_build_exists() {
    let t = node_with_kernels();
    let r = t.path();
    let (code, c) = kernel_check(r, "kernel.dkms");
    assert_eq!(code, 1);
    assert_eq!(
        c["message"],
        format!("rebooting into {NEWER} would lose mlnx-ofed-kernel: not built by DKMS")
    );
    let all = agent(r, &["check"]);
    assert_eq!(all.status.code(), Some(1), "{}", stdout(&all));

    for m in ["mlx5_core", "mlx5_ib"] {
        put(
            r,
            &format!("/var/lib/dkms/mlnx-ofed-kernel/24.10/{NEWER}/x86_64/module/{m}.ko.xz"),
            &compressed("xz", &ko(NEWER)),
        );
    }
    let (code, c) = kernel_check(r, "kernel.dkms");
    assert_eq!(code, 0, "{c}");
    assert_eq!(
        c["message"],
        format!("DKMS builds present for {RUNNING}, {NEWER}")
    );
    let all = agent(r, &["check"]);
    assert_eq!(
        all.status.code(),
        Some(0),
        "every check ok:\n{}",
        stdout(&all)
    );
}

#[test]
fn compressed_modules_are_read_and_dkms_builds_shadow_in_tree_ones() {
    let t = node_with_kernels();
    let (code, c) = kernel_check(t.path(), "kernel.modules");
    assert_eq!(code, 0, "{c}");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!(
            "ib_core, ib_uverbs, mlx5_core, mlx5_ib, rdma_ucm loaded, files match {RUNNING}"
        )),
        "{msg}"
    );
    assert!(
        msg.contains("mlx5_ib: updates/dkms/mlx5_ib.ko.xz shadows in-tree kernel/drivers/infiniband/mlx5_ib.ko.zst"),
        "{msg}"
    );
    let files = &c["details"]["modules"][3]["files"];
    assert_eq!(files[0]["version"], "24.10-1.1.4");
    assert_eq!(files[0]["built_for"], RUNNING);
}

#[test]
fn vermagic_mismatch_and_unloaded_modules_fail_with_the_reason() {
    let t = node_with_kernels();
    let r = t.path();
    // A DKMS build for another kernel copied under this one.
    put(
        r,
        &format!("/lib/modules/{RUNNING}/updates/dkms/mlx5_ib.ko.xz"),
        &compressed("xz", &ko("6.8.0-31-generic")),
    );
    write(
        r,
        "/proc/modules",
        "ib_core 1454080 3 - Live 0x0000000000000000\n",
    );
    let (code, c) = kernel_check(r, "kernel.modules");
    assert_eq!(code, 1);
    let msg = c["message"].as_str().unwrap();
    assert!(msg.contains("ib_uverbs is not loaded"), "{msg}");
    assert!(
        msg.contains(&format!(
            "mlx5_ib: updates/dkms/mlx5_ib.ko.xz was built for 6.8.0-31-generic, not {RUNNING} (vermagic mismatch)"
        )),
        "{msg}"
    );
    // A corrupt module file is named, not a crash.
    put(
        r,
        &format!("/lib/modules/{RUNNING}/updates/dkms/mlx5_core.ko.xz"),
        b"not xz at all",
    );
    let (_, c) = kernel_check(r, "kernel.modules");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("mlx5_core: updates/dkms/mlx5_core.ko.xz: cannot decompress"),
        "{c}"
    );
}

#[test]
fn a_kernel_change_is_reported_then_recorded_by_apply() {
    let t = node_with_kernels();
    let r = t.path();
    let (_, c) = kernel_check(r, "kernel.change");
    assert_eq!(
        c["message"],
        format!("kernel {RUNNING}; first run, nothing to compare with")
    );
    assert_eq!(agent(r, &["apply"]).status.code(), Some(0));
    assert_eq!(
        kernel_check(r, "kernel.change").1["message"],
        format!("kernel {RUNNING}, unchanged")
    );

    // The node reboots into the newer kernel.
    write(r, "/proc/sys/kernel/osrelease", &format!("{NEWER}\n"));
    write(
        r,
        "/proc/sys/kernel/random/boot_id",
        "7a1b2c3d-0000-4000-8000-000000000002\n",
    );
    let (code, c) = kernel_check(r, "kernel.change");
    assert_eq!(code, 0, "a change is a warning, not a failure");
    assert_eq!(c["status"], "warn");
    assert_eq!(
        c["message"],
        format!(
            "kernel changed from {RUNNING} to {NEWER} since the last run: the host preparation is re-applied at the next apply"
        )
    );
    let o = agent(r, &["apply"]);
    assert!(
        stderr(&o).contains(&format!(
            "kernel changed from {RUNNING} to {NEWER}: host preparation re-applied"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        kernel_check(r, "kernel.change").1["message"],
        format!(
            "kernel changed from {RUNNING} to {NEWER} at this boot; host preparation re-applied"
        )
    );
}

/// The V100 node needs a reboot for the netns mode, but a newer installed kernel
/// lacks the DKMS build: the kured sentinel is held back until the build exists.
#[test]
fn dkms_gap_holds_back_the_reboot_sentinel() {
    let t = node("v100");
    let r = t.path();
    let running = read(r, "/proc/sys/kernel/osrelease").trim().to_owned();
    let newer = "6.1.0-28-amd64";
    write(
        r,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n\
         [rdma]\nnetns_mode = \"exclusive\"\nreboot_sentinel = true\n\
         [kernel]\nrequired_modules = []\n",
    );
    for k in [running.as_str(), newer] {
        put(
            r,
            &format!("/lib/modules/{k}/kernel/drivers/infiniband/ib_core.ko"),
            &ko(k),
        );
    }
    put(
        r,
        &format!("/var/lib/dkms/nvidia-peermem/1.1/{running}/x86_64/module/nvidia-peermem.ko"),
        &ko(&running),
    );

    let o = agent(r, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !r.join("var/run/reboot-required").exists(),
        "sentinel raised although the next kernel would lose nvidia-peermem"
    );
    let (_, c) = kernel_check(r, "kernel.dkms");
    assert_eq!(
        c["message"],
        format!("rebooting into {newer} would lose nvidia-peermem: not built by DKMS")
    );

    put(
        r,
        &format!("/var/lib/dkms/nvidia-peermem/1.1/{newer}/x86_64/module/nvidia-peermem.ko"),
        &ko(newer),
    );
    let o = agent(r, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        read(r, "/var/run/reboot-required").contains("RDMA netns mode exclusive"),
        "sentinel once the build exists"
    );
}
