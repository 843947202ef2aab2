//! Logs: no ANSI escapes unless stderr is a terminal (and `NO_COLOR` is unset),
//! and one clear line when systemd cannot be asked. These run the agent on the
//! live host (`--root /`, read-only `check --only rdma.devices`) with a system
//! bus address that does not exist.

mod support;

use std::process::Command;

use support::*;

const NO_BUS: &str = "unix:path=/nonexistent/rdma-node-agent-test/system_bus_socket";

fn live_check() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"));
    c.args(["check", "--only", "rdma.devices"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", NO_BUS)
        .env_remove("NO_COLOR")
        .env_remove("JOURNAL_STREAM")
        .env_remove("RUST_LOG");
    c
}

#[test]
fn no_bus_is_one_plain_line_on_a_pipe() {
    let o = live_check().output().unwrap();
    let err = stderr(&o);
    assert!(!err.contains('\u{1b}'), "ANSI escapes into a pipe: {err:?}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("D-Bus")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("cannot ask systemd: ")
            && lines[0].contains("cannot reach systemd over D-Bus")
            && lines[0].contains("restarts are left pending"),
        "{err}"
    );
}

/// At a terminal (a pty from util-linux's `script`), colour, unless NO_COLOR.
#[test]
fn a_terminal_gets_colour_unless_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux script(1) is not installed");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_rdma-node-agent");
    let run = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args([
            "-qec",
            &format!("{bin} check --only rdma.devices"),
            "/dev/null",
        ])
        .env("DBUS_SYSTEM_BUS_ADDRESS", NO_BUS)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let coloured = run(None);
    assert!(
        coloured.contains("D-Bus") && coloured.contains('\u{1b}'),
        "{coloured:?}"
    );
    let plain = run(Some("1"));
    assert!(plain.contains("D-Bus"), "{plain:?}");
    assert!(
        !plain
            .lines()
            .filter(|l| l.contains("D-Bus"))
            .any(|l| l.contains('\u{1b}')),
        "NO_COLOR ignored: {plain:?}"
    );
}
