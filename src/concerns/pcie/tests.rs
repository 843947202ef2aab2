//! `pcie.aer` on the real GPU host's tree (tests/fixtures/gpudirect/gpu-host,
//! see its PROVENANCE: a kernel without CONFIG_PCIEPORTBUS, so no AER
//! statistics) and on PCIe trees built here, labelled as such, whose AER
//! files are in the kernel's format (tests/fixtures/aer, see its PROVENANCE).

use crate::concerns::pcie::reasons;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::*;
use crate::engine::check::Status;
use crate::host::Host;

const RP: &str = "sys/devices/pci0000:00/0000:00:10.0";
const USP: &str = "sys/devices/pci0000:00/0000:00:10.0/0000:01:00.0";
const DSP: &str = "sys/devices/pci0000:00/0000:00:10.0/0000:01:00.0/0000:02:00.0";
const NIC: &str = "sys/devices/pci0000:00/0000:00:10.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
const GPU: &str = "sys/devices/pci0000:00/0000:00:11.0/0000:05:00.0";
const CLEAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/aer/clean");

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// A function with the kernel's clean AER files, a 16 GT/s x16 link, and its
/// /sys/bus/pci/devices link.
fn function(root: &Path, dir: &str, vendor: &str, class: &str) {
    let bdf = dir.rsplit('/').next().unwrap();
    for f in ["aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"] {
        put(
            root,
            &format!("{dir}/{f}"),
            &fs::read_to_string(format!("{CLEAN}/{f}")).unwrap(),
        );
    }
    put(root, &format!("{dir}/vendor"), &format!("{vendor}\n"));
    put(root, &format!("{dir}/class"), &format!("{class}\n"));
    for (k, v) in [
        ("current_link_speed", "16.0 GT/s PCIe"),
        ("max_link_speed", "16.0 GT/s PCIe"),
        ("current_link_width", "16"),
        ("max_link_width", "16"),
    ] {
        put(root, &format!("{dir}/{k}"), &format!("{v}\n"));
    }
    fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
    symlink(
        format!("../../../{}", dir.trim_start_matches("sys/")),
        root.join("sys/bus/pci/devices").join(bdf),
    )
    .unwrap();
}

/// Built here: root port 00:10.0 → switch (01:00.0 → 02:00.0) → NIC mlx5_0 at
/// 03:00.0; root port 00:11.0 → GPU 05:00.0; a Soft-RoCE rxe0 (no PCI).
fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    for d in [RP, USP, DSP, "sys/devices/pci0000:00/0000:00:11.0"] {
        function(root, d, "0x8086", "0x060400");
    }
    for rp in [RP, "sys/devices/pci0000:00/0000:00:11.0"] {
        for f in ["cor", "nonfatal", "fatal"] {
            put(root, &format!("{rp}/aer_rootport_total_err_{f}"), "0\n");
        }
    }
    function(root, NIC, "0x15b3", "0x020000");
    function(root, GPU, "0x10de", "0x030200");
    fs::create_dir_all(root.join("sys/class/infiniband/mlx5_0")).unwrap();
    symlink(
        format!("../../../{}", NIC.trim_start_matches("sys/")),
        root.join("sys/class/infiniband/mlx5_0/device"),
    )
    .unwrap();
    fs::create_dir_all(root.join("sys/devices/virtual/infiniband/rxe0")).unwrap();
    symlink(
        "../../devices/virtual/infiniband/rxe0",
        root.join("sys/class/infiniband/rxe0"),
    )
    .unwrap();
    put(root, "proc/sys/kernel/random/boot_id", "boot-a\n");
    t
}

