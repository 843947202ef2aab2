//! `gpudirect.path` on the real GPU host's bytes (tests/fixtures/gpudirect/gpu-host,
//! see its PROVENANCE) and on PCIe trees built here, labelled as such: a
//! switch with ACS set, a NIC across the socket interconnect, a narrow link.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::decide::Reason;
use super::mechanism::Kind;
use super::pcie::{self, Acs, PortType};
use super::topo::Distance;
use super::*;
use crate::host::Host;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gpudirect")
        .join(name)
}

fn run(root: &Path, cfg: &GpuDirectConfig) -> Outcome {
    let snap = Snapshot::new(Host::new(root));
    assess(&gather::gather(&snap).expect("gather"), cfg)
}

#[test]
fn the_real_h200_config_space_parses() {
    let bytes = fs::read(fixture(
        "gpu-host/sys/devices/pci0000:00/0000:00:06.0/config",
    ))
    .unwrap();
    assert_eq!(bytes.len(), 4096);
    let c = pcie::parse_config(&bytes);
    assert_eq!(c.port, Some(PortType::Endpoint));
    // Its extended capabilities (README: 0x0000@0x100 … serial@0x2f0) hold no ACS.
    assert_eq!(c.acs, Acs::Absent);
    // What a non-root reader gets is too short to tell.
    assert_eq!(
        pcie::parse_config(&bytes[..64]).acs,
        Acs::Truncated { len: 64 }
    );
    // The virtio functions expose 256 bytes and have no PCI Express
    // capability: conventional PCI, no extended space, so no ACS at all.
    let virtio = fs::read(fixture(
        "gpu-host/sys/devices/pci0000:00/0000:00:03.0/config",
    ))
    .unwrap();
    assert_eq!(pcie::parse_config(&virtio).port, None);
    assert_eq!(pcie::parse_config(&virtio).acs, Acs::Absent);
    // The GPU's first 256 bytes (a PCI Express function) cannot tell.
    assert_eq!(
        pcie::parse_config(&bytes[..256]).acs,
        Acs::Truncated { len: 256 }
    );
}

#[test]
fn link_attributes_as_sysfs_prints_them() {
    assert_eq!(pcie::parse_speed("32.0 GT/s PCIe\n"), Some(320));
    assert_eq!(pcie::parse_speed("2.5 GT/s PCIe"), Some(25));
    assert_eq!(pcie::parse_speed("8 GT/s"), Some(80));
    assert_eq!(pcie::parse_speed("Unknown"), None);
    assert_eq!(pcie::parse_speed(""), None);
    assert_eq!(pcie::parse_width("16\n"), Some(16));
    assert_eq!(pcie::parse_width("0"), None);
    assert_eq!(
        pcie::acs_ctl_text(0x001d),
        "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
    );
}

#[test]
fn the_real_gpu_host_has_no_nic_and_no_gpudirect_mechanism() {
    let out = run(&fixture("gpu-host"), &GpuDirectConfig::default());
    let m = out.mechanism.as_ref().unwrap();
    assert_eq!(m.kind, Kind::None);
    assert_eq!(m.unknown, None);
    let d = m.driver.as_ref().unwrap();
    assert!(d.open && d.version == "580.159.04");
    assert_eq!(
        m.dmabuf_missing,
        ["CONFIG_PCI_P2PDMA is not set in /proc/config.gz (no PCI peer-to-peer DMA)"]
    );
    assert!(m.peermem_missing[0].starts_with("nvidia_peermem is not loaded"));
    assert_eq!(out.check.status, Status::Skipped);
    assert!(out.check.message.starts_with(
        "1 NVIDIA GPU(s), no RDMA NIC with a PCI function (/sys/class/infiniband): no GPU↔NIC path to check; GPUDirect mechanism: none (nvidia_peermem is not loaded"
    ));
    assert!(
        out.check.message.contains("IOMMU off"),
        "{}",
        out.check.message
    );
    let required = GpuDirectConfig {
        required: true,
        ..GpuDirectConfig::default()
    };
    assert_eq!(
        run(&fixture("gpu-host"), &required).check.status,
        Status::Fail
    );
}

