//! Synthetic sysfs trees of many RDMA devices, laid out as on a real node (PCI
//! functions under root ports, relative links from /sys/class/infiniband and
//! /sys/bus/pci/devices, VFs with `physfn`), for tests and benchmarks.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

fn link(root: &Path, path: &str, target: &str) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    symlink(target, p).unwrap();
}

/// One RoCE function with its RDMA device; returns nothing, writes everything.
fn function(root: &Path, bus: u8, func: &str, ibdev: &str, netdev: &str, physfn: Option<&str>) {
    let port = format!("/sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:00.0");
    let dir = format!("{port}/{func}");
    rdma_function(root, &dir, func, ibdev, netdev, physfn);
}

/// The RDMA side of the function at `dir` (`/sys/devices/…/<func>`): identity,
/// net device, the RDMA device with one ACTIVE port, and the class links.
pub fn rdma_function(
    root: &Path,
    dir: &str,
    func: &str,
    ibdev: &str,
    netdev: &str,
    physfn: Option<&str>,
) {
    write(root, &format!("{dir}/vendor"), "0x15b3\n");
    write(root, &format!("{dir}/class"), "0x020000\n");
    write(root, &format!("{dir}/net/{netdev}/ifindex"), "2\n");
    if !root.join(format!("sys/bus/pci/devices/{func}")).exists() {
        link(
            root,
            &format!("/sys/bus/pci/devices/{func}"),
            &format!("../../..{}", &dir["/sys".len()..]),
        );
    }
    if let Some(pf) = physfn {
        link(root, &format!("{dir}/physfn"), &format!("../{pf}"));
    }
    let ib = format!("{dir}/infiniband/{ibdev}");
    link(
        root,
        &format!("/sys/class/infiniband/{ibdev}"),
        &format!("../..{}", &ib["/sys".len()..]),
    );
    link(root, &format!("{ib}/device"), &format!("../../../{func}"));
    let n: u32 = ibdev.trim_start_matches("mlx5_").parse().unwrap();
    write(
        root,
        &format!("{ib}/node_guid"),
        &format!("0c42:a103:{:04x}:{:04x}\n", n >> 16, n & 0xffff),
    );
    write(root, &format!("{ib}/fw_ver"), "22.36.1010\n");
    // The PSID mlx5 prints as board_id (node_exporter 1.5 requires the file).
    write(root, &format!("{ib}/board_id"), "MT_0000000222\n");
    write(
        root,
        &format!("{ib}/hca_type"),
        if physfn.is_some() {
            "MT4126\n"
        } else {
            "MT4125\n"
        },
    );
    let p = format!("{ib}/ports/1");
    write(root, &format!("{p}/state"), "4: ACTIVE\n");
    write(root, &format!("{p}/phys_state"), "5: LinkUp\n");
    write(root, &format!("{p}/rate"), "200 Gb/sec (4X HDR)\n");
    write(root, &format!("{p}/link_layer"), "Ethernet\n");
    // mlx5 ports carry the PMA counters (node_exporter's collector needs them).
    for c in [
        "port_rcv_data",
        "port_xmit_data",
        "port_rcv_packets",
        "port_xmit_packets",
    ] {
        write(root, &format!("{p}/counters/{c}"), "0\n");
    }
    write(
        root,
        &format!("{p}/gid_attrs/ndevs/0"),
        &format!("{netdev}\n"),
    );
    // The port's PMA counters, named as drivers/infiniband/core/sysfs.c names them:
    // the agent does not read them, node_exporter's infiniband collector needs them.
    for c in COUNTERS {
        write(root, &format!("{p}/counters/{c}"), "0\n");
    }
}

const COUNTERS: [&str; 21] = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "port_xmit_wait",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
];

/// `pfs` physical functions with `vfs` virtual functions each: `pfs * (1 + vfs)`
/// devices named mlx5_0… (PFs first, as mlx5_core numbers them).
pub fn sriov_tree(root: &Path, pfs: u32, vfs: u32) {
    for p in 0..pfs {
        let bus = 0x10 + 2 * p as u8;
        let pf = format!("0000:{:02x}:00.0", bus + 1);
        function(
            root,
            bus,
            &pf,
            &format!("mlx5_{p}"),
            &format!("ens{p}f0np0"),
            None,
        );
        for v in 0..vfs {
            // Real VFs follow the PF at devfn + offset; any distinct address will do.
            let vf = format!("0000:{:02x}:{:02x}.{}", bus + 1, 1 + v / 8, v % 8);
            let n = pfs + p * vfs + v;
            link(
                root,
                &format!("/sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:00.0/{pf}/virtfn{v}"),
                &format!("../{vf}"),
            );
            function(
                root,
                bus,
                &vf,
                &format!("mlx5_{n}"),
                &format!("ens{p}f0v{v}"),
                Some(&pf),
            );
        }
    }
    write(root, "/sys/module/ib_core/parameters/netns_mode", "N\n");
}
