use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::*;
use crate::host::Host;
use crate::host::snapshot::Snapshot;

const FN: &str = "sys/devices/pci0000:00/0000:00:01.0";

/// A hand-written tree: mlx5_0 on a PCI function with a netdev, its port 1
/// with a state that is a directory (unreadable: EISDIR) and counters, one
/// `N/A` and one not a number; mlx5_1 a class link to nothing.
fn tree(root: &Path) {
    let dev = root.join(FN).join("infiniband/mlx5_0");
    let port = dev.join("ports/1");
    fs::create_dir_all(port.join("state")).unwrap();
    fs::create_dir_all(port.join("counters")).unwrap();
    fs::create_dir_all(port.join("hw_counters")).unwrap();
    fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    fs::create_dir_all(root.join(FN).join("net/eth0")).unwrap();
    fs::create_dir_all(root.join("sys/bus/pci/drivers/mlx5_core")).unwrap();
    symlink(
        "../../../bus/pci/drivers/mlx5_core",
        root.join(FN).join("driver"),
    )
    .unwrap();
    fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
    fs::write(port.join("rate"), "100 Gb/sec (4X EDR)\n").unwrap();
    fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    fs::write(port.join("gid_attrs/ndevs/0"), "eth0\n").unwrap();
    fs::write(port.join("counters/link_downed"), "3\n").unwrap();
    fs::write(port.join("counters/symbol_error"), "N/A (no PMA)\n").unwrap();
    fs::write(port.join("counters/port_rcv_errors"), "lots\n").unwrap();
    fs::write(port.join("hw_counters/lifespan"), "12\n").unwrap();
    fs::write(port.join("hw_counters/out_of_buffer"), "7\n").unwrap();
    fs::write(dev.join("node_guid"), "0c42:a103:0065:6a3c\n").unwrap();
    symlink("../../../0000:00:01.0", dev.join("device")).unwrap();
    let class = root.join("sys/class/infiniband");
    fs::create_dir_all(&class).unwrap();
    symlink(
        "../../devices/pci0000:00/0000:00:01.0/infiniband/mlx5_0",
        class.join("mlx5_0"),
    )
    .unwrap();
    symlink(
        "../../devices/pci0000:00/0000:00:02.0/infiniband/mlx5_1",
        class.join("mlx5_1"),
    )
    .unwrap();
}

#[test]
fn each_device_keeps_its_own_problems() {
    let t = tempfile::tempdir().unwrap();
    tree(t.path());
    let snap = Snapshot::new(Host::new(t.path()));
    let inv = snap.rdma_inventory().unwrap();
    let names: Vec<&str> = inv.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    let d = &inv.devices[0];
    assert_eq!(d.pci.as_deref(), Some("0000:00:01.0"));
    assert_eq!(d.function, DeviceLink::Real(Path::new("/").join(FN)));
    assert!(!d.physfn);
    assert_eq!(d.function_netdevs, ["eth0"]);
    assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(d.node_guid, Ok(Some("0c42:a103:0065:6a3c\n".into())));
    assert_eq!(d.fw_ver, Ok(None));
    let p = &d.ports[0];
    // An unreadable state is an error, kept: never "down".
    assert!(
        p.state.as_ref().is_err_and(|e| e.contains("state")),
        "{p:?}"
    );
    assert_eq!(p.phys_state, Ok(Some("5: LinkUp\n".into())));
    assert_eq!(p.netdev().as_deref(), Some("eth0"));
    // The dangling class link stays with its device; the other was read.
    let broken = &inv.devices[1];
    assert!(broken.broken_link.is_some(), "{broken:?}");
    assert!(broken.ports.is_empty());

    let c = snap.port_counters(d, p);
    assert_eq!(c.counter("link_downed"), Some(3));
    let counters = c.counters.as_ref().unwrap();
    // `N/A (no PMA)`: not a counter of this driver; text that is no count: kept as such.
    assert!(!counters.contains_key("symbol_error"));
    assert_eq!(
        counters["port_rcv_errors"],
        Err("\"lots\" is not a count".to_owned())
    );
    let hw = c.hw_counters.as_ref().unwrap();
    assert_eq!(hw.keys().collect::<Vec<_>>(), ["out_of_buffer"]);
    // Read once per cycle: a second ask is the first answer.
    fs::write(
        t.path()
            .join(FN)
            .join("infiniband/mlx5_0/ports/1/counters/link_downed"),
        "4\n",
    )
    .unwrap();
    assert_eq!(snap.port_counters(d, p).counter("link_downed"), Some(3));
}

#[test]
fn no_class_no_devices() {
    let t = tempfile::tempdir().unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    assert!(snap.rdma_device_names().unwrap().is_empty());
    assert!(snap.rdma_inventory().unwrap().devices.is_empty());
}

/// What a full check lists or opens by path under /sys/class/infiniband.
fn class_walks(node: &str, only: &[&str]) -> Vec<String> {
    let t = tempfile::tempdir().unwrap();
    // A copy of the node's sysfs and /proc: no other test walks it meanwhile.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nodes")
        .join(node);
    for d in ["sys", "proc"] {
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(fixture.join(d))
            .arg(t.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot copy {node}/{d}");
    }
    let agent = crate::agent::Agent::new(Host::new(t.path()), crate::config::Config::default());
    let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
    let report = agent.check(&only);
    assert!(!report.checks.is_empty());
    crate::host::walks::under(&t.path().join("sys/class/infiniband"))
}

/// One walk of /sys/class/infiniband per cycle: the class listed once and
/// opened once, nothing under it reached by path (listed, stat'ed, its link
/// read or resolved: the walk reads each device relative to the class
/// directory's descriptor), whichever concerns read RDMA devices (rdma.devices, rdma.link, rdma.counters, the fleet
/// facts, gpudirect.path, pcie.aer, driver.health, pods.rdma). Before the
/// inventory each of them listed it again.
#[test]
fn a_full_check_walks_the_rdma_class_once() {
    for node in ["sriov", "a100", "rxe", "roce"] {
        let walks = class_walks(node, &[]);
        assert_eq!(walks, ["list ", "open "], "{node}: {walks:#?}");
    }
}
