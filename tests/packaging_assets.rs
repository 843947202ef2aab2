//! The man page and shell completions the packages ship are committed under
//! packaging/generated/ so that a plain `cargo deb` or `cargo generate-rpm` after
//! `cargo build --release` finds them. They must be exactly what this CLI
//! generates now: a changed option or version without a regeneration fails here.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

/// Runs `play.yml` in `dir` with the role's filter plugins and `vars` as extra vars.
fn playbook(dir: &Path, role: &Path, vars: &serde_json::Value) {
    let run = Command::new("ansible-playbook")
        .arg("play.yml")
        .arg("-e")
        .arg(vars.to_string())
        .current_dir(dir)
        .env("ANSIBLE_FILTER_PLUGINS", role.join("filter_plugins"))
        .env("ANSIBLE_NOCOLOR", "1")
        .output()
        .expect("ansible-playbook (ansible-core) is installed by scripts/test.sh");
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn shipped_man_page_and_completions_are_fresh() {
    let fresh = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("generate-assets")
        .arg(fresh.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/generated");
    let (want, got) = (files(fresh.path()), files(&shipped));
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    let stale: Vec<&String> = want
        .iter()
        .filter(|(name, bytes)| got.get(*name) != Some(bytes))
        .map(|(name, _)| name)
        .collect();
    assert!(
        names(&want) == names(&got) && stale.is_empty(),
        "packaging/generated/ is stale (differs: {stale:?}; generated {:?}, shipped {:?}): \
         run `cargo run -- generate-assets packaging/generated` and commit the result",
        names(&want),
        names(&got)
    );
}

/// The role renders the whole agent config from its variables: keys of every
/// table (nested tables, lists of tables, `[containerd]` keys the old
/// `extra_config` could not set) come out as TOML the agent itself accepts.
#[test]
#[ignore = "needs ansible-core (ansible-playbook): run via scripts/test.sh"]
fn ansible_role_renders_every_table_as_a_config_the_agent_accepts() {
    let role =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/ansible/roles/rdma_node_agent");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("config.toml");
    let play = format!(
        "- hosts: localhost\n  gather_facts: false\n  vars_files: [{r}/defaults/main.yml, {r}/vars/main.yml]\n  tasks:\n    - ansible.builtin.template: {{src: {r}/templates/config.toml.j2, dest: {o}, mode: \"0644\"}}\n",
        r = role.display(),
        o = out.display()
    );
    fs::write(dir.path().join("play.yml"), play).unwrap();
    let config = serde_json::json!({
        "containerd": {
            "enabled": true, "memlock_via": "both", "unit": "containerd.service",
            "nri_index": "10", "nri_annotations": ["memlock.rdma-node-agent.io/nri"],
            "daemon_version": 2, "required": false, "rlimits": {"RLIMIT_NOFILE": 1048576},
        },
        "systemd": {"dropin": "50-rdma-node-agent.conf"},
        "pods": {"below_target": "fail", "rdma": "warn"},
        "daemon": {"interval_secs": 120, "debounce_ms": 200},
        "http": {"max_connections": 1024},
        "nfd": {"path": "/etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent"},
        "rdma": {
            "netns_mode": "exclusive", "reboot_sentinel": true, "flap_window": "1h",
            "ignore_ports": ["mlx5_1/1"], "min_active_ports": {"InfiniBand": 2},
            "expect_port": [{"device": "mlx5_0", "port": 1, "min_rate_gbps": 200},
                            {"device": "mlx5_2"}],
        },
        "gpudirect": {"required_gpus": ["0000:1b:00.0"], "acs": "report"},
        "kernel": {"required_modules": [], "dkms_modules": []},
        "kubelet": {"expected_resources": ["rdma/hca"], "mismatch": "warn"},
        "peers": {
            "enabled": true, "k": 3, "interval": "60s", "gate": true,
            "rails": {"mlx5_0": 0, "mlx5_1": 1},
            "source": {"kind": "file", "path": "/etc/rdma-node-agent/peers.toml"},
        },
        "mode": "report",
        "unused": null,
    });
    let vars =
        serde_json::json!({"rdma_node_agent_memlock": "4MiB", "rdma_node_agent_config": config});
    playbook(dir.path(), &role, &vars);
    let text = fs::read_to_string(&out).unwrap();
    for line in [
        "mode = \"report\"",
        "[containerd]\nmemlock = \"4MiB\"",
        "memlock_via = \"both\"",
        "[containerd.rlimits]\nRLIMIT_NOFILE = 1048576",
        "[rdma.min_active_ports]\nInfiniBand = 2",
        "[[rdma.expect_port]]\ndevice = \"mlx5_2\"",
        "[peers.rails]\nmlx5_0 = 0",
        "[peers.source]\nkind = \"file\"",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    assert!(!text.contains("unused"), "{text}");
    // The agent's own parser: `check` on an empty tree says when its config is invalid.
    let root = tempfile::tempdir().unwrap();
    fs::create_dir_all(root.path().join("etc/rdma-node-agent")).unwrap();
    fs::copy(&out, root.path().join("etc/rdma-node-agent/config.toml")).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root.path())
        .arg("check")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        !said.contains("config is invalid"),
        "{text}\n{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The peers file the role templates from `rdma_node_agent_peers` is one the
/// agent's file source reads, entry for entry.
#[test]
#[ignore = "needs ansible-core (ansible-playbook): run via scripts/test.sh"]
fn ansible_role_renders_a_peers_file_the_agent_reads() {
    let role =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/ansible/roles/rdma_node_agent");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("peers.toml");
    let play = format!(
        "- hosts: localhost\n  gather_facts: false\n  vars_files: [{r}/defaults/main.yml]\n  tasks:\n    - ansible.builtin.template: {{src: {r}/templates/peers.toml.j2, dest: {o}, mode: \"0644\"}}\n",
        r = role.display(),
        o = out.display()
    );
    fs::write(dir.path().join("play.yml"), play).unwrap();
    let vars = serde_json::json!({"rdma_node_agent_peers": [
        {"node": "gpu-001", "addr": "10.0.0.1", "fabric": "roce:10.0.0.0/24", "rail": 0},
        {"node": "gpu-002", "addr": "10.0.1.2", "fabric": "roce:10.0.1.0/24", "rail": 1},
        {"node": "ib-001", "addr": "192.168.0.1", "fabric": "ib:fe80:0000:0000:0000"},
    ]});
    playbook(dir.path(), &role, &vars);
    let text = fs::read_to_string(&out).unwrap();
    let peers = rdma_node_agent::host::probe::sources::file::parse(&text, &out)
        .unwrap_or_else(|e| panic!("{e}:\n{text}"));
    let got: Vec<(&str, &str, Option<u32>)> = peers
        .iter()
        .map(|p| (p.node.as_str(), p.fabric.as_str(), p.rail))
        .collect();
    assert_eq!(
        got,
        [
            ("gpu-001", "roce:10.0.0.0/24", Some(0)),
            ("gpu-002", "roce:10.0.1.0/24", Some(1)),
            ("ib-001", "ib:fe80:0000:0000:0000", None),
        ]
    );
}
