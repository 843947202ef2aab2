//! Writes the PCIe trees of the V100 and A100 sample nodes (config space,
//! identity, link and NUMA attributes of every function between their GPUs and
//! NICs): `cargo run --example pcie_samples -- tests/fixtures/nodes`.
//!
//! Hand-assembled from published topologies, not read from a machine (see each
//! sample's PROVENANCE): the V100 one from a DGX-1 (PLX PEX 8764 switches, two
//! GPUs and an EDR NIC on each: NVIDIA/nccl#671's topology dump), the A100 one
//! from a DGX A100 (two levels of Broadcom PEX88096 switches, GPU and NIC PXB:
//! NVIDIA/nccl#1505's `nvidia-smi topo -m` and topology dump). The RDMA
//! devices' own sysfs directories were there before and are kept; this only
//! writes the PCI functions. Running it again rewrites the same bytes.

#[path = "../tests/support/pcie.rs"]
#[allow(dead_code)]
mod pcie;

// pcie::hgx_tree writes its NICs' RDMA side with it (unused here).
#[path = "../tests/support/sysfs.rs"]
#[allow(dead_code)]
mod sysfs;

use std::path::Path;

use pcie::{DOWNSTREAM, ENDPOINT, Function, ROOT_PORT, UPSTREAM, write_function};

/// ACSCtl as NVIDIA/nccl#304 found it on PLX switch ports:
/// SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+.
const ACS_ON: u16 = 0x001d;

/// The extended capability list of a PLX PEX 87xx port as the real PEX 8749
/// dump in tests/fixtures/gpudirect/public/n1sdp-plx8749 shows it (ACS at 0xf24).
fn plx_ext(mut f: Function, acs_ctl: Option<u16>) -> Function {
    f.ext = vec![
        (0x100, 0x03),
        (0xfb4, 0x01),
        (0x138, 0x04),
        (0x10c, 0x19),
        (0x148, 0x02),
        (0xe00, 0x12),
    ];
    if let Some(ctl) = acs_ctl {
        f.ext.push((0xf24, 0x0d));
        f.acs = Some((0x007f, ctl));
    }
    f.ext.push((0xb70, 0x0b));
    f
}

fn v100(root: &Path) {
    let gen3 = |f: Function| f.link("8.0", 16, "8.0", 16);
    let s0 = |f: Function| gen3(f).numa(0);
    let s1 = |f: Function| gen3(f).numa(1);
    let rp0 = "pci0000:00/0000:00:02.0";
    let sw0 = format!("{rp0}/0000:03:00.0");
    let rp1 = "pci0000:80/0000:80:02.0";
    let sw1 = format!("{rp1}/0000:83:00.0");
    // Intel Xeon E5 v4 (Broadwell) root ports, 8086:6f04 / 6f08.
    let rp = |bdf: &str, dev| Function::new(bdf, 0x8086, dev, 0x060400, ROOT_PORT).acs(0);
    let plx =
        |bdf: &str, port, acs| plx_ext(Function::new(bdf, 0x10b5, 0x8764, 0x060400, port), acs);
    let v100 = |bdf: &str| Function::new(bdf, 0x10de, 0x1db1, 0x030200, ENDPOINT);
    let cx4 = |bdf: &str| Function::new(bdf, 0x15b3, 0x1013, 0x020700, ENDPOINT);
    let fs: Vec<(String, Function)> = vec![
        (rp0.into(), s0(rp("0000:00:02.0", 0x6f04))),
        (sw0.clone(), s0(plx("0000:03:00.0", UPSTREAM, None))),
        (
            format!("{sw0}/0000:04:00.0"),
            s0(plx("0000:04:00.0", DOWNSTREAM, Some(ACS_ON))),
        ),
        (
            format!("{sw0}/0000:04:00.0/0000:05:00.0"),
            s0(cx4("0000:05:00.0")),
        ),
        (
            format!("{sw0}/0000:04:08.0"),
            s0(plx("0000:04:08.0", DOWNSTREAM, Some(ACS_ON))),
        ),
        (
            format!("{sw0}/0000:04:08.0/0000:06:00.0"),
            s0(v100("0000:06:00.0")),
        ),
        (
            format!("{sw0}/0000:04:10.0"),
            s0(plx("0000:04:10.0", DOWNSTREAM, Some(0))),
        ),
        (
            format!("{sw0}/0000:04:10.0/0000:07:00.0"),
            s0(v100("0000:07:00.0")),
        ),
        // A second NIC on its own root port of socket 0.
        (
            "pci0000:00/0000:00:03.0".into(),
            s0(rp("0000:00:03.0", 0x6f08)),
        ),
        (
            "pci0000:00/0000:00:03.0/0000:08:00.0".into(),
            s0(cx4("0000:08:00.0")),
        ),
        // Socket 1: a switch with two GPUs and no NIC (the DGX-1's is left out).
        (rp1.into(), s1(rp("0000:80:02.0", 0x6f04))),
        (sw1.clone(), s1(plx("0000:83:00.0", UPSTREAM, None))),
        (
            format!("{sw1}/0000:84:08.0"),
            s1(plx("0000:84:08.0", DOWNSTREAM, Some(0))),
        ),
        (
            format!("{sw1}/0000:84:08.0/0000:85:00.0"),
            s1(v100("0000:85:00.0")),
        ),
        (
            format!("{sw1}/0000:84:10.0"),
            s1(plx("0000:84:10.0", DOWNSTREAM, Some(0))),
        ),
        (
            format!("{sw1}/0000:84:10.0/0000:86:00.0"),
            s1(v100("0000:86:00.0")),
        ),
    ];
    for (path, f) in &fs {
        write_function(root, path, f);
    }
}

