//! The parsers against every spelling of the kernel's sysfs.c (Linux 6.1,
//! drivers/infiniband/core/sysfs.c: state_show, phys_state_to_str, rate_show,
//! link_layer_show), and the check's verdicts on what they give.

use super::*;
use crate::concerns::rdma::gpudirect::Finding;
use crate::config::rdma::{ExpectPort, RdmaConfig};
use crate::engine::check::Status;
use crate::host::inventory::port::*;
use crate::host::inventory::{self, Read};

fn t(s: &str) -> Read {
    Ok(Some(format!("{s}\n")))
}

fn port(name: &str, state: &str, rate: &str, layer: &str) -> inventory::Port {
    inventory::Port {
        state: t(state),
        phys_state: t(if state.contains("ACTIVE") {
            "5: LinkUp"
        } else {
            "3: Disabled"
        }),
        rate: t(rate),
        link_layer: t(layer),
        ..inventory::Port::new(name.into())
    }
}

fn raw(name: &str, ports: Vec<inventory::Port>) -> inventory::Device {
    inventory::Device {
        node_guid: t("0c42:a103:0065:6a3c"),
        fw_ver: t("20.31.1014"),
        hca_type: t("MT4123"),
        ports,
        ..inventory::Device::new(name.into())
    }
}

#[test]
fn every_state_the_kernel_prints() {
    // state_show: "%d: %s" over state_name[], "UNKNOWN" past it.
    for (text, id) in [
        ("0: NOP", 0),
        ("1: DOWN", 1),
        ("2: INIT", 2),
        ("3: ARMED", 3),
        ("4: ACTIVE", 4),
        ("5: ACTIVE_DEFER", 5),
        ("6: UNKNOWN", 6),
        ("17: UNKNOWN", 17),
    ] {
        assert_eq!(
            parse_state(&format!("{text}\n")),
            Ok(PortState(id)),
            "{text}"
        );
        assert_eq!(format!("{id}: {}", PortState(id).name()), text);
    }
    assert!(PortState(4).is_active() && PortState(4).is_named());
    assert!(!PortState(6).is_named());
    // phys_state_to_str: "%u: %s", "<unknown>" for 0 and past the table.
    for (text, id) in [
        ("0: <unknown>", 0),
        ("1: Sleep", 1),
        ("2: Polling", 2),
        ("3: Disabled", 3),
        ("4: PortConfigurationTraining", 4),
        ("5: LinkUp", 5),
        ("6: LinkErrorRecovery", 6),
        ("7: Phy Test", 7),
        ("9: <unknown>", 9),
    ] {
        assert_eq!(
            parse_phys_state(&format!("{text}\n")),
            Ok(PhysState(id)),
            "{text}"
        );
    }
}

#[test]
fn a_value_without_a_number_is_an_error() {
    for bad in ["ACTIVE", "x: ACTIVE", "-1: DOWN", ": ACTIVE", ""] {
        assert!(parse_state(bad).is_err(), "{bad:?}");
        assert!(parse_phys_state(bad).is_err(), "{bad:?}");
    }
}

/// The number is the kernel's ABI: a known number beside an unfamiliar name
/// is read by the number, the text noted (node_exporter reads it the same way).
#[test]
fn the_number_decides_and_odd_text_is_noted() {
    for (text, id) in [
        ("4:ACTIVE", 4),
        ("4: active", 4),
        ("1: ACTIVE", 1),
        ("4: \u{1}", 4),
    ] {
        assert_eq!(parse_state(text), Ok(PortState(id)), "{text:?}");
        assert!(state_note(text).is_some(), "{text:?}");
    }
    assert_eq!(state_note("4: ACTIVE\n"), None);
    // prometheus/procfs's recorded mlx5_0 tree holds this phys_state: 4 is
    // PortConfigurationTraining in sysfs.c's phys_state_to_str.
    assert_eq!(parse_phys_state("4: ACTIVE\n"), Ok(PhysState(4)));
    let n = phys_state_note("4: ACTIVE\n").unwrap();
    assert!(n.contains("\"4: PortConfigurationTraining\""), "{n}");
    assert_eq!(parse_phys_state("7: PhyTest"), Ok(PhysState(7)));
    assert_eq!(phys_state_note("7: Phy Test"), None);
    // Past the kernel's names: read, but not a state that can be judged.
    assert!(!parse_state("17: UNKNOWN").unwrap().is_named());
}

