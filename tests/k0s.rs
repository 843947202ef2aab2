//! k0s as a layout (tests/fixtures/real-world/k0s, with its PROVENANCE): k0s
//! rewrites its managed /etc/k0s/containerd.toml at every start and restarts
//! its containerd on any change in /etc/k0s/containerd.d, so the agent writes
//! a drop-in of its own there and touches neither k0s's file nor an admin's
//! drop-in; the LimitMEMLOCK drop-in goes to the k0s unit containerd is a
//! child of; what it cannot do right it refuses, naming k0s. containerd's own
//! `config dump` of the result is checked by tests/real_world.rs (case `k0s`).

mod support;

use std::path::Path;

use support::*;

const MAIN: &str = "/etc/k0s/containerd.toml";
const ADMIN: &str = "/etc/k0s/containerd.d/foo.toml";
const DROPIN: &str = "/etc/k0s/containerd.d/rdma-node-agent.toml";
const SPEC: &str = "/etc/k0s/containerd.d/rdma-node-agent-base-spec.json";

/// The real k0s tree, with the agent told where k0s's config is (as an
/// operator who read k0s's docs would).
fn k0s_node(agent_config: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("real-world/k0s/root"), t.path());
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        &format!("[containerd]\ndaemon_version = 2\n{agent_config}"),
    );
    t
}

#[test]
fn k0s_gets_its_own_dropin_and_its_unit_is_the_one_restarted() {
    let t = k0s_node("config_path = \"/etc/k0s/containerd.toml\"\n");
    let root = t.path();
    let (main, admin) = (read(root, MAIN), read(root, ADMIN));
    let plan = stdout(&agent(root, &["plan"]));
    assert!(
        plan.contains("action: restart k0sworker.service ("),
        "{plan}"
    );
    assert!(!plan.contains("containerd.service"), "{plan}");
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "apply: {}{}", stdout(&o), stderr(&o));
    assert_eq!(read(root, MAIN), main, "k0s's managed file is k0s's");
    assert_eq!(
        read(root, ADMIN),
        admin,
        "the admin's drop-in is the admin's"
    );
    let dropin: toml::Table = read(root, DROPIN).parse().unwrap();
    assert_eq!(
        dropin["version"].as_integer(),
        Some(3),
        "k0s ≥ 1.36 wants v3"
    );
    let runtimes = &dropin["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"];
    for h in ["foo", "runc"] {
        assert_eq!(
            runtimes[h]["base_runtime_spec"].as_str(),
            Some(SPEC),
            "{dropin}"
        );
    }
    assert!(read(root, SPEC).contains("RLIMIT_MEMLOCK"));
    // containerd inherits the limits of the k0s process (k0s's supervisor
    // execs it as a plain child): the k0s unit gets LimitMEMLOCK.
    let limit = read(
        root,
        "/etc/systemd/system/k0sworker.service.d/50-rdma-node-agent.conf",
    );
    assert!(limit.contains("LimitMEMLOCK=infinity"), "{limit}");
    assert!(
        !root
            .join("etc/systemd/system/containerd.service.d")
            .exists()
    );
    assert!(!root.join("etc/containerd").exists());
    let again = agent(root, &["plan", "--exit-code"]);
    assert_eq!(code(&again), 0, "not converged: {}", stdout(&again));
    let r = agent(root, &["revert"]);
    assert_eq!(code(&r), 0, "revert: {}{}", stdout(&r), stderr(&r));
    assert!(!root.join(DROPIN.trim_start_matches('/')).exists());
    assert_eq!(read(root, MAIN), main);
}

/// A containerd.toml without k0s's marker is the admin's (k0s leaves it alone):
/// edited in place, and k0s's unit restarted.
#[test]
fn an_admin_managed_k0s_config_is_edited_in_place() {
    let t = k0s_node("");
    let root = t.path();
    let main = read(root, MAIN).replacen("# k0s_managed=true\n", "", 1);
    write(root, MAIN, &main);
    let plan = stdout(&agent(root, &["plan"]));
    assert!(
        plan.contains("action: restart k0sworker.service ("),
        "{plan}"
    );
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "apply: {}{}", stdout(&o), stderr(&o));
    assert!(!root.join(DROPIN.trim_start_matches('/')).exists());
    assert!(read(root, MAIN).contains(SPEC), "{}", read(root, MAIN));
}

