use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use super::*;

/// The lines the helper printed on a real Soft-RoCE device (see PROVENANCE).
fn real(step: &str) -> String {
    let all = include_str!("../../../tests/fixtures/peers-vm/ping.tsv");
    let line = all
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{step}\t")));
    line.unwrap_or_else(|| panic!("no step {step}")).to_owned()
}

fn local() -> LocalPort {
    LocalPort {
        device: "rxe0".into(),
        port: 1,
        addr: Some("10.77.0.1".into()),
        fabric: None,
        rail: Some(0),
    }
}

fn peer() -> Peer {
    Peer {
        node: "node0".into(),
        addr: "10.77.0.1".into(),
        fabric: "roce:10.77.0.0/24".into(),
        rail: Some(0),
    }
}

#[test]
fn real_helper_lines_map_onto_the_record() {
    let ok = to_probe(&local(), &peer(), 7, parse_ping(&real("ping-ok")));
    assert_eq!(ok.stage, Stage::Done);
    assert_eq!(
        (ok.path_mtu, ok.gid_index, ok.gid_type.as_deref()),
        (Some(1024), Some(1), Some("RoCE v2"))
    );
    assert_eq!(
        (ok.answered_node.as_deref(), ok.answered_rail),
        (Some("node0"), Some(0))
    );
    assert!(ok.rtt_us.is_some_and(|r| r > 0));
    assert_eq!((ok.src.as_str(), ok.started_unix), ("10.77.0.1", 7));
    let forged = to_probe(&local(), &peer(), 7, parse_ping(&real("ping-forged")));
    assert_eq!(
        (forged.stage, forged.reject_why.as_deref()),
        (Stage::Rejected, Some("bad_key"))
    );
    let cases = [
        ("ping-key-world-readable", Stage::Helper, "mode 644"),
        ("ping-no-peer-address", Stage::Resolve, "timed out"),
        ("ping-responder-stopped", Stage::Connect, "no responder"),
        ("ping-address-removed", Stage::Source, "Cannot assign"),
        ("ping-from-netns", Stage::Connect, "timed out"),
    ];
    for (step, stage, error) in cases {
        let p = to_probe(&local(), &peer(), 7, parse_ping(&real(step)));
        assert_eq!(p.stage, stage, "{step}");
        assert!(p.error.contains(error), "{step}: {}", p.error);
        assert_eq!(p.rtt_us, None, "{step}");
    }
}

#[test]
fn garbage_or_silence_is_a_helper_failure_never_done() {
    for out in [
        "",
        "\n",
        "not json",
        "{\"stage\":\"bogus\"}",
        "{\"error\":\"\"}",
    ] {
        let p = to_probe(&local(), &peer(), 0, parse_ping(out));
        assert_eq!(p.stage, Stage::Helper, "{out:?}");
        assert!(p.error.contains("does not parse"), "{}", p.error);
    }
}

fn settings(helper: &std::path::Path, timeout_ms: u64) -> ProberSettings {
    ProberSettings {
        helper: helper.to_owned(),
        probe_timeout: Duration::from_millis(timeout_ms),
        ..ProberSettings::default()
    }
}