fn facts(root: &Path) -> Facts {
    let snap = Snapshot::new(Host::new(root));
    let cfg = Config::default();
    Aer.gather(&snap, &cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn decide(f: &Facts, cfg: &Config) -> (Check, Option<History>) {
    let ctx = Ctx {
        config: cfg,
        checks: &[],
        observations: &[],
    };
    let d = Aer.decide(f, &ctx);
    let next = d.observations.iter().find_map(|o| match o {
        Observation::Fleet(Fact::Persist { record, .. }) => {
            Some(serde_json::from_slice(&record.bytes).unwrap())
        }
        _ => None,
    });
    (d.checks[0].clone(), next)
}

/// A reconcile at `now` with the history the previous one left.
fn again(root: &Path, prev: &History, now: u64) -> (Check, History) {
    let mut f = facts(root);
    f.history = Ok(prev.clone());
    f.now = now;
    let (c, next) = decide(&f, &Config::default());
    (c, next.unwrap_or_else(|| prev.clone()))
}

#[test]
fn the_real_gpu_host_without_aer_statistics_warns_never_ok() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpudirect/gpu-host");
    // `[pcie] without_aer = "unknown"`: not ready until AER can be read.
    let mut strict = Config::default();
    strict
        .section_mut::<super::config::PcieConfig>()
        .without_aer = super::config::WithoutAer::Unknown;
    let (c, _) = decide(&facts(&root), &strict);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::AER_UNAVAILABLE));
    // By default a warning: its errors are not known, the node stays ready.
    let (c, _) = decide(&facts(&root), &Config::default());
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::AER_UNAVAILABLE));
    assert_eq!(
        c.message,
        "1 function(s) have no AER statistics, so their errors are not known (no aer_dev_* files: the function has no AER capability, or the kernel is built without CONFIG_PCIEAER): 0000:00:06.0 (GPU)"
    );
}

#[test]
fn a_clean_tree_is_ok_and_watches_every_function_on_the_paths() {
    let t = tree();
    let f = facts(t.path());
    let all: Vec<&str> = f.watched.functions.keys().map(String::as_str).collect();
    assert_eq!(
        all,
        [
            "0000:00:10.0",
            "0000:00:11.0",
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:03:00.0",
            "0000:05:00.0"
        ]
    );
    let rp = &f.watched.functions["0000:00:10.0"];
    assert_eq!(
        rp.role.describe(),
        "root port on the path to NIC mlx5_0 (0000:03:00.0)"
    );
    assert_eq!(rp.rootport, Some(Ok([0, 0, 0])));
    assert_eq!(
        f.watched.functions["0000:03:00.0"].role.describe(),
        "NIC mlx5_0"
    );
    let (c, next) = decide(&f, &Config::default());
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert!(c.message.starts_with("6 PCIe function(s)"), "{}", c.message);
    assert_eq!(next.unwrap().boot_id.as_deref(), Some("boot-a"));
}

#[test]
fn a_fatal_error_fails_naming_the_function_and_counter_and_an_unreadable_one_hides_nothing() {
    let t = tree();
    let root = t.path();
    put(
        root,
        &format!("{NIC}/aer_dev_fatal"),
        &fs::read_to_string(format!("{CLEAN}/aer_dev_fatal"))
            .unwrap()
            .replace("DLP 0", "DLP 1")
            .replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 1"),
    );
    put(
        root,
        "sys/devices/pci0000:00/0000:00:10.0/aer_rootport_total_err_fatal",
        "1\n",
    );
    put(root, &format!("{GPU}/aer_dev_nonfatal"), "garbage\n");
    let (c, _) = decide(&facts(root), &Config::default());
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::AER_FATAL));
    assert!(c.message.starts_with("0000:00:10.0 (root port on the path to NIC mlx5_0 (0000:03:00.0)): aer_rootport_total_err_fatal 1 since boot"), "{}", c.message);
    assert!(
        c.message.contains(
            "0000:03:00.0 (NIC mlx5_0): aer_dev_fatal TOTAL_ERR_FATAL 1 since boot (DLP 1)"
        ),
        "{}",
        c.message
    );
    assert!(
        c.message.contains(
            "0000:05:00.0 (GPU): cannot read its AER statistics: aer_dev_nonfatal does not parse"
        ),
        "{}",
        c.message
    );
}

