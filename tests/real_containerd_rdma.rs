//! `pods.rdma` on containers started through real containerd + runc over CRI,
//! each given a device node at /dev/infiniband/uverbs0 the way a device plugin's
//! Allocate answer has the kubelet ask for it (a CRI `Device`). The host has no
//! uverbs device, so the node is the host's /dev/null (char 1:3) under that
//! name: the container opens it, and the agent sees the open descriptor, the
//! container's capabilities and its memlock through the real /proc.

mod support;

use k8s_cri::v1::{
    Capability, ContainerConfig, Device, Int64Value, LinuxContainerConfig,
    LinuxContainerSecurityContext,
};
use serde_json::{Value, json};
use support::cri::Containerd;
use support::*;

const HOLD: &str = "exec 3<>/dev/infiniband/uverbs0; exec sleep 600";

fn uverbs(cfg: &mut ContainerConfig) {
    cfg.devices.push(Device {
        container_path: "/dev/infiniband/uverbs0".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
    });
}

/// The device, and `capabilities.add: ["IPC_LOCK"]` in its securityContext
/// (as the fix says), run as `uid` when given (`runAsUser`).
fn ipc_lock(cfg: &mut ContainerConfig, uid: Option<i64>) {
    uverbs(cfg);
    cfg.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            capabilities: Some(Capability {
                add_capabilities: vec!["IPC_LOCK".into()],
                ..Default::default()
            }),
            run_as_user: uid.map(|value| Int64Value { value }),
            ..Default::default()
        }),
        ..Default::default()
    });
}

fn finding<'a>(check: &'a Value, id: &str) -> &'a Value {
    check["details"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["container_id"] == id)
        .unwrap_or_else(|| panic!("container {id} not reported: {check}"))
}

#[test]
#[ignore = "needs root and containerd: run via scripts/test.sh"]
fn cri_containers_with_a_uverbs_device() {
    let mut c = Containerd::new();
    write(
        &c.root(),
        "/etc/rdma-node-agent/config.toml",
        "[systemd]\nenabled = false\n",
    );
    c.start();
    // As a pod without securityContext gets it: containerd's default capabilities.
    let plain = c.running_with("rdma-plain", "runc", HOLD, uverbs);
    // With `capabilities.add: ["IPC_LOCK"]`, as the fix says.
    let locked = c.running_with("rdma-ipc-lock", "runc", HOLD, |cfg| ipc_lock(cfg, None));
    // The same IPC_LOCK for a non-root container (runAsUser 1000): the
    // capability is in its spec, but execve as uid 1000 drops it (not ambient).
    let non_root = c.running_with("rdma-non-root", "runc", HOLD, |cfg| {
        ipc_lock(cfg, Some(1000))
    });
    // A pod without the device.
    let other = c.running("no-rdma", "runc", "exec sleep 600");

    let report = json(&agent(
        &c.root(),
        &["check", "--only", "pods.rdma", "--json"],
    ));
    let check = &report["checks"][0];
    assert_eq!(check["status"], "warn", "{check}");

    let p = finding(check, &plain.id);
    // containerd runs here with a soft memlock of 64 KiB and no base spec.
    assert_eq!(p["problems"], json!(["no_ipc_lock", "low_memlock"]), "{p}");
    assert_eq!(p["evidence"], "opens /dev/infiniband/uverbs0", "{p}");
    assert_eq!(p["process"]["pid"], plain.pid);
    assert_eq!(p["process"]["comm"], "sleep");
    assert_eq!(p["process"]["memlock_soft"], "64KiB");
    assert!(
        p["pod_uid"].as_str().unwrap().starts_with("rdma-plain-"),
        "{p}"
    );
    let msg = check["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "container {} (sleep, pid {}) opens /dev/infiniband/uverbs0 but lacks CAP_IPC_LOCK and \
             its memlock 64KiB (hard ",
            &plain.id[..12],
            plain.pid
        )),
        "{msg}"
    );

    assert!(
        msg.contains(
            "is below unlimited: ibv_reg_mr fails (\"Couldn't allocate MR\") past it; either remedy \
             works, as it runs as root: IPC_LOCK in securityContext.capabilities.add, for this pod"
        ),
        "{msg}"
    );
    assert_eq!(p["remedy"], "either", "{p}");

    let l = finding(check, &locked.id);
    assert_eq!(l["problems"], json!([]), "IPC_LOCK added: {l}");

    // Non-root with IPC_LOCK in its spec: CapEff empty as the kernel left it,
    // so the advice is the node's memlock, not the capability it already asked for.
    let n = finding(check, &non_root.id);
    assert_eq!(n["process"]["uid"], 1000, "{n}");
    assert_eq!(n["process"]["cap_eff"], "0000000000000000", "{n}");
    assert_eq!(n["problems"], json!(["low_memlock"]), "{n}");
    assert_eq!(n["remedy"], "node_memlock_non_root", "{n}");
    assert!(
        msg.contains(&format!(
            "container {} (sleep, pid {}) opens /dev/infiniband/uverbs0 but its memlock 64KiB (hard ",
            &non_root.id[..12],
            non_root.pid
        )),
        "{msg}"
    );
    assert!(
        msg.contains(
            "past it; it runs as uid 1000, not root, so IPC_LOCK in \
             securityContext.capabilities.add gives it no effective capability (execve drops \
             every capability that is not ambient, capabilities(7), and Kubernetes sets none): \
             raise the node's memlock"
        ),
        "{msg}"
    );

    assert!(
        !check["details"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["container_id"] == other.id.as_str()),
        "a pod without RDMA devices was reported: {check}"
    );
    // The sandboxes (pause) are never reported.
    for r in [&plain, &locked, &non_root] {
        assert!(
            !check["details"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["container_id"] == r.pod.as_str()),
            "sandbox reported: {check}"
        );
    }
}
