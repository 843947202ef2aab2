//! rdma.devices on the sysfs tree a real kernel wrote for Soft-RoCE (rdma_rxe on
//! Debian's 6.1, captured by the VM tier: tests/fixtures/nodes/rxe/PROVENANCE).
//! A software device differs from every mlx5 fixture: no `device` link (it sits
//! under /sys/devices/virtual), the netdev only in `parent` and
//! `ports/1/gid_attrs/ndevs/*`, an empty `fw_ver`, no `hca_type`/`board_id`.

mod support;

use support::*;

#[test]
fn rxe_port_is_read_as_the_kernel_wrote_it() {
    let root = fixtures().join("nodes/rxe");
    let o = agent(&root, &["check", "--json", "--only", "rdma.devices"]);
    let v = json(&o);
    let c = &v["checks"][0];
    assert_eq!(c["id"], "rdma.devices");
    let devices = c["details"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{c:#}");
    let rxe = &devices[0];
    assert_eq!(rxe["name"], "rxe0");
    let guid = read(&root, "/sys/devices/virtual/infiniband/rxe0/node_guid");
    assert_eq!(rxe["node_guid"].as_str(), Some(guid.trim()));
    // A software device, not a PCI function: its netdev is the one `parent`
    // names; an empty fw_ver is what the driver writes, not an error.
    assert_eq!(rxe["kind"], "software", "{c:#}");
    assert_eq!(rxe["pci"], serde_json::Value::Null, "{c:#}");
    assert_eq!(rxe["netdevs"], serde_json::json!(["veth0"]), "{c:#}");
    assert_eq!(rxe["hca_type"], serde_json::Value::Null, "{c:#}");
    assert_eq!(rxe["fw_ver"], serde_json::Value::Null, "{c:#}");
    assert_eq!(c["status"], "ok", "{c:#}");
    let ports = rxe["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{c:#}");
    let p = &ports[0];
    assert_eq!(p["port"], 1);
    assert_eq!(p["state"], "ACTIVE");
    assert_eq!(p["phys_state"], "LinkUp");
    // "10 Gb/sec (1X FDR10)" on a veth.
    assert_eq!(p["rate_gbps"], 10.0);
    assert_eq!(p["link_layer"], "Ethernet");
    // The RoCE netdev comes from the GID table, as ibdev2netdev finds it.
    assert_eq!(p["netdev"], "veth0");
    assert_eq!(c["details"]["active_ports"]["Ethernet"], 1, "{c:#}");
}

#[test]
fn rxe_fixture_is_the_kernels_spelling() {
    let root = fixtures().join("nodes/rxe");
    let dev = "/sys/devices/virtual/infiniband/rxe0";
    // What makes rxe different, kept as the kernel wrote it.
    assert_eq!(read(&root, &format!("{dev}/fw_ver")), "\n");
    assert_eq!(read(&root, &format!("{dev}/parent")), "veth0\n");
    assert_eq!(
        read(&root, &format!("{dev}/ports/1/rate")),
        "10 Gb/sec (1X FDR10)\n"
    );
    assert_eq!(
        read(&root, &format!("{dev}/ports/1/gid_attrs/ndevs/0")),
        "veth0\n"
    );
    assert!(!root.join(&dev[1..]).join("device").exists());
    assert!(!root.join(&dev[1..]).join("hca_type").exists());
    assert!(root.join(&dev[1..]).join("ports/1/hw_counters").is_dir());
    assert!(!root.join(&dev[1..]).join("ports/1/counters").exists());
}
