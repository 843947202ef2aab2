//! A small gzip reader for `/proc/config.gz` (RFC 1952 around RFC 1951
//! DEFLATE), so the kernel's configuration can be read on hosts without
//! `/boot/config-*` and without another dependency. Decoding only, bounded
//! output, every malformed input an error (never a panic).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid gzip stream: {0}")]
pub struct GzipError(&'static str);

type R<T> = Result<T, GzipError>;

/// The output limit: kernel configs are ~250 KiB.
const MAX_OUT: usize = 16 << 20;

struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    bit: u32,
    nbits: u32,
}

impl Bits<'_> {
    fn need(&mut self, n: u32) -> R<u32> {
        while self.nbits < n {
            let b = *self.data.get(self.pos).ok_or(GzipError("truncated"))?;
            self.pos += 1;
            self.bit |= u32::from(b) << self.nbits;
            self.nbits += 8;
        }
        let v = self.bit & ((1u32 << n) - 1);
        self.bit >>= n;
        self.nbits -= n;
        Ok(v)
    }
}

/// Canonical Huffman decoding table (counts per length, symbols by code).
struct Huffman {
    count: [u16; 16],
    symbol: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> R<Huffman> {
        let mut count = [0u16; 16];
        for &l in lengths {
            count[usize::from(l)] += 1;
        }
        let mut offs = [0u16; 16];
        for i in 1..15 {
            offs[i + 1] = offs[i] + count[i];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbol[usize::from(offs[usize::from(l)])] = s as u16;
                offs[usize::from(l)] += 1;
            }
        }
        count[0] = 0;
        Ok(Huffman { count, symbol })
    }

    fn decode(&self, b: &mut Bits) -> R<u16> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= b.need(1)? as i32;
            let count = i32::from(self.count[len]);
            if code - count < first {
                return self
                    .symbol
                    .get((index + (code - first)) as usize)
                    .copied()
                    .ok_or(GzipError("bad code"));
            }
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        Err(GzipError("bad code"))
    }
}

const LBASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEXT: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DBASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DEXT: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

fn codes(b: &mut Bits, out: &mut Vec<u8>, lit: &Huffman, dist: &Huffman) -> R<()> {
    loop {
        let sym = lit.decode(b)?;
        match sym {
            0..=255 => out.push(sym as u8),
            256 => return Ok(()),
            _ => {
                let i = usize::from(sym - 257);
                let len = usize::from(*LBASE.get(i).ok_or(GzipError("bad length"))?)
                    + b.need(u32::from(LEXT[i]))? as usize;
                let d = usize::from(dist.decode(b)?);
                let back = usize::from(*DBASE.get(d).ok_or(GzipError("bad distance"))?)
                    + b.need(u32::from(DEXT[d]))? as usize;
                if back > out.len() {
                    return Err(GzipError("distance too far back"));
                }
                if out.len() + len > MAX_OUT {
                    return Err(GzipError("output too large"));
                }
                let start = out.len() - back;
                for k in 0..len {
                    out.push(out[start + k]);
                }
            }
        }
    }
}

fn dynamic(b: &mut Bits) -> R<(Huffman, Huffman)> {
    let nlen = b.need(5)? as usize + 257;
    let ndist = b.need(5)? as usize + 1;
    let ncode = b.need(4)? as usize + 4;
    const ORDER: [usize; 19] = [
        16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
    ];
    let mut lengths = [0u8; 19];
    for &o in &ORDER[..ncode] {
        lengths[o] = b.need(3)? as u8;
    }
    let lencode = Huffman::new(&lengths)?;
    let mut l = vec![0u8; nlen + ndist];
    let mut i = 0;
    while i < nlen + ndist {
        let sym = lencode.decode(b)?;
        let (val, rep) = match sym {
            0..=15 => (sym as u8, 1),
            16 => {
                let prev = *l
                    .get(i.wrapping_sub(1))
                    .ok_or(GzipError("repeat with no length"))?;
                (prev, 3 + b.need(2)? as usize)
            }
            17 => (0, 3 + b.need(3)? as usize),
            _ => (0, 11 + b.need(7)? as usize),
        };
        if i + rep > nlen + ndist {
            return Err(GzipError("too many lengths"));
        }
        l[i..i + rep].fill(val);
        i += rep;
    }
    Ok((Huffman::new(&l[..nlen])?, Huffman::new(&l[nlen..])?))
}

fn fixed() -> R<(Huffman, Huffman)> {
    let mut l = [0u8; 288];
    l[..144].fill(8);
    l[144..256].fill(9);
    l[256..280].fill(7);
    l[280..].fill(8);
    Ok((Huffman::new(&l)?, Huffman::new(&[5u8; 30])?))
}

/// The decompressed bytes of a gzip file (its first member).
pub fn gunzip(data: &[u8]) -> R<Vec<u8>> {
    if data.len() < 18 || data[0] != 0x1f || data[1] != 0x8b || data[2] != 8 {
        return Err(GzipError("no gzip header"));
    }
    let flags = data[3];
    let mut pos = 10;
    if flags & 4 != 0 {
        let xlen = usize::from(u16::from_le_bytes([data[pos], data[pos + 1]]));
        pos += 2 + xlen;
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            let end = data
                .get(pos..)
                .and_then(|d| d.iter().position(|&c| c == 0))
                .ok_or(GzipError("truncated header"))?;
            pos += end + 1;
        }
    }
    if flags & 2 != 0 {
        pos += 2;
    }
    let mut b = Bits {
        data: data.get(pos..).ok_or(GzipError("truncated header"))?,
        pos: 0,
        bit: 0,
        nbits: 0,
    };
    let mut out = Vec::new();
    loop {
        let last = b.need(1)?;
        match b.need(2)? {
            0 => {
                b.bit = 0;
                b.nbits = 0;
                let d = b.data;
                let hdr = d.get(b.pos..b.pos + 4).ok_or(GzipError("truncated"))?;
                let len = usize::from(u16::from_le_bytes([hdr[0], hdr[1]]));
                b.pos += 4;
                let block = d.get(b.pos..b.pos + len).ok_or(GzipError("truncated"))?;
                out.extend_from_slice(block);
                b.pos += len;
            }
            1 => {
                let (l, d) = fixed()?;
                codes(&mut b, &mut out, &l, &d)?;
            }
            2 => {
                let (l, d) = dynamic(&mut b)?;
                codes(&mut b, &mut out, &l, &d)?;
            }
            _ => return Err(GzipError("bad block type")),
        }
        if out.len() > MAX_OUT {
            return Err(GzipError("output too large"));
        }
        if last == 1 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf 'CONFIG_PCI=y\n# CONFIG_PCI_P2PDMA is not set\n' | gzip -9n` (GNU gzip 1.12).
    #[test]
    fn reads_real_gzip_output_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let text = "CONFIG_PCI=y\n# CONFIG_PCI_P2PDMA is not set\nCONFIG_PCI=y\n".repeat(400);
        let plain = dir.path().join("c");
        std::fs::write(&plain, &text).unwrap();
        for level in ["-1", "-9"] {
            let out = std::process::Command::new("gzip")
                .args([level, "-n", "-c"])
                .arg(&plain)
                .output()
                .expect("gzip is installed");
            assert_eq!(gunzip(&out.stdout).unwrap(), text.as_bytes());
            // Every truncation is an error, never a panic.
            for cut in [0, 10, 20, out.stdout.len() / 2] {
                assert!(gunzip(&out.stdout[..cut]).is_err());
            }
        }
        assert!(gunzip(b"CONFIG_PCI=y\n not gzip at all").is_err());
    }
}