/// A PCIe tree built here (not from a real machine): its functions' config
/// space is 4096 bytes with a PCI Express capability at 0x40 and, for
/// bridges given an ACS control value, an ACS capability at 0x148 behind an
/// AER header at 0x100, laid out as pci_regs.h says.
struct Tree {
    root: tempfile::TempDir,
}

fn config(port: u8, acs: Option<u16>) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x06] = 0x10; // PCI_STATUS_CAP_LIST
    c[0x34] = 0x40;
    c[0x40] = 0x10; // PCI_CAP_ID_EXP, next 0
    c[0x42] = (port << 4) | 2;
    // AER (id 1, version 1) at 0x100, next 0x148.
    c[0x100..0x104].copy_from_slice(&(0x0001 | (1 << 16) | (0x148 << 20) as u32).to_le_bytes());
    if let Some(ctl) = acs {
        c[0x148..0x14c].copy_from_slice(&(0x000d_u32 | (1 << 16)).to_le_bytes());
        c[0x14c..0x14e].copy_from_slice(&0x005f_u16.to_le_bytes());
        c[0x14e..0x150].copy_from_slice(&ctl.to_le_bytes());
    }
    c
}

impl Tree {
    fn new() -> Tree {
        let t = Tree {
            root: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(t.path("sys/bus/pci/devices")).unwrap();
        fs::create_dir_all(t.path("sys/class/infiniband")).unwrap();
        fs::create_dir_all(t.path("proc/sys/kernel")).unwrap();
        t.write("proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
        t
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    /// A function at `devpath` (`pci0000:00/0000:00:01.0/...`).
    fn function(
        &self,
        devpath: &str,
        vendor: &str,
        class: &str,
        port: u8,
        acs: Option<u16>,
        link: (&str, &str, u32, u32),
    ) {
        let dir = format!("sys/devices/{devpath}");
        let bdf = devpath.rsplit('/').next().unwrap();
        fs::create_dir_all(self.path(&dir)).unwrap();
        fs::write(self.path(&format!("{dir}/config")), config(port, acs)).unwrap();
        self.write(&format!("{dir}/vendor"), &format!("{vendor}\n"));
        self.write(&format!("{dir}/class"), &format!("{class}\n"));
        self.write(
            &format!("{dir}/current_link_speed"),
            &format!("{} GT/s PCIe\n", link.0),
        );
        self.write(
            &format!("{dir}/max_link_speed"),
            &format!("{} GT/s PCIe\n", link.1),
        );
        self.write(
            &format!("{dir}/current_link_width"),
            &format!("{}\n", link.2),
        );
        self.write(&format!("{dir}/max_link_width"), &format!("{}\n", link.3));
        let depth = 3;
        let up = "../".repeat(depth);
        symlink(
            format!("{up}devices/{devpath}"),
            self.path(&format!("sys/bus/pci/devices/{bdf}")),
        )
        .unwrap();
    }
    fn nic(&self, name: &str, devpath: &str) {
        let dir = format!("sys/devices/{devpath}/infiniband/{name}");
        fs::create_dir_all(self.path(&dir)).unwrap();
        symlink("../..", self.path(&format!("{dir}/device"))).unwrap();
        let up = "../".repeat(2);
        symlink(
            format!("{up}devices/{devpath}/infiniband/{name}"),
            self.path(&format!("sys/class/infiniband/{name}")),
        )
        .unwrap();
    }
}

const BRIDGE: &str = "0x060400";
const GEN5: (&str, &str, u32, u32) = ("32.0", "32.0", 16, 16);

/// One switch under root port 00:01.0 with the GPU on downstream port 02:00.0
/// (ACS `dsp_acs`) and mlx5_0 on 02:01.0; mlx5_1 on another root complex.
fn switch_tree(dsp_acs: u16, nic_link: (&'static str, &'static str, u32, u32)) -> Tree {
    let t = Tree::new();
    let rp = "pci0000:00/0000:00:01.0";
    let usp = format!("{rp}/0000:01:00.0");
    t.function(rp, "0x8086", BRIDGE, 4, Some(0), GEN5);
    t.function(&usp, "0x1000", BRIDGE, 5, None, GEN5);
    t.function(
        &format!("{usp}/0000:02:00.0"),
        "0x1000",
        BRIDGE,
        6,
        Some(dsp_acs),
        GEN5,
    );
    t.function(
        &format!("{usp}/0000:02:01.0"),
        "0x1000",
        BRIDGE,
        6,
        Some(0),
        GEN5,
    );
    // The GPU idles at 2.5 GT/s: not a fault.
    t.function(
        &format!("{usp}/0000:02:00.0/0000:03:00.0"),
        "0x10de",
        "0x030200",
        0,
        None,
        ("2.5", "32.0", 16, 16),
    );
    t.function(
        &format!("{usp}/0000:02:01.0/0000:04:00.0"),
        "0x15b3",
        "0x020700",
        0,
        None,
        nic_link,
    );
    t.nic("mlx5_0", &format!("{usp}/0000:02:01.0/0000:04:00.0"));
    t.function(
        "pci0000:80/0000:80:01.0",
        "0x8086",
        BRIDGE,
        4,
        Some(0),
        GEN5,
    );
    t.function(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        "0x15b3",
        "0x020700",
        0,
        None,
        GEN5,
    );
    t.nic("mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0");
    t.write(
        "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node",
        "1\n",
    );
    t.write(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/numa_node",
        "0\n",
    );
    // peermem, registered as MLNX_OFED shows it.
    t.write(
        "proc/modules",
        "nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 nvidia_peermem, Live 0x0\n",
    );
    t.write("sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0\n");
    t.write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n");
    t.write(
        "boot/config-6.8.0-45-generic",
        "CONFIG_DMA_SHARED_BUFFER=y\nCONFIG_PCI_P2PDMA=y\n",
    );
    t
}

#[test]
fn acs_on_the_switch_port_between_gpu_and_nic_is_named_with_its_fix() {
    let t = switch_tree(0x001d, GEN5);
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert_eq!(out.pairs.len(), 1, "only the nearest NIC: {:?}", out.pairs);
    let p = &out.pairs[0];
    assert_eq!((p.gpu.as_str(), p.nic.as_str()), ("0000:03:00.0", "mlx5_0"));
    assert_eq!(p.distance, Distance::Pix);
    assert_eq!(p.bridges, ["0000:02:00.0", "0000:01:00.0", "0000:02:01.0"]);
    // The proprietary driver: peermem, not DMA-BUF.
    assert_eq!(p.mechanism, Kind::Peermem);
    assert_eq!(p.reasons, [Reason::AcsRedirect]);
    assert_eq!(p.ready, Some(false));
    assert_eq!(out.check.status, Status::Warn);
    assert!(out.check.message.contains(
        "GPU 0000:03:00.0 ↔ mlx5_0: ACS P2P redirect on switch port 0000:02:00.0 (ACSCtl SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+): peer-to-peer goes through the root complex; run 'rdma-node-agent apply' with [gpudirect] acs = \"disable\", or setpci -s 0000:02:00.0 ECAP_ACS+6.w=0000 after every boot"
    ), "{}", out.check.message);
    let required = GpuDirectConfig {
        required_gpus: vec!["0000:03:00.0".into()],
        ..GpuDirectConfig::default()
    };
    assert_eq!(run(t.root.path(), &required).check.status, Status::Fail);
}

#[test]
fn a_clean_path_is_ok_and_a_narrow_nic_link_warns() {
    let t = switch_tree(0x0000, GEN5);
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert_eq!(out.check.status, Status::Ok, "{}", out.check.message);
    assert_eq!(out.pairs[0].ready, Some(true));
    // Source validation alone redirects nothing.
    let t = switch_tree(0x0001, ("16.0", "32.0", 8, 16));
    let out = run(t.root.path(), &GpuDirectConfig::default());
    let p = &out.pairs[0];
    assert_eq!(p.reasons, [Reason::LinkDegraded]);
    assert_eq!(p.ready, Some(true));
    assert_eq!(out.check.status, Status::Warn);
    assert!(
        out.check.message.contains(
            "the link of 0000:04:00.0 runs at 16.0 GT/s x8, both ends support 32.0 GT/s x16"
        ),
        "{}",
        out.check.message
    );
}

#[test]
fn without_a_registered_peer_memory_client_nor_p2pdma_there_is_no_mechanism() {
    let t = switch_tree(0, GEN5);
    fs::remove_dir_all(t.path("sys/kernel/mm/memory_peers")).unwrap();
    let out = run(t.root.path(), &GpuDirectConfig::default());
    let m = out.mechanism.as_ref().unwrap();
    assert_eq!(m.kind, Kind::None);
    assert!(m.peermem_missing[0].contains("nvidia_peermem is loaded but registered nowhere"));
    assert_eq!(out.pairs[0].reasons, [Reason::NoMechanism]);
    assert_eq!(out.check.status, Status::Warn);
    // The open driver on a kernel with P2PDMA: DMA-BUF.
    t.write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.42.02  Release Build  (dvs-builder@U16-I3-A03-02-4)  Mon May 13 17:10:33 UTC 2024\n");
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert_eq!(out.mechanism.unwrap().kind, Kind::Dmabuf);
    assert_eq!(out.check.status, Status::Ok, "{}", out.check.message);
    // No kernel config anywhere: DMA-BUF cannot be told.
    fs::remove_file(t.path("boot/config-6.8.0-45-generic")).unwrap();
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert_eq!(out.check.status, Status::Unknown, "{}", out.check.message);
    assert_eq!(out.pairs[0].reasons, [Reason::MechanismUnknown]);
}

#[test]
fn a_nic_on_another_socket_is_sys_and_a_truncated_config_is_unknown() {
    let t = switch_tree(0, GEN5);
    // Take mlx5_0 away: the GPU's nearest NIC is across the socket link.
    fs::remove_file(t.path("sys/class/infiniband/mlx5_0")).unwrap();
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert_eq!(out.pairs[0].distance, Distance::Sys);
    assert!(out.pairs[0].reasons.contains(&Reason::Distance));
    // What a non-root reader sees of a root port's config space: 64 bytes.
    let cfg = t.path("sys/devices/pci0000:00/0000:00:01.0/config");
    let short = fs::read(&cfg).unwrap()[..64].to_vec();
    fs::write(&cfg, short).unwrap();
    let out = run(t.root.path(), &GpuDirectConfig::default());
    assert!(out.pairs[0].reasons.contains(&Reason::AcsUnknown));
    assert_eq!(
        out.check.status,
        Status::Warn,
        "distance settles it: {}",
        out.check.message
    );
}

/// The switch tree with NVIDIA's open module 580 loaded, no nvidia_peermem,
/// running kernel `release` whose config is the real one in fixture `dir`.
fn open_driver_without_peermem(release: &str, dir: &str) -> Outcome {
    let t = switch_tree(0, GEN5);
    fs::remove_dir_all(t.path("sys/kernel/mm/memory_peers")).unwrap();
    fs::write(t.path("proc/modules"), "nvidia 1 0 - Live 0x0\n").unwrap();
    t.write("proc/sys/kernel/osrelease", &format!("{release}\n"));
    t.write(
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Release Build\n",
    );
    let config = format!("boot/config-{release}");
    let text = fs::read_to_string(fixture(&format!("{dir}/{config}"))).unwrap();
    t.write(&config, &text);
    run(t.root.path(), &GpuDirectConfig::default())
}

#[test]
fn debians_own_kernel_config_has_no_dmabuf_path() {
    let out = open_driver_without_peermem("6.1.0-49-amd64", "debian-6.1");
    let m = out.mechanism.unwrap();
    assert_eq!(m.kind, Kind::None);
    assert_eq!(
        m.dmabuf_missing,
        ["CONFIG_PCI_P2PDMA is not set in /boot/config-6.1.0-49-amd64 (no PCI peer-to-peer DMA)"]
    );
    assert_eq!(
        m.notes,
        [
            "CONFIG_DMABUF_MOVE_NOTIFY is not set in /boot/config-6.1.0-49-amd64 (not needed: the RDMA importer pins)"
        ]
    );
    assert_eq!(out.check.status, Status::Warn);
}

#[test]
fn observations_feed_the_nfd_label_and_metrics() {
    let t = switch_tree(0x001d, ("16.0", "32.0", 8, 16));
    let snap = Snapshot::new(Host::new(t.root.path()));
    let config = Config::default();
    let ctx = Ctx {
        config: &config,
        checks: &[],
        observations: &[],
    };
    let d = Path.decide(&Path.gather(&snap, &config).unwrap(), &ctx);
    assert!(
        d.observations
            .contains(&Observation::GpuDirectMechanism(Some("peermem")))
    );
    assert!(d.observations.contains(&Observation::GpuDirectPair {
        gpu: "0000:03:00.0".into(),
        nic: "mlx5_0".into(),
        mechanism: "peermem",
        distance: "PIX",
        ready: Some(false),
        reasons: vec!["acs_redirect", "link_degraded"],
    }));
    assert!(d.observations.contains(&Observation::PcieLink {
        device: "0000:04:00.0".into(),
        speed_tenths_gts: Some(160),
        max_speed_tenths_gts: Some(320),
        width: Some(8),
        max_width: Some(16),
    }));
    // On the real H200 host: none (the NFD label that follows: nfd.rs's tests).
    let snap = Snapshot::new(Host::new(fixture("gpu-host")));
    let d = Path.decide(&Path.gather(&snap, &config).unwrap(), &ctx);
    assert!(
        d.observations
            .contains(&Observation::GpuDirectMechanism(Some("none")))
    );
}

/// On the V100 sample two GPUs share mlx5_0's switch: its links are one
/// series each, not one per pair (Prometheus rejects a repeated series).
#[test]
fn a_link_shared_by_pairs_is_observed_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nodes/v100");
    let snap = Snapshot::new(Host::new(&root));
    let config = Config::default();
    let ctx = Ctx {
        config: &config,
        checks: &[],
        observations: &[],
    };
    let d = Path.decide(&Path.gather(&snap, &config).unwrap(), &ctx);
    let links: Vec<&String> = d
        .observations
        .iter()
        .filter_map(|o| match o {
            Observation::PcieLink { device, .. } => Some(device),
            _ => None,
        })
        .collect();
    let mut unique = links.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(links.len(), unique.len(), "{links:?}");
    assert!(links.contains(&&"0000:05:00.0".to_owned()), "{links:?}");
}

/// Talos's kernel configuration (tests/fixtures/gpudirect/talos-6.18, real, see
/// its PROVENANCE) enables what DMA-BUF needs: with the open driver, `dmabuf`.
#[test]
fn talos_kernel_config_with_the_open_driver_is_dmabuf() {
    let out = open_driver_without_peermem("6.18.45-talos", "talos-6.18");
    let m = out.mechanism.unwrap();
    assert_eq!(m.kind, Kind::Dmabuf, "{m:?}");
    assert!(m.dmabuf_missing.is_empty(), "{m:?}");
    assert_eq!(out.check.status, Status::Ok, "{}", out.check.message);
}
