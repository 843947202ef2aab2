//! `containerd.memlock` follows the containerd that really runs and is `ok` only
//! when containerd itself agrees, on layouts that are not containerd.service
//! reading /etc/containerd/config.toml: a unit passing `--config` (Flatcar's
//! sysext, from its public repository), Docker's containerd.io with CRI off
//! (its shipped config), a node without containerd, the old `[systemd] units`
//! knob, and a `version = 2` file with containerd 2.x plugin names judged by
//! the real containerd 2.1's `config dump`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::*;

fn layout(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(
        &fixtures().join("layouts").join(name).join("root"),
        t.path(),
    );
    t
}

fn changed_paths(plan: &Value) -> Vec<String> {
    plan["changes"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|c| c["path"].as_str().map(str::to_owned))
        .collect()
}

fn plan_json(root: &Path) -> Value {
    let o = agent(root, &["plan", "--json"]);
    assert!(
        matches!(o.status.code(), Some(0 | 2)),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    json(&o)
}

fn check_json(root: &Path) -> Value {
    json(&agent(root, &["check", "--json"]))
}

/// containerd 2.1 (scripts/fetch-containerd.sh), when there.
fn containerd_21() -> Option<PathBuf> {
    let cache = std::env::var_os("RDMA_AGENT_CONTAINERD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/rdma-node-agent/containerd".into());
    let p = cache.join("2.1/containerd");
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("RDMA_AGENT_REQUIRE_CONTAINERD").is_none(),
        "no containerd 2.1 at {}: run scripts/fetch-containerd.sh (scripts/test.sh does)",
        p.display()
    );
    None
}

#[test]
fn the_config_a_unit_passes_is_the_one_edited() {
    let t = layout("flatcar-sysext");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\ndaemon_version = 2\n",
    );
    let changes = changed_paths(&plan_json(root));
    assert!(
        changes
            .iter()
            .any(|p| p == "/usr/share/containerd/config.toml"),
        "{changes:?}"
    );
    assert!(
        !changes.iter().any(|p| p == "/etc/containerd/config.toml"),
        "a file containerd never reads: {changes:?}"
    );
    let c = check_in(&check_json(root), "containerd.memlock");
    let source = c["details"]["config_source"].as_str().unwrap_or_default();
    assert!(source.contains("ExecStart of containerd.service"), "{c}");

    // An admin's drop-in points the unit elsewhere (Flatcar's documented way to
    // customise): that file is the one, found through the drop-in's Environment=.
    write(
        root,
        "/etc/systemd/system/containerd.service.d/10-custom.conf",
        "[Service]\nEnvironment=CONTAINERD_CONFIG=/etc/containerd/config.toml\n",
    );
    write(root, "/etc/containerd/config.toml", "version = 3\n");
    let changes = changed_paths(&plan_json(root));
    assert!(
        changes.iter().any(|p| p == "/etc/containerd/config.toml"),
        "{changes:?}"
    );
    assert!(
        !changes
            .iter()
            .any(|p| p == "/usr/share/containerd/config.toml"),
        "{changes:?}"
    );

    // And through an EnvironmentFile=, which wins over Environment=.
    write(
        root,
        "/etc/containerd/env",
        "CONTAINERD_CONFIG=/srv/containerd.toml\n",
    );
    write(root, "/srv/containerd.toml", "version = 3\n");
    write(
        root,
        "/etc/systemd/system/containerd.service.d/20-env.conf",
        "[Service]\nEnvironmentFile=/etc/containerd/env\n",
    );
    let changes = changed_paths(&plan_json(root));
    assert!(
        changes.iter().any(|p| p == "/srv/containerd.toml"),
        "{changes:?}"
    );
}

#[test]
fn an_explicit_config_path_unlike_the_units_is_a_warning_naming_both() {
    let t = layout("flatcar-sysext");
    let root = t.path();
    write(root, "/etc/containerd/config.toml", "version = 2\n");
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\ndaemon_version = 2\nconfig_path = \"/etc/containerd/config.toml\"\n",
    );
    let changes = changed_paths(&plan_json(root));
    assert!(
        changes
            .iter()
            .any(|p| p == "/usr/share/containerd/config.toml")
            && !changes.iter().any(|p| p == "/etc/containerd/config.toml"),
        "the unit's file wins: {changes:?}"
    );
    let c = check_in(&check_json(root), "containerd.memlock");
    let warnings = c["details"]["warnings"].to_string();
    assert!(
        warnings.contains("/etc/containerd/config.toml")
            && warnings.contains("/usr/share/containerd/config.toml"),
        "{c}"
    );
}

