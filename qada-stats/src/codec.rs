//! A small versioned, checksummed container for qada's binary files (calibration moment
//! tables here, static criterion tables in qada-core).
//!
//! Layout, all integers little-endian:
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic, one per file kind |
//! | 4 | format version (u32) |
//! | 8 | payload length `n` (u64) |
//! | n | payload |
//! | 8 | FNV-1a 64 checksum of every byte before it |
//!
//! [`open`] checks magic, version, length and checksum before any field is parsed, so a
//! truncated file, a flipped byte or a file of another kind is refused with an error that says
//! which; the [`Decoder`] then bounds-checks every read against the payload.
//!
//! Public for the other crates' files (qada-core's static table): [`Format`], [`Encoder`],
//! [`open`], [`Decoder`], [`read_file`], [`write_file`]. The checksum and the string and array
//! primitives used by this crate's own files stay inside the crate.

use crate::error::Lossy;
use crate::{Result, StatsError};

/// The kind of a container file.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// Human name used in errors, e.g. `qada moment table`.
    pub name: &'static str,
    /// First 8 bytes of the file.
    pub magic: [u8; 8],
    /// The version this build writes and reads.
    pub version: u32,
}

const HEADER: usize = 8 + 4 + 8;
const TRAILER: usize = 8;

/// FNV-1a, 64 bits. Any single changed byte changes the hash (each step is a bijection of the
/// state), which is what a corruption check needs; it is not a cryptographic hash.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Writes a payload, then wraps it with header and checksum.
#[derive(Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An empty payload.
    pub fn new() -> Self {
        Encoder::default()
    }
    /// Append a u32.
    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Append a u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Append an f64.
    pub fn f64(&mut self, v: f64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Append f64 values (no length prefix: the reader must know the count).
    pub(crate) fn f64s(&mut self, v: &[f64]) {
        self.buf.reserve(v.len() * 8);
        for x in v {
            self.f64(*x);
        }
    }
    /// Append a string with a u32 length prefix.
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
    }
    /// The whole file: header, payload, checksum.
    pub fn finish(self, format: &Format) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.buf.len() + TRAILER);
        out.extend_from_slice(&format.magic);
        out.extend_from_slice(&format.version.to_le_bytes());
        out.extend_from_slice(&(self.buf.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.buf);
        let sum = fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }
}

/// Make the container's payload length and checksum agree with `bytes` (at least a header and
/// a trailer long; shorter input is returned as is). For fuzzing: mutated files get past the
/// container checks into the payload parser.
// Public only for the cargo-fuzz targets outside the workspace (fuzz/fuzz_targets/
// moment_table.rs and static_table.rs); hidden from the docs, not part of the API.
#[doc(hidden)]
pub fn reseal(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.len() < HEADER + TRAILER {
        return b;
    }
    let payload = (b.len() - HEADER - TRAILER) as u64;
    b[12..20].copy_from_slice(&payload.to_le_bytes());
    let end = b.len() - TRAILER;
    let sum = fnv1a64(&b[..end]);
    b[end..].copy_from_slice(&sum.to_le_bytes());
    b
}

/// Write a file, naming it in the error.
pub fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| StatsError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Read a whole file, naming it in the error.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| StatsError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Check the container, read the model signature it starts with and, with `expected`,
/// refuse a file made for another model: what every per-model table does first.
pub fn open_for_model<'a>(
    bytes: &'a [u8],
    format: &Format,
    expected: Option<&crate::ModelSignature>,
) -> Result<(Decoder<'a>, crate::ModelSignature)> {
    let mut dec = open(bytes, format)?;
    let signature = crate::ModelSignature::decode(&mut dec)?;
    if let Some(expected) = expected {
        signature.check_matches(expected)?;
    }
    Ok((dec, signature))
}