fn refused(root: &Path, words: &[&str]) {
    let before = snapshot(root);
    let o = agent(root, &["apply", "--no-restart"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "apply must refuse: {said}");
    for w in words {
        assert!(said.contains(w), "the refusal says {w:?}: {said}");
    }
    let after = snapshot(root);
    let written: Vec<_> = after
        .keys()
        .filter(|k| before.get(*k) != after.get(*k) && k.starts_with(root.join("etc/k0s")))
        .collect();
    assert!(written.is_empty(), "nothing of k0s's written: {written:?}");
}

/// k0s before 1.36 (containerd 1.7) merged drop-ins' CRI sections itself into
/// /run/k0s/containerd-cri.toml: refused, naming k0s and the way out.
#[test]
fn an_old_k0s_is_refused_by_name() {
    let t = k0s_node("");
    let root = t.path();
    // v1.35's marshalled file: version 2, imports k0s's own CRI file.
    write(
        root,
        MAIN,
        "# k0s_managed=true\nimports = [\"/run/k0s/containerd-cri.toml\"]\nversion = 2\n",
    );
    refused(root, &["k0s", "1.36", "k0s_managed=true"]);
}

/// Before k0s first starts containerd there is no containerd.toml: the agent
/// must not create one (k0s would then take it for the admin's).
#[test]
fn a_k0s_that_never_started_is_refused_by_name() {
    let t = k0s_node("");
    let root = t.path();
    std::fs::remove_file(root.join(MAIN.trim_start_matches('/'))).unwrap();
    refused(root, &["k0s", "does not exist yet"]);
    assert!(!root.join(MAIN.trim_start_matches('/')).exists());
}

/// A controller-only k0s runs no containerd: its unit is not taken for one.
#[test]
fn a_controller_without_worker_runs_no_containerd() {
    let t = k0s_node("");
    let root = t.path();
    let unit = read(root, "/etc/systemd/system/k0sworker.service");
    std::fs::remove_file(root.join("etc/systemd/system/k0sworker.service")).unwrap();
    std::fs::remove_file(root.join("etc/systemd/system/multi-user.target.wants/k0sworker.service"))
        .unwrap();
    let controller = unit.replace(" worker --token-file=/etc/k0s/worker-token", " controller");
    write(
        root,
        "/etc/systemd/system/k0scontroller.service",
        &controller,
    );
    // A controller-only node has no containerd config either.
    let main = read(root, MAIN);
    std::fs::remove_file(root.join(MAIN.trim_start_matches('/'))).unwrap();
    let plan = stdout(&agent(root, &["plan"]));
    assert!(!plan.contains("k0scontroller.service"), "{plan}");
    assert!(!plan.contains("/etc/k0s/"), "{plan}");
    write(root, MAIN, &main);
    write(
        root,
        "/etc/systemd/system/k0scontroller.service",
        &controller.replace(" controller", " controller --enable-worker"),
    );
    let plan = stdout(&agent(root, &["plan"]));
    assert!(
        plan.contains("action: restart k0scontroller.service ("),
        "{plan}"
    );
}

/// Without its unit file (a tree taken from a node, an install without
/// `k0s install`): k0s's config still says who runs containerd.
#[test]
fn k0s_is_known_by_its_config_without_a_unit_file() {
    let t = k0s_node("");
    let root = t.path();
    std::fs::remove_file(root.join("etc/systemd/system/k0sworker.service")).unwrap();
    std::fs::remove_file(root.join("etc/systemd/system/multi-user.target.wants/k0sworker.service"))
        .unwrap();
    let main = read(root, MAIN);
    let plan = stdout(&agent(root, &["plan"]));
    assert!(
        plan.contains("action: restart k0sworker.service ("),
        "{plan}"
    );
    assert!(plan.contains(DROPIN), "{plan}");
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "apply: {}{}", stdout(&o), stderr(&o));
    assert_eq!(read(root, MAIN), main);
}