#[test]
fn cri_off_is_said_and_nothing_is_written() {
    let t = layout("docker-containerd.io");
    let root = t.path();
    let plan = plan_json(root);
    let changes = changed_paths(&plan);
    assert!(
        !changes.iter().any(|p| p.starts_with("/etc/containerd")),
        "{changes:?}"
    );
    let c = check_in(&check_json(root), "containerd.memlock");
    assert_eq!(c["status"], "warn", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains("CRI is off") && m.contains("serves no pods"),
        "{m}"
    );

    // The kubelet talks to this very containerd: no pod can start.
    write(
        root,
        "/var/lib/kubelet/config.yaml",
        "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
    );
    let c = check_in(&check_json(root), "containerd.memlock");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["message"].as_str().unwrap().contains("no pod can start"),
        "{c}"
    );
}

#[test]
fn a_node_without_containerd_skips_and_creates_nothing() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("etc")).unwrap();
    let report = check_json(root);
    for id in ["containerd.memlock", "systemd.memlock"] {
        let c = check_in(&report, id);
        assert_eq!(c["status"], "skipped", "{c}");
        assert!(
            c["message"].as_str().unwrap().contains("no containerd"),
            "{c}"
        );
    }
    let changes = changed_paths(&plan_json(root));
    assert!(
        !changes
            .iter()
            .any(|p| p.contains("containerd") || p.starts_with("/etc/systemd")),
        "{changes:?}"
    );
    let o = agent(root, &["apply"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!root.join("etc/containerd").exists());
    assert!(!root.join("etc/systemd").exists());

    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nrequired = true\n",
    );
    let c = check_in(&check_json(root), "containerd.memlock");
    assert_eq!(c["status"], "fail", "{c}");
}

#[test]
fn old_systemd_units_load_with_a_warning_and_cannot_disagree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    copy_tree(&fixtures().join("real-world/microk8s/root"), root);
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[systemd]\nunits = [\"snap.microk8s.daemon-containerd.service\"]\n",
    );
    let o = agent(root, &["plan", "--json"]);
    let err = stderr(&o);
    assert!(
        err.contains("no longer read")
            && err.contains("unit = \"snap.microk8s.daemon-containerd.service\""),
        "{err}"
    );
    let plan = json(&o);
    let text = plan.to_string();
    assert!(
        text.contains("snap.microk8s.daemon-containerd.service.d/50-rdma-node-agent.conf"),
        "{text}"
    );
    assert!(
        !text.contains("\"containerd.service\""),
        "no other unit restarted or given a drop-in: {text}"
    );
}

/// A `version = 2` file with containerd 2.x's plugin names (as AKS renders for
/// containerd-2 GPU pools; this file is hand-written after that shape): 2.1
/// reads only the 2.x-named handlers. The agent edits those, and the check is
/// judged by containerd 2.1's own `config dump`, which a wrong reading fails.
#[test]
fn two_x_names_in_a_version_2_file_under_containerd_2_1() {
    let Some(bin) = containerd_21() else { return };
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let config = "version = 2\n\
        [plugins.\"io.containerd.cri.v1.runtime\".containerd]\n\
        default_runtime_name = \"nvidia-container-runtime\"\n\
        [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia-container-runtime]\n\
        runtime_type = \"io.containerd.runc.v2\"\n\
        [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia-container-runtime.options]\n\
        BinaryName = \"/usr/bin/nvidia-container-runtime\"\n\
        [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n\
        runtime_type = \"io.containerd.runc.v2\"\n";
    write(root, "/etc/containerd/config.toml", config);
    let agent_cfg = |major: u32| {
        format!(
            "[containerd]\ndaemon_version = {major}\nbinary = \"{}\"\n[systemd]\nenabled = false\n",
            bin.display()
        )
    };
    // Told the wrong major, the agent writes 1.x's names, which 2.1 ignores:
    // containerd's own view says so, so the check fails instead of saying ok.
    write(root, "/etc/rdma-node-agent/config.toml", &agent_cfg(1));
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let c = check_in(&check_json(root), "containerd.memlock");
    assert_eq!(c["status"], "fail", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains("config dump")
            && m.contains("nvidia-container-runtime has no base_runtime_spec"),
        "{m}"
    );
    assert_eq!(agent(root, &["revert"]).status.code(), Some(0));

    // Told the truth, the 2.x-named handlers get the spec, and 2.1 agrees.
    write(root, "/etc/rdma-node-agent/config.toml", &agent_cfg(2));
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let c = check_in(&check_json(root), "containerd.memlock");
    // No containerd runs here: configured and confirmed, but not running.
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("`containerd config dump` agrees"),
        "{c}"
    );
    let dump = c["details"]["config_dump"].to_string();
    assert!(
        dump.contains("nvidia-container-runtime")
            && dump.contains("/etc/containerd/rdma-node-agent/base-spec.json"),
        "{dump}"
    );
}
