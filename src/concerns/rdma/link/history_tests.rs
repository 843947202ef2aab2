use super::*;

fn reading(active: Option<bool>, downed: Option<u64>) -> Reading {
    Reading {
        active,
        link_downed: downed,
        link_error_recovery: downed.map(|d| d * 2),
        events: 0,
    }
}

fn at(now: u64, boot: &str, port: Reading) -> Readings {
    Readings {
        now,
        boot_id: Some(boot.into()),
        events_instance: None,
        ports: [("mlx5_0/1".to_owned(), port)].into(),
    }
}

fn port(h: &History) -> &PortHistory {
    &h.ports["mlx5_0/1"]
}

#[test]
fn the_first_reading_is_only_a_baseline() {
    // Down, with counters already high: nothing happened while the agent watched.
    let h = update(
        &History::default(),
        &at(100, "b1", reading(Some(false), Some(40))),
    );
    let p = port(&h);
    assert_eq!((p.flaps_total, p.link_downed_total), (0, 0));
    assert!(p.flaps.is_empty());
    assert_eq!(p.link_downed, Some(40));
    assert_eq!(h.boot_id.as_deref(), Some("b1"));
}

#[test]
fn leaving_active_is_a_flap_coming_back_is_not() {
    let mut h = update(
        &History::default(),
        &at(100, "b", reading(Some(true), None)),
    );
    h = update(&h, &at(110, "b", reading(Some(false), None)));
    assert_eq!(port(&h).flaps_total, 1);
    h = update(&h, &at(120, "b", reading(Some(true), None)));
    assert_eq!(port(&h).flaps_total, 1);
    // Down and staying down is one flap, not one per poll.
    h = update(&h, &at(130, "b", reading(Some(false), None)));
    h = update(&h, &at(140, "b", reading(Some(false), None)));
    assert_eq!(port(&h).flaps_total, 2);
    assert_eq!(port(&h).last_flap(), Some(130));
    // An unknown state neither flaps nor forgets the last known one.
    h = update(&h, &at(150, "b", reading(None, None)));
    assert_eq!(port(&h).active, Some(false));
    assert_eq!(port(&h).flaps_total, 2);
}

#[test]
fn counter_deltas_catch_flaps_between_polls_without_double_counting() {
    let mut h = update(
        &History::default(),
        &at(0, "b", reading(Some(true), Some(5))),
    );
    // ACTIVE at both polls, yet the link went down 3 times in between.
    h = update(&h, &at(60, "b", reading(Some(true), Some(8))));
    let p = port(&h);
    assert_eq!((p.flaps_total, p.link_downed_total), (3, 3));
    assert_eq!(p.link_error_recovery_total, 6);
    // Seen down by the poll and counted by the kernel: one flap, not two.
    h = update(&h, &at(120, "b", reading(Some(false), Some(9))));
    assert_eq!(port(&h).flaps_total, 4);
    assert_eq!(port(&h).link_downed_total, 4);
}

#[test]
fn a_counter_reset_is_a_reset_not_a_negative_delta() {
    let mut h = update(
        &History::default(),
        &at(0, "b", reading(Some(true), Some(100))),
    );
    // The driver was reloaded: the counter starts again, and rose to 2 since.
    h = update(&h, &at(60, "b", reading(Some(true), Some(2))));
    let p = port(&h);
    assert_eq!((p.link_downed_total, p.flaps_total), (2, 2));
    assert_eq!(p.link_downed, Some(2));
    h = update(&h, &at(120, "b", reading(Some(true), Some(2))));
    assert_eq!(port(&h).flaps_total, 2);
}

#[test]
fn a_reboot_keeps_the_totals_and_rebaselines() {
    let mut h = update(
        &History::default(),
        &at(0, "b1", reading(Some(true), Some(0))),
    );
    h = update(&h, &at(60, "b1", reading(Some(false), Some(1))));
    assert_eq!(port(&h).flaps_total, 1);
    // Rebooted: the counters restart at a value of their own, the port was
    // down while the node rebooted; none of it is a flap.
    h = update(&h, &at(600, "b2", reading(Some(true), Some(1))));
    let p = port(&h);
    assert_eq!((p.flaps_total, p.link_downed_total), (1, 1));
    assert_eq!(p.flaps.len(), 1);
    assert_eq!(h.boot_id.as_deref(), Some("b2"));
    // The next flap of the new boot counts from the new baseline.
    h = update(&h, &at(660, "b2", reading(Some(true), Some(3))));
    assert_eq!(port(&h).flaps_total, 3);
}

