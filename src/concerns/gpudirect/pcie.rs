//! PCIe facts from raw configuration space and sysfs link attributes: the
//! port type (PCI Express capability), the ACS capability and its control
//! register, and link speed/width. Pure: bytes and strings in, values out.
//!
//! Register layout from the kernel's `include/uapi/linux/pci_regs.h`
//! (torvalds/linux): `PCI_STATUS` 0x06 with `PCI_STATUS_CAP_LIST` 0x10,
//! `PCI_CAPABILITY_LIST` 0x34, `PCI_CAP_ID_EXP` 0x10, `PCI_EXP_FLAGS_TYPE`
//! 0x00f0 (`PCI_EXP_TYPE_ROOT_PORT` 0x4, `_UPSTREAM` 0x5, `_DOWNSTREAM` 0x6,
//! `_PCI_BRIDGE` 0x7), extended capabilities from `PCI_CFG_SPACE_SIZE` 256,
//! `PCI_EXT_CAP_ID(h)` = h & 0xffff, `PCI_EXT_CAP_NEXT(h)` = (h >> 20) & 0xffc,
//! `PCI_EXT_CAP_ID_ACS` 0x0d with `PCI_ACS_CAP` 0x04 and `PCI_ACS_CTRL` 0x06.

use crate::host::pci_config::PciIdentity;

/// ACS control bits, `PCI_ACS_*` in pci_regs.h, with lspci's names (`ACSCtl:`).
pub const ACS_BITS: [(u16, &str); 7] = [
    (0x0001, "SrcValid"),    // PCI_ACS_SV  Source Validation
    (0x0002, "TransBlk"),    // PCI_ACS_TB  Translation Blocking
    (0x0004, "ReqRedir"),    // PCI_ACS_RR  P2P Request Redirect
    (0x0008, "CmpltRedir"),  // PCI_ACS_CR  P2P Completion Redirect
    (0x0010, "UpstreamFwd"), // PCI_ACS_UF  Upstream Forwarding
    (0x0020, "EgressCtrl"),  // PCI_ACS_EC  P2P Egress Control
    (0x0040, "DirectTrans"), // PCI_ACS_DT  Direct Translated P2P
];

/// The bits that send peer-to-peer traffic up to the root complex or block it:
/// request and completion redirect, and egress control.
pub const ACS_P2P_BLOCKING: u16 = 0x0004 | 0x0008 | 0x0020;

const PCI_STATUS: usize = 0x06;
const PCI_STATUS_CAP_LIST: u16 = 0x10;
const PCI_CAPABILITY_LIST: usize = 0x34;
const PCI_CAP_ID_EXP: u8 = 0x10;
const PCI_CFG_SPACE_SIZE: usize = 256;
const PCI_EXT_CAP_ID_ACS: u16 = 0x000d;
const PCI_ACS_CAP: usize = 0x04;
const PCI_ACS_CTRL: usize = 0x06;

/// What the PCI Express capability says the function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortType {
    Endpoint,
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    PcieToPciBridge,
    Other(u8),
}

impl PortType {
    fn from_flags(flags: u16) -> PortType {
        match ((flags >> 4) & 0xf) as u8 {
            0x0 | 0x1 | 0x9 => PortType::Endpoint,
            0x4 => PortType::RootPort,
            0x5 => PortType::SwitchUpstream,
            0x6 => PortType::SwitchDownstream,
            0x7 => PortType::PcieToPciBridge,
            t => PortType::Other(t),
        }
    }

    /// How a person calls it in a message.
    pub fn noun(self) -> &'static str {
        match self {
            PortType::RootPort => "root port",
            PortType::SwitchUpstream => "switch upstream port",
            PortType::SwitchDownstream => "switch port",
            PortType::PcieToPciBridge => "PCIe-to-PCI bridge",
            PortType::Endpoint | PortType::Other(_) => "bridge",
        }
    }
}

/// A function's ACS as its configuration space shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acs {
    /// The extended capability list has no ACS capability.
    Absent,
    /// Capability and control registers.
    Present { offset: u16, cap: u16, ctl: u16 },
    /// Only the first `len` bytes could be read although the function has
    /// more (64: a reader without CAP_SYS_ADMIN; 256 for a PCI Express
    /// function: the kernel cannot reach its extended space), so whether it
    /// has ACS is not known. Never taken for "no ACS".
    Truncated { len: usize },
    /// Config space reads all ones (`0xffffffff`): the function does not
    /// answer (surprise removal, powered off, DPC containment). Not "no ACS".
    NotResponding { at: u16 },
}

