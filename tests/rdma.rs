//! The RDMA concerns on fixture nodes, through the real binary: the inventory of
//! each node, expectations, netns exclusive mode persisted/applied/reverted, and
//! its refusals. The live netlink switch is covered by unit tests with a fake
//! kernel (src/rdma/netns.rs) and golden bytes (tests/netlink_golden.rs).

mod support;

use std::path::Path;
use std::time::Instant;

use serde_json::Value;
use support::*;

const MODPROBE: &str = "/etc/modprobe.d/rdma-node-agent.conf";
const SENTINEL: &str = "/var/run/reboot-required";
const CONFIG: &str = "/etc/rdma-node-agent/config.toml";

fn check_of(root: &Path, id: &str) -> (i32, Value) {
    let o = agent(root, &["check", "--json", "--only", id]);
    let v = json(&o);
    (code(&o), v["checks"][0].clone())
}

/// `name kind port:state/phys_state/rate/link_layer/netdev …` of each device.
fn inventory(root: &Path) -> Vec<String> {
    let (_, c) = check_of(root, "rdma.devices");
    c["details"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let ports: Vec<String> = d["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    format!(
                        "{}:{}/{}/{}/{}/{}",
                        p["port"],
                        p["state"].as_str().unwrap(),
                        p["phys_state"].as_str().unwrap(),
                        p["rate_gbps"],
                        p["link_layer"].as_str().unwrap(),
                        p["netdev"].as_str().unwrap_or("-")
                    )
                })
                .collect();
            let netdevs: Vec<&str> = d["netdevs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            format!(
                "{} {} [{}] {}",
                d["name"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
                netdevs.join(","),
                ports.join(" ")
            )
        })
        .collect()
}

#[test]
fn each_fixture_reports_exactly_its_devices() {
    assert_eq!(
        inventory(&fixtures().join("nodes/v100")),
        vec![
            "mlx5_0 pf [ib0] 1:ACTIVE/LinkUp/100.0/InfiniBand/-",
            "mlx5_1 pf [ib1] 1:ACTIVE/LinkUp/100.0/InfiniBand/-",
        ]
    );
    assert_eq!(
        inventory(&fixtures().join("nodes/a100")),
        vec![
            "mlx5_0 pf [ibp12s0] 1:DOWN/Disabled/10.0/InfiniBand/-",
            "mlx5_1 pf [ibp18s0] 1:ACTIVE/LinkUp/200.0/InfiniBand/-",
            "mlx5_bond_0 bond [ens2f0np0] 1:ACTIVE/LinkUp/100.0/Ethernet/bond0",
        ]
    );
    assert_eq!(
        inventory(&fixtures().join("nodes/roce")),
        vec![
            "mlx5_0 pf [ens1f0np0] 1:ACTIVE/LinkUp/100.0/Ethernet/ens1f0np0",
            "mlx5_1 pf [ens1f1np1] 1:ACTIVE/LinkUp/25.0/Ethernet/ens1f1np1",
        ]
    );
    let sriov = inventory(&fixtures().join("nodes/sriov"));
    assert_eq!(sriov.len(), 10);
    assert_eq!(
        sriov[0],
        "mlx5_0 pf [ens1f0np0] 1:ACTIVE/LinkUp/100.0/Ethernet/ens1f0np0"
    );
    // mlx5_2..5 are VFs of the first PF, mlx5_6..9 of the second (names sort as text).
    assert_eq!(
        sriov.iter().filter(|d| d.contains(" vf ")).count(),
        8,
        "{sriov:#?}"
    );
    assert!(sriov.contains(&"mlx5_9 vf [ens2f0v3] 1:ACTIVE/LinkUp/100.0/Ethernet/ens2f0v3".into()));

    let (code, c) = check_of(&fixtures().join("nodes/a100"), "rdma.devices");
    // No expectations: ports ACTIVE, so it does not fail; the one down is named.
    assert_eq!(code, 0);
    assert_eq!(c["status"], "warn");
    assert_eq!(
        c["message"],
        "3 RDMA device(s), 2/3 port(s) ACTIVE; 2 NVIDIA GPU(s): nvidia_peermem loaded, gdrdrv not loaded; \
         mlx5_0/1 is DOWN (Disabled); list it in rdma.ignore_ports if it is down by design"
    );
    // Down by design (one cable): listed, it is not warned about.
    let t = node("a100");
    write(t.path(), CONFIG, "[rdma]\nignore_ports = [\"mlx5_0/1\"]\n");
    let (_, ignored) = check_of(t.path(), "rdma.devices");
    assert_eq!(ignored["status"], "ok", "{ignored}");
    assert_eq!(
        ignored["message"],
        "3 RDMA device(s), 2/3 port(s) ACTIVE; 2 NVIDIA GPU(s): nvidia_peermem loaded, gdrdrv not loaded"
    );
    assert_eq!(c["details"]["devices"][0]["pci"], "0000:0c:00.0");
    assert_eq!(
        c["details"]["devices"][0]["node_guid"],
        "b83f:d203:0012:3a40"
    );
}

