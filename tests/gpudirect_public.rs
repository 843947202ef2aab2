//! `gpudirect.path` on config space published in public bug reports
//! (tests/fixtures/gpudirect/public/*, each with its PROVENANCE): the agent's
//! own decoding gives the answer each report arrived at.

mod support;

use std::fs;
use std::path::Path;

use rdma_node_agent::concerns::gpudirect::pcie::{self, Acs, PortType};
use support::pcie::{self as tree, Function};
use support::*;

fn public(rel: &str) -> String {
    fs::read_to_string(fixtures().join("gpudirect/public").join(rel)).unwrap()
}

fn plx() -> Vec<Function> {
    tree::parse_lspci(&public("n1sdp-plx8749/lspci-vvxxx.txt"))
}

/// The ACSCtl bits of an lspci line, by the names the agent prints.
fn ctl_of(line: &str) -> u16 {
    pcie::ACS_BITS
        .iter()
        .filter(|(_, n)| line.contains(&format!("{n}+")))
        .fold(0, |v, (b, _)| v | b)
}

#[test]
fn the_plx_switch_dump_parses_to_its_port_types_and_acs_at_0xf24() {
    let fs = plx();
    let names: Vec<&str> = fs.iter().map(|f| f.bdf.as_str()).collect();
    assert_eq!(names, ["0000:01:00.0", "0000:02:08.0", "0000:02:10.0"]);
    // The real header bytes: PLX 10b5:8749, a PCI bridge.
    assert!(
        fs.iter()
            .all(|f| (f.vendor, f.device, f.class) == (0x10b5, 0x8749, 0x060400))
    );
    let usp = pcie::parse_config(&fs[0].config());
    assert_eq!(usp.port, Some(PortType::SwitchUpstream));
    assert_eq!(usp.acs, Acs::Absent);
    for f in &fs[1..] {
        let c = pcie::parse_config(&f.config());
        assert_eq!(c.port, Some(PortType::SwitchDownstream), "{}", f.bdf);
        assert_eq!(
            c.acs,
            Acs::Present {
                offset: 0xf24,
                cap: 0x7f,
                ctl: 0x1d
            },
            "{}",
            f.bdf
        );
        assert_eq!(
            pcie::acs_ctl_text(0x1d),
            "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
        );
        assert_ne!(c.acs.blocking(), 0);
    }
}

/// NVIDIA/nccl#304: the broken state blocks peer-to-peer, the working state
/// does not, and the fix's register (0xf2a on PLX) is ECAP_ACS+6 of a real
/// PLX port.
#[test]
fn nccl_304_broken_and_working_acsctl_decode_as_the_report_says() {
    let text = public("nccl-304-plx/excerpt.txt");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("ACSCtl:")).collect();
    let broken = lines.iter().find(|l| l.contains("ReqRedir+")).unwrap();
    let working = lines.iter().find(|l| l.contains("SrcValid-")).unwrap();
    assert_eq!(ctl_of(broken), 0x001d);
    assert_ne!(ctl_of(broken) & pcie::ACS_P2P_BLOCKING, 0);
    assert_eq!(ctl_of(working), 0);
    let reg = text
        .split("setpci -s {} ")
        .nth(1)
        .and_then(|r| r.split(".w=0000").next())
        .unwrap();
    let reg = u16::from_str_radix(reg, 16).unwrap();
    let port = &plx()[1];
    assert_eq!(port.acs_offset().map(|o| o + 6), Some(reg));
}

/// NVIDIA/nccl#2079: ACSCtl 0x001d is the four bits the report names, and it
/// blocks peer-to-peer.
#[test]
fn nccl_2079_acsctl_0x001d_is_the_four_bits_the_report_names() {
    let text = public("nccl-2079-amd-gpp/excerpt.txt");
    assert!(text.contains("ACSCtl: 0x001d = SrcValid+, ReqRedir+, CmpltRedir+,"));
    assert_eq!(
        pcie::acs_ctl_text(0x001d),
        "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
    );
    assert_eq!(0x001d & pcie::ACS_P2P_BLOCKING, 0x000c);
    assert!(text.contains("setpci -s \"$bdf\" ECAP_ACS+6.w=0000"));
}

