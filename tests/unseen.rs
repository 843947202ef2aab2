//! Reads that fail are reported as such, never as an `ok` or a silent "none":
//! the agent run without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (as root, so its
//! trust rules still hold) on fixture trees with a directory it cannot list.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use support::*;

/// The agent as root without the capabilities that bypass file permissions.
fn agent_without_dac(root: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--bounding-set=-dac_override,-dac_read_search", "--"])
        .arg(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("setpriv (util-linux) runs")
}

#[test]
fn an_imports_directory_that_cannot_be_listed_is_an_error_naming_it() {
    let t = node("v100");
    let root = t.path();
    let cfg = read(root, "/etc/containerd/config.toml");
    let cfg = cfg.replacen(
        "version = 2\n",
        "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
        1,
    );
    write(root, "/etc/containerd/config.toml", &cfg);
    write(root, "/etc/containerd/conf.d/10-gpu.toml", "version = 2\n");
    let dir = root.join("etc/containerd/conf.d");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    let o = agent_without_dac(root, &["check", "--json", "--only", "containerd.memlock"]);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!("{e}: {out}\n{}", stderr(&o));
    });
    let c = check_in(&v, "containerd.memlock");
    let msg = c["message"].as_str().unwrap();
    assert_ne!(c["status"], "ok", "{msg}");
    assert!(
        msg.contains("etc/containerd/conf.d") && msg.contains("ermission denied"),
        "{msg}"
    );
}
