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

fn fixture(node: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nodes")
        .join(node)
}

/// Soft-RoCE on Debian's 6.1 kernel (tests/fixtures/nodes/rxe, recorded by
/// the VM tier): entry 0 used (`RoCE v2` on veth0), entries 1-3 empty (zero
/// GIDs whose type and netdev the kernel refuses: absent in the recording).
#[test]
fn a_real_rxe_ports_gid_table() {
    let snap = Snapshot::new(Host::new(fixture("rxe")));
    let inv = snap.rdma_inventory().unwrap();
    let d = &inv.devices[0];
    // A virtual device has no PCI function: no NUMA node.
    assert_eq!((d.name.as_str(), d.numa_node()), ("rxe0", None));
    let a = snap.port_addresses(d, &d.ports[0]);
    let want = gids::Gid {
        index: 0,
        gid: "fe80::2c08:74ff:fed6:ac96".parse().unwrap(),
        kind: Ok(gids::GidType::RoceV2),
        ndev: Some("veth0".into()),
    };
    assert_eq!(a.gids(), [want]);
    assert!(a.unreadable.is_empty(), "{a:?}");
    // Ethernet: the LIDs the kernel prints (0x0) are InfiniBand's, not read.
    assert_eq!((a.lid(), a.sm_lid(), a.sm_sl()), (None, None, None));
    assert_eq!(a.lid, Ok(None));
    // veth0 had no IPv4 address: no IPv4-mapped GID, and the table was read whole.
    assert_eq!(a.roce_v2_ipv4_gid(), Ok(None));
}