impl Acs {
    /// Control bits set that block or redirect peer-to-peer.
    pub fn blocking(self) -> u16 {
        match self {
            Acs::Present { ctl, .. } => ctl & ACS_P2P_BLOCKING,
            _ => 0,
        }
    }
}

/// The parts of configuration space the check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigSpace {
    pub port: Option<PortType>,
    pub acs: Acs,
    pub identity: Option<PciIdentity>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The PCI Express capability's port type, from the standard capability list.
fn port_type(b: &[u8]) -> Option<PortType> {
    express_flags(b).map(PortType::from_flags)
}

/// The PCI Express capability's flags register, from the standard capability list.
fn express_flags(b: &[u8]) -> Option<u16> {
    if u16_at(b, PCI_STATUS)? & PCI_STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = usize::from(*b.get(PCI_CAPABILITY_LIST)? & 0xfc);
    // At most 48 capabilities fit in 192 bytes: a loop guard, as the kernel's.
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        if *b.get(at)? == PCI_CAP_ID_EXP {
            return u16_at(b, at + 2);
        }
        at = usize::from(*b.get(at + 1)? & 0xfc);
    }
    None
}

/// Whether `b` is a read cut short by the kernel's rule for readers without
/// CAP_SYS_ADMIN (drivers/pci/pci-sysfs.c gives them the first 64 bytes):
/// what the agent's privileged helper can read in full.
pub fn unprivileged_read(b: &[u8]) -> bool {
    b.len() < PCI_CFG_SPACE_SIZE && u32_at(b, 0) != Some(u32::MAX)
}

/// The ACS capability, walking the extended capability list from 0x100.
fn acs(b: &[u8]) -> Acs {
    // A function that does not answer reads all ones, header included.
    if u32_at(b, 0) == Some(u32::MAX) {
        return Acs::NotResponding { at: 0 };
    }
    if b.len() < PCI_CFG_SPACE_SIZE {
        return Acs::Truncated { len: b.len() };
    }
    if b.len() == PCI_CFG_SPACE_SIZE {
        // A conventional PCI function has 256 bytes and no extended space (no
        // ACS); a PCI Express one has 4096, and 256 means they were not readable.
        return if port_type(b).is_some() {
            Acs::Truncated { len: b.len() }
        } else {
            Acs::Absent
        };
    }
    let mut at = PCI_CFG_SPACE_SIZE;
    // (4096 - 256) / 8 headers at most: the kernel's own loop guard.
    for _ in 0..480 {
        let Some(h) = u32_at(b, at) else {
            return Acs::Absent;
        };
        // An empty list reads as 0; all ones is a function that stopped
        // answering (or a hypervisor hiding it), not the end of the list.
        if h == 0 {
            return Acs::Absent;
        }
        if h == u32::MAX {
            return Acs::NotResponding { at: at as u16 };
        }
        if (h & 0xffff) as u16 == PCI_EXT_CAP_ID_ACS {
            return match (u16_at(b, at + PCI_ACS_CAP), u16_at(b, at + PCI_ACS_CTRL)) {
                (Some(cap), Some(ctl)) => Acs::Present {
                    offset: at as u16,
                    cap,
                    ctl,
                },
                _ => Acs::Truncated { len: b.len() },
            };
        }
        let next = ((h >> 20) & 0xffc) as usize;
        if next < PCI_CFG_SPACE_SIZE {
            return Acs::Absent;
        }
        at = next;
    }
    Acs::Absent
}

