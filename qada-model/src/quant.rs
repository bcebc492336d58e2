//! ggml tensor types and their dequantization to f32.
//!
//! Block layouts (as llama.cpp's `ggml-common.h` defines them; `d`, `m`, `dmin` are f16):
//!
//! | type | values/block | bytes | layout | value |
//! |---|---|---|---|---|
//! | Q4_0 | 32 | 18 | d, qs[16] | `(q - 8) d`, low nibbles first 16, high nibbles last 16 |
//! | Q4_1 | 32 | 20 | d, m, qs[16] | `q d + m` |
//! | Q5_0 | 32 | 22 | d, qh[4], qs[16] | `(q - 16) d`, 5th bit from qh |
//! | Q5_1 | 32 | 24 | d, m, qh[4], qs[16] | `q d + m` |
//! | Q8_0 | 32 | 34 | d, qs[32] (i8) | `q d` |
//! | Q4_K | 256 | 144 | d, dmin, scales[12], qs[128] | `d sc q - dmin m` per 32 |
//! | Q5_K | 256 | 176 | d, dmin, scales[12], qh[32], qs[128] | as Q4_K with a 5th bit |
//! | Q6_K | 256 | 210 | ql[128], qh[64], scales[16] (i8), d | `d sc (q - 32)` per 16 |

use half::{bf16, f16};

/// A ggml tensor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// A type id this reader does not know.
    Unknown(u32),
}

impl GgmlType {
    /// The type of a ggml type id.
    pub fn from_u32(id: u32) -> Self {
        use GgmlType::*;
        match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            other => Unknown(other),
        }
    }

    /// `(values per block, bytes per block)`, `None` for unknown types.
    pub fn block(self) -> Option<(u64, u64)> {
        use GgmlType::*;
        Some(match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (256, 84),
            Q3_K => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            Unknown(_) => return None,
        })
    }

    /// Bytes of `n` values, `None` when `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let (per, bytes) = self.block()?;
        if n % per != 0 {
            return None;
        }
        (n / per).checked_mul(bytes)
    }

    /// True when [`dequantize`] handles this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K | Q6_K
        )
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GgmlType::Unknown(id) => write!(f, "unknown type id {id}"),
            other => write!(f, "{other:?}"),
        }
    }
}

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantize `out.len()` values of type `ty` from `bytes`.
///
/// Returns `false` (writing nothing) when the type is not supported or `bytes` does not hold
/// exactly `out.len()` values; callers turn that into an error naming the tensor.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    if !ty.can_dequantize() || ty.bytes_for(out.len() as u64) != Some(bytes.len() as u64) {
        return false;
    }
    let (per, size) = ty.block().expect("supported types have blocks");
    let (per, size) = (per as usize, size as usize);
    for (blk, y) in bytes.chunks_exact(size).zip(out.chunks_exact_mut(per)) {
        dequantize_block(ty, blk, y);
    }
    true
}

fn dequantize_block(ty: GgmlType, b: &[u8], y: &mut [f32]) {
    use GgmlType::*;
    match ty {
        F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        F16 => y[0] = f16_at(b, 0),
        BF16 => y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        Q4_0 => {
            let d = f16_at(b, 0);
            let qs = &b[2..18];
            for j in 0..16 {
                y[j] = ((qs[j] & 0x0f) as i32 - 8) as f32 * d;
                y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        Q4_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qs = &b[4..20];
            for j in 0..16 {
                y[j] = (qs[j] & 0x0f) as f32 * d + m;
                y[j + 16] = (qs[j] >> 4) as f32 * d + m;
            }
        }
        Q5_0 => {
            let d = f16_at(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let qs = &b[6..22];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = (((qs[j] & 0x0f) as u32 | h0) as i32 - 16) as f32 * d;
                y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
            }
        }
        Q5_1 => {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            let qs = &b[8..24];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = ((qs[j] & 0x0f) as u32 | h0) as f32 * d + m;
                y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
            }
        }
        Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                y[j] = (b[2 + j] as i8) as f32 * d;
            }
        }
        Q4_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let qs = &b[16..144];
            for (g, q) in qs.chunks_exact(32).enumerate() {
                let (sc1, m1) = scale_min_k4(2 * g, scales);
                let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
                let (d1, mm1, d2, mm2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
                let out = &mut y[g * 64..g * 64 + 64];
                for l in 0..32 {
                    out[l] = d1 * (q[l] & 0x0f) as f32 - mm1;
                    out[l + 32] = d2 * (q[l] >> 4) as f32 - mm2;
                }
            }
        }
        Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let scales = &b[4..16];
            let qh = &b[16..48];
            let qs = &b[48..176];
            for (g, q) in qs.chunks_exact(32).enumerate() {
                let (sc1, m1) = scale_min_k4(2 * g, scales);
                let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
                let (d1, mm1, d2, mm2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
                let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
                let out = &mut y[g * 64..g * 64 + 64];
                for l in 0..32 {
                    let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                    let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                    out[l] = d1 * ((q[l] & 0x0f) + h1) as f32 - mm1;
                    out[l + 32] = d2 * ((q[l] >> 4) + h2) as f32 - mm2;
                }
            }
        }
        Q6_K => {
            let ql = &b[0..128];
            let qh = &b[128..192];
            let sc = &b[192..208];
            let d = f16_at(b, 208);
            for n in 0..2 {
                let (ql, qh, sc) = (&ql[n * 64..], &qh[n * 32..], &sc[n * 8..]);
                let out = &mut y[n * 128..n * 128 + 128];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
        _ => unreachable!("checked by can_dequantize"),
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a K-quant block.
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        (
            ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4)) as f32,
            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f32,
        )
    }
}