/// Hand-written, after the rxe recording's format: a RoCE port whose table
/// has a hole (entry 2 freed, as core/cache.c leaves one when an address
/// goes) before the IPv4-mapped entries, and an InfiniBand port with LIDs.
fn addressed(root: &Path) -> std::path::PathBuf {
    tree(root);
    let dev = root.join(FN).join("infiniband/mlx5_0");
    let eth = dev.join("ports/1");
    fs::create_dir_all(eth.join("gids")).unwrap();
    fs::create_dir_all(eth.join("gid_attrs/types")).unwrap();
    let entries = [
        ("fe80:0000:0000:0000:0c42:a1ff:fe65:6a3c", "IB/RoCE v1"),
        ("fe80:0000:0000:0000:0c42:a1ff:fe65:6a3c", "RoCE v2"),
        ("0000:0000:0000:0000:0000:0000:0000:0000", ""),
        ("0000:0000:0000:0000:0000:ffff:0a00:020f", "IB/RoCE v1"),
        ("0000:0000:0000:0000:0000:ffff:0a00:020f", "RoCE v2"),
        ("0000:0000:0000:0000:0000:0000:0000:0000", ""),
    ];
    for (i, (gid, kind)) in entries.iter().enumerate() {
        fs::write(eth.join(format!("gids/{i}")), format!("{gid}\n")).unwrap();
        if !kind.is_empty() {
            fs::write(
                eth.join(format!("gid_attrs/types/{i}")),
                format!("{kind}\n"),
            )
            .unwrap();
            fs::write(eth.join(format!("gid_attrs/ndevs/{i}")), "eth0\n").unwrap();
        }
    }
    fs::write(eth.join("lid"), "0x0\n").unwrap();
    let ib = dev.join("ports/2");
    fs::create_dir_all(ib.join("gids")).unwrap();
    fs::create_dir_all(ib.join("gid_attrs/types")).unwrap();
    fs::write(ib.join("link_layer"), "InfiniBand\n").unwrap();
    fs::write(
        ib.join("gids/0"),
        "fe80:0000:0000:0000:0c42:a103:0065:6a3d\n",
    )
    .unwrap();
    fs::write(ib.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
    fs::write(ib.join("lid"), "0x1a\n").unwrap();
    fs::write(ib.join("sm_lid"), "0x1\n").unwrap();
    fs::write(ib.join("sm_sl"), "0\n").unwrap();
    fs::write(root.join(FN).join("numa_node"), "-1\n").unwrap();
    eth
}

#[test]
fn the_whole_gid_table_is_read_past_its_holes() {
    let t = tempfile::tempdir().unwrap();
    let eth = addressed(t.path());
    let snap = Snapshot::new(Host::new(t.path()));
    let inv = snap.rdma_inventory().unwrap();
    let d = &inv.devices[0];
    // `-1`: the function is on no NUMA node.
    assert_eq!(d.numa_node, Ok(Some("-1\n".into())));
    assert_eq!(d.numa_node(), None);
    let a = snap.port_addresses(d, &d.ports[0]);
    let indexes: Vec<u32> = a.gids().iter().map(|g| g.index).collect();
    assert_eq!(indexes, [0, 1, 3, 4]);
    // Past the empty slot 2: the RoCE v2 entry of 10.0.2.15, not its v1 twin.
    let (gid, v4) = a.roce_v2_ipv4_gid().unwrap().unwrap();
    assert_eq!((gid.index, v4), (4, std::net::Ipv4Addr::new(10, 0, 2, 15)));
    assert_eq!(gid.ndev.as_deref(), Some("eth0"));
    assert_eq!(a.lid(), None);

    let ib = snap.port_addresses(d, &d.ports[1]);
    assert_eq!(
        (ib.lid(), ib.sm_lid(), ib.sm_sl()),
        (Some(0x1a), Some(1), Some(0))
    );
    // No netdev on InfiniBand (the kernel answers EINVAL: here, no file).
    assert_eq!(ib.gids()[0].ndev, None);
    assert_eq!(ib.gids()[0].kind, Ok(gids::GidType::IbRoceV1));
    assert_eq!(ib.roce_v2_ipv4_gid(), Ok(None));

    // An IPv4-mapped entry whose type cannot be read: unknown, never "none".
    fs::remove_file(eth.join("gid_attrs/types/4")).unwrap();
    fs::create_dir(eth.join("gid_attrs/types/4")).unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let inv = snap.rdma_inventory().unwrap();
    let d = &inv.devices[0];
    let err = snap.port_addresses(d, &d.ports[0]).roce_v2_ipv4_gid();
    assert!(
        err.as_ref().is_err_and(|e| e.contains("types/4")),
        "{err:?}"
    );
}

/// The NUMA node of a PCI function, read from the a100 sample (hand-assembled
/// PCIe tree, see its PROVENANCE); the sriov sample records none (absent).
#[test]
fn the_numa_node_of_each_device() {
    let snap = Snapshot::new(Host::new(fixture("a100")));
    let inv = snap.rdma_inventory().unwrap();
    assert!(inv.devices.iter().all(|d| d.numa_node() == Some(0)));
    let snap = Snapshot::new(Host::new(fixture("sriov")));
    let inv = snap.rdma_inventory().unwrap();
    assert!(inv.devices.iter().all(|d| d.numa_node == Ok(None)));
}

/// A device without `ports/` is read from its own directory (the walk's other
/// way): the same fields, no ports and no error. A VF's `physfn` names its PF;
/// a `physfn` that is not a link still makes a VF, with no PF named.
#[test]
fn a_device_without_ports_and_a_vfs_pf() {
    let t = tempfile::tempdir().unwrap();
    tree(t.path());
    let dev = t.path().join(FN).join("infiniband/mlx5_0");
    symlink("../0000:00:00.7", t.path().join(FN).join("physfn")).unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let inv = snap.rdma_inventory().unwrap();
    let with_ports = &inv.devices[0];
    assert!(with_ports.physfn);
    assert_eq!(with_ports.pf.as_deref(), Some("0000:00:00.7"));
    assert_eq!(
        inv.vf_parents().collect::<Vec<_>>(),
        [("0000:00:01.0", "0000:00:00.7")]
    );
    assert_eq!(with_ports.ports.len(), 1);

    fs::remove_dir_all(dev.join("ports")).unwrap();
    fs::remove_file(t.path().join(FN).join("physfn")).unwrap();
    fs::write(t.path().join(FN).join("physfn"), "").unwrap();
    let snap = Snapshot::new(Host::new(t.path()));
    let inv = snap.rdma_inventory().unwrap();
    let d = &inv.devices[0];
    assert_eq!((d.physfn, d.pf.as_deref()), (true, None));
    assert!(d.ports.is_empty() && d.ports_error.is_none(), "{d:?}");
    assert_eq!(d.path.as_deref(), with_ports.path.as_deref());
    assert_eq!(d.pci, with_ports.pci);
    assert_eq!(d.function, with_ports.function);
    assert_eq!(d.function_netdevs, with_ports.function_netdevs);
    assert_eq!(d.node_guid, with_ports.node_guid);
    assert_eq!(inv.vf_parents().count(), 0);
}

/// The GPU scan reads no vendor of a VF the inventory met once its PF's was
/// read and is not NVIDIA's: the kernel gives a VF its PF's vendor
/// (drivers/pci/iov.c). Shown on the sriov sample with one VF's `vendor` made
/// unreadable: read when the inventory was not walked first, or when the PF
/// is NVIDIA's; not read otherwise. The GPUs found are the same each way.
#[test]
fn the_gpu_scan_reads_no_vf_vendor_the_inventory_answers() {
    let t = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("sriov").join("sys"))
        .arg(t.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let vf = t
        .path()
        .join("sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.2");
    fs::remove_file(vf.join("vendor")).unwrap();
    fs::create_dir(vf.join("vendor")).unwrap();
    let unreadable = |walk_first: bool| {
        let snap = Snapshot::new(Host::new(t.path()));
        if walk_first {
            let inv = snap.rdma_inventory().unwrap();
            assert!(
                inv.vf_parents()
                    .any(|v| v == ("0000:3b:00.2", "0000:3b:00.0"))
            );
        }
        let scan = snap.nvidia_gpus().unwrap();
        (scan.gpus.clone(), scan.unreadable.clone())
    };
    let (gpus, cold) = unreadable(false);
    assert!(
        cold.len() == 1 && cold[0].contains("0000:3b:00.2/vendor"),
        "{cold:?}"
    );
    assert_eq!(unreadable(true), (gpus.clone(), Vec::new()));
    fs::write(vf.join("../0000:3b:00.0/vendor"), "0x10de\n").unwrap();
    assert_eq!(unreadable(true), (gpus, cold));
}

#[path = "../../../tests/support/sysfs.rs"]
mod sysfs;

/// Each device read by its `ports/` (the walk's way) is the device read by
/// its own directory, opened by path from the class link (the way a device
/// without `ports/` takes): every field, on the synthetic SR-IOV node of
/// tests/support/sysfs.rs (PFs and VFs) and on every sample node.
#[test]
fn the_ports_way_reads_what_the_directory_way_reads() {
    let t = tempfile::tempdir().unwrap();
    sysfs::sriov_tree(t.path(), 2, 3);
    let mut roots = vec![t.path().to_owned()];
    for node in ["sriov", "a100", "rxe", "roce", "v100", "gpu-host", "k3s"] {
        roots.push(fixture(node));
    }
    let mut compared = 0;
    for root in roots {
        let host = crate::host::read::ReadHost::new(Host::new(&root));
        let names = host.list_dir(Path::new(CLASS)).unwrap();
        if names.is_empty() {
            continue;
        }
        let class = host.open_dir(Path::new(CLASS)).unwrap().unwrap();
        for name in &names {
            let by_ports = walk::device(&host, Some(&class), name);
            let by_dir = walk::device(&host, None, name);
            assert_eq!(
                format!("{by_ports:?}"),
                format!("{by_dir:?}"),
                "{}: {name}",
                root.display()
            );
            compared += 1;
        }
    }
    // 8 synthetic devices (2 PFs, 6 VFs) and the samples' own.
    assert!(compared > 8, "{compared}");
}
