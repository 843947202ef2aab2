use crate::concerns::driver::reasons;
use std::collections::BTreeMap;

use super::*;
use crate::engine::check::{Check, Status};
use crate::host::Host;

fn reporter(instance: &str, name: &str, state: u8, errors: u64) -> Reporter {
    Reporter {
        instance: instance.into(),
        port: None,
        name: name.into(),
        state,
        errors,
        recovers: errors,
        last_dump_unix: None,
    }
}

fn nic(name: &str, pci: &str) -> Nic {
    Nic {
        name: name.into(),
        pci: Some(pci.into()),
        why: None,
    }
}

fn facts(reporters: Vec<Reporter>, state: State) -> Facts {
    Facts {
        state: Ok(state),
        boot_id: Some("boot-a".into()),
        nics: vec![nic("mlx5_0", "0000:03:00.0"), nic("mlx5_1", "0000:41:00.0")],
        devlink: Devlink::Reporters(reporters),
        log: Some(Ok(LogReading::default())),
    }
}

fn run(f: &Facts) -> (Check, Vec<Observation>) {
    run_with(f, &Config::default())
}

fn run_with(f: &Facts, config: &Config) -> (Check, Vec<Observation>) {
    let ctx = Ctx {
        config,
        checks: &[],
        observations: &[],
    };
    let d = Health.decide(f, &ctx);
    (d.checks[0].clone(), d.observations)
}

fn persisted(obs: &[Observation]) -> Option<State> {
    obs.iter().find_map(|o| match o {
        Observation::Fleet(Fact::Persist { record, .. }) => {
            serde_json::from_slice(&record.bytes).ok()
        }
        _ => None,
    })
}

fn healthy() -> Vec<Reporter> {
    vec![
        reporter("pci/0000:03:00.0", "fw_fatal", 0, 0),
        reporter("pci/0000:41:00.0", "fw_fatal", 0, 0),
    ]
}

#[test]
fn healthy_reporters_and_a_clean_log_are_ok() {
    let (c, obs) = run(&facts(healthy(), State::default()));
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert!(
        c.message
            .starts_with("2 devlink health reporter(s) healthy"),
        "{}",
        c.message
    );
    assert!(persisted(&obs).is_some());
}

#[test]
fn a_reporter_in_error_fails_naming_device_and_reporter_and_hides_no_other() {
    let mut r = healthy();
    r[0].state = 1;
    r[0].errors = 1;
    // The other NIC's count rose: its warning is still in the message.
    r[1].errors = 2;
    let (c, obs) = run(&facts(r, State::default()));
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.reason, Some(reasons::DEVLINK_REPORTER_ERROR));
    assert!(
        c.message
            .starts_with("mlx5_0 (pci/0000:03:00.0): health reporter fw_fatal is in error state"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains(
            "mlx5_1 (pci/0000:41:00.0): health reporter fw_fatal counted 2 error(s) since boot"
        ),
        "{}",
        c.message
    );
    let Observation::DriverHealth { problems, .. } = &obs[0] else {
        panic!()
    };
    assert!(problems.contains(&(
        "pci/0000:41:00.0".into(),
        "pci/0000:41:00.0/fw_fatal".into(),
        "reporter_errors",
        2
    )));
}

#[test]
fn errors_rising_warn_until_reboot_and_a_reload_is_no_alarm() {
    let mut r = healthy();
    r[1].errors = 3;
    let (c, obs) = run(&facts(r.clone(), State::default()));
    assert_eq!(
        (c.status, c.reason),
        (Status::Warn, Some(reasons::DEVLINK_ERRORS_RISING))
    );
    assert!(
        c.message
            .contains("3 error(s) since boot, 3 since the last cycle"),
        "{}",
        c.message
    );
    let kept = persisted(&obs).unwrap();
    // The driver was reloaded: its count restarts at 0, not an alarm, not a fall.
    r[1].errors = 0;
    let (c, obs) = run(&facts(r.clone(), kept));
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    let kept = persisted(&obs).unwrap();
    r[1].errors = 1;
    let (c, _) = run(&facts(r.clone(), kept.clone()));
    assert!(
        c.message
            .contains("1 error(s) since boot, 1 since the last cycle"),
        "{}",
        c.message
    );
    // A new boot: counts are the new boot's.
    let mut f = facts(r, kept);
    f.boot_id = Some("boot-b".into());
    let (c, _) = run(&f);
    assert_eq!(c.status, Status::Warn);
}

#[test]
fn no_devlink_family_is_unknown_for_a_pci_nic_and_skipped_without_one() {
    let mut f = facts(vec![], State::default());
    f.devlink = Devlink::NoFamily;
    let (c, _) = run(&f);
    assert_eq!(
        (c.status, c.reason),
        (Status::Unknown, Some(reasons::DEVLINK_UNAVAILABLE))
    );
    assert!(c.message.contains("CONFIG_NET_DEVLINK"), "{}", c.message);
    // A node with only Soft-RoCE and no kernel log: nothing to watch, said so.
    f.nics = vec![Nic {
        name: "rxe0".into(),
        pci: None,
        why: Some("no PCI device (a software RDMA device)".into()),
    }];
    f.log = None;
    let (c, _) = run(&f);
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
    assert!(c.message.contains("rxe0: no PCI device"), "{}", c.message);
    // Nor does a kernel log it cannot read (a container's /dev/null) make it
    // unknown: there is no NIC on PCI whose driver it would speak of.
    f.log = Some(Err(
        "/dev/kmsg is a stand-in (char 1:3), not the kernel log".into(),
    ));
    let (c, _) = run(&f);
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
    assert!(c.message.contains("kernel log not read"), "{}", c.message);
}

