//! Writes to a PCI function's configuration space through sysfs
//! (`/sys/bus/pci/devices/<bdf>/config`, under `--root`): only the 16-bit ACS
//! control register, and only where the ACS capability still is where the
//! check read it. The kernel's `pci_write_config` (drivers/pci/pci-sysfs.c)
//! turns a 2-byte write at an even offset into one config word write, which
//! is what `setpci -s BDF ECAP_ACS+6.w=VALUE` does. Root only: the kernel
//! refuses writes to `config` without CAP_SYS_ADMIN.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Host;

/// `PCI_EXT_CAP_ID_ACS` and `PCI_ACS_CTRL` (include/uapi/linux/pci_regs.h).
const EXT_CAP_ID_ACS: u16 = 0x000d;
const ACS_CTRL: u64 = 6;

#[derive(Debug, thiserror::Error)]
pub enum PciConfigError {
    #[error("{bdf}: not a PCI function of this host ({path} is absent)")]
    NoDevice { bdf: String, path: PathBuf },
    #[error(
        "{bdf}: cannot open {path} for writing: {source} (the agent must run as root to write PCI config space)"
    )]
    Open {
        bdf: String,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{bdf}: cannot {what} {path} at 0x{offset:03x}: {source}")]
    Io {
        bdf: String,
        path: PathBuf,
        what: &'static str,
        offset: u64,
        source: io::Error,
    },
    #[error(
        "{bdf}: refusing to write: the ACS capability is not at 0x{offset:03x} any more (its header reads {header:#010x}); the device changed since it was read: run the check again"
    )]
    Moved {
        bdf: String,
        offset: u16,
        header: u32,
    },
    #[error(
        "{bdf}: refusing to write: it is {found} now, not the {expected} the check read; another device sits at that address: run the check again"
    )]
    Identity {
        bdf: String,
        found: String,
        expected: String,
    },
    #[error(
        "{bdf}: refusing to write: ACSCtl is {found:#06x} now, not the {expected:#06x} the check read (changed since): run the check again"
    )]
    Changed {
        bdf: String,
        found: u16,
        expected: u16,
    },
    #[error(
        "{bdf}: wrote ACSCtl {wrote:#06x} at 0x{offset:03x} but it reads back {read:#06x}: the device did not take the write"
    )]
    NotTaken {
        bdf: String,
        offset: u16,
        wrote: u16,
        read: u16,
    },
}

/// What was there and what is there now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AcsWrite {
    pub old: u16,
    pub new: u16,
}

/// Who a function is, from its standard header: what an ACS write re-checks
/// before it lands, and what `revert` compares with its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PciIdentity {
    pub vendor: u16,
    pub device: u16,
    /// Base class, subclass and programming interface (`0x060400`).
    pub class: u32,
    /// `PCI_EXP_FLAGS_TYPE` of its PCI Express capability (`None`: it has none).
    pub port_type: Option<u8>,
}

impl PciIdentity {
    /// From the first bytes of config space (the capability list needs the
    /// first 256); `None` when too short or all ones (a function that does
    /// not answer).
    pub fn of(b: &[u8]) -> Option<PciIdentity> {
        let u16_at = |at: usize| Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]));
        let vendor = u16_at(0)?;
        if vendor == 0xffff {
            return None;
        }
        // The PCI Express capability (PCI_CAP_ID_EXP 0x10) in the standard list.
        let mut port_type = None;
        if u16_at(0x06)? & 0x10 != 0 {
            let mut at = usize::from(*b.get(0x34)? & 0xfc);
            for _ in 0..48 {
                if at < 0x40 || at >= b.len() {
                    break;
                }
                if b[at] == 0x10 {
                    port_type = u16_at(at + 2).map(|f| ((f >> 4) & 0xf) as u8);
                    break;
                }
                at = usize::from(*b.get(at + 1)? & 0xfc);
            }
        }
        Some(PciIdentity {
            vendor,
            device: u16_at(2)?,
            class: u32::from(*b.get(0x09)?)
                | (u32::from(*b.get(0x0a)?) << 8)
                | (u32::from(*b.get(0x0b)?) << 16),
            port_type,
        })
    }

    /// `vendor 0x10b5 device 0x8747 class 0x060400 port type 6`.
    pub fn text(&self) -> String {
        let port = self
            .port_type
            .map_or(String::new(), |t| format!(" port type {t}"));
        format!(
            "vendor {:#06x} device {:#06x} class {:#08x}{port}",
            self.vendor, self.device, self.class
        )
    }
}

/// An ACS write as the check planned it: to whom, where, from what, to what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AcsRequest {
    pub bdf: String,
    pub identity: PciIdentity,
    /// The ACS capability's offset.
    pub offset: u16,
    /// What ACSCtl must hold for the write to go ahead.
    pub expect: u16,
    pub value: u16,
}

