//! k3s/rke2 with containerd 2 (tests/fixtures/real-world/k3s-v3-base, with its
//! PROVENANCE): they read `config-v3.toml.tmpl` before `config.toml.tmpl`, and
//! their base template imports `config-v3.toml.d/*.toml`. The agent writes its
//! own drop-in there and no template; where it must refuse, the advice names
//! the template k3s reads and never asks for a second `runc` table in a
//! `{{ template "base" . }}` template (containerd 2: "table runc already
//! exists"). containerd's own `config dump` of the result: tests/real_world.rs.

mod support;

use std::path::Path;

use support::*;

const DIR: &str = "/var/lib/rancher/k3s/agent/etc/containerd";

fn node() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("real-world/k3s-v3-base/root"), t.path());
    write(
        t.path(),
        "/etc/rdma-node-agent/config.toml",
        "[systemd]\nenabled = false\n[containerd]\ndaemon_version = 2\n",
    );
    t
}

/// A k3s whose base template does not import the drop-in directory (before
/// k3s-io/k3s#13680): its config.toml without the imports line.
fn without_imports(root: &Path) {
    let main = format!("{DIR}/config.toml");
    let text = read(root, &main);
    let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("imports")).collect();
    write(root, &main, &(kept.join("\n") + "\n"));
}

fn refusal(root: &Path) -> String {
    let before = snapshot(root);
    let o = agent(root, &["apply", "--no-restart"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "apply must refuse: {said}");
    assert_eq!(snapshot(root), before, "a refusal writes nothing");
    said
}

#[test]
fn a_base_template_gets_the_agents_dropin_not_a_runc_table() {
    let t = node();
    let root = t.path();
    let (main, tmpl) = (
        read(root, &format!("{DIR}/config.toml")),
        read(root, &format!("{DIR}/config-v3.toml.tmpl")),
    );
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "apply: {}{}", stdout(&o), stderr(&o));
    assert_eq!(read(root, &format!("{DIR}/config-v3.toml.tmpl")), tmpl);
    assert_eq!(
        read(root, &format!("{DIR}/config.toml")),
        main,
        "k3s's render"
    );
    let dropin: toml::Table = read(
        root,
        &format!("{DIR}/config-v3.toml.d/rdma-node-agent.toml"),
    )
    .parse()
    .unwrap();
    let runc = &dropin["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"];
    assert_eq!(
        runc["base_runtime_spec"].as_str(),
        Some(&*format!("{DIR}/rdma-node-agent/base-spec.json")),
        "{dropin}"
    );
    let again = agent(root, &["plan", "--exit-code"]);
    assert_eq!(code(&again), 0, "not converged: {}", stdout(&again));
}

/// containerd 2's k3s renders version 3 and reads config-v3.toml.tmpl first:
/// the refusal names that one, not config.toml.tmpl.
#[test]
fn without_a_template_the_advice_names_config_v3_toml_tmpl() {
    let t = node();
    let root = t.path();
    without_imports(root);
    std::fs::remove_file(
        root.join(DIR.trim_start_matches('/'))
            .join("config-v3.toml.tmpl"),
    )
    .unwrap();
    let said = refusal(root);
    assert!(said.contains("config-v3.toml.tmpl"), "{said}");
    assert!(!said.contains("/config.toml.tmpl"), "{said}");
}

/// A base template on a k3s whose base does not import the drop-in directory:
/// no advice to add a runc table (the documented breakage).
#[test]
fn a_base_template_without_imports_is_not_told_to_add_a_runc_table() {
    let t = node();
    let root = t.path();
    without_imports(root);
    let said = refusal(root);
    assert!(said.contains("table runc already exists"), "{said}");
    assert!(said.contains("k3s-io/k3s#13680"), "{said}");
    assert!(!said.contains("Add by hand"), "{said}");
}