#[test]
fn rates_links_and_texts() {
    assert_eq!(parse_rate("200 Gb/sec (4X HDR)\n"), Ok(200.0));
    assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), Ok(2.5));
    assert_eq!(parse_rate("10 Gb/sec (4X)"), Ok(10.0)); // SDR before " SDR" was printed
    assert_eq!(parse_rate("10 Gb/sec (1X FDR10)"), Ok(10.0)); // rxe on a veth
    assert_eq!(parse_rate("100 Gb/sec"), Ok(100.0));
    assert!(parse_rate("fast").is_err());
    assert!(parse_rate("NaN Gb/sec (4X HDR)").is_err());
    assert!(parse_rate("-1 Gb/sec (4X HDR)").is_err());
    assert_eq!(gbps_to_bytes(2.5), 312_500_000);
    assert_eq!(gbps_to_bytes(400.0), 50_000_000_000);
    assert_eq!(parse_link_layer("InfiniBand\n"), Ok(LinkLayer::InfiniBand));
    assert_eq!(parse_link_layer("Ethernet\n"), Ok(LinkLayer::Ethernet));
    assert_eq!(parse_link_layer("Unknown\n"), Ok(LinkLayer::Unknown));
    assert_eq!(parse_link_layer("\n"), Ok(LinkLayer::Unknown));
    assert!(parse_link_layer("Ether net").is_err());
    assert_eq!(
        parse_guid("0c42:a103:0065:6a3c\n").unwrap(),
        "0c42:a103:0065:6a3c"
    );
    assert!(parse_guid("0c42:a103:0065").is_err());
    assert!(parse_guid("zzzz:a103:0065:6a3c").is_err());
    // rxe, EFA and hns print an empty fw_ver: nothing, and no error.
    assert_eq!(parse_text("\n"), Ok(None));
    assert!(parse_text("a\u{7}b").is_err());
}

#[test]
fn an_empty_fw_ver_is_normal() {
    let mut r = raw(
        "rxe0",
        vec![port("1", "4: ACTIVE", "10 Gb/sec (1X FDR10)", "Ethernet")],
    );
    r.fw_ver = t("");
    r.hca_type = Ok(None);
    let d = parse(&r);
    assert_eq!(d.fw_ver, None);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let c = check(&[d], &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Ok, "{}", c.message);
}

