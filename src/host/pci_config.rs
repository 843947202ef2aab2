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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcsWrite {
    pub old: u16,
    pub new: u16,
}

fn is_bdf(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 16
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
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
