//! ggml tensor types and their dequantization to f32.
//!
//! Block layouts (as llama.cpp's `ggml-common.h` defines them; `d`, `m`, `dmin` are f16):
//!
//! | type | values/block | bytes | layout | value |
//! |---|---|---|---|---|
//! | Q4_0 | 32 | 18 | `d, qs[16]` | `(q - 8) d`, low nibbles first 16, high nibbles last 16 |
//! | Q4_1 | 32 | 20 | `d, m, qs[16]` | `q d + m` |
//! | Q5_0 | 32 | 22 | `d, qh[4], qs[16]` | `(q - 16) d`, 5th bit from qh |
//! | Q5_1 | 32 | 24 | `d, m, qh[4], qs[16]` | `q d + m` |
//! | Q8_0 | 32 | 34 | `d, qs[32] (i8)` | `q d` |
//! | Q4_K | 256 | 144 | `d, dmin, scales[12], qs[128]` | `d sc q - dmin m` per 32 |
//! | Q5_K | 256 | 176 | `d, dmin, scales[12], qh[32], qs[128]` | as Q4_K with a 5th bit |
//! | Q6_K | 256 | 210 | `ql[128], qh[64], scales[16] (i8), d` | `d sc (q - 32)` per 16 |
//!
//! Each layout is a `#[repr(C)]` struct ([`BlockQ4_0`], ..., [`BlockQ6K`]) that [`view`] reads
//! a row of bytes as, without copying; each block dequantizes itself ([`Dequantize`]), or
//! writes itself as unsigned integers with a scale and an offset per sub-block
//! ([`int_form_row`], prefill's int8 products).

mod blocks;
mod dequant;
mod int_form;

pub use blocks::{
    f16_value, view, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8_0, F16Bytes, QuantBlock,
};
pub use dequant::Dequantize;
pub(crate) use dequant::{k4_scales_mins, scale_min_k4};
pub use int_form::{int_form_row, int_form_shape};

use half::{bf16, f16};

/// A ggml tensor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 4-bit quants, one scale per 32.
    Q4_0,
    /// 4-bit quants, scale and minimum per 32.
    Q4_1,
    /// 5-bit quants, one scale per 32.
    Q5_0,
    /// 5-bit quants, scale and minimum per 32.
    Q5_1,
    /// 8-bit quants, one scale per 32.
    Q8_0,
    /// 8-bit quants with block sums (not dequantized here).
    Q8_1,
    /// 2-bit K-quant (not dequantized here).
    Q2_K,
    /// 3-bit K-quant (not dequantized here).
    Q3_K,
    /// 4-bit K-quant: 256 values, 6-bit scales and mins per 32.
    Q4_K,
    /// 5-bit K-quant: 256 values, 6-bit scales and mins per 32.
    Q5_K,
    /// 6-bit K-quant: 256 values, 8-bit scales per 16.
    Q6_K,
    /// 8-bit K-quant (not dequantized here).
    Q8_K,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
    /// bfloat16.
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
        if !n.is_multiple_of(per) {
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

/// Dequantize `out.len()` values of type `ty` from `bytes`.
///
/// Returns `false` (writing nothing) when the type is not supported or `bytes` does not hold
/// exactly `out.len()` values; callers turn that into an error naming the tensor.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    if !ty.can_dequantize() || ty.bytes_for(out.len() as u64) != Some(bytes.len() as u64) {
        return false;
    }
    use GgmlType::*;
    match ty {
        F32 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            true
        }
        F16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
            true
        }
        BF16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
            true
        }
        Q4_0 => dequantize_blocks::<BlockQ4_0>(bytes, out),
        Q4_1 => dequantize_blocks::<BlockQ4_1>(bytes, out),
        Q5_0 => dequantize_blocks::<BlockQ5_0>(bytes, out),
        Q5_1 => dequantize_blocks::<BlockQ5_1>(bytes, out),
        Q8_0 => dequantize_blocks::<BlockQ8_0>(bytes, out),
        Q4_K => dequantize_blocks::<BlockQ4K>(bytes, out),
        Q5_K => dequantize_blocks::<BlockQ5K>(bytes, out),
        Q6_K => dequantize_blocks::<BlockQ6K>(bytes, out),
        _ => false,
    }
}

/// Every block of `bytes`, viewed as `B`, into `out` (`false` when `bytes` is not whole blocks).
fn dequantize_blocks<B: Dequantize>(bytes: &[u8], out: &mut [f32]) -> bool {
    let Some(blocks) = view::<B>(bytes) else {
        return false;
    };
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(B::VALUES)) {
        b.dequantize(y);
    }
    true
}
