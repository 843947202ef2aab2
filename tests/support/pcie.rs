//! PCIe trees under a `--root` for the GPUDirect tests and bench: a sysfs
//! layout (`sys/devices/pci…/…/<bdf>` with `config`, identity and link
//! attributes, `sys/bus/pci/devices/<bdf>` links) built from values, and a
//! reader of `lspci -vv[xxx]` text that gives those values for a real dump.
//!
//! Config space is laid out as the kernel's `include/uapi/linux/pci_regs.h`
//! says: the standard header (real bytes when a dump has them), the PCI
//! Express capability with its port type, and the extended capability list
//! from 0x100 with each capability's header at its offset (the ACS one with
//! its capability and control registers). Bytes not in a dump are rebuilt
//! from the printed values, never read.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

/// PCI Express capability port types (`PCI_EXP_TYPE_*`).
pub const ENDPOINT: u8 = 0x0;
pub const ROOT_PORT: u8 = 0x4;
pub const UPSTREAM: u8 = 0x5;
pub const DOWNSTREAM: u8 = 0x6;

pub const BRIDGE_CLASS: &str = "0x060400";

/// One PCI function as the tree shows it.
#[derive(Debug, Clone)]
pub struct Function {
    pub bdf: String,
    pub vendor: u16,
    pub device: u16,
    /// `0x060400`.
    pub class: u32,
    /// The first 256 bytes when a dump has them.
    pub header: Option<Vec<u8>>,
    /// Offset of the PCI Express capability and its port type.
    pub express: Option<(u8, u8)>,
    /// Extended capabilities in list order: offset and id.
    pub ext: Vec<(u16, u16)>,
    /// ACS capability and control registers, for the ext entry with id 0x0d.
    pub acs: Option<(u16, u16)>,
    /// (speed "8.0 GT/s PCIe", width) now and at most; `None`: no attribute.
    pub link: Option<(String, u32)>,
    pub max_link: Option<(String, u32)>,
    pub numa: Option<i32>,
}

impl Function {
    /// A function built here from values (no dump): PCIe capability at 0x40,
    /// and, with `acs_ctl`, AER at 0x100 followed by ACS at 0x148.
    pub fn new(bdf: &str, vendor: u16, device: u16, class: u32, port: u8) -> Function {
        Function {
            bdf: bdf.to_owned(),
            vendor,
            device,
            class,
            header: None,
            express: Some((0x40, port)),
            ext: vec![(0x100, 0x0001)],
            acs: None,
            link: None,
            max_link: None,
            numa: None,
        }
    }

    pub fn acs(mut self, ctl: u16) -> Function {
        self.ext.push((0x148, 0x000d));
        self.acs = Some((0x005f, ctl));
        self
    }

    pub fn link(mut self, speed: &str, width: u32, max_speed: &str, max_width: u32) -> Function {
        self.link = Some((format!("{speed} GT/s PCIe"), width));
        self.max_link = Some((format!("{max_speed} GT/s PCIe"), max_width));
        self
    }

    pub fn numa(mut self, n: i32) -> Function {
        self.numa = Some(n);
        self
    }

    /// 4096 bytes of configuration space, as root reads it.
    pub fn config(&self) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        match &self.header {
            Some(h) => c[..h.len()].copy_from_slice(h),
            None => {
                c[0..2].copy_from_slice(&self.vendor.to_le_bytes());
                c[2..4].copy_from_slice(&self.device.to_le_bytes());
                c[4] = 0x07;
                c[0x06] = 0x10; // PCI_STATUS_CAP_LIST
                c[0x09..0x0c].copy_from_slice(&self.class.to_le_bytes()[..3]);
                c[0x0e] = u8::from(self.class >> 8 == 0x0604);
                if let Some((at, port)) = self.express {
                    c[0x34] = at;
                    let at = usize::from(at);
                    c[at] = 0x10; // PCI_CAP_ID_EXP, last in the list
                    c[at + 2] = (port << 4) | 2;
                }
            }
        }
        for (i, (at, id)) in self.ext.iter().enumerate() {
            let next = self.ext.get(i + 1).map_or(0, |(n, _)| u32::from(*n));
            let at = usize::from(*at);
            let h = u32::from(*id) | (1 << 16) | (next << 20);
            c[at..at + 4].copy_from_slice(&h.to_le_bytes());
            if *id == 0x000d
                && let Some((cap, ctl)) = self.acs
            {
                c[at + 4..at + 6].copy_from_slice(&cap.to_le_bytes());
                c[at + 6..at + 8].copy_from_slice(&ctl.to_le_bytes());
            }
        }
        c
    }

    /// The ACS capability's offset, as the list places it.
    pub fn acs_offset(&self) -> Option<u16> {
        self.ext
            .iter()
            .find(|(_, id)| *id == 0x000d)
            .map(|(a, _)| *a)
    }
}

