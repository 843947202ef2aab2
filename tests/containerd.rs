//! The containerd concern on fixture trees, through the real binary: plan, apply,
//! idempotence, revert, every config version, and bad input. Where containerd is
//! installed, every edit is also validated by its own `containerd config dump`.

mod support;

use std::path::Path;

use serde_json::Value;
use support::containerd::{handlers_of, memlock_of};
use support::*;

const SPEC: &str = "/etc/containerd/rdma-node-agent/base-spec.json";
const CONFIG: &str = "/etc/containerd/config.toml";

fn apply_ok(root: &Path) -> String {
    let o = agent(root, &["apply"]);
    assert_eq!(code(&o), 0, "apply failed: {}{}", stdout(&o), stderr(&o));
    let edited_v2 = stdout(&o).contains(&format!("changed: {CONFIG}"))
        && read(root, CONFIG).contains("version = 2");
    if edited_v2 && have_containerd() {
        assert!(
            stderr(&o).contains("validated with `containerd config dump`"),
            "edits were not validated by containerd: {}",
            stderr(&o)
        );
    }
    stdout(&o)
}

/// plan → apply → converged → apply changes nothing → revert is byte-identical.
fn round_trip(root: &Path) {
    let before = snapshot(root);
    let plan = agent(root, &["plan", "--exit-code"]);
    assert_eq!(code(&plan), 2, "{}{}", stdout(&plan), stderr(&plan));
    apply_ok(root);
    let again = agent(root, &["plan", "--exit-code"]);
    assert_eq!(code(&again), 0, "not converged: {}", stdout(&again));
    assert_eq!(apply_ok(root).trim(), "No changes: the node is converged.");
    let r = agent(root, &["revert"]);
    assert_eq!(code(&r), 0, "{}{}", stdout(&r), stderr(&r));
    // The agent's journal of what happened stays (left out by `snapshot`).
    let after = snapshot(root);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    let expected = before;
    assert!(after == expected, "revert is not byte-identical");
}

#[test]
fn v100_plan_shows_both_diffs_and_keeps_comments() {
    let t = node("v100");
    let root = t.path();
    let original = read(root, CONFIG);
    let o = agent(root, &["plan"]);
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    assert!(
        text.contains(&format!("+          base_runtime_spec = \"{SPEC}\"")),
        "{text}"
    );
    assert!(
        text.contains(&format!("--- /dev/null\n+++ {SPEC}")),
        "{text}"
    );
    assert!(text.contains("action: restart containerd.service"));

    apply_ok(root);
    let edited = read(root, CONFIG);
    for line in original.lines().filter(|l| l.contains('#')) {
        assert!(edited.contains(line), "comment line lost: {line}");
    }
    // Only one line was added.
    assert_eq!(edited.lines().count(), original.lines().count() + 1);
    let spec = read(root, SPEC);
    assert_eq!(memlock_of(&spec), Some((u64::MAX, u64::MAX)));
    assert!(spec.contains("18446744073709551615"));
    assert!(
        !spec.contains("RLIMIT_NOFILE"),
        "open-files limit must be inherited, not 1024"
    );
}

#[test]
fn v100_round_trip() {
    let t = node("v100");
    round_trip(t.path());
    assert!(!t.path().join("etc/containerd/rdma-node-agent").exists());
}

#[test]
fn a100_v3_conf_d_handlers_each_get_the_spec_where_they_are_defined() {
    let t = node("a100");
    let root = t.path();
    apply_ok(root);
    let mut names: Vec<String> = handlers_of(root).into_iter().map(|(h, _)| h).collect();
    names.sort();
    assert_eq!(names, vec!["nvidia", "nvidia-cdi", "runc"]);
    let main = read(root, CONFIG);
    let dropin = read(root, "/etc/containerd/conf.d/99-nvidia.toml");
    assert_eq!(main.matches("base_runtime_spec").count(), 1, "{main}");
    assert_eq!(dropin.matches("base_runtime_spec").count(), 2, "{dropin}");
    // The file writes '…' strings: so does the agent.
    assert!(
        main.contains(&format!("base_runtime_spec = '{SPEC}'")),
        "{main}"
    );
    round_trip(node("a100").path());
}

#[test]
fn kubespray_base_spec_keeps_its_content() {
    let t = node("kubespray");
    let root = t.path();
    let config_before = read(root, CONFIG);
    let spec_before: Value =
        serde_json::from_str(&read(root, "/etc/containerd/cri-base.json")).unwrap();
    apply_ok(root);
    assert_eq!(
        read(root, CONFIG),
        config_before,
        "its handler already had a base spec"
    );
    let spec_after: Value =
        serde_json::from_str(&read(root, "/etc/containerd/cri-base.json")).unwrap();
    let rl = spec_after["process"]["rlimits"].as_array().unwrap();
    assert_eq!(
        rl[0],
        serde_json::json!({"type": "RLIMIT_NOFILE", "hard": 65535, "soft": 65535})
    );
    assert_eq!(
        memlock_of(&read(root, "/etc/containerd/cri-base.json")),
        Some((u64::MAX, u64::MAX))
    );
    // Nothing else in the operator's spec moved.
    let mut a = spec_after.clone();
    let mut b = spec_before.clone();
    a["process"]["rlimits"] = Value::Null;
    b["process"]["rlimits"] = Value::Null;
    assert_eq!(a, b);
    assert!(!root.join(SPEC.trim_start_matches('/')).exists());
}