fn a100(root: &Path) {
    let gen4 = |f: Function| f.link("16.0", 16, "16.0", 16);
    // AMD EPYC 7742 (Rome) root ports, 1022:1483, ACS on as the firmware leaves it.
    let rp = |bdf: &str, numa| {
        gen4(Function::new(bdf, 0x1022, 0x1483, 0x060400, ROOT_PORT).acs(ACS_ON)).numa(numa)
    };
    // Broadcom PEX88096 ports, 1000:c010 (NVIDIA/nccl#1505's dump), ACS off.
    let pex = |bdf: &str, port, numa| {
        gen4(Function::new(bdf, 0x1000, 0xc010, 0x060400, port).acs(0)).numa(numa)
    };
    // A100-SXM4-40GB (10de:20b0), idle at 2.5 GT/s as NVIDIA GPUs are.
    let gpu = |bdf: &str, numa| {
        Function::new(bdf, 0x10de, 0x20b0, 0x030200, ENDPOINT)
            .link("2.5", 16, "16.0", 16)
            .numa(numa)
    };
    let s0 = "pci0000:00/0000:00:01.1";
    let l1 = format!("{s0}/0000:01:00.0");
    let g = format!("{l1}/0000:02:00.0/0000:03:00.0");
    let n = format!("{l1}/0000:02:04.0/0000:0a:00.0");
    let s1 = "pci0000:b0/0000:b0:01.1";
    let m1 = format!("{s1}/0000:b1:00.0");
    let h = format!("{m1}/0000:b2:00.0/0000:b3:00.0");
    let fs: Vec<(String, Function)> = vec![
        (s0.into(), rp("0000:00:01.1", 0)),
        (l1.clone(), pex("0000:01:00.0", UPSTREAM, 0)),
        (
            format!("{l1}/0000:02:00.0"),
            pex("0000:02:00.0", DOWNSTREAM, 0),
        ),
        (g.clone(), pex("0000:03:00.0", UPSTREAM, 0)),
        (
            format!("{g}/0000:04:10.0"),
            pex("0000:04:10.0", DOWNSTREAM, 0),
        ),
        (
            format!("{g}/0000:04:10.0/0000:07:00.0"),
            gpu("0000:07:00.0", 0),
        ),
        (
            format!("{l1}/0000:02:04.0"),
            pex("0000:02:04.0", DOWNSTREAM, 0),
        ),
        (n.clone(), pex("0000:0a:00.0", UPSTREAM, 0)),
        (
            format!("{n}/0000:0b:00.0"),
            pex("0000:0b:00.0", DOWNSTREAM, 0),
        ),
        (
            format!("{n}/0000:0b:00.0/0000:0c:00.0"),
            gen4(Function::new(
                "0000:0c:00.0",
                0x15b3,
                0x101b,
                0x020700,
                ENDPOINT,
            ))
            .numa(0),
        ),
        // Socket 1: a GPU whose switch has no NIC here (the DGX A100's are left out).
        (s1.into(), rp("0000:b0:01.1", 1)),
        (m1.clone(), pex("0000:b1:00.0", UPSTREAM, 1)),
        (
            format!("{m1}/0000:b2:00.0"),
            pex("0000:b2:00.0", DOWNSTREAM, 1),
        ),
        (h.clone(), pex("0000:b3:00.0", UPSTREAM, 1)),
        (
            format!("{h}/0000:b4:10.0"),
            pex("0000:b4:10.0", DOWNSTREAM, 1),
        ),
        (
            format!("{h}/0000:b4:10.0/0000:b7:00.0"),
            gpu("0000:b7:00.0", 1),
        ),
    ];
    for (path, f) in &fs {
        write_function(root, path, f);
    }
    // The NICs on their own host bridges, socket 0: their root ports too.
    write_function(root, "pci0000:11/0000:11:00.0", &rp("0000:11:00.0", 0));
    write_function(root, "pci0000:5d/0000:5d:00.0", &rp("0000:5d:00.0", 0));
    for d in [
        "pci0000:11/0000:11:00.0/0000:12:00.0",
        "pci0000:5d/0000:5d:00.0/0000:5e:00.0",
        "pci0000:5d/0000:5d:00.0/0000:5e:00.1",
    ] {
        std::fs::write(root.join("sys/devices").join(d).join("numa_node"), "0\n").unwrap();
    }
}

fn main() {
    let nodes = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/fixtures/nodes".into());
    let nodes = Path::new(&nodes);
    v100(&nodes.join("v100"));
    a100(&nodes.join("a100"));
}