#[test]
fn a_down_port_expected_active_fails_naming_it() {
    let t = node("a100");
    write(
        t.path(),
        CONFIG,
        "[gpudirect]\nrequired_modules = [\"nvidia_peermem\", \"gdrdrv\"]\n\
         [[rdma.expect_port]]\ndevice = \"mlx5_0\"\nport = 1\n\
         [[rdma.expect_port]]\ndevice = \"mlx5_1\"\nport = 1\nmin_rate_gbps = 200\n",
    );
    let (code, c) = check_of(t.path(), "rdma.devices");
    assert_eq!(code, 1);
    assert_eq!(c["status"], "fail");
    assert_eq!(
        c["message"],
        "mlx5_0/1 is DOWN (Disabled), expected ACTIVE; GPUDirect module gdrdrv is not loaded \
         (2 NVIDIA GPU(s) present; required by gpudirect.required_modules)"
    );
    let o = agent(t.path(), &["check"]);
    assert!(
        stdout(&o).starts_with("RDMA host not ready: ") && stdout(&o).contains("rdma.devices"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn garbage_in_sysfs_is_a_field_error_not_a_crash() {
    let t = node("a100");
    let port = "sys/devices/pci0000:11/0000:11:00.0/0000:12:00.0/infiniband/mlx5_1/ports/1";
    std::fs::write(t.path().join(port).join("rate"), "fast\n").unwrap();
    std::fs::write(t.path().join(port).join("state"), [0xff, 0xfe]).unwrap();
    let (code, c) = check_of(t.path(), "rdma.devices");
    assert_eq!(code, 0);
    assert_eq!(c["status"], "warn");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains("mlx5_1/1 state: ") && m.contains("not valid UTF-8"),
        "{m}"
    );
    assert!(m.contains("mlx5_1/1 rate: cannot parse \"fast\""), "{m}");
}

fn exclusive(root: &Path, extra: &str) {
    write(
        root,
        CONFIG,
        // Only the RDMA concern, so plans show its changes alone.
        &format!(
            "[containerd]\nenabled = false\n[systemd]\nenabled = false\n\
             [rdma]\nnetns_mode = \"exclusive\"\n{extra}"
        ),
    );
}

#[test]
fn exclusive_mode_is_persisted_then_reverted() {
    let t = node("v100");
    exclusive(t.path(), "reboot_sentinel = true\n");
    let with_config = snapshot(t.path());
    let plan = agent(t.path(), &["plan", "--exit-code"]);
    assert_eq!(code(&plan), 2, "{}", stdout(&plan));
    assert!(stdout(&plan).contains("+options ib_core netns_mode=0"));

    let o = agent(t.path(), &["apply"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(read(t.path(), MODPROBE).ends_with("options ib_core netns_mode=0\n"));
    assert!(read(t.path(), SENTINEL).contains("RDMA netns mode exclusive"));

    let again = agent(t.path(), &["plan", "--exit-code"]);
    assert_eq!(code(&again), 0, "not converged: {}", stdout(&again));

    // The pod's namespace blocks the live switch: only a reboot applies the mode.
    let (code_, c) = check_of(t.path(), "rdma.netns");
    assert_eq!(code_, 1);
    let m = c["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!(
            "pending reboot: exclusive is persisted in {MODPROBE}"
        )),
        "{m}"
    );
    assert!(
        m.contains("net:[4026532451] (pid 4301 ib_write_bw in cri-containerd-9a8b7c6d"),
        "{m}"
    );
    assert_eq!(c["details"]["mode"], "shared");

    let r = agent(t.path(), &["revert"]);
    assert_eq!(code(&r), 0, "{}{}", stdout(&r), stderr(&r));
    assert!(!t.path().join(MODPROBE.trim_start_matches('/')).exists());
    assert!(!t.path().join(SENTINEL.trim_start_matches('/')).exists());
    assert_eq!(snapshot(t.path()), with_config);
}

#[test]
fn unblocked_live_switch_is_planned_and_skipped_off_the_live_host() {
    let t = node("a100");
    exclusive(t.path(), "");
    let plan = agent(t.path(), &["plan"]);
    assert!(
        stdout(&plan)
            .contains("action: set the RDMA netns mode to exclusive (live mode is shared)"),
        "{}",
        stdout(&plan)
    );
    let o = agent(t.path(), &["apply"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("skipped: set the RDMA netns mode to exclusive: --root"),
        "{}",
        stdout(&o)
    );
    assert!(t.path().join(MODPROBE.trim_start_matches('/')).exists());
    let (_, c) = check_of(t.path(), "rdma.netns");
    assert_eq!(
        c["message"],
        "live mode is shared, want exclusive (run `rdma-node-agent apply`)"
    );
}

#[test]
fn already_exclusive_node_is_ok_once_persisted() {
    let t = node("sriov");
    exclusive(t.path(), "");
    agent(t.path(), &["apply"]);
    let (code, c) = check_of(t.path(), "rdma.netns");
    assert_eq!(code, 0, "{c}");
    assert_eq!(
        c["message"],
        format!("exclusive (live), persisted in {MODPROBE}")
    );
}

#[test]
fn shared_device_plugin_is_refused_or_warned() {
    let t = node("roce");
    exclusive(t.path(), "");
    let (code_, c) = check_of(t.path(), "rdma.netns");
    assert_eq!(code_, 1);
    assert!(
        c["message"].as_str().unwrap().starts_with(
            "refusing exclusive mode: the RDMA shared device plugin is in use \
             (/var/lib/kubelet/device-plugins/rdma_shared_device_a.sock)"
        ),
        "{c}"
    );
    let plan = agent(t.path(), &["plan", "--exit-code"]);
    assert_eq!(
        code(&plan),
        0,
        "refused: nothing planned: {}",
        stdout(&plan)
    );

    exclusive(t.path(), "shared_plugin = \"warn\"\n");
    let (_, c) = check_of(t.path(), "rdma.netns");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("WARNING: the RDMA shared device plugin is in use"),
        "{c}"
    );
    assert_eq!(code(&agent(t.path(), &["plan", "--exit-code"])), 2);
}

#[test]
fn old_kernel_without_ofed_is_refused() {
    let t = node("v100");
    exclusive(t.path(), "");
    write(
        t.path(),
        "/proc/sys/kernel/osrelease",
        "4.18.0-553.el8_10.x86_64\n",
    );
    let (code_, c) = check_of(t.path(), "rdma.netns");
    assert_eq!(code_, 1);
    assert_eq!(
        c["message"],
        "refusing to manage the RDMA netns mode: kernel 4.18.0-553.el8_10.x86_64 is older than 5.3 \
         and MLNX_OFED was not found (/usr/bin/ofed_info); RDMA netns modes need kernel 5.3+ or \
         MLNX_OFED 4.7+; nothing was changed"
    );
    assert_eq!(code(&agent(t.path(), &["plan", "--exit-code"])), 0);
    write(
        t.path(),
        "/usr/bin/ofed_info",
        "#!/bin/bash\necho MLNX_OFED_LINUX-5.8-1.0.1.1:\n",
    );
    assert_eq!(code(&agent(t.path(), &["plan", "--exit-code"])), 2);
}

#[test]
fn a_thousand_sriov_devices() {
    let t = tempfile::tempdir().unwrap();
    let start = Instant::now();
    sysfs::sriov_tree(t.path(), 8, 127);
    eprintln!("generated the tree in {:?}", start.elapsed());
    let host = rdma_node_agent::host::Host::new(t.path());
    let start = Instant::now();
    let devices: Vec<_> = rdma_node_agent::concerns::rdma::devices::gather(
        &rdma_node_agent::host::snapshot::Snapshot::new(host.clone()),
    )
    .unwrap();
    eprintln!(
        "inventory of {} devices (gather + parse): {:?}",
        devices.len(),
        start.elapsed()
    );
    // 8 PFs and 1016 VFs.
    assert_eq!(devices.len(), 1024);
    assert!(devices.iter().all(|d| d.errors.is_empty()));
    assert_eq!(
        devices
            .iter()
            .filter(|d| d.kind == rdma_node_agent::concerns::rdma::devices::Kind::Vf)
            .count(),
        1016
    );
    let vf = devices.iter().find(|d| d.name == "mlx5_1023").unwrap();
    assert_eq!(vf.netdevs, vec!["ens7f0v126"]);
    assert_eq!(vf.ports[0].rate_gbps, Some(200.0));

    let start = Instant::now();
    let (code, c) = check_of(t.path(), "rdma.devices");
    eprintln!(
        "`check --json --only rdma.devices` on 1024 devices: {:?}",
        start.elapsed()
    );
    assert_eq!(code, 0);
    assert_eq!(
        c["message"],
        "1024 RDMA device(s) (1016 VFs), 1024/1024 port(s) ACTIVE"
    );
}

/// `kubelet.devices` counts the host's ports from `rdma.devices`: when that
/// gather fails it saw none, and said `ok` ("0 of 0 ACTIVE") or a false
/// mismatch. The engine carries the unknown along `needs()`.
#[test]
fn kubelet_devices_is_unknown_when_rdma_devices_could_not_be_read() {
    let t = node("v100");
    let class = t.path().join("sys/class/infiniband");
    std::fs::remove_dir_all(&class).unwrap();
    // A link to itself: listing it fails (ELOOP), even as root.
    std::os::unix::fs::symlink("infiniband", &class).unwrap();
    let o = agent(t.path(), &["check", "--json", "--only", "kubelet.devices"]);
    let v = json(&o);
    let by_id = |id: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id}: {v}"))
            .clone()
    };
    // `--only` shows the asked check (rdma.devices ran for it, unseen).
    assert_eq!(v["checks"].as_array().unwrap().len(), 1, "{v}");
    let k = by_id("kubelet.devices");
    assert_eq!(k["status"], "unknown", "{k}");
    assert_eq!(k["reason"], "dependency_unknown", "{k}");
    let m = k["message"].as_str().unwrap();
    assert!(
        m.starts_with(
            "not established: it reads rdma.devices, whose facts could not be gathered (unknown: "
        ) && m.contains("/sys/class/infiniband"),
        "{m}"
    );
    assert_eq!(code(&o), 2, "{}", stdout(&o));
}
