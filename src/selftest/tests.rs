use super::*;

fn recorded(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perftest")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn edr() -> Target {
    Target {
        device: "mlx5_1".into(),
        port: 1,
        rate_gbps: Some(100.0),
        link_layer: Some("InfiniBand".into()),
        software: false,
    }
}

/// Answers with recorded perftest output: the pod's memlock gets `test`, the
/// control's 64 KiB gets `control`.
struct Recorded {
    test: String,
    control: String,
}

impl Runner for Recorded {
    fn run(&self, _: &Target, memlock: Limit, _: u64, _: u16) -> RunOutput {
        RunOutput {
            client: if memlock == CONTROL_MEMLOCK {
                self.control.clone()
            } else {
                self.test.clone()
            },
            ..RunOutput::default()
        }
    }
}

fn options() -> Options {
    Options {
        size: 65536,
        memlock: Limit::UNLIMITED,
        min_percent: 80.0,
        control: true,
    }
}

#[test]
fn edr_loopback_passes_and_the_control_fails_as_expected() {
    let r = Recorded {
        test: recorded("edr-100g-loopback-interleaved.txt"),
        control: recorded("memlock-64k-read-bw-failure.txt"),
    };
    let report = run(&[edr()], &r, &options());
    assert!(report.ok);
    assert_eq!(report.exit_code, EXIT_PASS);
    assert_eq!(
        report.ports[0].message,
        "mlx5_1/1: 94.71 Gb/s of 100 Gb/s (94.7%, at least 80%) with memlock unlimited; \
         control with memlock 64KiB: failed as expected (Couldn't allocate MR): the raised \
         memlock is what lets pods register memory"
    );
    assert!(
        report
            .summary
            .starts_with("selftest passed: 1 of 1 ACTIVE port(s) pass")
    );
}

#[test]
fn slow_or_failing_ports_fail_with_numbers() {
    // The 200 Gb HDR recording, judged against a 400 Gb port: 45.9%.
    let ndr = Target {
        rate_gbps: Some(400.0),
        ..edr()
    };
    let r = Recorded {
        test: recorded("hdr-200g-loopback-gbits.txt"),
        control: String::new(),
    };
    let report = run(&[ndr], &r, &options());
    assert_eq!(report.exit_code, EXIT_FAIL);
    assert!(
        report.ports[0]
            .message
            .starts_with("mlx5_1/1: 183.61 Gb/s of 400 Gb/s (45.9%, below 80%)"),
        "{}",
        report.ports[0].message
    );
    // The pod's memlock itself is too low.
    let r = Recorded {
        test: recorded("memlock-64k-read-bw-failure.txt"),
        control: recorded("memlock-64k-read-bw-failure.txt"),
    };
    let report = run(&[edr()], &r, &options());
    assert_eq!(report.exit_code, EXIT_FAIL);
    assert!(
        report.ports[0].message.starts_with(
            "mlx5_1/1: ib_write_bw with memlock unlimited failed: Couldn't allocate MR"
        ),
        "{}",
        report.ports[0].message
    );
}

#[test]
fn nothing_to_test_is_said() {
    let e = targets(&[], None).unwrap_err();
    assert!(e.starts_with("no RDMA device on this host"), "{e}");
    let r = Report::unable(e);
    assert_eq!(r.exit_code, EXIT_UNABLE);
    assert!(
        r.to_text()
            .starts_with("selftest not run: no RDMA device on this host")
    );
}

#[test]
fn ipc_lock_is_read_from_the_capability_sets() {
    let st = |uid: &str, eff: &str, amb: &str| {
        format!(
            "Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapInh:\t0\nCapPrm:\t{eff}\nCapEff:\t{eff}\nCapBnd:\t000001ffffffffff\nCapAmb:\t{amb}\n"
        )
    };
    // A non-root caller granted CAP_IPC_LOCK (0x4000) still holds it.
    assert_eq!(
        children_keep_ipc_lock(&st("1000", "0000000000004000", "0")),
        Ok(true)
    );
    assert_eq!(
        children_keep_ipc_lock(&st("1000", "0", "0000000000004000")),
        Ok(true)
    );
    assert_eq!(children_keep_ipc_lock(&st("1000", "0", "0")), Ok(false));
    // Root regains it at exec from the bounding set, whatever it holds now.
    assert_eq!(children_keep_ipc_lock(&st("0", "0", "0")), Ok(true));
    assert!(
        children_keep_ipc_lock("Name:\tx\nUid:\t0\t0\t0\t0\n")
            .unwrap_err()
            .contains("CapEff")
    );
}

#[test]
fn a_software_devices_rate_is_not_compared() {
    // Soft-RoCE under an emulated CPU moves a fraction of its netdev's rate:
    // the transfer with the pod's memlock is what it proves.
    let rxe = Target {
        device: "rxe0".into(),
        rate_gbps: Some(400.0),
        link_layer: Some("Ethernet".into()),
        software: true,
        ..edr()
    };
    let r = Recorded {
        test: recorded("hdr-200g-loopback-gbits.txt"),
        control: String::new(),
    };
    let report = run(&[rxe], &r, &options());
    assert_eq!(report.exit_code, EXIT_PASS, "{}", report.ports[0].message);
    assert!(
        report.ports[0]
            .message
            .contains("a software device: its rate is not compared"),
        "{}",
        report.ports[0].message
    );
}

#[test]
fn a_listening_servers_socket_is_found_in_proc_net_tcp() {
    // /proc/net/tcp's layout (include/net/tcp_states.h: TCP_LISTEN is 0x0A),
    // hand-written here: 0.0.0.0:18515 listening (0x4853), 127.0.0.1:18517
    // connected, not listening.
    let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23456 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4855 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 23457 1 0000000000000000 20 4 30 10 -1
";
    assert_eq!(run::listening_in(table, 18515), vec![23456]);
    assert!(run::listening_in(table, 18517).is_empty());
    assert!(run::listening_in(table, 1).is_empty());
    // tcp6's addresses are longer; the port is after the last colon all the same.
    let table6 = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:4853 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
";
    assert_eq!(run::listening_in(table6, 18515), vec![1]);
}

#[test]
fn only_the_servers_own_listener_counts() {
    // A real listening socket of this process: seen as this process's, and
    // not as another process's (the port taken by someone else).
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    assert!(run::listens(std::process::id(), port));
    let mut other = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    assert!(!run::listens(other.id(), port));
    drop(l);
    assert!(!run::listens(std::process::id(), port));
    let _ = other.kill();
    let _ = other.wait();
}
