//! `[gpudirect] acs = "disable"` on a copy of the V100 sample (PLX ports
//! 0000:04:00.0 and 0000:04:08.0 with ACSCtl 0x001d at ECAP_ACS 0xf24, see its
//! PROVENANCE): what is planned, what the effects write, the record, a reboot
//! and revert. The effects run against the tree through the fake live host.

use std::fs;
use std::path::{Path as FsPath, PathBuf};

use super::acs_fix::{self, Port, Record};
use super::*;
use crate::config::gpudirect::AcsMode;
use crate::engine::effect::{LiveCtx, settle};
use crate::engine::fakes::FakeHost;
use crate::engine::outcome::ActionStatus;
use crate::host::Host;
use crate::host::stop::Stop;

pub(super) fn sample() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let from = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes/v100");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(t.path())
        .status()
        .unwrap();
    assert!(status.success());
    t
}

pub(super) fn config_of(root: &FsPath, bdf: &str) -> PathBuf {
    root.join("sys/bus/pci/devices").join(bdf).join("config")
}

pub(super) fn ctl(root: &FsPath, bdf: &str) -> u16 {
    let c = fs::read(config_of(root, bdf)).unwrap();
    u16::from_le_bytes([c[0xf2a], c[0xf2b]])
}

pub(super) fn decide(root: &FsPath, acs: AcsMode) -> Decision {
    let mut config = Config::default();
    config.gpudirect.acs = acs;
    let snap = Snapshot::new(Host::new(root));
    let ctx = Ctx {
        config: &config,
        checks: &[],
        observations: &[],
    };
    Path.decide(&Path.gather(&snap, &config).unwrap(), &ctx)
}

pub(super) fn effects(d: &Decision) -> Vec<Arc<dyn Effect>> {
    d.actions
        .iter()
        .map(|a| match &a.kind {
            ActionKind::Effect(e) => e.clone(),
            ActionKind::RestartUnit { unit } => panic!("restart {unit}"),
        })
        .collect()
}

pub(super) fn run_all(root: &FsPath, effects: &[Arc<dyn Effect>]) -> Vec<(ActionStatus, String)> {
    let live = FakeHost {
        host: Host::new(root),
        ..FakeHost::default()
    };
    let stop = Stop::new();
    let cx = LiveCtx {
        host: &live,
        manager: None,
        stop: &stop,
    };
    effects.iter().map(|e| settle(e.run(&cx))).collect()
}

pub(super) fn record(root: &FsPath) -> Option<Record> {
    let p = root.join(acs_fix::record_path().strip_prefix("/").unwrap());
    fs::read(p)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap())
}

#[test]
fn report_plans_nothing_and_disable_plans_exactly_the_pix_path_bridges() {
    let t = sample();
    assert!(decide(t.path(), AcsMode::Report).actions.is_empty());
    let d = decide(t.path(), AcsMode::Disable);
    let keys: Vec<String> = d.actions.iter().map(|a| a.kind.key().to_string()).collect();
    // Not the SYS pairs' root ports, not the upstream port (no ACS), not 04:10.0 (ACS 0).
    assert_eq!(keys, ["clear_acs 0000:04:00.0", "clear_acs 0000:04:08.0"]);
    assert_eq!(
        d.actions[1].kind.to_string(),
        "clear ACS on 0000:04:08.0: ACSCtl SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ → none (config 0xf2a = ECAP_ACS+6, as setpci -s 0000:04:08.0 ECAP_ACS+6.w=0000)"
    );
    assert_eq!(
        d.actions[0].reason,
        "[gpudirect] acs = \"disable\": ACS redirects peer-to-peer for GPU 0000:06:00.0 ↔ mlx5_0, GPU 0000:07:00.0 ↔ mlx5_0"
    );
    assert!(
        d.checks[0]
            .message
            .contains("apply clears ACS on 0000:04:00.0, 0000:04:08.0"),
        "{}",
        d.checks[0].message
    );
}