/// Check the container and return a decoder over its payload.
pub fn open<'a>(bytes: &'a [u8], format: &Format) -> Result<Decoder<'a>> {
    if bytes.len() < 8 || bytes[..8] != format.magic {
        let found = &bytes[..bytes.len().min(8)];
        return Err(StatsError::BadMagic {
            format: format.name,
            expected: Lossy(&format.magic).to_string(),
            found: Lossy(found).to_string(),
        });
    }
    if bytes.len() < HEADER {
        return Err(StatsError::Truncated {
            what: "header",
            offset: 8,
            needed: (HEADER - 8) as u64,
            available: bytes.len() - 8,
        });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != format.version {
        return Err(StatsError::UnsupportedVersion {
            format: format.name,
            found: version,
            supported: format.version,
        });
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let available = bytes.len() - HEADER;
    if len > available as u64 || available - len as usize != TRAILER {
        if len.saturating_add(TRAILER as u64) > available as u64 {
            return Err(StatsError::Truncated {
                what: "payload and checksum",
                offset: HEADER,
                needed: len.saturating_add(TRAILER as u64),
                available,
            });
        }
        return Err(StatsError::Invalid {
            what: "file length",
            offset: HEADER + len as usize + TRAILER,
            reason: format!(
                "{} bytes follow the checksum",
                available - len as usize - TRAILER
            ),
        });
    }
    let end = HEADER + len as usize;
    let stored = u64::from_le_bytes(bytes[end..end + 8].try_into().expect("8 bytes"));
    let computed = fnv1a64(&bytes[..end]);
    if stored != computed {
        return Err(StatsError::ChecksumMismatch {
            format: format.name,
            covered: end,
            stored,
            computed,
        });
    }
    Ok(Decoder {
        bytes,
        pos: HEADER,
        end,
    })
}

/// Bounds-checked reads from a payload. Offsets in errors are absolute file offsets.
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Decoder<'a> {
    /// Current absolute offset.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes left in the payload.
    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn take(&mut self, what: &'static str, n: u64) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(StatsError::Truncated {
                what,
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// Read a u32.
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(what, 4)?.try_into().expect("4 bytes"),
        ))
    }
    /// Read a u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(what, 8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Read an f64.
    pub fn f64(&mut self, what: &'static str) -> Result<f64> {
        Ok(f64::from_le_bytes(
            self.take(what, 8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Read `n` f64 values; the length is checked before anything is allocated.
    pub(crate) fn f64s(&mut self, what: &'static str, n: u64) -> Result<Vec<f64>> {
        let bytes = self.take(what, n.saturating_mul(8))?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }
    /// Read a string of at most `max_len` bytes written by [`Encoder::str`].
    pub(crate) fn str(&mut self, what: &'static str, max_len: u32) -> Result<String> {
        let at = self.pos;
        let len = self.u32(what)?;
        if len > max_len {
            return Err(StatsError::Invalid {
                what,
                offset: at,
                reason: format!("string of {len} bytes, at most {max_len} allowed"),
            });
        }
        let bytes = self.take(what, len as u64)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| StatsError::Invalid {
            what,
            offset: at + 4,
            reason: "not UTF-8".into(),
        })
    }
    /// Error unless the whole payload was read.
    pub fn finish(self) -> Result<()> {
        if self.pos != self.end {
            return Err(StatsError::Invalid {
                what: "payload",
                offset: self.pos,
                reason: format!("{} unread bytes at the end", self.end - self.pos),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Format = Format {
        name: "test file",
        magic: *b"QADATEST",
        version: 3,
    };

    fn sample() -> Vec<u8> {
        let mut e = Encoder::new();
        e.u32(7);
        e.str("llama");
        e.f64s(&[1.0, -2.5]);
        e.finish(&F)
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let mut d = open(&bytes, &F).unwrap();
        assert_eq!(d.u32("a").unwrap(), 7);
        assert_eq!(d.str("b", 16).unwrap(), "llama");
        assert_eq!(d.f64s("c", 2).unwrap(), vec![1.0, -2.5]);
        d.finish().unwrap();
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(
                open(&bytes[..n], &F).is_err(),
                "prefix of {n} bytes accepted"
            );
        }
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(open(&b, &F).is_err(), "flip at byte {i} bit {bit} accepted");
            }
        }
    }

    #[test]
    fn resealed_bytes_pass_the_container_checks() {
        let mut bytes = sample();
        bytes[20] ^= 0xff;
        bytes.push(7);
        assert!(open(&bytes, &F).is_err());
        assert!(open(&reseal(&bytes), &F).is_ok());
    }

    #[test]
    fn reads_past_the_payload_are_errors() {
        let bytes = sample();
        let mut d = open(&bytes, &F).unwrap();
        assert!(d.f64s("huge", u64::MAX).is_err());
        assert!(matches!(
            d.str("s", 2),
            Err(StatsError::Invalid { .. }) | Err(StatsError::Truncated { .. })
        ));
    }
}
