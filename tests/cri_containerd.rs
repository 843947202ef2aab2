//! A second containerd beside Docker's containerd.io
//! (tests/fixtures/layouts/cri-containerd-beside-docker, with its PROVENANCE):
//! Docker's `containerd.service` disables CRI, a `cri-containerd.service`
//! passes its own config (and serves the kubelet on its own socket). The agent
//! edits the config of the one that serves the kubelet and restarts its unit,
//! told by the kubelet's runtime endpoint, else by which one leaves CRI on.

mod support;

use std::path::Path;

use serde_json::Value;
use support::*;

const CRI_CONFIG: &str = "/etc/cri-containerd/config.toml";
const DOCKER_CONFIG: &str = "/etc/containerd/config.toml";

fn beside_docker() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(
        &fixtures().join("layouts/cri-containerd-beside-docker/root"),
        t.path(),
    );
    t
}

fn plan(root: &Path) -> (String, Vec<String>) {
    let o = agent(root, &["plan", "--json"]);
    assert!(
        matches!(code(&o), 0 | 2),
        "plan: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let v: Value = json(&o);
    let paths = v["changes"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|c| c["path"].as_str().map(str::to_owned))
        .collect();
    (stdout(&agent(root, &["plan"])), paths)
}

fn edits_cri_containerd(root: &Path) {
    let (text, paths) = plan(root);
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("etc/cri-containerd/config.toml")),
        "the cri-containerd config is edited: {paths:?}\n{text}"
    );
    assert!(
        !paths.iter().any(|p| p == DOCKER_CONFIG),
        "Docker's config is left alone: {paths:?}"
    );
    assert!(
        text.contains("restart cri-containerd.service"),
        "its unit is restarted: {text}"
    );
    assert!(!text.contains("restart containerd.service"), "{text}");
    let c = check_in(
        &json(&agent(root, &["check", "--json"])),
        "containerd.memlock",
    );
    let shown = c.to_string();
    assert!(
        shown.contains("cri-containerd") && !shown.contains("CRI is off"),
        "check follows cri-containerd: {c}"
    );
    let docker = read(root, DOCKER_CONFIG);
    let o = agent(root, &["apply", "--no-restart"]);
    assert_eq!(code(&o), 0, "apply: {}{}", stdout(&o), stderr(&o));
    assert!(read(root, CRI_CONFIG).contains("base_runtime_spec = \"/"));
    assert_eq!(
        read(root, DOCKER_CONFIG),
        docker,
        "Docker's config untouched"
    );
    let limit = root.join("etc/systemd/system/cri-containerd.service.d/50-rdma-node-agent.conf");
    assert!(
        limit.exists(),
        "LimitMEMLOCK goes to cri-containerd.service"
    );
    assert!(
        !root
            .join("etc/systemd/system/containerd.service.d")
            .exists()
    );
}

/// No kubelet endpoint to read: Docker's config disables CRI, the other one's
/// does not.
#[test]
fn the_unit_whose_config_leaves_cri_on_is_chosen() {
    let t = beside_docker();
    edits_cri_containerd(t.path());
}

/// Hand-written (labelled): what `kubeadm init --cri-socket
/// /run/cri-containerd/cri-containerd.sock` writes. The endpoint decides even
/// when both configs leave CRI on, and the socket is the unit's `--address`
/// when its ExecStart passes one.
#[test]
fn the_kubelets_endpoint_decides() {
    let t = beside_docker();
    let root = t.path();
    write(
        root,
        DOCKER_CONFIG,
        &read(root, DOCKER_CONFIG).replace("disabled_plugins = [\"cri\"]", ""),
    );
    write(
        root,
        "/var/lib/kubelet/kubeadm-flags.env",
        "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///var/run/cri-containerd/cri-containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9\"\n",
    );
    edits_cri_containerd(root);

    // The socket given by `--address` in the unit instead of the config.
    let t = beside_docker();
    let root = t.path();
    write(
        root,
        DOCKER_CONFIG,
        &read(root, DOCKER_CONFIG).replace("disabled_plugins = [\"cri\"]", ""),
    );
    let unit = "/etc/systemd/system/cri-containerd.service";
    write(
        root,
        unit,
        &read(root, unit).replace(
            "--config //etc/cri-containerd/config.toml",
            "--config /etc/cri-containerd/config.toml --address /run/k8s-containerd.sock",
        ),
    );
    write(
        root,
        "/var/lib/kubelet/config.yaml",
        "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/k8s-containerd.sock\n",
    );
    edits_cri_containerd(root);
}

/// Both leave CRI on and no endpoint says which: the refusal names both units
/// and why neither was chosen.
#[test]
fn two_that_serve_cri_without_an_endpoint_are_refused_naming_them() {
    let t = beside_docker();
    let root = t.path();
    write(
        root,
        DOCKER_CONFIG,
        &read(root, DOCKER_CONFIG).replace("disabled_plugins = [\"cri\"]", ""),
    );
    let before = snapshot(root);
    let o = agent(root, &["apply", "--no-restart"]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "{said}");
    for w in [
        "containerd.service",
        "cri-containerd.service",
        "more than one leaves CRI on",
        "unit = ",
    ] {
        assert!(said.contains(w), "says {w:?}: {said}");
    }
    assert_eq!(snapshot(root), before, "nothing written");
}

/// The unit's `--address` is the socket the agent speaks of (it wins over the
/// config's `[grpc] address`): with CRI off in the config of the containerd the
/// kubelet names, the check says no pod can start there (hand-written variant).
#[test]
fn the_units_address_is_the_socket() {
    let t = beside_docker();
    let root = t.path();
    let unit = "/etc/systemd/system/cri-containerd.service";
    write(
        root,
        unit,
        &read(root, unit).replace(
            "--config //etc/cri-containerd/config.toml",
            "--config //etc/cri-containerd/config.toml --address=/run/k8s-containerd.sock",
        ),
    );
    write(
        root,
        CRI_CONFIG,
        &read(root, CRI_CONFIG).replace(
            "disabled_plugins = []",
            "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]",
        ),
    );
    write(
        root,
        "/var/lib/kubelet/config.yaml",
        "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/k8s-containerd.sock\n",
    );
    let c = check_in(
        &json(&agent(root, &["check", "--json"])),
        "containerd.memlock",
    );
    assert_eq!(c["details"]["unit"], "cri-containerd.service", "{c}");
    assert_eq!(c["status"], "fail", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains(CRI_CONFIG) && m.contains("no pod can start"),
        "{m}"
    );
}