/// Writes `f` at `devpath` (`pci0000:00/0000:00:01.0/…`, ending in its bdf)
/// under `root`, with its `sys/bus/pci/devices` link.
pub fn write_function(root: &Path, devpath: &str, f: &Function) {
    let dir = root.join("sys/devices").join(devpath);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("config"), f.config()).unwrap();
    let put = |name: &str, text: String| fs::write(dir.join(name), text + "\n").unwrap();
    put("vendor", format!("0x{:04x}", f.vendor));
    put("device", format!("0x{:04x}", f.device));
    put("class", format!("0x{:06x}", f.class));
    if let Some((s, w)) = &f.link {
        put("current_link_speed", s.clone());
        put("current_link_width", w.to_string());
    }
    if let Some((s, w)) = &f.max_link {
        put("max_link_speed", s.clone());
        put("max_link_width", w.to_string());
    }
    put("numa_node", f.numa.unwrap_or(-1).to_string());
    // The kernel (CONFIG_PCIEAER) gives a function with the AER capability its
    // statistics files, a root port its totals too: as a clean boot has them
    // (tests/fixtures/aer/clean, the kernel's format).
    if f.ext.iter().any(|(_, id)| *id == 0x0001) {
        let clean = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aer/clean");
        for name in ["aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"] {
            fs::copy(clean.join(name), dir.join(name)).unwrap();
        }
        if f.express.is_some_and(|(_, port)| port == ROOT_PORT) {
            for sev in ["cor", "nonfatal", "fatal"] {
                put(&format!("aer_rootport_total_err_{sev}"), "0".into());
            }
        }
    }
    let bus = root.join("sys/bus/pci/devices");
    fs::create_dir_all(&bus).unwrap();
    let link = bus.join(&f.bdf);
    if !link.exists() {
        symlink(format!("../../../devices/{devpath}"), link).unwrap();
    }
}

/// An RDMA device `name` on the function at `devpath`.
pub fn write_ib(root: &Path, name: &str, devpath: &str) {
    let dir = root
        .join("sys/devices")
        .join(devpath)
        .join("infiniband")
        .join(name);
    fs::create_dir_all(&dir).unwrap();
    symlink("../..", dir.join("device")).unwrap();
    let class = root.join("sys/class/infiniband");
    fs::create_dir_all(&class).unwrap();
    symlink(
        format!("../../devices/{devpath}/infiniband/{name}"),
        class.join(name),
    )
    .unwrap();
}

/// lspci's name of an extended capability to its id (`PCI_EXT_CAP_ID_*`);
/// `#19` is lspci's way of printing an id it has no name for.
fn ext_id(name: &str) -> u16 {
    if let Some(hex) = name.strip_prefix('#') {
        return u16::from_str_radix(hex.trim(), 16).unwrap();
    }
    let known = [
        ("Advanced Error Reporting", 0x01),
        ("Virtual Channel", 0x02),
        ("Device Serial Number", 0x03),
        ("Power Budgeting", 0x04),
        ("Vendor Specific Information", 0x0b),
        ("Access Control Services", 0x0d),
        ("Alternative Routing-ID Interpretation", 0x0e),
        ("Latency Tolerance Reporting", 0x18),
        ("Secondary PCI Express", 0x19),
        ("Physical Layer 16.0 GT/s", 0x26),
        ("L1 PM Substates", 0x1e),
        ("Precision Time Measurement", 0x1f),
        ("Data Link Feature", 0x25),
        ("Lane Margining at the Receiver", 0x27),
    ];
    known
        .iter()
        .find(|(n, _)| name.starts_with(n))
        .map(|(_, id)| *id)
        .unwrap_or_else(|| panic!("extended capability {name:?} has no id here: add it"))
}