/// A root holding only the given containerd config.
fn root_with_config(fixture: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixtures().join("containerd").join(fixture)).unwrap();
    write(t.path(), CONFIG, &text);
    t
}

#[test]
fn version_1_legacy_layout() {
    let t = root_with_config("v1-legacy.toml");
    apply_ok(t.path());
    let text = read(t.path(), CONFIG);
    assert!(text.contains(&format!(
        "[plugins.cri.containerd.runtimes.runc]\n      runtime_type = \"io.containerd.runc.v2\"\n      base_runtime_spec = \"{SPEC}\""
    )), "{text}");
    round_trip(root_with_config("v1-legacy.toml").path());
}

#[test]
fn version_4_every_handler() {
    let t = root_with_config("v4.toml");
    apply_ok(t.path());
    assert_eq!(
        read(t.path(), CONFIG).matches("base_runtime_spec").count(),
        2
    );
    round_trip(root_with_config("v4.toml").path());
}

#[test]
fn dotted_keys_and_inline_tables_are_edited_in_place() {
    let t = root_with_config("dotted-inline.toml");
    apply_ok(t.path());
    let text = read(t.path(), CONFIG);
    assert!(text.contains("version = 2 # dotted keys and inline tables are legal TOML too"));
    assert!(text.contains("# pinned"));
    let doc: toml::Table = text.parse().expect("still valid TOML");
    let runtimes = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
    for h in ["runc", "nvidia"] {
        assert_eq!(
            runtimes[h]["base_runtime_spec"].as_str(),
            Some(SPEC),
            "{text}"
        );
    }
    assert_eq!(
        runtimes["runc"]["options"]["SystemdCgroup"].as_bool(),
        Some(true)
    );
    round_trip(root_with_config("dotted-inline.toml").path());
}

#[test]
fn implicit_default_runtime_is_created_with_its_runtime_type() {
    let t = root_with_config("v2-empty-default.toml");
    apply_ok(t.path());
    let doc: toml::Table = read(t.path(), CONFIG).parse().unwrap();
    let runc = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"];
    assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    assert_eq!(runc["base_runtime_spec"].as_str(), Some(SPEC));
    // The registry setting is untouched.
    assert!(read(t.path(), CONFIG).starts_with("version = 2\n# Only a registry mirror"));
}

