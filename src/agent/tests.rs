//! The whole path on a sample node: every real concern, the engine, and the
//! executor with a fake systemd and CRI probe standing in for the live host.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use super::*;
use crate::engine::fakes::{FakeHost, FakeManager, Job};
use crate::engine::outcome::ActionStatus;

fn v100() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes/v100/.");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&fixture)
        .arg(t.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "copy the fixture");
    t
}

/// `ctr plugins ls` on a containerd whose CRI plugin is in `status`.
fn plugins_ls(status: &str) -> Vec<u8> {
    format!(
        "TYPE                    ID     PLATFORMS      STATUS\nio.containerd.grpc.v1   cri    linux/amd64    {status}\n"
    )
    .into_bytes()
}

/// The live host as a fake: every `ctr plugins ls` says CRI is ok.
fn cri_ok() -> FakeHost {
    FakeHost {
        stdout: plugins_ls("ok"),
        ..FakeHost::default()
    }
}

fn agent(root: &Path, m: &Arc<FakeManager>, cri: FakeHost) -> Agent {
    Agent::with_live(
        Host::new(root),
        Config::default(),
        Live {
            manager: Some(m.clone()),
            host: Box::new(cri),
        },
    )
}

fn same_tree(a: &Path, b: &Path) -> bool {
    Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

#[test]
fn apply_restarts_the_readers_once_and_revert_restarts_them_again() {
    let t = v100();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[], &stop));
    let a = agent(t.path(), &m, cri_ok());
    let out = a.apply(true).unwrap();
    let changed: Vec<&str> = out.changed.iter().filter_map(|p| p.to_str()).collect();
    assert!(
        changed.contains(&"/etc/containerd/config.toml"),
        "{changed:?}"
    );
    assert!(
        changed.contains(&"/etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf"),
        "{changed:?}"
    );
    // config.toml, the base spec and the drop-in are all read by containerd:
    // one daemon-reload, one restart.
    assert_eq!(m.calls(), ["reload", "restart containerd.service"]);
    assert_eq!(out.actions.len(), 1);
    assert_eq!(out.actions[0].status, ActionStatus::Done);

    let again = a.apply(true).unwrap();
    assert!(again.is_empty(), "{:?}", again.actions);
    assert_eq!(m.calls().len(), 2, "converged: nothing restarted");

    let r = a.revert(false).unwrap();
    assert!(r.files.kept.is_empty());
    assert_eq!(r.actions.len(), 1);
    assert_eq!(r.actions[0].action, "restart containerd.service");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes/v100");
    assert!(
        same_tree(&fixture.join("etc"), &t.path().join("etc")),
        "revert leaves the node's /etc as it was"
    );
}

#[test]
fn a_restart_that_breaks_cri_rolls_the_node_back() {
    let t = v100();
    let stop = Stop::new();
    let m = Arc::new(FakeManager::new(&[Job::Done, Job::Done], &stop));
    let cri = cri_ok();
    *cri.outputs.lock().unwrap() = std::iter::once(Ok(plugins_ls("error"))).collect();
    let mut a = agent(t.path(), &m, cri);
    a.config.daemon.restart_timeout_secs = 0;
    let e = a.apply(true).unwrap_err();
    let AgentError::Exec(ExecError::RolledBack { unit, after, .. }) = e else {
        panic!("expected a rollback, got {e}");
    };
    assert_eq!(unit, "containerd.service");
    assert_eq!(after, "it is healthy again");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes/v100");
    // The files of the failed apply are back to the node's bytes (the agent's
    // own state directory aside).
    assert_eq!(
        std::fs::read(t.path().join("etc/containerd/config.toml")).unwrap(),
        std::fs::read(fixture.join("etc/containerd/config.toml")).unwrap()
    );
    assert!(
        !t.path()
            .join("etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf")
            .exists()
    );
}

#[test]
fn check_only_runs_the_concerns_its_checks_need() {
    let t = v100();
    let a = Agent::new(Host::new(t.path()), Config::default());
    let only = ["pods.memlock".to_owned()];
    let ids: Vec<String> = a.check(&only).checks.into_iter().map(|c| c.id).collect();
    // pods.memlock reads containerd's observation: containerd runs too; no
    // kernel, RDMA or systemd concern does.
    assert_eq!(ids, ["containerd.memlock", "pods.memlock"]);
}