/// Reads what `parse_config` looks at and nothing more, through `read`
/// (offset, length → bytes): the 256-byte standard header, then the extended
/// capability headers one by one until ACS (and its two registers). Returns an
/// image of config space holding those bytes at their offsets, zero elsewhere:
/// 4096 bytes long when the extended space is readable, else as long as what
/// could be read (64 bytes for a reader without CAP_SYS_ADMIN, 256 for a
/// conventional PCI function), so `parse_config` says the same as on the whole.
pub fn read_config(
    read: &mut dyn FnMut(u64, usize) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<Vec<u8>> {
    let head = read(0, PCI_CFG_SPACE_SIZE)?;
    if head.len() < PCI_CFG_SPACE_SIZE {
        return Ok(head);
    }
    let mut image = head;
    image.resize(4096, 0);
    let mut at = PCI_CFG_SPACE_SIZE;
    for _ in 0..480 {
        let h = read(at as u64, 4)?;
        if h.len() < 4 {
            // No extended space (a 256-byte function): as long as it is.
            if at == PCI_CFG_SPACE_SIZE {
                image.truncate(PCI_CFG_SPACE_SIZE);
            }
            break;
        }
        image[at..at + 4].copy_from_slice(&h);
        let h = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if h == 0 || h == u32::MAX {
            break;
        }
        if (h & 0xffff) as u16 == PCI_EXT_CAP_ID_ACS {
            let regs = read((at + PCI_ACS_CAP) as u64, 4)?;
            image[at + PCI_ACS_CAP..at + PCI_ACS_CAP + regs.len()].copy_from_slice(&regs);
            break;
        }
        let next = ((h >> 20) & 0xffc) as usize;
        if next < PCI_CFG_SPACE_SIZE {
            break;
        }
        at = next;
    }
    Ok(image)
}

pub fn parse_config(bytes: &[u8]) -> ConfigSpace {
    ConfigSpace {
        port: port_type(bytes),
        acs: acs(bytes),
        identity: PciIdentity::of(bytes),
    }
}

/// `SrcValid+ ReqRedir+ CmpltRedir+`: the set control bits, as lspci names them.
pub fn acs_ctl_text(ctl: u16) -> String {
    let set: Vec<String> = ACS_BITS
        .iter()
        .filter(|(bit, _)| ctl & bit != 0)
        .map(|(_, name)| format!("{name}+"))
        .collect();
    if set.is_empty() {
        "none set".to_owned()
    } else {
        set.join(" ")
    }
}

/// A link speed in tenths of GT/s from sysfs `current_link_speed`
/// (`32.0 GT/s PCIe`, older kernels `8 GT/s`, `2.5 GT/s`); `None` for
/// `Unknown`, an empty file (no link: a virtual function, a root-bus device
/// in some VMs) or anything else.
pub fn parse_speed(s: &str) -> Option<u32> {
    let num = s.split_whitespace().next()?;
    if !s.contains("GT/s") {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, "0"));
    let int: u32 = int.parse().ok()?;
    let tenth: u32 = frac.get(..1).unwrap_or("0").parse().ok()?;
    Some(int * 10 + tenth)
}

/// A link width in lanes (`16`; some kernels print `x16`); `None` when empty
/// or 0 (no link trained).
pub fn parse_width(s: &str) -> Option<u32> {
    let t = s.trim().trim_start_matches('x');
    t.parse().ok().filter(|w| *w > 0)
}

/// `32.0` from 320 tenths.
pub fn speed_text(tenths: u32) -> String {
    format!("{}.{} GT/s", tenths / 10, tenths % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_config` asks for the header and the capability chain only, and
    /// `parse_config` says the same of its image as of the whole 4 KiB: on the
    /// real H200's function (no ACS), on a PLX port of the V100 sample (ACS at
    /// 0xf24 behind six capabilities), and as a reader without root sees them.
    #[test]
    fn reading_only_the_chain_gives_the_same_answer_with_far_fewer_bytes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for f in [
            "gpudirect/gpu-host/sys/devices/pci0000:00/0000:00:06.0/config",
            "nodes/v100/sys/bus/pci/devices/0000:04:08.0/config",
            "gpudirect/gpu-host/sys/devices/pci0000:00/0000:00:03.0/config",
        ] {
            let whole = std::fs::read(root.join(f)).unwrap();
            for visible in [whole.len(), 64] {
                let seen = &whole[..visible];
                let mut asked = 0;
                let mut read = |at: u64, len: usize| {
                    asked += len;
                    let at = (at as usize).min(seen.len());
                    Ok(seen[at..(at + len).min(seen.len())].to_vec())
                };
                let image = read_config(&mut read).unwrap();
                assert_eq!(
                    parse_config(&image),
                    parse_config(seen),
                    "{f} ({visible} bytes)"
                );
                assert!(asked <= 256 + 4 * 10, "{f}: {asked} bytes asked");
            }
        }
    }
}