#[test]
fn nonfatal_warns_or_fails_as_configured() {
    let t = tree();
    let root = t.path();
    put(
        root,
        &format!("{GPU}/aer_dev_nonfatal"),
        &fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/aer/errors/aer_dev_nonfatal"
        ))
        .unwrap(),
    );
    let (c, _) = decide(&facts(root), &Config::default());
    assert_eq!(
        (c.status, c.reason),
        (Status::Warn, Some(reasons::AER_NONFATAL)),
        "{}",
        c.message
    );
    assert_eq!(
        c.message,
        "0000:05:00.0 (GPU): aer_dev_nonfatal TOTAL_ERR_NONFATAL 3 since boot (UnsupReq 3)"
    );
    let cfg = Config::parse(
        "[pcie]\nnonfatal = \"fail\"\n",
        Path::new("/c"),
        crate::concerns::registry::SECTIONS,
    )
    .unwrap();
    let (c, _) = decide(&facts(root), &cfg);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    // A root port's non-fatal totals (from a function below it) follow the same setting.
    let t = tree();
    let root = t.path();
    put(
        root,
        &format!("{RP}/aer_rootport_total_err_nonfatal"),
        "2\n",
    );
    let (c, _) = decide(&facts(root), &Config::default());
    assert_eq!(
        (c.status, c.reason),
        (Status::Warn, Some(reasons::AER_NONFATAL)),
        "{}",
        c.message
    );
    assert!(
        c.message.ends_with(
            "aer_rootport_total_err_nonfatal 2 since boot (non-fatal error messages from below it)"
        ),
        "{}",
        c.message
    );
    let (c, _) = decide(&facts(root), &cfg);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
}

fn correctable(root: &Path, dir: &str, n: u64) {
    put(
        root,
        &format!("{dir}/aer_dev_correctable"),
        &format!("RxErr {n}\nBadTLP 0\nTOTAL_ERR_COR {n}\n"),
    );
}

#[test]
fn rising_correctable_errors_warn_and_a_reset_or_a_reboot_does_not() {
    let t = tree();
    let root = t.path();
    // Errors from before the agent looked are a baseline, not a rise.
    correctable(root, NIC, 5000);
    let (c, h) = again(root, &History::default(), 10_000);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    correctable(root, NIC, 5150);
    let (c, h) = again(root, &h, 10_600);
    assert_eq!(
        (c.status, c.reason),
        (Status::Warn, Some(reasons::AER_CORRECTABLE_RISING)),
        "{}",
        c.message
    );
    assert_eq!(
        c.message,
        "0000:03:00.0 (NIC mlx5_0): aer_dev_correctable TOTAL_ERR_COR rose by 150 in the last 1h (more than pcie.correctable_threshold = 100; 5150 since boot (RxErr 5150))"
    );
    // An hour without new errors: ok again.
    let (c, h) = again(root, &h, 14_300);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    // The function was reset (removed and rescanned): the count fell.
    correctable(root, NIC, 2);
    let (c, h) = again(root, &h, 14_400);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(h.functions["0000:03:00.0"].resets, 1);
    // A reboot: a new boot id, counts from 0.
    put(root, "proc/sys/kernel/random/boot_id", "boot-b\n");
    correctable(root, NIC, 90);
    let (c, h) = again(root, &h, 14_500);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(h.boot_id.as_deref(), Some("boot-b"));
}

#[test]
fn a_link_that_retrained_down_since_boot_is_named() {
    let t = tree();
    let root = t.path();
    let (_, h) = again(root, &History::default(), 1000);
    put(
        root,
        &format!("{GPU}/current_link_speed"),
        "8.0 GT/s PCIe\n",
    );
    put(root, &format!("{GPU}/current_link_width"), "8\n");
    let (c, h) = again(root, &h, 1100);
    assert_eq!(
        (c.status, c.reason),
        (Status::Warn, Some(reasons::PCIE_LINK_RETRAINED_DOWN)),
        "{}",
        c.message
    );
    assert_eq!(
        c.message,
        "0000:05:00.0 (GPU): link retrained down: now 8.0 GT/s x8, trained at 16.0 GT/s x16 earlier this boot (max 16.0 GT/s x16)"
    );
    // The next boot starts at its own best: a link that never trained faster is not named here.
    put(root, "proc/sys/kernel/random/boot_id", "boot-b\n");
    let (c, _) = again(root, &h, 1200);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
}

#[test]
fn virtual_rdma_devices_alone_leave_nothing_to_watch() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("sys/devices/virtual/infiniband/rxe0")).unwrap();
    fs::create_dir_all(root.join("sys/class/infiniband")).unwrap();
    symlink(
        "../../devices/virtual/infiniband/rxe0",
        root.join("sys/class/infiniband/rxe0"),
    )
    .unwrap();
    let (c, _) = decide(&facts(root), &Config::default());
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
}