/// `Speed 5GT/s, Width x16` (lspci) as sysfs prints it: `5.0 GT/s PCIe`, 16.
fn speed_width(line: &str) -> Option<(String, u32)> {
    let speed = line.split("Speed ").nth(1)?.split("GT/s").next()?.trim();
    let width = line.split("Width x").nth(1)?;
    let width: u32 = width
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let speed = if speed.contains('.') {
        speed.to_owned()
    } else {
        format!("{speed}.0")
    };
    Some((format!("{speed} GT/s PCIe"), width))
}

fn bits(line: &str) -> u16 {
    let names = [
        "SrcValid",
        "TransBlk",
        "ReqRedir",
        "CmpltRedir",
        "UpstreamFwd",
        "EgressCtrl",
        "DirectTrans",
    ];
    let mut v = 0;
    for (i, n) in names.iter().enumerate() {
        if line.contains(&format!("{n}+")) {
            v |= 1 << i;
        }
    }
    v
}

/// The functions of an `lspci -vv` or `-vvxxx` dump, in order.
pub fn parse_lspci(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = Vec::new();
    let mut hex: Vec<u8> = Vec::new();
    let finish = |out: &mut Vec<Function>, hex: &mut Vec<u8>| {
        if let Some(f) = out.last_mut()
            && hex.len() >= 64
        {
            f.vendor = u16::from_le_bytes([hex[0], hex[1]]);
            f.device = u16::from_le_bytes([hex[2], hex[3]]);
            f.class = u32::from_le_bytes([hex[9], hex[10], hex[11], 0]);
            f.header = Some(std::mem::take(hex));
        }
        hex.clear();
    };
    for line in text.lines() {
        let t = line.trim();
        if !line.starts_with(char::is_whitespace)
            && let Some((bdf, _)) = line.split_once(' ')
            && bdf.contains(':')
            && bdf.contains('.')
            && !bdf.ends_with(':')
        {
            finish(&mut out, &mut hex);
            let bdf = if bdf.matches(':').count() == 1 {
                format!("0000:{bdf}")
            } else {
                bdf.to_owned()
            };
            out.push(Function {
                bdf,
                vendor: 0,
                device: 0,
                class: 0,
                header: None,
                express: None,
                ext: Vec::new(),
                acs: None,
                link: None,
                max_link: None,
                numa: None,
            });
            continue;
        }
        let Some(f) = out.last_mut() else { continue };
        if let Some((off, rest)) = line.split_once(": ")
            && off.len() == 2
            && u8::from_str_radix(off, 16).is_ok()
        {
            hex.extend(
                rest.split_whitespace()
                    .map(|b| u8::from_str_radix(b, 16).unwrap()),
            );
        } else if let Some(rest) = t.strip_prefix("Capabilities: [") {
            let (at, name) = rest.split_once("] ").unwrap();
            let at = at.split_whitespace().next().unwrap();
            let at = u16::from_str_radix(at, 16).unwrap();
            if at >= 0x100 {
                f.ext.push((at, ext_id(name)));
            } else if let Some(kind) = name
                .strip_prefix("Express (v2) ")
                .or(name.strip_prefix("Express (v1) "))
            {
                let port = if kind.starts_with("Root Port") {
                    ROOT_PORT
                } else if kind.starts_with("Upstream Port") {
                    UPSTREAM
                } else if kind.starts_with("Downstream Port") {
                    DOWNSTREAM
                } else {
                    ENDPOINT
                };
                f.express = Some((at as u8, port));
            }
        } else if let Some(rest) = t.strip_prefix("ACSCap:") {
            f.acs = Some((bits(rest), 0));
        } else if let Some(rest) = t.strip_prefix("ACSCtl:") {
            let cap = f.acs.map_or(0, |(c, _)| c);
            f.acs = Some((cap, bits(rest)));
        } else if let Some(rest) = t.strip_prefix("LnkCap:") {
            f.max_link = speed_width(rest);
        } else if let Some(rest) = t.strip_prefix("LnkSta:") {
            f.link = speed_width(rest);
        } else if let Some(rest) = t.strip_prefix("NUMA node: ") {
            f.numa = rest.trim().parse().ok();
        }
    }
    finish(&mut out, &mut hex);
    out
}