/// The real PLX switch as a tree: a GPU under 02:08.0, a NIC under 02:10.0
/// (both hand-placed), peermem registered. The agent names both switch ports
/// with the report's remedy; with the ports' ACSCtl as the report's working
/// state, the pair is ready.
fn plx_tree(root: &Path, ctl: Option<u16>) {
    let rp = "pci0000:00/0000:00:00.0";
    // The root port's own block is not kept: built here (ARM 13b5:0100, as the mail names it).
    tree::write_function(
        root,
        rp,
        &Function::new("0000:00:00.0", 0x13b5, 0x0100, 0x060400, tree::ROOT_PORT)
            .link("5.0", 16, "8.0", 16),
    );
    let fs = plx();
    let usp = format!("{rp}/0000:01:00.0");
    tree::write_function(root, &usp, &fs[0]);
    for f in &fs[1..] {
        let mut f = f.clone();
        if let Some(ctl) = ctl {
            f.acs = f.acs.map(|(cap, _)| (cap, ctl));
        }
        tree::write_function(root, &format!("{usp}/{}", f.bdf), &f);
    }
    let gpu = format!("{usp}/0000:02:08.0/0000:03:00.0");
    tree::write_function(
        root,
        &gpu,
        &Function::new("0000:03:00.0", 0x10de, 0x1db4, 0x030200, tree::ENDPOINT)
            .link("5.0", 16, "8.0", 16),
    );
    let nic = format!("{usp}/0000:02:10.0/0000:04:00.0");
    tree::write_function(
        root,
        &nic,
        &Function::new("0000:04:00.0", 0x15b3, 0x1017, 0x020000, tree::ENDPOINT)
            .link("5.0", 8, "8.0", 16),
    );
    tree::write_ib(root, "mlx5_0", &nic);
    write(root, "/proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
    write(
        root,
        "/proc/modules",
        "nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 nvidia_peermem, Live 0x0\n",
    );
    write(
        root,
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        "1.3-0\n",
    );
    write(
        root,
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n",
    );
    write(
        root,
        "/boot/config-5.15.0-91-generic",
        "CONFIG_DMA_SHARED_BUFFER=y\n",
    );
}

#[test]
fn acs_on_the_real_plx_ports_warns_naming_each_port_with_the_setpci_remedy() {
    let t = tempfile::tempdir().unwrap();
    plx_tree(t.path(), None);
    let v = json(&agent(
        t.path(),
        &["check", "--json", "--only", "gpudirect.path"],
    ));
    let c = check_in(&v, "gpudirect.path");
    assert_eq!(c["status"], "warn", "{c}");
    let p = &c["details"]["pairs"][0];
    assert_eq!(p["distance"], "PIX", "{p}");
    assert_eq!(p["reasons"], serde_json::json!(["acs_redirect"]), "{p}");
    let msg = c["message"].as_str().unwrap();
    for port in ["0000:02:08.0", "0000:02:10.0"] {
        assert!(
            msg.contains(&format!(
                "GPU 0000:03:00.0 ↔ mlx5_0: ACS P2P redirect on switch port {port} (ACSCtl SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+): peer-to-peer goes through the root complex"
            )) && msg.contains(&format!("setpci -s {port} ECAP_ACS+6.w=0000")),
            "{msg}"
        );
    }
    // The upstream port has no ACS: not named.
    assert!(!msg.contains("on switch upstream port"), "{msg}");

    // The report's working state: every ACSCtl bit clear.
    let t = tempfile::tempdir().unwrap();
    plx_tree(t.path(), Some(0));
    let v = json(&agent(
        t.path(),
        &["check", "--json", "--only", "gpudirect.path"],
    ));
    let c = check_in(&v, "gpudirect.path");
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(c["details"]["pairs"][0]["ready"], true, "{c}");
}
