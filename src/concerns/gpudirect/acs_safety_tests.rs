//! What keeps ACS reads and writes honest, on copies of the V100 sample (see
//! its PROVENANCE; PLX ports 0000:04:00.0 and 0000:04:08.0 with ACSCtl 0x001d)
//! changed here as a node shows them: the 64 bytes a process without
//! CAP_SYS_ADMIN gets (the daemon's unit), a bridge that reads all ones, a
//! device bound to vfio-pci, a shared IOMMU group, another device or another
//! boot at revert, a corrupt record, an RDMA device whose link loops.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path as FsPath;

use super::acs_fix;
use super::acs_tests::{config_of, ctl, decide, effects, record, run_all, sample};
use super::*;
use crate::config::gpudirect::AcsMode;
use crate::engine::effect::{LiveCtx, settle};
use crate::engine::fakes::FakeHost;
use crate::engine::outcome::ActionStatus;
use crate::host::Host;
use crate::host::pci_helper::testing::InProcess;
use crate::host::stop::Stop;

const BRIDGES: [&str; 8] = [
    "0000:00:02.0",
    "0000:00:03.0",
    "0000:03:00.0",
    "0000:04:00.0",
    "0000:04:08.0",
    "0000:04:10.0",
    "0000:80:02.0",
    "0000:83:00.0",
];

/// What the daemon reads under its unit: the first 64 bytes of each bridge.
fn as_the_unit_reads(root: &FsPath) {
    for b in BRIDGES {
        let p = config_of(root, b);
        if let Ok(c) = fs::read(&p) {
            fs::write(&p, &c[..64]).unwrap();
        }
    }
}

/// nvidia_peermem loaded: the pairs' readiness rests on the path alone.
fn with_peermem(root: &FsPath) {
    let m = root.join("sys/module/nvidia_peermem");
    fs::create_dir_all(&m).unwrap();
    fs::write(m.join("version"), "1.0\n").unwrap();
    let peers = root.join("sys/kernel/mm/memory_peers/nv_mem");
    fs::create_dir_all(&peers).unwrap();
    fs::write(peers.join("version"), "1.3-0\n").unwrap();
}

fn line_of<'a>(d: &'a Decision, gpu: &str) -> &'a str {
    d.checks[0].details["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .find(|l| l.starts_with(&format!("GPU {gpu} ↔ mlx5_0")))
        .unwrap_or_else(|| panic!("no pair of {gpu}: {}", d.checks[0].details))
}