#[test]
fn absent_config_is_written_with_an_explicit_version() {
    let t = tempfile::tempdir().unwrap();
    // containerd is installed (its binary), with no config file: it runs on its
    // defaults, and the agent writes the default path (tests/containerd_truth.rs:
    // a node with no containerd at all gets nothing).
    write(t.path(), "/usr/bin/containerd", "");
    apply_ok(t.path());
    let doc: toml::Table = read(t.path(), CONFIG).parse().unwrap();
    assert_eq!(doc["version"].as_integer(), Some(2));
    let runc = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"];
    assert_eq!(runc["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    let r = agent(t.path(), &["revert"]);
    assert_eq!(code(&r), 0);
    assert!(
        !t.path().join("etc/containerd").exists(),
        "created files and dirs removed"
    );
}

#[test]
fn refusals_name_the_file_and_change_nothing() {
    let cases = [
        ("broken.toml", "config.toml:4:40: invalid basic string"),
        (
            "bad-version.toml",
            "containerd config version 7 is not one this agent knows",
        ),
        ("v1-with-v2-sections.toml", "has no `version` key"),
    ];
    for (fixture, expected) in cases {
        let t = root_with_config(fixture);
        let before = snapshot(t.path());
        for cmd in [&["plan"][..], &["apply"][..]] {
            let o = agent(t.path(), cmd);
            assert_eq!(code(&o), 1, "{fixture}: {}", stdout(&o));
            assert!(stderr(&o).contains(expected), "{fixture}: {}", stderr(&o));
        }
        let c = agent(t.path(), &["check"]);
        assert_eq!(code(&c), 1, "{fixture}");
        assert!(stdout(&c).contains(expected), "{fixture}: {}", stdout(&c));
        assert_eq!(snapshot(t.path()), before, "{fixture}: files changed");
    }
}

#[test]
fn bad_agent_config_names_line_and_column_and_changes_nothing() {
    let t = node("v100");
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlock = \"4MiB\"\nhandler = [\"runc\"]\n",
    );
    let before = snapshot(t.path());
    let o = agent(t.path(), &["apply"]);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    assert!(
        err.contains("etc/rdma-node-agent/config.toml:3:1: "),
        "{err}"
    );
    assert!(err.contains("handler"), "{err}");
    let c = agent(t.path(), &["check"]);
    assert_eq!(code(&c), 2, "could not tell: NPD's unknown");
    assert!(stdout(&c).lines().next().unwrap().len() <= 80);
    assert_eq!(snapshot(t.path()), before);
}

#[test]
fn configured_handlers_only_and_unknown_handler_refused() {
    let t = node("a100");
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nhandlers = [\"nvidia\"]\nmemlock = \"4MiB\"\n",
    );
    apply_ok(t.path());
    assert_eq!(
        read(t.path(), CONFIG).matches("base_runtime_spec").count(),
        0
    );
    assert_eq!(
        read(t.path(), "/etc/containerd/conf.d/99-nvidia.toml")
            .matches("base_runtime_spec")
            .count(),
        1
    );
    assert_eq!(memlock_of(&read(t.path(), SPEC)), Some((4 << 20, 4 << 20)));

    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nhandlers = [\"kata\"]\n",
    );
    let o = agent(t.path(), &["plan"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("runtime handler \"kata\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn changing_the_target_updates_only_the_spec() {
    let t = node("v100");
    apply_ok(t.path());
    let config = read(t.path(), CONFIG);
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlock = \"4MiB\"\n",
    );
    let o = agent(t.path(), &["plan"]);
    let text = stdout(&o);
    assert!(
        text.contains("-                \"hard\": 18446744073709551615,"),
        "{text}"
    );
    assert!(
        text.contains("+                \"hard\": 4194304,"),
        "{text}"
    );
    apply_ok(t.path());
    assert_eq!(read(t.path(), CONFIG), config);
    // Revert still returns the very first original.
    let r = agent(t.path(), &["revert"]);
    assert_eq!(code(&r), 0);
    assert!(!read(t.path(), CONFIG).contains("base_runtime_spec"));
}

#[test]
fn check_reports_restart_pending_and_old_pods() {
    let t = node("v100");
    apply_ok(t.path());
    let c = json(&agent(t.path(), &["check", "--json"]));
    let by_id = |id: &str| check_in(&c, id);
    // The fixture's containerd (pid 812) started long before the files changed.
    let cm = by_id("containerd.memlock");
    assert_eq!(cm["status"], "fail");
    assert!(
        cm["message"].as_str().unwrap().contains("restart pending"),
        "{cm}"
    );
    let pods = by_id("pods.memlock");
    assert_eq!(pods["status"], "warn");
    let message = pods["message"].as_str().unwrap();
    assert!(
        message.contains("pod 6f1c2d3e-aaaa-bbbb-cccc-0123456789ab container 9a8b7c6d5e4f"),
        "{pods}"
    );
    // The pod's sandbox (OpenShift's `pod` infra binary, known by its shim's -id)
    // runs with 64 KiB too, but never registers memory: no finding.
    assert!(message.starts_with("1 pod container(s)"), "{pods}");
    assert!(!message.contains("3c4d5e6f7081"), "{pods}");
    assert_eq!(c["ok"], false);
}

#[test]
fn nfd_feature_file_follows_the_checks_and_is_removed_by_revert() {
    let t = node("v100");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[nfd]\nenabled = true\n",
    );
    let before = snapshot(root);
    apply_ok(root);
    let labels = read(
        root,
        "/etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent",
    );
    // The fixture's containerd has not restarted since the change: not ready yet.
    assert!(
        labels.contains("\nrdma-node-agent.ready=false\n"),
        "{labels}"
    );
    assert!(
        labels.contains("\nrdma-node-agent.memlock=unlimited\n"),
        "{labels}"
    );
    let plan = agent(root, &["plan", "--exit-code"]);
    assert_eq!(code(&plan), 0, "{}", stdout(&plan));
    let r = agent(root, &["revert"]);
    assert_eq!(code(&r), 0);
    assert_eq!(snapshot(root), before);
}

#[test]
fn moving_base_spec_path_moves_the_agents_spec_and_removes_the_old_one() {
    let t = node("v100");
    let root = t.path();
    apply_ok(root);
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nbase_spec_path = \"/etc/containerd/rdma.json\"\n",
    );
    let o = agent(root, &["plan"]);
    let text = stdout(&o);
    assert!(
        text.contains("+          base_runtime_spec = \"/etc/containerd/rdma.json\""),
        "{text}"
    );
    assert!(
        text.contains(&format!("--- {SPEC}\n+++ /dev/null")),
        "{text}"
    );
    apply_ok(root);
    assert!(!root.join(SPEC.trim_start_matches('/')).exists());
    assert!(root.join("etc/containerd/rdma.json").exists());
    assert_eq!(code(&agent(root, &["plan", "--exit-code"])), 0);
    // Revert still gives back the node as it was before the very first apply.
    assert_eq!(code(&agent(root, &["revert"])), 0);
    assert!(!read(root, CONFIG).contains("base_runtime_spec"));
    assert!(!root.join("etc/containerd/rdma.json").exists());
}
