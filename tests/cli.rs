//! The CLI's honesty: the first line counts every status apart, and an
//! explicit `--config` that does not exist is an error (only the default path
//! may be absent).

mod support;

use support::*;

/// The procfs device tree with only what needs no host: ok, warn and skipped.
fn quiet_node() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("sysfs/procfs"), t.path());
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nenabled = false\n[systemd]\nenabled = false\n[kernel]\nenabled = false\n",
    );
    // One port down (a warning: the others are ACTIVE).
    write(
        t.path(),
        "/sys/class/infiniband/mlx4_0/ports/2/state",
        "1: DOWN\n",
    );
    t
}

#[test]
fn the_summary_counts_each_status_apart() {
    let t = quiet_node();
    let o = agent(t.path(), &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(
        stdout(&o).lines().next().unwrap(),
        "RDMA host ready: 1 warn, 3 ok, 14 skipped"
    );
}

#[test]
fn an_explicit_config_that_does_not_exist_is_an_error() {
    let t = quiet_node();
    let r = t.path();
    let o = agent(r, &["--config", "/etc/rdma-node-agent/confg.toml", "check"]);
    assert_eq!(o.status.code(), Some(2), "could not tell: {}", stdout(&o));
    assert_eq!(
        stdout(&o),
        "rdma-node-agent cannot check: its config is invalid or missing\n"
    );
    assert!(
        stderr(&o).contains("confg.toml does not exist (only the default /etc/rdma-node-agent/config.toml may be absent)"),
        "{}",
        stderr(&o)
    );
    for cmd in [
        &["plan"][..],
        &["apply"],
        &["serve", "--listen", "127.0.0.1:1"],
    ] {
        let o = agent(r, &[&["--config", "/nope.toml"][..], cmd].concat());
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("/nope.toml does not exist"),
            "{}",
            stderr(&o)
        );
    }
    // The default path may be absent: built-in defaults.
    std::fs::remove_file(r.join("etc/rdma-node-agent/config.toml")).unwrap();
    let o = agent(r, &["check", "--only", "rdma.devices"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // An explicit path that exists is used.
    write(r, "/srv/agent.toml", "[rdma]\nenabled = false\n");
    let o = agent(
        r,
        &[
            "--config",
            "/srv/agent.toml",
            "check",
            "--only",
            "rdma.devices",
        ],
    );
    assert_eq!(
        stdout(&o).lines().next().unwrap(),
        "RDMA host ready: 0 ok, 1 skipped"
    );
}