#[test]
fn the_window_counts_only_recent_flaps_and_the_list_is_bounded() {
    let mut h = update(
        &History::default(),
        &at(0, "b", reading(Some(true), Some(0))),
    );
    for i in 1..=100u64 {
        h = update(&h, &at(i * 60, "b", reading(Some(true), Some(i))));
    }
    let p = port(&h);
    assert_eq!(p.flaps_total, 100);
    assert_eq!(p.flaps.len(), KEEP);
    assert_eq!(p.flaps_within(6000, 3600), 60);
    assert_eq!(p.flaps_within(6000, 600), 10);
    assert_eq!(p.flaps_within(6000 + 86400, 3600), 0);
}

#[test]
fn daemon_events_count_flaps_between_polls_and_a_new_daemon_starts_over() {
    let events = |n: u64, inst: &str, now: u64| Readings {
        events_instance: Some(inst.into()),
        ..at(
            now,
            "b",
            Reading {
                events: n,
                ..reading(Some(true), None)
            },
        )
    };
    let mut h = update(&History::default(), &events(0, "d1", 0));
    // Two downs and ups between polls (Soft-RoCE has no link_downed counter).
    h = update(&h, &events(2, "d1", 60));
    assert_eq!(port(&h).flaps_total, 2);
    h = update(&h, &events(2, "d1", 120));
    assert_eq!(port(&h).flaps_total, 2);
    // A restarted daemon counts from 0 again: its tally is all new.
    h = update(&h, &events(0, "d2", 180));
    assert_eq!(port(&h).flaps_total, 2);
    h = update(&h, &events(1, "d2", 240));
    assert_eq!(port(&h).flaps_total, 3);
}

#[test]
fn a_port_gone_keeps_its_history_for_a_while() {
    let mut h = update(&History::default(), &at(0, "b", reading(Some(true), None)));
    let empty = |now| Readings {
        now,
        boot_id: Some("b".into()),
        ..Readings::default()
    };
    h = update(&h, &empty(60));
    assert!(h.ports.contains_key("mlx5_0/1"));
    h = update(&h, &empty(FORGET_AFTER_SECS + 1));
    assert!(h.ports.is_empty());
}

#[test]
fn nothing_new_is_the_same_history_so_nothing_is_written() {
    let h = update(
        &History::default(),
        &at(100, "b", reading(Some(true), Some(1))),
    );
    let same = update(&h, &at(160, "b", reading(Some(true), Some(1))));
    assert_eq!(same, h);
    // `seen` is refreshed hourly, not at every reading.
    let later = update(
        &h,
        &at(100 + SEEN_EVERY_SECS, "b", reading(Some(true), Some(1))),
    );
    assert_eq!(port(&later).seen, 100 + SEEN_EVERY_SECS);
}

#[test]
fn a_down_polled_before_its_event_is_tallied_is_counted_once() {
    let read = |active, events, now| Readings {
        events_instance: Some("d1".into()),
        ..at(
            now,
            "b",
            Reading {
                events,
                ..reading(Some(active), None)
            },
        )
    };
    let mut h = update(&History::default(), &read(true, 0, 0));
    // The poll sees the port down; the daemon has not tallied its event yet.
    h = update(&h, &read(false, 0, 60));
    assert_eq!(port(&h).flaps_total, 1);
    // The event comes: the same down, not a second one.
    h = update(&h, &read(false, 1, 120));
    assert_eq!(port(&h).flaps_total, 1);
    // The next down is counted again.
    h = update(&h, &read(true, 1, 180));
    h = update(&h, &read(false, 2, 240));
    assert_eq!(port(&h).flaps_total, 2);
}
