use super::*;

fn reading(name: &str, values: &[(&str, u64)]) -> PortReading {
    PortReading {
        name: name.to_owned(),
        values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

fn at(now: u64, boot: &str, ports: &[(&str, PortReading)]) -> Readings {
    Readings {
        now,
        boot_id: Some(boot.to_owned()),
        ports: ports
            .iter()
            .map(|(id, r)| ((*id).to_owned(), r.clone()))
            .collect(),
    }
}

const SYM: &str = "counters/symbol_error";
const ID: &str = "guid:0c42:a103:0065:6a3c/1";

#[test]
fn first_reading_is_a_baseline_then_rises_count() {
    let h = update(
        &History::default(),
        &at(1000, "a", &[(ID, reading("mlx5_0/1", &[(SYM, 500)]))]),
        3600,
    );
    let p = &h.ports[ID];
    // 500 errors before the agent looked: not within any window.
    assert_eq!(p.within(SYM, 1000, 3600), 0);
    let h = update(
        &h,
        &at(1030, "a", &[(ID, reading("mlx5_0/1", &[(SYM, 540)]))]),
        3600,
    );
    assert_eq!(h.ports[ID].within(SYM, 1030, 3600), 40);
    assert_eq!(h.ports[ID].totals[SYM], 40);
    // An hour later the window no longer holds them; the total does.
    let h = update(
        &h,
        &at(
            1030 + 3700,
            "a",
            &[(ID, reading("mlx5_0/1", &[(SYM, 540)]))],
        ),
        3600,
    );
    assert_eq!(h.ports[ID].within(SYM, 1030 + 3700, 3600), 0);
    assert_eq!(h.ports[ID].totals[SYM], 40);
}

#[test]
fn a_reset_a_reboot_and_a_wrap_raise_nothing_false() {
    let q = "hw_counters/out_of_sequence";
    let h = update(
        &History::default(),
        &at(
            0,
            "a",
            &[(ID, reading("mlx5_0/1", &[(SYM, 9_000), (q, 4_294_967_000)]))],
        ),
        3600,
    );
    // Driver reload: symbol_error back to 2; the Q counter wrapped by 300.
    let h = update(
        &h,
        &at(30, "a", &[(ID, reading("mlx5_0/1", &[(SYM, 2), (q, 4)]))]),
        3600,
    );
    let p = &h.ports[ID];
    assert_eq!(p.within(SYM, 30, 3600), 0);
    assert_eq!(p.last_reset, Some(30));
    assert_eq!(p.within(q, 30, 3600), 300);
    // From the reset on, rises count again.
    let h = update(
        &h,
        &at(60, "a", &[(ID, reading("mlx5_0/1", &[(SYM, 7), (q, 4)]))]),
        3600,
    );
    assert_eq!(h.ports[ID].within(SYM, 60, 3600), 5);
    // A reboot: raw values start again (lower); nothing counted, nothing lost.
    let h = update(
        &h,
        &at(90, "b", &[(ID, reading("mlx5_0/1", &[(SYM, 1), (q, 0)]))]),
        3600,
    );
    assert_eq!(h.ports[ID].within(SYM, 90, 3600), 5);
    assert_eq!(h.ports[ID].last_reset, Some(30));
    // After a reboot a raw value above the old one is no rise either.
    let h2 = update(
        &h,
        &at(
            95,
            "c",
            &[(ID, reading("mlx5_0/1", &[(SYM, 60_000), (q, 0)]))],
        ),
        3600,
    );
    assert_eq!(h2.ports[ID].within(SYM, 95, 3600), 5);
    let h = update(
        &h,
        &at(120, "b", &[(ID, reading("mlx5_0/1", &[(SYM, 3), (q, 0)]))]),
        3600,
    );
    assert_eq!(h.ports[ID].within(SYM, 120, 3600), 7);
}

#[test]
fn a_renamed_device_keeps_its_baseline_and_a_gone_one_is_forgotten() {
    let h = update(
        &History::default(),
        &at(0, "a", &[(ID, reading("mlx5_0/1", &[(SYM, 10)]))]),
        3600,
    );
    let h = update(
        &h,
        &at(30, "a", &[(ID, reading("mlx5_4/1", &[(SYM, 25)]))]),
        3600,
    );
    assert_eq!(h.ports[ID].name, "mlx5_4/1");
    assert_eq!(h.ports[ID].within(SYM, 30, 3600), 15);
    let h = update(&h, &at(30 + FORGET_AFTER_SECS, "a", &[]), 3600);
    assert!(h.ports.is_empty());
}

#[test]
fn steps_stay_bounded_when_counters_move_every_reconcile() {
    let c = "hw_counters/np_cnp_sent";
    let mut h = update(
        &History::default(),
        &at(0, "a", &[(ID, reading("mlx5_0/1", &[(c, 0)]))]),
        3600,
    );
    for i in 1..=2000u64 {
        h = update(
            &h,
            &at(i * 30, "a", &[(ID, reading("mlx5_0/1", &[(c, i * 7)]))]),
            3600,
        );
    }
    let p = &h.ports[ID];
    assert!(
        p.steps[c].len() <= BUCKETS as usize + 2,
        "{}",
        p.steps[c].len()
    );
    // 120 reconciles of 7 in the hour, give or take one bucket (60 s, 2 reconciles).
    let n = p.within(c, 60_000, 3600);
    assert!((840..=854).contains(&n), "{n}");
}