/// A function address as the kernel names it under /sys/bus/pci/devices:
/// `dddd:bb:dd.f`, lower-case hex (a domain of up to 8 digits: VMD's are
/// 0x10000 and up), nothing else: no path can hide in it.
pub fn is_bdf(s: &str) -> bool {
    let hex = |t: &str, n: std::ops::RangeInclusive<usize>| {
        n.contains(&t.len())
            && t.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    let Some((rest, func)) = s.rsplit_once('.') else {
        return false;
    };
    let parts: Vec<&str> = rest.split(':').collect();
    matches!(func.as_bytes(), [b'0'..=b'7'])
        && parts.len() == 3
        && hex(parts[0], 4..=8)
        && hex(parts[1], 2..=2)
        && hex(parts[2], 2..=2)
}

/// The whole of config space a reader gets (4096 bytes for one with
/// CAP_SYS_ADMIN), read in pieces as the kernel hands them out.
pub fn read_all(f: &File) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

impl Host {
    fn pci_config_path(&self, bdf: &str) -> PathBuf {
        self.path(&Path::new("/sys/bus/pci/devices").join(bdf).join("config"))
    }

    fn open_config(&self, bdf: &str, write: bool) -> Result<(File, PathBuf), PciConfigError> {
        let path = self.pci_config_path(bdf);
        if !is_bdf(bdf) || !path.exists() {
            return Err(PciConfigError::NoDevice {
                bdf: bdf.to_owned(),
                path,
            });
        }
        OpenOptions::new()
            .read(true)
            .write(write)
            .open(&path)
            .map(|f| (f, path.clone()))
            .map_err(|source| PciConfigError::Open {
                bdf: bdf.to_owned(),
                path,
                source,
            })
    }

    /// The ACS control register of `bdf`, its capability expected at `offset`.
    pub fn acs_ctl(&self, bdf: &str, offset: u16) -> Result<u16, PciConfigError> {
        let (f, path) = self.open_config(bdf, false)?;
        read_acs(&f, &path, bdf, offset)
    }

    /// The whole config space of `bdf` and who it is, as this process may
    /// read it; `Err` also when it is not there.
    pub fn pci_config_of(&self, bdf: &str) -> Result<Vec<u8>, PciConfigError> {
        let (f, path) = self.open_config(bdf, false)?;
        read_all(&f).map_err(|source| PciConfigError::Io {
            bdf: bdf.to_owned(),
            path,
            what: "read",
            offset: 0,
            source,
        })
    }

    /// `write_acs_ctl` after checking that `bdf` is still the function the
    /// check read (vendor, device, class, port type) and that ACSCtl still
    /// holds what it read: a write never lands on another device, nor over a
    /// value someone else set since.
    pub fn write_acs_checked(&self, r: &AcsRequest) -> Result<AcsWrite, PciConfigError> {
        let (f, path) = self.open_config(&r.bdf, false)?;
        let mut head = vec![0u8; 256];
        let n = f
            .read_at(&mut head, 0)
            .map_err(|source| PciConfigError::Io {
                bdf: r.bdf.clone(),
                path: path.clone(),
                what: "read",
                offset: 0,
                source,
            })?;
        head.truncate(n);
        let found = PciIdentity::of(&head);
        if found != Some(r.identity) {
            return Err(PciConfigError::Identity {
                bdf: r.bdf.clone(),
                found: found.map_or("not answering (all ones)".into(), |i| i.text()),
                expected: r.identity.text(),
            });
        }
        let now = read_acs(&f, &path, &r.bdf, r.offset)?;
        if now != r.expect {
            return Err(PciConfigError::Changed {
                bdf: r.bdf.clone(),
                found: now,
                expected: r.expect,
            });
        }
        drop(f);
        self.write_acs_ctl(&r.bdf, r.offset, r.value)
    }

    /// Writes `value` to the ACS control register of `bdf` (the capability at
    /// `offset`, checked first) and reads it back.
    pub fn write_acs_ctl(
        &self,
        bdf: &str,
        offset: u16,
        value: u16,
    ) -> Result<AcsWrite, PciConfigError> {
        let (f, path) = self.open_config(bdf, true)?;
        let old = read_acs(&f, &path, bdf, offset)?;
        let at = u64::from(offset) + ACS_CTRL;
        let io = |what, source| PciConfigError::Io {
            bdf: bdf.to_owned(),
            path: path.clone(),
            what,
            offset: at,
            source,
        };
        // One 2-byte pwrite: the kernel makes it one config word write.
        let n = f
            .write_at(&value.to_le_bytes(), at)
            .map_err(|e| io("write", e))?;
        if n != 2 {
            return Err(io(
                "write",
                io::Error::other(format!("{n} of 2 bytes written")),
            ));
        }
        let read = read_acs(&f, &path, bdf, offset)?;
        if read != value {
            return Err(PciConfigError::NotTaken {
                bdf: bdf.to_owned(),
                offset,
                wrote: value,
                read,
            });
        }
        Ok(AcsWrite { old, new: value })
    }
}

fn read_acs(f: &File, path: &Path, bdf: &str, offset: u16) -> Result<u16, PciConfigError> {
    let io = |what, at, source| PciConfigError::Io {
        bdf: bdf.to_owned(),
        path: path.to_owned(),
        what,
        offset: at,
        source,
    };
    let mut h = [0u8; 4];
    f.read_exact_at(&mut h, u64::from(offset))
        .map_err(|e| io("read", u64::from(offset), e))?;
    let header = u32::from_le_bytes(h);
    if offset < 0x100 || (header & 0xffff) as u16 != EXT_CAP_ID_ACS {
        return Err(PciConfigError::Moved {
            bdf: bdf.to_owned(),
            offset,
            header,
        });
    }
    let mut c = [0u8; 2];
    let at = u64::from(offset) + ACS_CTRL;
    f.read_exact_at(&mut c, at).map_err(|e| io("read", at, e))?;
    Ok(u16::from_le_bytes(c))
}

/// A positioned reader of one function's config space: `(offset, len)` → the
/// bytes there, fewer (or none) past what the kernel lets this reader see.
pub type ConfigReader<'a> = dyn FnMut(u64, usize) -> io::Result<Vec<u8>> + 'a;

impl Host {
    /// Reads parts of the config space at `p` (a `config` file under the
    /// root) through `walk`, which asks only for what it needs: the kernel turns
    /// every 4 bytes read into a config cycle (on a VM, a trap to the
    /// hypervisor), so a 4 KiB read is 1024 of them. `Ok(None)` without the file.
    pub fn read_pci_config<T>(
        &self,
        p: &Path,
        walk: impl FnOnce(&mut ConfigReader) -> io::Result<T>,
    ) -> Result<Option<T>, super::HostError> {
        let real = self.path(p);
        match File::open(&real) {
            Ok(f) => read_config_file(f, real, walk).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(super::HostError::Read { path: real, source }),
        }
    }
}

impl super::Dir<'_> {
    /// `Host::read_pci_config` of `rel` (`config`) under this directory.
    pub fn read_pci_config<T>(
        &self,
        rel: &str,
        walk: impl FnOnce(&mut ConfigReader) -> io::Result<T>,
    ) -> Result<Option<T>, super::HostError> {
        match self.open_file(rel)? {
            Some((f, real)) => read_config_file(f, real, walk).map(Some),
            None => Ok(None),
        }
    }
}

