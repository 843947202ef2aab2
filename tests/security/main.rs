//! Attacks on the agent, each on a `--root` tree through the real binary: what a
//! careful admin or someone with a foothold on the node would try. Each of these
//! failed on the code before the security work (commit 65c19aa) and passes now,
//! but for one guard that says so.
//! The real-systemd side (the sandboxed rewrite keeping a group, journald, the
//! exposure) is in `tests/system_systemd.rs`.

#[path = "../support/mod.rs"]
mod support;

mod files;
mod listener;
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
