use crate::concerns::rdma::counters::reasons;
use std::collections::{BTreeMap, BTreeSet};

use super::config::CountersConfig;
use super::gather::PortRead;
use super::*;

fn port(dev: &str, netdev: &str, values: &[(&str, u64)]) -> PortRead {
    PortRead {
        device: dev.to_owned(),
        port: "1".to_owned(),
        identity: format!("guid:{dev}/1"),
        netdevs: [netdev.to_owned()].into(),
        rated: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        ..PortRead::default()
    }
}

fn facts(now: u64, history: History, ports: Vec<PortRead>) -> Facts {
    Facts {
        history: Ok(history),
        gathered: Gathered {
            ports,
            devices_unreadable: Vec::new(),
            default_route: Ok(BTreeSet::from(["eno1".to_owned()])),
        },
        now,
        boot_id: Some("boot-a".into()),
    }
}

/// Runs reconciles one after another, each on the last one's history.
fn run(steps: Vec<(u64, Vec<PortRead>)>) -> Check {
    let cfg = CountersConfig::default();
    let mut h = History::default();
    let mut last = None;
    for (now, ports) in steps {
        let (c, next, _) = evaluate(&facts(now, h, ports), &cfg);
        h = next;
        last = Some(c);
    }
    last.unwrap()
}

const SYM: &str = "counters/symbol_error";
const OOS: &str = "hw_counters/out_of_sequence";

#[test]
fn the_first_reading_says_no_rate_yet_rather_than_ok() {
    let c = run(vec![(0, vec![port("mlx5_0", "ens1", &[(SYM, 900)])])]);
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
    assert!(c.message.contains("no rate yet"), "{}", c.message);
}

#[test]
fn a_rising_symbol_error_counter_fails_naming_port_and_counter() {
    let c = run(vec![
        (
            0,
            vec![
                port("mlx5_0", "ens1", &[(SYM, 0)]),
                port("mlx5_1", "ens2", &[(SYM, 0)]),
            ],
        ),
        (
            30,
            vec![
                port("mlx5_0", "ens1", &[(SYM, 200)]),
                port("mlx5_1", "ens2", &[(SYM, 0)]),
            ],
        ),
    ]);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::SYMBOL_ERRORS));
    assert_eq!(
        c.message,
        "mlx5_0/1 symbol_errors: 200 in the last 1h (counters/symbol_error +200; [counters] symbol_errors_fail fails at 121)"
    );
    // Fewer: a warning; fewer still: ok.
    let c = run(vec![
        (0, vec![port("mlx5_0", "ens1", &[(SYM, 0)])]),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 20)])]),
    ]);
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    let c = run(vec![
        (0, vec![port("mlx5_0", "ens1", &[(SYM, 0)])]),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 10)])]),
    ]);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
}

#[test]
fn a_counter_reset_never_raises_an_alarm() {
    let c = run(vec![
        (
            0,
            vec![port("mlx5_0", "ens1", &[(SYM, 60_000), (OOS, 9_000_000)])],
        ),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 0), (OOS, 3)])]),
        (60, vec![port("mlx5_0", "ens1", &[(SYM, 0), (OOS, 3)])]),
    ]);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
}

#[test]
fn the_management_nic_is_reported_and_never_fails_the_node() {
    let c = run(vec![
        (
            0,
            vec![
                port("mlx5_0", "ens1", &[(SYM, 0)]),
                port("mlx5_2", "eno1", &[(SYM, 0)]),
            ],
        ),
        (
            30,
            vec![
                port("mlx5_0", "ens1", &[(SYM, 0)]),
                port("mlx5_2", "eno1", &[(SYM, 5000)]),
            ],
        ),
    ]);
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert!(
        c.message.contains("management NIC (default route), reported, not counted against the node: mlx5_2/1 symbol_errors: 5000"),
        "{}",
        c.message
    );
}

#[test]
fn one_unreadable_port_is_unknown_and_hides_no_other() {
    let mut bad = port("mlx5_1", "ens2", &[]);
    bad.unreadable = vec!["hw_counters/out_of_sequence: Input/output error (os error 5)".into()];
    let c = run(vec![
        (0, vec![port("mlx5_0", "ens1", &[(SYM, 0)]), bad.clone()]),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 15)]), bad.clone()]),
    ]);
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::COUNTERS_UNREADABLE));
    assert!(
        c.message
            .contains("mlx5_1/1 hw_counters/out_of_sequence: Input/output error"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("mlx5_0/1 symbol_errors: 15"),
        "{}",
        c.message
    );
    // A failing port outranks the unreadable one, and still names it.
    let c = run(vec![
        (0, vec![port("mlx5_0", "ens1", &[(SYM, 0)]), bad.clone()]),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 500)]), bad]),
    ]);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert!(c.message.contains("mlx5_1/1"), "{}", c.message);
}

#[test]
fn a_saturated_counter_warns_rather_than_stays_ok() {
    let mut p = port("mlx5_0", "ens1", &[(SYM, 65_535)]);
    p.saturated = vec![SYM.into()];
    let c = run(vec![(0, vec![p.clone()]), (30, vec![p])]);
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::COUNTERS_SATURATED));
    assert!(
        c.message
            .contains("mlx5_0/1 counters/symbol_error is at its maximum (65535)"),
        "{}",
        c.message
    );
}

#[test]
fn a_renamed_device_leaves_no_orphaned_verdict() {
    let mut renamed = port("mlx5_7", "ens1", &[(SYM, 500)]);
    renamed.identity = "guid:mlx5_0/1".into();
    let c = run(vec![
        (0, vec![port("mlx5_0", "ens1", &[(SYM, 0)])]),
        (30, vec![port("mlx5_0", "ens1", &[(SYM, 500)])]),
        // Re-enumerated: same GUID, new name; the old name is never reported again.
        (60, vec![renamed]),
    ]);
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert!(
        c.message.starts_with("mlx5_7/1 symbol_errors: 500"),
        "{}",
        c.message
    );
    assert!(!c.message.contains("mlx5_0"), "{}", c.message);
}

#[test]
fn retransmits_from_rxe_counters_warn_at_the_threshold() {
    let cfg = CountersConfig {
        retransmits_warn: 10,
        ..CountersConfig::default()
    };
    let rx = |n| {
        port(
            "rxe0",
            "enp0s3",
            &[
                ("hw_counters/rcvd_seq_err", n),
                ("hw_counters/completer_retry_err", n),
            ],
        )
    };
    let (_, h, _) = evaluate(&facts(0, History::default(), vec![rx(0)]), &cfg);
    let (c, _, obs) = evaluate(&facts(30, h, vec![rx(6)]), &cfg);
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(c.reason, Some(reasons::RETRANSMITS));
    assert!(
        c.message
            .contains("hw_counters/completer_retry_err +6, hw_counters/rcvd_seq_err +6"),
        "{}",
        c.message
    );
    let totals: BTreeMap<&str, u64> = obs
        .iter()
        .filter_map(|o| match o {
            Observation::PortErrors { class, total, .. } => Some((*class, *total)),
            _ => None,
        })
        .collect();
    assert_eq!(totals, BTreeMap::from([("retransmits", 12)]));
}