#[test]
fn a_nic_without_reporters_is_named_and_a_watched_instance_without_them_is_unknown() {
    let (c, _) = run(&facts(vec![healthy()[0].clone()], State::default()));
    assert_eq!(c.status, Status::Ok);
    assert!(
        c.message
            .contains("mlx5_1 (pci/0000:41:00.0) has no devlink health reporter"),
        "{}",
        c.message
    );
    let mut cfg = Config::default();
    cfg.section_mut::<super::config::DriverHealthConfig>()
        .also_watch = vec!["netdevsim/netdevsim10".into()];
    let (c, _) = run_with(&facts(healthy(), State::default()), &cfg);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message
            .starts_with("netdevsim/netdevsim10 has no devlink health reporter"),
        "{}",
        c.message
    );
    let mut r = healthy();
    r.push(reporter("netdevsim/netdevsim10", "dummy", 1, 1));
    let (c, _) = run_with(&facts(r, State::default()), &cfg);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message
            .starts_with("netdevsim/netdevsim10: health reporter dummy is in error state"),
        "{}",
        c.message
    );
}

#[test]
fn an_unreadable_kernel_log_is_unknown_and_hides_no_devlink_failure() {
    let mut r = healthy();
    r[0].state = 1;
    let mut f = facts(r, State::default());
    f.log = Some(Err("cannot read /dev/kmsg: EPERM".into()));
    let (c, _) = run(&f);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message.contains("the kernel log could not be read"),
        "{}",
        c.message
    );
    f.devlink = Devlink::Reporters(healthy());
    let (c, _) = run(&f);
    assert_eq!(
        (c.status, c.reason),
        (Status::Unknown, Some(reasons::KERNEL_LOG_UNREADABLE))
    );
}

/// A tree whose sysfs has two mlx5 NICs and whose /dev/kmsg holds the public
/// reports' lines (tests/fixtures/kmsg/mlx5-public.txt).
fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (dev, pci) in [("mlx5_0", "0000:56:00.0"), ("mlx5_1", "0000:41:00.0")] {
        let fun = t.path().join("sys/devices/pci0000:00").join(pci);
        std::fs::create_dir_all(fun.join("infiniband").join(dev)).unwrap();
        std::fs::create_dir_all(t.path().join("sys/class/infiniband")).unwrap();
        std::os::unix::fs::symlink(
            format!("../../devices/pci0000:00/{pci}/infiniband/{dev}"),
            t.path().join("sys/class/infiniband").join(dev),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            format!("../../../{pci}"),
            fun.join("infiniband").join(dev).join("device"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(t.path().join("proc/sys/kernel/random")).unwrap();
    std::fs::write(
        t.path().join("proc/sys/kernel/random/boot_id"),
        "3f0c1e0e-boot\n",
    )
    .unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kmsg/mlx5-public.txt"
        ),
        t.path().join("dev/kmsg"),
    )
    .unwrap();
    t
}

#[test]
fn the_kernel_logs_fatal_messages_fail_per_device_counted_once() {
    let t = tree();
    let snap = Snapshot::new(Host::new(t.path())).with_devlink(Ok(vec![
        reporter("pci/0000:56:00.0", "fw_fatal", 0, 0),
        reporter("pci/0000:41:00.0", "fw_fatal", 0, 0),
    ]));
    let cfg = Config::default();
    let f = Health.gather(&snap, &cfg).unwrap();
    assert_eq!(f.nics[0].pci.as_deref(), Some("0000:56:00.0"));
    let (c, obs) = run(&f);
    assert_eq!(
        (c.status, c.reason),
        (Status::Fail, Some(reasons::DRIVER_FATAL_LOG))
    );
    for part in [
        "mlx5_0 (mlx5_core 0000:56:00.0): cmd_timeout ×1",
        "mlx5_1 (mlx5_core 0000:41:00.0): health_compromised ×1",
        "mlx5_core 0000:18:00.0: cmd_timeout ×1",
        "mlx5_1 (mlx5_core 0000:41:00.0): fw_syndrome ×1",
    ] {
        assert!(c.message.contains(part), "{part} in {}", c.message);
    }
    // Counts and names only: no text of a record leaves the check.
    assert!(!format!("{obs:?}").contains("ACCESS_REG"));
    // The daemon keeps the state: the next pass reads only newer records.
    let state = persisted(&obs).unwrap();
    assert_eq!(state.kmsg_seq, Some(1403));
    let expected: BTreeMap<String, u64> = [
        ("0000:18:00.0/cmd_timeout", 1),
        ("0000:41:00.0/fw_syndrome", 1),
        ("0000:41:00.0/health_compromised", 1),
        ("0000:56:00.0/cmd_timeout", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(state.kmsg, expected);
    let mut again = Health.gather(&snap, &cfg).unwrap();
    // gather read the state file, absent in the tree: give it the kept one.
    assert_eq!(state.boot_id.as_deref(), Some("3f0c1e0e-boot"));
    again.state = Ok(state.clone());
    again.log = read_log(&snap, state.kmsg_seq, true, &cfg);
    let (c, obs) = run(&again);
    assert!(c.message.contains("health_compromised ×1"), "{}", c.message);
    assert!(persisted(&obs).is_none(), "nothing new: nothing to write");
}

#[test]
fn off_the_live_host_devlink_is_not_asked_and_nothing_is_persisted() {
    let t = tree();
    std::fs::remove_file(t.path().join("dev/kmsg")).unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let f = Health.gather(&snap, &Config::default()).unwrap();
    let (c, obs) = run(&f);
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
    assert!(c.message.contains("devlink not asked"), "{}", c.message);
    assert!(persisted(&obs).is_none());
}
