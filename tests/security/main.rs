//! Attacks on the agent, each on a `--root` tree through the real binary: what a
//! careful admin or someone with a foothold on the node would try. Each of these
//! failed on the code before the security work (commit 65c19aa) and passes now,
//! but for one guard that says so.
//! The real-systemd side (the sandboxed rewrite keeping a group, journald, the
//! exposure) is in `tests/system_systemd.rs`.

#[path = "../support/mod.rs"]
mod support;

mod files;
mod fleet_http;
mod links;
mod listener;
mod own_paths;
mod secrets;
mod trust;

use support::*;

pub const CONFIG: &str = "etc/containerd/config.toml";
pub const STATE: &str = "var/lib/rdma-node-agent";

pub fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap()
}

pub fn ok(o: &std::process::Output) -> String {
    assert_eq!(code(o), 0, "{}{}", stdout(o), stderr(o));
    stdout(o)
}

pub fn stdout_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A daemon a test started: stopped with SIGTERM when the test is done, killed
/// if the test fails first (never left running).
pub struct Daemon(Option<std::process::Child>);

impl Daemon {
    pub fn spawn(cmd: &mut std::process::Command) -> Daemon {
        Daemon(Some(cmd.spawn().unwrap()))
    }

    /// SIGTERM, then everything it wrote.
    pub fn stop(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