fn read_config_file<T>(
    f: File,
    real: PathBuf,
    walk: impl FnOnce(&mut ConfigReader) -> io::Result<T>,
) -> Result<T, super::HostError> {
    {
        let mut read = |at: u64, len: usize| -> io::Result<Vec<u8>> {
            let mut buf = vec![0u8; len];
            let mut got = 0;
            while got < len {
                match f.read_at(&mut buf[got..], at + got as u64)? {
                    0 => break,
                    n => got += n,
                }
            }
            buf.truncate(got);
            Ok(buf)
        };
        walk(&mut read).map_err(|source| super::HostError::Read { path: real, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(ctl: u16) -> (tempfile::TempDir, Host) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("sys/bus/pci/devices/0000:02:08.0");
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = vec![0u8; 4096];
        c[0xf24..0xf28].copy_from_slice(&(0x000d_u32 | (1 << 16)).to_le_bytes());
        c[0xf2a..0xf2c].copy_from_slice(&ctl.to_le_bytes());
        std::fs::write(dir.join("config"), c).unwrap();
        let h = Host::new(t.path());
        (t, h)
    }

    #[test]
    fn writes_exactly_the_two_bytes_of_acsctl() {
        let (t, h) = tree(0x001d);
        let before =
            std::fs::read(t.path().join("sys/bus/pci/devices/0000:02:08.0/config")).unwrap();
        assert_eq!(
            h.write_acs_ctl("0000:02:08.0", 0xf24, 0).unwrap(),
            AcsWrite {
                old: 0x001d,
                new: 0
            }
        );
        let after =
            std::fs::read(t.path().join("sys/bus/pci/devices/0000:02:08.0/config")).unwrap();
        let differ: Vec<usize> = (0..4096).filter(|i| before[*i] != after[*i]).collect();
        assert_eq!(differ, [0xf2a]);
        assert_eq!(h.acs_ctl("0000:02:08.0", 0xf24).unwrap(), 0);
    }

    #[test]
    fn refuses_where_the_capability_is_not() {
        let (_t, h) = tree(0x001d);
        let e = h.write_acs_ctl("0000:02:08.0", 0x148, 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("the ACS capability is not at 0x148 any more"),
            "{e}"
        );
        let e = h.write_acs_ctl("0000:09:00.0", 0xf24, 0).unwrap_err();
        assert!(matches!(e, PciConfigError::NoDevice { .. }), "{e}");
        let e = h.write_acs_ctl("../../etc", 0xf24, 0).unwrap_err();
        assert!(matches!(e, PciConfigError::NoDevice { .. }), "{e}");
    }
}
