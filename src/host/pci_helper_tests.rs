//! The helper on planted trees (hand-made config space, labelled as such:
//! a PLX-like switch port with ACS at 0xf24, and an endpoint).

use super::testing::InProcess;
use super::*;
use crate::host::pci_config::PciIdentity;

const BRIDGE: &str = "0000:04:08.0";
const ENDPOINT: &str = "0000:06:00.0";

/// Config space as the kernel lays it out (pci_regs.h): identity, header
/// type, capability list with the PCI Express capability at 0x40 (port type
/// 6, a switch downstream port), and ACS at 0xf24 with ACSCtl `ctl`.
fn config(header_type: u8, ctl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0..2].copy_from_slice(&0x10b5u16.to_le_bytes());
    c[2..4].copy_from_slice(&0x8747u16.to_le_bytes());
    c[6] = 0x10; // PCI_STATUS_CAP_LIST
    c[0x09..0x0c].copy_from_slice(&[0x00, 0x04, 0x06]);
    c[0x0e] = header_type;
    c[0x34] = 0x40;
    c[0x40] = 0x10; // PCI_CAP_ID_EXP
    c[0x42..0x44].copy_from_slice(&(0x0062u16).to_le_bytes());
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | (0xf24 << 20)).to_le_bytes());
    c[0xf24..0xf28].copy_from_slice(&(0x000d_u32 | (1 << 16)).to_le_bytes());
    c[0xf2a..0xf2c].copy_from_slice(&ctl.to_le_bytes());
    c
}

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (bdf, ty) in [(BRIDGE, 1u8), (ENDPOINT, 0)] {
        let d = t.path().join("sys/bus/pci/devices").join(bdf);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config"), config(ty, 0x001d)).unwrap();
    }
    t
}

fn words(w: &str) -> Vec<String> {
    std::iter::once("/usr/bin/rdma-node-agent")
        .chain(w.split_whitespace())
        .map(str::to_owned)
        .collect()
}

fn answer(root: &Path, token: &str) -> serde_json::Value {
    let p = root.join(out_path(token).strip_prefix("/").unwrap());
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn reads_bridges_whole_and_nothing_else() {
    let t = tree();
    let h = Host::new(t.path());
    let e = execute_words(
        &h,
        &h,
        &words(&format!(
            "pci-config read --token 1a {BRIDGE} {ENDPOINT} ../../../etc/shadow 0000:09:00.0"
        )),
    )
    .unwrap_err();
    assert!(e.contains("not every function"), "{e}");
    let a = answer(t.path(), "1a");
    let f = &a["functions"];
    assert_eq!(f[BRIDGE]["Ok"].as_str().unwrap().len(), 2 * 4096);
    assert!(
        f[ENDPOINT]["Err"]
            .as_str()
            .unwrap()
            .contains("not a PCI bridge (header type 0x00): the helper reads bridges only"),
        "{f}"
    );
    assert!(
        f["../../../etc/shadow"]["Err"]
            .as_str()
            .unwrap()
            .contains("is not a PCI address"),
        "{f}"
    );
    assert!(
        f["0000:09:00.0"]["Err"]
            .as_str()
            .unwrap()
            .contains("not a PCI function of this host"),
        "{f}"
    );
    let mode = std::fs::metadata(t.path().join("run/rdma-node-agent/pci-config/1a.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A token that could name another file, and too many functions, are refused outright.
    for bad in ["../x", "ABC", ""] {
        let w = vec![
            "x".to_owned(),
            "pci-config".into(),
            "read".into(),
            "--token".into(),
            bad.into(),
            BRIDGE.into(),
        ];
        assert!(execute_words(&h, &h, &w).is_err(), "{bad:?}");
    }
    let many: Vec<String> = (0..65).map(|_| BRIDGE.to_owned()).collect();
    let e = execute_words(
        &h,
        &h,
        &words(&format!("pci-config read --token 2 {}", many.join(" "))),
    )
    .unwrap_err();
    assert!(e.contains("at most 64"), "{e}");
}

use std::os::unix::fs::PermissionsExt;

fn identity() -> PciIdentity {
    PciIdentity::of(&config(1, 0)).unwrap()
}

fn ctl(root: &Path) -> u16 {
    let c = std::fs::read(root.join("sys/bus/pci/devices").join(BRIDGE).join("config")).unwrap();
    u16::from_le_bytes([c[0xf2a], c[0xf2b]])
}

#[test]
fn writes_acs_only_to_the_device_and_value_it_was_told() {
    let t = tree();
    let root = t.path();
    let m = InProcess::new(root, root);
    let host = Host::new(root);
    let helper = Helper {
        manager: &m,
        host: &host,
        exe: "/usr/bin/rdma-node-agent".into(),
    };
    assert_eq!(
        identity(),
        PciIdentity {
            vendor: 0x10b5,
            device: 0x8747,
            class: 0x060400,
            port_type: Some(6)
        }
    );
    let req = AcsRequest {
        bdf: BRIDGE.into(),
        identity: identity(),
        offset: 0xf24,
        expect: 0x001d,
        value: 0,
    };
    // Another device at the address: nothing written.
    let other = AcsRequest {
        identity: PciIdentity {
            device: 0x8748,
            ..identity()
        },
        ..req.clone()
    };
    let e = helper.write_acs(&other).unwrap_err().to_string();
    assert!(
        e.contains("it is vendor 0x10b5 device 0x8747 class 0x060400 port type 6 now, not the vendor 0x10b5 device 0x8748"),
        "{e}"
    );
    assert_eq!(ctl(root), 0x001d);
    // A value changed since the check read it: nothing written.
    let stale = AcsRequest {
        expect: 0x0005,
        ..req.clone()
    };
    let e = helper.write_acs(&stale).unwrap_err().to_string();
    assert!(
        e.contains("ACSCtl is 0x001d now, not the 0x0005 the check read"),
        "{e}"
    );
    assert_eq!(ctl(root), 0x001d);
    assert_eq!(
        helper.write_acs(&req).unwrap(),
        AcsWrite {
            old: 0x001d,
            new: 0
        }
    );
    assert_eq!(ctl(root), 0);
    // Each run's answer is removed once read.
    assert_eq!(
        std::fs::read_dir(root.join("run/rdma-node-agent/pci-config"))
            .unwrap()
            .count(),
        0
    );
    let runs = m.runs();
    assert_eq!(runs.len(), 3);
    assert!(
        runs[2].starts_with("pci-config write-acs --token ")
            && runs[2].ends_with(&format!(
                "{BRIDGE} --vendor=0x10b5 --device=0x8747 --class=0x060400 --port-type=6 --offset=0xf24 --expect=0x001d --value=0x0000"
            )),
        "{runs:?}"
    );
    // And the read: the whole of it, from the tree a root process sees.
    let got = helper.read(&[BRIDGE.to_owned()]).unwrap();
    assert_eq!(got[BRIDGE].as_ref().unwrap().len(), 4096);
}

#[test]
fn a_bdf_is_exactly_what_the_kernel_names() {
    use crate::host::pci_config::is_bdf;
    assert!(is_bdf("0000:04:08.0"));
    assert!(is_bdf("10000:e1:00.0"));
    for bad in [
        "0000:04:08.8",
        "0000:04:08",
        "0000:4:08.0",
        "0000:04:08.0/",
        "../04:08.0xx",
        "0000:0G:08.0",
        "0000:0A:08.0",
    ] {
        assert!(!is_bdf(bad), "{bad}");
    }
}