#[test]
fn apply_clears_exactly_those_bytes_records_them_and_revert_restores_them() {
    let t = sample();
    let root = t.path();
    let before: Vec<(String, Vec<u8>)> = [
        "0000:04:00.0",
        "0000:04:08.0",
        "0000:04:10.0",
        "0000:03:00.0",
        "0000:00:02.0",
    ]
    .iter()
    .map(|b| (b.to_string(), fs::read(config_of(root, b)).unwrap()))
    .collect();
    let out = run_all(root, &effects(&decide(root, AcsMode::Disable)));
    assert!(out.iter().all(|(s, _)| *s == ActionStatus::Done), "{out:?}");
    assert_eq!(
        out[0].1,
        "0000:04:00.0: ACSCtl 0x001d → 0x0000 (recorded for revert)"
    );
    for (bdf, old) in &before {
        let new = fs::read(config_of(root, bdf)).unwrap();
        let differ: Vec<usize> = (0..old.len()).filter(|i| old[*i] != new[*i]).collect();
        let want: &[usize] = if bdf.starts_with("0000:04:0") {
            &[0xf2a]
        } else {
            &[]
        };
        assert_eq!(differ, want, "{bdf}");
    }
    let boot = fs::read_to_string(root.join("proc/sys/kernel/random/boot_id")).unwrap();
    let rec = record(root).unwrap();
    assert_eq!(rec.boot_id, boot.trim());
    let identity = crate::host::pci_config::PciIdentity::of(&before[1].1);
    assert!(identity.is_some());
    assert_eq!(
        rec.ports["0000:04:08.0"],
        Port {
            offset: 0xf24,
            original: 0x001d,
            written: 0,
            boot_id: boot.trim().to_owned(),
            identity,
        }
    );
    // The check now finds no redirect on the PIX pairs, and nothing to plan.
    let d = decide(root, AcsMode::Disable);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert!(
        !d.checks[0].details["lines"][0]
            .as_str()
            .unwrap()
            .contains("acs_redirect")
    );

    // A reboot: ACS is back (the firmware's 0x001d), the boot id is new.
    fs::write(root.join("proc/sys/kernel/random/boot_id"), "b00t-2\n").unwrap();
    for (bdf, old) in &before {
        fs::write(config_of(root, bdf), old).unwrap();
    }
    let out = run_all(root, &effects(&decide(root, AcsMode::Disable)));
    assert_eq!(out.len(), 2);
    // Each bridge says so (the record keeps the boot of each port).
    assert!(
        out.iter()
            .all(|(_, d)| d.ends_with("; ACS had come back with the reboot")),
        "{out:?}"
    );
    let rec = record(root).unwrap();
    assert_eq!(
        (rec.boot_id.as_str(), rec.ports["0000:04:00.0"].original),
        ("b00t-2", 0x001d)
    );

    // revert: the recorded values go back, the record goes.
    let undo = acs_fix::undo(&Host::new(root).reader());
    assert_eq!(undo.len(), 2);
    assert_eq!(
        undo[0].describe(),
        "write ACSCtl 0x001d back to 0000:04:00.0"
    );
    let out = run_all(root, &undo);
    assert!(out.iter().all(|(s, _)| *s == ActionStatus::Done), "{out:?}");
    for (bdf, old) in &before {
        assert_eq!(&fs::read(config_of(root, bdf)).unwrap(), old, "{bdf}");
    }
    assert_eq!(record(root), None);
    assert!(acs_fix::undo(&Host::new(root).reader()).is_empty());
}

#[test]
fn revert_leaves_a_register_changed_since_and_apply_refuses_a_moved_capability() {
    let t = sample();
    let root = t.path();
    run_all(root, &effects(&decide(root, AcsMode::Disable)));
    // Someone set SrcValid since the agent wrote 0.
    let p = config_of(root, "0000:04:00.0");
    let mut c = fs::read(&p).unwrap();
    c[0xf2a] = 0x01;
    fs::write(&p, &c).unwrap();
    let out = run_all(root, &acs_fix::undo(&Host::new(root).reader()));
    assert_eq!(out[0].0, ActionStatus::Skipped, "{out:?}");
    assert!(
        out[0]
            .1
            .contains("ACSCtl is 0x0001, not the 0x0000 the agent wrote")
    );
    assert_eq!(ctl(root, "0000:04:00.0"), 0x0001);
    assert_eq!(ctl(root, "0000:04:08.0"), 0x001d);

    // The capability is not where the plan read it: nothing is written.
    let t = sample();
    let root = t.path();
    let plan = effects(&decide(root, AcsMode::Disable));
    let p = config_of(root, "0000:04:08.0");
    let mut c = fs::read(&p).unwrap();
    c[0xf24] = 0x0b;
    fs::write(&p, &c).unwrap();
    let out = run_all(root, &plan);
    assert_eq!(out[1].0, ActionStatus::Failed);
    assert!(
        out[1]
            .1
            .contains("the ACS capability is not at 0xf24 any more"),
        "{}",
        out[1].1
    );
    assert_eq!(ctl(root, "0000:04:08.0"), 0x001d);
}