#[test]
fn garbage_becomes_field_errors() {
    let mut r = raw(
        "mlx5_0",
        vec![
            port("1", "banana", "fast", "InfiniBand"),
            port("x", "4: ACTIVE", "1 Gb/sec", "Ethernet"),
            // One ACTIVE port: the node can run RDMA jobs, the garbage warns.
            port("2", "4: ACTIVE", "100 Gb/sec (4X EDR)", "InfiniBand"),
        ],
    );
    r.node_guid = Err("/sys/…/node_guid is not valid UTF-8".into());
    let d = parse(&r);
    assert_eq!(d.ports.len(), 2);
    assert_eq!(d.ports[0].state, None);
    assert_eq!(d.ports[0].active(), None);
    let all = d.errors.join("\n");
    for want in [
        "mlx5_0 node_guid: /sys/…/node_guid is not valid UTF-8",
        "mlx5_0/1 state: cannot parse \"banana\"",
        "mlx5_0/1 rate: cannot parse \"fast\"",
        "mlx5_0: unexpected port directory \"x\"",
    ] {
        assert!(all.contains(want), "{want} not in:\n{all}");
    }
    let c = check(&[d], &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert!(c.message.contains("(and 1 more)"), "{}", c.message);
}

fn a100() -> Vec<Device> {
    vec![
        parse(&raw(
            "mlx5_0",
            vec![port("1", "1: DOWN", "200 Gb/sec (4X HDR)", "InfiniBand")],
        )),
        parse(&raw(
            "mlx5_1",
            vec![port("1", "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")],
        )),
        parse(&raw(
            "mlx5_bond_0",
            vec![port("1", "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")],
        )),
    ]
}

/// Without expectations an RDMA node still needs its ports: a port not
/// ACTIVE warns, naming it, unless listed in rdma.ignore_ports.
#[test]
fn no_expectations_warn_on_a_port_not_active_unless_ignored() {
    let c = check(&a100(), &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(
        c.message,
        "3 RDMA device(s), 2/3 port(s) ACTIVE; mlx5_0/1 is DOWN (Disabled); \
         list it in rdma.ignore_ports if it is down by design"
    );
    assert_eq!(c.details["devices"][2]["kind"], "bond");
    assert_eq!(c.details["devices"][0]["ports"][0]["state"], "DOWN");
    assert_eq!(
        c.details["devices"][0]["ports"][0]["phys_state"],
        "Disabled"
    );
    assert_eq!(c.details["active_ports"]["Ethernet"], 1);
    let cfg = RdmaConfig {
        ignore_ports: vec!["mlx5_0/*".into()],
        ..RdmaConfig::default()
    };
    let c = check(&a100(), &cfg, &Finding::default());
    assert_eq!(c.status, Status::Ok, "{}", c.message);
    assert_eq!(c.message, "3 RDMA device(s), 2/3 port(s) ACTIVE");
}

/// No ACTIVE port anywhere: the node cannot run RDMA jobs, expectations or not.
/// Ports of unknown state keep that from being a failure.
#[test]
fn no_active_port_at_all_fails_and_unknown_states_are_unknown() {
    let down = || {
        vec![
            parse(&raw(
                "mlx5_0",
                vec![port("1", "1: DOWN", "200 Gb/sec (4X HDR)", "InfiniBand")],
            )),
            parse(&raw(
                "mlx5_1",
                vec![port("1", "2: INIT", "200 Gb/sec (4X HDR)", "InfiniBand")],
            )),
        ]
    };
    let c = check(&down(), &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Fail, "{}", c.message);
    assert!(
        c.message.starts_with(
            "no ACTIVE port on any of 2 RDMA device(s): this node cannot run RDMA jobs \
             (mlx5_0/1 is DOWN (Disabled); mlx5_1/1 is INIT"
        ),
        "{}",
        c.message
    );
    // Ignored ports do not count as down, but do not make the node usable either.
    let cfg = RdmaConfig {
        ignore_ports: vec!["mlx5_*/1".into()],
        ..RdmaConfig::default()
    };
    assert_eq!(
        check(&down(), &cfg, &Finding::default()).status,
        Status::Fail
    );
    let mut d = down();
    d[1].ports[0].state = None;
    let c = check(&d, &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert!(
        c.message.contains("the state of mlx5_1/1 is unknown"),
        "{}",
        c.message
    );
}

#[test]
fn no_device_at_all_is_skipped_or_fails_with_expectations() {
    let c = check(&[], &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Skipped, "{}", c.message);
    assert!(c.message.starts_with("no RDMA device"), "{}", c.message);
    let cfg = RdmaConfig {
        min_active_ports: [("InfiniBand".to_owned(), 1)].into(),
        ..RdmaConfig::default()
    };
    let c = check(&[], &cfg, &Finding::default());
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.message,
        "0 ACTIVE InfiniBand port(s), expected at least 1"
    );
}

#[test]
fn a_device_without_ports_or_behind_a_broken_link_is_not_healthy() {
    let mut broken = inventory::Device::new("mlx5_3".into());
    broken.broken_link = Some("/sys/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_3".into());
    let mut devices = a100();
    devices.push(parse(&raw("mlx5_2", vec![])));
    devices.push(parse(&broken));
    assert_eq!(devices[3].problem, Some(Problem::NoPorts));
    assert!(!devices[4].is_usable());
    let c = check(&devices, &RdmaConfig::default(), &Finding::default());
    assert_eq!(c.status, Status::Warn, "{}", c.message);
    assert_eq!(
        c.message,
        "5 RDMA device(s) (1 without ports; 1 broken link(s)), 2/3 port(s) ACTIVE; \
         mlx5_2 has no ports; mlx5_3: broken link (/sys/class/infiniband/mlx5_3 points to \
         /sys/devices/pci0000:00/0000:00:03.0/infiniband/mlx5_3, which does not exist); \
         mlx5_0/1 is DOWN (Disabled); list it in rdma.ignore_ports if it is down by design"
    );
    assert_eq!(c.details["devices"][4]["problem"]["problem"], "broken_link");
}

fn expect(device: &str, port: Option<u32>, min: Option<u32>) -> ExpectPort {
    ExpectPort {
        device: device.into(),
        port,
        min_rate_gbps: min,
    }
}

#[test]
fn expectations_name_the_port() {
    let cfg = RdmaConfig {
        expect_port: vec![
            expect("mlx5_[01]", Some(1), None),
            expect("mlx5_bond_*", None, Some(200)),
            expect("mlx5_7", None, None),
            expect("mlx5_1", Some(2), None),
        ],
        min_active_ports: [("InfiniBand".to_owned(), 2)].into(),
        ..RdmaConfig::default()
    };
    let c = check(&a100(), &cfg, &Finding::default());
    assert_eq!(c.status, Status::Fail);
    assert_eq!(
        c.message,
        "mlx5_0/1 is DOWN (Disabled), expected ACTIVE; \
         mlx5_bond_0/1 runs at 100 Gb/s, expected at least 200 Gb/s; \
         no RDMA device matches \"mlx5_7\"; mlx5_1 has no port 2; \
         1 ACTIVE InfiniBand port(s), expected at least 2"
    );
}

#[test]
fn an_expected_port_of_unknown_state_is_unknown_not_down() {
    let mut devices = a100();
    devices[0] = parse(&inventory::Device {
        ports: vec![inventory::Port {
            state: Err("cannot read …/state: Input/output error".into()),
            ..port("1", "1: DOWN", "200 Gb/sec (4X HDR)", "InfiniBand")
        }],
        ..raw("mlx5_0", vec![])
    });
    devices[1] = parse(&raw(
        "mlx5_1",
        vec![port("1", "9: UNKNOWN", "200 Gb/sec (4X HDR)", "InfiniBand")],
    ));
    let cfg = RdmaConfig {
        expect_port: vec![expect("mlx5_[01]", Some(1), None)],
        min_active_ports: [("InfiniBand".to_owned(), 1)].into(),
        ..RdmaConfig::default()
    };
    let c = check(&devices, &cfg, &Finding::default());
    assert_eq!(c.status, Status::Unknown, "{}", c.message);
    assert_eq!(
        c.message,
        "mlx5_0/1 state is unreadable, expected ACTIVE; \
         mlx5_1/1 state is 9: UNKNOWN (the kernel does not name it), expected ACTIVE; \
         0 ACTIVE InfiniBand port(s) and 2 of unknown state, expected at least 1"
    );
}