#[test]
fn a_64_byte_read_is_unknown_naming_the_missing_capability() {
    let t = sample();
    with_peermem(t.path());
    as_the_unit_reads(t.path());
    let d = decide(t.path(), AcsMode::Disable);
    let c = &d.checks[0];
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message.contains(
            "ACS of bridge 0000:04:08.0 unknown: config space truncated to 64 bytes: the process lacks CAP_SYS_ADMIN"
        ),
        "{}",
        c.message
    );
    assert!(c.message.contains(
        "run the check as root, or let the daemon reach systemd over D-Bus to run its helper"
    ));
    // Nothing unknown is cleared.
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn under_the_unit_the_helper_reads_what_root_reads_and_clears_it() {
    let whole = sample();
    let unit = sample();
    as_the_unit_reads(unit.path());
    let mut config = Config::default();
    config.gpudirect.acs = AcsMode::Disable;
    let ctx = Ctx {
        config: &config,
        checks: &[],
        observations: &[],
    };
    let systemd = Arc::new(InProcess::new(whole.path(), unit.path()));
    let snap = Snapshot::new(Host::new(unit.path())).with_manager(systemd.clone());
    let d = Path.decide(&Path.gather(&snap, &config).unwrap(), &ctx);
    // The same check as root's on the whole config space.
    let root = decide(whole.path(), AcsMode::Disable);
    assert_eq!(d.checks[0].status, root.checks[0].status);
    assert_eq!(d.checks[0].message, root.checks[0].message);
    assert!(
        d.checks[0]
            .message
            .contains("ACS P2P redirect on switch port 0000:04:08.0")
    );
    let runs = systemd.runs();
    assert_eq!(runs.len(), 1, "one helper run per cycle: {runs:?}");
    assert!(runs[0].starts_with("pci-config read --token "), "{runs:?}");
    assert!(runs[0].contains("0000:04:08.0"), "{runs:?}");
    // apply, through the helper: the register changes where root sees it,
    // the record and the journal are the agent's.
    let live = FakeHost {
        host: Host::new(unit.path()),
        ..FakeHost::default()
    };
    let stop = Stop::new();
    let cx = LiveCtx {
        host: &live,
        manager: Some(systemd.as_ref() as &dyn crate::host::service::ServiceManager),
        stop: &stop,
    };
    let out: Vec<_> = effects(&d).iter().map(|e| settle(e.run(&cx))).collect();
    assert!(out.iter().all(|(s, _)| *s == ActionStatus::Done), "{out:?}");
    assert_eq!(ctl(whole.path(), "0000:04:08.0"), 0);
    assert_eq!(record(unit.path()).unwrap().ports.len(), 2);
    let journal =
        fs::read_to_string(unit.path().join("var/lib/rdma-node-agent/journal.jsonl")).unwrap();
    assert!(
        journal
            .contains(r#""event":"acs_clear","path":"/sys/bus/pci/devices/0000:04:08.0/config""#),
        "{journal}"
    );
    assert!(
        systemd.runs()[1].contains("write-acs"),
        "{:?}",
        systemd.runs()
    );
}

#[test]
fn a_bridge_that_reads_all_ones_is_unknown_not_without_acs() {
    let t = sample();
    let root = t.path();
    with_peermem(root);
    // ACS already off on the NIC's port; the GPU's port stopped answering.
    let p = config_of(root, "0000:04:00.0");
    let mut c = fs::read(&p).unwrap();
    c[0xf2a] = 0;
    fs::write(&p, &c).unwrap();
    fs::write(config_of(root, "0000:04:08.0"), vec![0xff; 4096]).unwrap();
    let d = decide(root, AcsMode::Report);
    let line = line_of(&d, "0000:06:00.0");
    assert!(
        line.contains("; cannot tell: ") && line.contains("acs_unknown"),
        "{line}"
    );
    assert!(
        d.checks[0].message.contains(
            "ACS of bridge 0000:04:08.0 unknown: its config space reads all ones (0xffffffff at 0x000)"
        ),
        "{}",
        d.checks[0].message
    );
    assert_eq!(d.checks[0].status, Status::Unknown);
    // All ones in the extended list only (a hypervisor hiding it) is no better.
    let mut c = fs::read(config_of(sample().path(), "0000:04:08.0")).unwrap();
    c[0x100..0x104].copy_from_slice(&[0xff; 4]);
    assert_eq!(
        pcie::parse_config(&c).acs,
        pcie::Acs::NotResponding { at: 0x100 }
    );
}

#[test]
fn no_clear_above_a_passthrough_device_or_in_a_shared_iommu_group() {
    let t = sample();
    let root = t.path();
    let sw = root.join("sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0");
    // The GPU below 04:08.0 handed to a VM.
    let drivers = root.join("sys/bus/pci/drivers/vfio-pci");
    fs::create_dir_all(&drivers).unwrap();
    symlink(
        "../../../../../../bus/pci/drivers/vfio-pci",
        sw.join("0000:04:08.0/0000:06:00.0/driver"),
    )
    .unwrap();
    // 04:00.0 shares its IOMMU group with the switch's upstream port.
    let group = root.join("sys/kernel/iommu_groups/7/devices");
    fs::create_dir_all(&group).unwrap();
    for f in ["0000:03:00.0", "0000:04:00.0"] {
        fs::create_dir_all(group.join(f)).unwrap();
    }
    symlink(
        "/sys/kernel/iommu_groups/7",
        sw.join("0000:04:00.0/iommu_group"),
    )
    .unwrap();
    // A group of several functions below a bridge is no reason (they are
    // grouped whatever its ACS): the NIC with a second function.
    let below = root.join("sys/kernel/iommu_groups/9/devices");
    fs::create_dir_all(&below).unwrap();
    for f in ["0000:05:00.0", "0000:05:00.1"] {
        fs::create_dir_all(below.join(f)).unwrap();
    }
    symlink(
        "/sys/kernel/iommu_groups/9",
        sw.join("0000:04:00.0/0000:05:00.0/iommu_group"),
    )
    .unwrap();
    let d = decide(root, AcsMode::Disable);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    let m = &d.checks[0].message;
    assert!(
        m.contains("apply does not clear ACS on 0000:04:08.0: 0000:06:00.0 below it is bound to vfio-pci, a passthrough driver"),
        "{m}"
    );
    assert!(
        m.contains("apply does not clear ACS on 0000:04:00.0: it is in IOMMU group 7 with 2 devices (0000:03:00.0, 0000:04:00.0)"),
        "{m}"
    );
    assert!(!m.contains("apply clears ACS"), "{m}");
    // A variant driver is passthrough too; a normal one is not.
    assert!(gather::is_passthrough("mlx5_vfio_pci"));
    assert!(gather::is_passthrough("pci-stub"));
    assert!(!gather::is_passthrough("nvidia"));
}

#[test]
fn revert_writes_nothing_to_another_device_or_after_a_reboot() {
    let t = sample();
    let root = t.path();
    let out = run_all(root, &effects(&decide(root, AcsMode::Disable)));
    assert!(out.iter().all(|(s, _)| *s == ActionStatus::Done), "{out:?}");
    // Another device now answers at 04:00.0 (same boot).
    let p = config_of(root, "0000:04:00.0");
    let mut c = fs::read(&p).unwrap();
    c[2] ^= 0x01;
    fs::write(&p, &c).unwrap();
    let undo = acs_fix::undo(&Host::new(root).reader());
    let out = run_all(root, &undo[..1]);
    assert_eq!(out[0].0, ActionStatus::Skipped, "{out:?}");
    assert!(out[0].1.contains("not the vendor"), "{}", out[0].1);
    assert!(
        out[0].1.ends_with("another device, nothing written"),
        "{}",
        out[0].1
    );
    assert_eq!(ctl(root, "0000:04:00.0"), 0);
    // A reboot since: the firmware's value is back already, or whatever
    // booted there; nothing is written.
    fs::write(root.join("proc/sys/kernel/random/boot_id"), "b00t-2\n").unwrap();
    let out = run_all(root, &acs_fix::undo(&Host::new(root).reader()));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, ActionStatus::Skipped, "{out:?}");
    assert!(
        out[0]
            .1
            .contains("ACS was reset by a reboot since the agent cleared it"),
        "{}",
        out[0].1
    );
    assert!(out[0].1.ends_with("nothing to restore"), "{}", out[0].1);
    assert_eq!(ctl(root, "0000:04:08.0"), 0);
    assert_eq!(record(root), None);
    let journal = fs::read_to_string(root.join("var/lib/rdma-node-agent/journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches(r#""event":"acs_clear""#).count(),
        2,
        "{journal}"
    );
    assert!(!journal.contains("acs_restore"), "{journal}");
}

#[test]
fn a_restore_is_journalled() {
    let t = sample();
    let root = t.path();
    run_all(root, &effects(&decide(root, AcsMode::Disable)));
    let out = run_all(root, &acs_fix::undo(&Host::new(root).reader()));
    assert!(out.iter().all(|(s, _)| *s == ActionStatus::Done), "{out:?}");
    let journal = fs::read_to_string(root.join("var/lib/rdma-node-agent/journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""event":"acs_restore","path":"/sys/bus/pci/devices/0000:04:00.0/config","owner":"gpudirect.path","reason":"ACSCtl 0x0000 → 0x001d at 0xf2a"#),
        "{journal}"
    );
}

#[test]
fn a_corrupt_record_is_an_error_never_overwritten() {
    let t = sample();
    let root = t.path();
    let rec = root.join("var/lib/rdma-node-agent/gpudirect-acs.json");
    fs::create_dir_all(rec.parent().unwrap()).unwrap();
    fs::write(
        &rec,
        b"{\"boot_id\": \"x\", \"ports\": {\"0000:04:00.0\": {\"offs",
    )
    .unwrap();
    let out = run_all(root, &effects(&decide(root, AcsMode::Disable)));
    assert!(
        out.iter().all(|(s, _)| *s == ActionStatus::Failed),
        "{out:?}"
    );
    assert!(
        out[0].1.contains("gpudirect-acs.json does not parse"),
        "{}",
        out[0].1
    );
    assert!(out[0].1.contains("nothing is written"), "{}", out[0].1);
    assert_eq!(ctl(root, "0000:04:00.0"), 0x001d);
    assert!(fs::read(&rec).unwrap().ends_with(b"offs"));
    let undo = acs_fix::undo(&Host::new(root).reader());
    let out = run_all(root, &undo);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, ActionStatus::Failed, "{out:?}");
    assert!(out[0].1.contains("does not parse"), "{}", out[0].1);
}

#[test]
fn an_rdma_device_whose_link_cannot_be_resolved_is_unknown_not_dropped() {
    let t = sample();
    let root = t.path();
    let dev = root.join(
        "sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0/0000:04:00.0/0000:05:00.0/infiniband/mlx5_0/device",
    );
    fs::remove_file(&dev).unwrap();
    symlink("device", &dev).unwrap();
    let d = decide(root, AcsMode::Report);
    let c = &d.checks[0];
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message
            .contains("RDMA device mlx5_0: its sysfs device link cannot be resolved"),
        "{}",
        c.message
    );
}

#[test]
fn a_group_of_functions_below_is_no_reason() {
    let t = sample();
    let root = t.path();
    let below = root.join("sys/kernel/iommu_groups/9/devices");
    fs::create_dir_all(&below).unwrap();
    for f in ["0000:05:00.0", "0000:05:00.1"] {
        fs::create_dir_all(below.join(f)).unwrap();
    }
    symlink(
        "/sys/kernel/iommu_groups/9",
        root.join("sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0/0000:04:00.0/0000:05:00.0/iommu_group"),
    )
    .unwrap();
    let keys: Vec<String> = decide(root, AcsMode::Disable)
        .actions
        .iter()
        .map(|a| a.kind.key().to_string())
        .collect();
    assert_eq!(keys, ["clear_acs 0000:04:00.0", "clear_acs 0000:04:08.0"]);
}
