use super::*;

fn events() -> Vec<Event> {
    include_str!("../../../tests/fixtures/peers-vm/respond.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn real_responder_events_fold_into_tallies_per_sender() {
    let evs = events();
    assert!(matches!(evs[0], Event::Ready { ref addr } if addr == "10.77.0.1"));
    let mut inbound = Vec::new();
    for ev in &evs {
        fold(&mut inbound, "rxe0", 1, ev);
    }
    assert_eq!(inbound.len(), 1, "{inbound:?}");
    let t = &inbound[0];
    assert_eq!(
        (t.from.as_str(), t.from_node.as_deref()),
        ("10.77.0.1", Some("node1"))
    );
    assert_eq!((t.answered_total, t.refused_total), (2, 1));
    assert_eq!(t.last_refused_why.as_deref(), Some("bad_key"));
    assert!(t.last_answered_unix.is_some() && t.last_refused_unix.is_some());
}

#[test]
fn a_flood_of_senders_is_bounded() {
    let mut inbound = Vec::new();
    for i in 0..(MAX_INBOUND + 50) {
        let ev = Event::Refused {
            unix: 1,
            from: format!("10.0.{}.{}", i / 256, i % 256),
            why: "bad_key".into(),
        };
        fold(&mut inbound, "rxe0", 1, &ev);
    }
    assert_eq!(inbound.len(), MAX_INBOUND);
}

#[test]
fn a_responder_that_cannot_start_is_reported_and_retried_with_backoff() {
    let t = tempfile::tempdir().unwrap();
    let s = ProberSettings {
        helper: t.path().join("absent"),
        ..ProberSettings::default()
    };
    let port = LocalPort {
        device: "rxe0".into(),
        port: 1,
        addr: Some("10.77.0.1".into()),
        fabric: None,
        rail: None,
    };
    let mut sup = Supervisor::new();
    let now = Instant::now();
    let r = sup.reconcile(&s, "n1", std::slice::from_ref(&port), now);
    assert_eq!(r.len(), 1);
    assert!(!r[0].running);
    assert!(
        r[0].error
            .as_deref()
            .unwrap()
            .contains("cannot run the probe helper"),
        "{r:?}"
    );
    // A port without an address has no responder; one gone is stopped.
    let none = LocalPort {
        addr: None,
        ..port.clone()
    };
    assert!(sup.reconcile(&s, "n1", &[none], now).is_empty());
}

#[test]
fn a_running_responder_is_supervised_and_its_events_read() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let helper = t.path().join("probe");
    std::fs::write(
        &helper,
        "#!/bin/sh\necho '{\"event\":\"ready\",\"unix\":1,\"addr\":\"10.77.0.1\"}'\n\
         echo '{\"event\":\"answered\",\"unix\":2,\"from\":\"10.77.0.2\",\"node\":\"n2\"}'\nexec sleep 30\n",
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = ProberSettings {
        helper,
        ..ProberSettings::default()
    };
    let port = LocalPort {
        device: "rxe0".into(),
        port: 1,
        addr: Some("10.77.0.1".into()),
        fabric: None,
        rail: None,
    };
    let mut sup = Supervisor::new();
    let r = sup.reconcile(&s, "n1", std::slice::from_ref(&port), Instant::now());
    assert!(r[0].running, "{r:?}");
    let mut inbound = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while inbound.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        sup.drain(&mut inbound);
    }
    assert_eq!(inbound.len(), 1, "{inbound:?}");
    assert_eq!(inbound[0].from_node.as_deref(), Some("n2"));
}