fn script(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("probe");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn a_missing_helper_says_so_and_a_port_without_address_runs_nothing() {
    let t = tempfile::tempdir().unwrap();
    let s = settings(&t.path().join("absent"), 100);
    let p = ping(&s, "n1", &local(), &peer(), 0);
    assert_eq!(p.stage, Stage::Helper);
    assert!(p.error.contains("is not installed"), "{}", p.error);
    let mut no_addr = local();
    no_addr.addr = None;
    let p = ping(&s, "n1", &no_addr, &peer(), 0);
    assert_eq!((p.stage, p.src.as_str()), (Stage::Source, ""));
    assert!(p.error.contains("no IPv4 address"), "{}", p.error);
}

#[test]
fn the_helper_gets_its_arguments_and_is_killed_past_its_budget() {
    let t = tempfile::tempdir().unwrap();
    let args = t.path().join("args");
    let echo = script(
        t.path(),
        &format!(
            "echo \"$@\" > {}\necho '{{\"stage\":\"done\",\"rtt_us\":5}}'",
            args.display()
        ),
    );
    let p = ping(&settings(&echo, 1500), "n1", &local(), &peer(), 0);
    assert_eq!((p.stage, p.rtt_us), (Stage::Done, Some(5)));
    let said = std::fs::read_to_string(&args).unwrap();
    assert_eq!(
        said.trim(),
        "ping --src 10.77.0.1 --dst 10.77.0.1 --port 18770 --key-file /etc/rdma-node-agent/peers.key \
         --node n1 --rail 0 --timeout-ms 1500"
    );
    // A loader error (a library missing): exit 127, nothing on stdout.
    let broken = script(
        t.path(),
        "echo 'error while loading shared libraries: librdmacm.so.1' >&2; exit 127",
    );
    let p = ping(&settings(&broken, 100), "n1", &local(), &peer(), 0);
    assert_eq!(p.stage, Stage::Helper);
    assert!(p.error.contains("librdmacm.so.1"), "{}", p.error);
    let hung = script(t.path(), "exec sleep 30");
    let started = std::time::Instant::now();
    let p = ping(&settings(&hung, 10), "n1", &local(), &peer(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(p.stage, Stage::Helper);
    assert!(p.error.contains("killed"), "{}", p.error);
    // Its line printed, then no exit within the budget: the line stands.
    let slow_exit = script(
        t.path(),
        "echo '{\"stage\":\"full\",\"error\":\"timed out after 10 ms\",\"reject_why\":null}'\nexec sleep 30",
    );
    let p = ping(&settings(&slow_exit, 10), "n1", &local(), &peer(), 0);
    assert_eq!(
        (p.stage, p.error.as_str()),
        (Stage::Full, "timed out after 10 ms")
    );
}

/// A helper that does not exit when killed (a task inside the kernel) is
/// handed to a thread that waits for it; the prober goes on at once, the
/// probe is `stuck`, and past `MAX_STUCK` held no new helper starts.
#[test]
fn a_helper_that_does_not_die_is_reaped_aside_and_bounds_new_ones() {
    let t = tempfile::tempdir().unwrap();
    let ran = t.path().join("ran");
    let undying = script(
        t.path(),
        &format!("echo x >> {}\nexec sleep 5", ran.display()),
    );
    let reaper = Reaper::default();
    let not_killed = |_: &mut Child| {};
    for n in 1..=MAX_STUCK {
        let started = Instant::now();
        let said = run_killing_with(
            &undying,
            &[],
            Duration::from_millis(50),
            &reaper,
            not_killed,
        );
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "the prober waited {:?} for a helper that does not exit",
            started.elapsed()
        );
        assert!(matches!(said, Err(HelperFailure::Stuck { .. })), "{said:?}");
        assert_eq!(reaper.stuck(), n);
    }
    let said = run_killing_with(
        &undying,
        &[],
        Duration::from_millis(50),
        &reaper,
        not_killed,
    );
    assert_eq!(said, Err(HelperFailure::TooManyStuck(MAX_STUCK)));
    let p = to_probe(&local(), &peer(), 0, said.and_then(|o| parse_ping(&o)));
    assert_eq!(p.stage, Stage::Stuck);
    assert!(p.error.contains("stuck in the kernel"), "{}", p.error);
    // They exit (the kernel let go): reaped, and probes run again.
    let until = Instant::now() + Duration::from_secs(20);
    while reaper.stuck() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(reaper.stuck(), 0, "exited helpers were not reaped");
    let runs = std::fs::read_to_string(&ran).unwrap().lines().count();
    assert_eq!(runs, MAX_STUCK, "a helper was started past the bound");
    let said = run_killing_with(&undying, &[], Duration::from_millis(50), &reaper, |c| {
        let _ = c.kill();
    });
    assert_eq!(said, Err(HelperFailure::Killed(Duration::from_millis(50))));
}

/// A helper that exits while something it started keeps its pipes open: its
/// answer comes back without waiting for that.
#[test]
fn an_exited_helper_is_not_waited_on_past_its_pipes() {
    let t = tempfile::tempdir().unwrap();
    let forks = script(
        t.path(),
        "echo '{\"stage\":\"done\",\"rtt_us\":9}'\nsleep 5 &\nexit 0",
    );
    let started = Instant::now();
    let said = run(&forks, &[], Duration::from_secs(3), &Reaper::default());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(parse_ping(&said.unwrap()).unwrap().rtt_us, Some(9));
}
