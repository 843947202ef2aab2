//! The `.modinfo` section of a kernel module (`.ko`, `.ko.xz`, `.ko.zst`), read
//! directly from the ELF file: no `modinfo` binary, so it works on any root.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModinfoError {
    #[error("cannot decompress: {0}")]
    Decompress(String),
    #[error("not an ELF64 little-endian file")]
    NotElf,
    #[error("truncated or corrupt ELF ({0})")]
    Corrupt(&'static str),
    #[error("no .modinfo section")]
    NoModinfo,
    #[error("listed in modules.dep but the file is missing (run depmod)")]
    Absent,
}

/// The key=value pairs of `.modinfo` (the first value of repeated keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modinfo(pub BTreeMap<String, String>);

impl Modinfo {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The kernel release a module was built for: the first word of `vermagic`.
    pub fn built_for(&self) -> Option<&str> {
        self.get("vermagic")?.split_whitespace().next()
    }
}

/// Decompresses by file name (`.xz`, `.zst`), then parses.
pub fn parse_file(name: &str, bytes: &[u8]) -> Result<Modinfo, ModinfoError> {
    if name.ends_with(".xz") {
        let mut out = Vec::new();
        lzma_rs::xz_decompress(&mut std::io::Cursor::new(bytes), &mut out)
            .map_err(|e| ModinfoError::Decompress(format!("xz: {e:?}")))?;
        parse_elf(&out)
    } else if name.ends_with(".zst") {
        use std::io::Read;
        let mut out = Vec::new();
        ruzstd::decoding::StreamingDecoder::new(bytes)
            .map_err(|e| ModinfoError::Decompress(format!("zstd: {e}")))?
            .read_to_end(&mut out)
            .map_err(|e| ModinfoError::Decompress(format!("zstd: {e}")))?;
        parse_elf(&out)
    } else {
        parse_elf(bytes)
    }
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, ModinfoError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(ModinfoError::Corrupt("header out of bounds"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, ModinfoError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
        .ok_or(ModinfoError::Corrupt("header out of bounds"))
}

fn u64_at(b: &[u8], at: usize) -> Result<usize, ModinfoError> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .and_then(|v| usize::try_from(v).ok())
        .ok_or(ModinfoError::Corrupt("header out of bounds"))
}

/// A section's bytes, bounds-checked.
fn section(b: &[u8], shoff: usize, entsize: usize, i: usize) -> Result<(u32, &[u8]), ModinfoError> {
    let h = i
        .checked_mul(entsize)
        .and_then(|o| o.checked_add(shoff))
        .ok_or(ModinfoError::Corrupt("section header offset"))?;
    let name = u32_at(b, h)?;
    let offset = u64_at(b, h + 24)?;
    let size = u64_at(b, h + 32)?;
    let end = offset
        .checked_add(size)
        .ok_or(ModinfoError::Corrupt("section size"))?;
    let data = b
        .get(offset..end)
        .ok_or(ModinfoError::Corrupt("section beyond the end of the file"))?;
    Ok((name, data))
}

pub fn parse_elf(b: &[u8]) -> Result<Modinfo, ModinfoError> {
    if b.len() < 64 || b[..4] != *b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return Err(ModinfoError::NotElf);
    }
    let shoff = u64_at(b, 0x28)?;
    let entsize = usize::from(u16_at(b, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0x3c)?);
    let shstrndx = usize::from(u16_at(b, 0x3e)?);
    if entsize < 40 || shstrndx >= shnum {
        return Err(ModinfoError::Corrupt("section header table"));
    }
    let (_, names) = section(b, shoff, entsize, shstrndx)?;
    for i in 0..shnum {
        let (name, data) = section(b, shoff, entsize, i)?;
        let name = names
            .get(name as usize..)
            .and_then(|s| s.split(|c| *c == 0).next())
            .ok_or(ModinfoError::Corrupt("section name"))?;
        if name == b".modinfo" {
            let mut map = BTreeMap::new();
            for entry in data.split(|c| *c == 0).filter(|e| !e.is_empty()) {
                let entry = String::from_utf8_lossy(entry);
                if let Some((k, v)) = entry.split_once('=') {
                    map.entry(k.to_owned()).or_insert_with(|| v.to_owned());
                }
            }
            return Ok(Modinfo(map));
        }
    }
    Err(ModinfoError::NoModinfo)
}

/// A minimal ELF64 file whose only content is a `.modinfo` section: what the
/// tests write as `.ko` files (no binary of unknown origin is checked in).
pub fn elf_with_modinfo(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut modinfo = Vec::new();
    for (k, v) in entries {
        modinfo.extend_from_slice(format!("{k}={v}").as_bytes());
        modinfo.push(0);
    }
    let shstrtab = b"\0.modinfo\0.shstrtab\0".to_vec();
    let modinfo_off = 64;
    let shstrtab_off = modinfo_off + modinfo.len();
    let shoff = (shstrtab_off + shstrtab.len()).div_ceil(8) * 8;
    let mut f = vec![0u8; shoff];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2; // 64-bit
    f[5] = 1; // little-endian
    f[6] = 1; // ELF version
    f[0x10..0x12].copy_from_slice(&1u16.to_le_bytes()); // ET_REL, as modules are
    f[0x12..0x14].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    f[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
    f[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
    f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
    f[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
    f[modinfo_off..shstrtab_off].copy_from_slice(&modinfo);
    f[shstrtab_off..shstrtab_off + shstrtab.len()].copy_from_slice(&shstrtab);
    let header = |name: u32, ty: u32, off: usize, size: usize| {
        let mut h = vec![0u8; 64];
        h[0..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&ty.to_le_bytes());
        h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
        h
    };
    f.extend(header(0, 0, 0, 0));
    f.extend(header(1, 1, modinfo_off, modinfo.len()));
    f.extend(header(10, 3, shstrtab_off, shstrtab.len()));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_of_a_written_module() {
        let ko = elf_with_modinfo(&[
            ("version", "24.10-1.1.4"),
            ("srcversion", "ABCDEF0123456789"),
            (
                "vermagic",
                "6.8.0-51-generic SMP preempt mod_unload modversions",
            ),
        ]);
        let m = parse_file("mlx5_ib.ko", &ko).unwrap();
        assert_eq!(m.built_for(), Some("6.8.0-51-generic"));
        assert_eq!(m.get("version"), Some("24.10-1.1.4"));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(parse_elf(b"not an elf"), Err(ModinfoError::NotElf));
        let mut ko = elf_with_modinfo(&[("vermagic", "6.1.0")]);
        ko.truncate(ko.len() - 100);
        assert!(matches!(parse_elf(&ko), Err(ModinfoError::Corrupt(_))));
        assert!(parse_file("x.ko.xz", b"garbage").is_err());
        assert!(parse_file("x.ko.zst", b"garbage").is_err());
        // Offsets that point far past the end.
        let mut ko = elf_with_modinfo(&[("vermagic", "6.1.0")]);
        ko[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_elf(&ko).is_err());
    }
}