/// An 8-GPU, 8-NIC node built here (not read from a machine), laid out as an
/// HGX H100 board's PCIe tree is commonly described: two sockets, two root
/// ports each, a level-1 switch under each root port and two level-2 switches
/// under each level-1 switch, each level-2 switch with one GPU and one NIC
/// (GPU↔NIC PIX). Gen5 x16 everywhere, ACS present and off on every port. The
/// NICs are full RDMA devices (`sysfs::rdma_function`), so `rdma.devices` has
/// the same eight to read.
pub fn hgx_tree(root: &Path) {
    let gen5 = |f: Function| f.link("32.0", 16, "32.0", 16);
    let mut n = 0;
    for (socket, host) in [(0, 0x00u8), (0, 0x20), (1, 0x80), (1, 0xa0)] {
        let rp = format!("pci0000:{host:02x}/0000:{host:02x}:01.0");
        write_function(
            root,
            &rp,
            &gen5(
                Function::new(
                    &format!("0000:{host:02x}:01.0"),
                    0x8086,
                    0x352a,
                    0x060400,
                    ROOT_PORT,
                )
                .acs(0x001d),
            )
            .numa(socket),
        );
        let l1 = format!("{rp}/0000:{:02x}:00.0", host + 1);
        let bridge = |bdf: &str, port| {
            gen5(Function::new(bdf, 0x1000, 0xc030, 0x060400, port).acs(0)).numa(socket)
        };
        write_function(
            root,
            &l1,
            &bridge(&format!("0000:{:02x}:00.0", host + 1), UPSTREAM),
        );
        for k in 0..2u8 {
            let d1 = format!("0000:{:02x}:{:02x}.0", host + 2, k);
            let l2 = format!("0000:{:02x}:00.0", host + 3 + 4 * k);
            let d2 = |f: u8| format!("0000:{:02x}:{:02x}.0", host + 4 + 4 * k, f);
            let ep = |f: u8| format!("0000:{:02x}:00.0", host + 5 + 4 * k + f);
            let p1 = format!("{l1}/{d1}");
            let p2 = format!("{p1}/{l2}");
            write_function(root, &p1, &bridge(&d1, DOWNSTREAM));
            write_function(root, &p2, &bridge(&l2, UPSTREAM));
            for f in 0..2u8 {
                write_function(
                    root,
                    &format!("{p2}/{}", d2(f)),
                    &bridge(&d2(f), DOWNSTREAM),
                );
            }
            let gpu = format!("{p2}/{}/{}", d2(0), ep(0));
            write_function(
                root,
                &gpu,
                &gen5(Function::new(&ep(0), 0x10de, 0x2330, 0x030200, ENDPOINT)).numa(socket),
            );
            let nic = format!("{p2}/{}/{}", d2(1), ep(1));
            write_function(
                root,
                &nic,
                &gen5(Function::new(&ep(1), 0x15b3, 0x1021, 0x020700, ENDPOINT)).numa(socket),
            );
            super::sysfs::rdma_function(
                root,
                &format!("/sys/devices/{nic}"),
                &ep(1),
                &format!("mlx5_{n}"),
                &format!("ibp{n}s0"),
                None,
            );
            n += 1;
        }
    }
    let w = |p: &str, t: &str| {
        let p = root.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, t).unwrap();
    };
    w("proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
    w(
        "proc/modules",
        "nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 nvidia_peermem, Live 0x0\n",
    );
    w("sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0\n");
    w(
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n",
    );
    w(
        "boot/config-6.8.0-45-generic",
        "CONFIG_DMA_SHARED_BUFFER=y\nCONFIG_PCI_P2PDMA=y\n",
    );
}
