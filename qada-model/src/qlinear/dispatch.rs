//! Which kernel multiplies a row of blocks by the activations.
//!
//! [`dot_row`] checks lengths once, views the row as typed blocks and picks a kernel from the
//! block type, the activations' precision and the [`Kernels`] the CPU runs. A new kernel is one
//! function in `avx2.rs`, one in `portable.rs` (or the generic [`portable::dot_f32`]) and one
//! arm in [`dot_row_checked`]. AVX-512 VNNI has kernels for Q5_K and Q6_K rows against the Q8_K
//! form (`avx512_int8.rs`) and for groups of eight rows of the 32-value types
//! (`avx512_rows.rs`, [`dot_group8_checked`]); everything else takes the AVX2 kernel.

use qada_stats::simd::{Avx2, Avx512Vnni};

use super::portable;
use super::{ActPrecision, Q8Acts};
use crate::quant::{
    view, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0,
    GgmlType, QuantBlock,
};
use crate::{ModelError, Result};

/// Which kernels run: the AVX2 ones only with a token that [`Avx2::detect`] made (the AVX-512
/// ones with one from [`Avx512Vnni::detect`]), so choosing them on a CPU without the features
/// is impossible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// AVX-512 VNNI for decoding's int8 products of eight rows (`avx512_rows.rs`) and for
    /// Q5_K and Q6_K rows against the Q8_K form (`avx512_int8.rs`), AVX2 for everything else;
    /// proven by the token.
    Avx512Vnni(Avx512Vnni),
    /// AVX2 + FMA + F16C, proven by the token.
    Avx2(Avx2),
    /// Plain Rust.
    Portable,
}

impl Kernels {
    /// The fastest kernels this CPU runs (AVX2 when `QADA_NO_AVX512` or `QADA_NO_VNNI` is set,
    /// portable when `QADA_PORTABLE` is); detected once per process.
    #[inline]
    pub fn detect() -> Kernels {
        if let Some(t) = Avx512Vnni::detect() {
            return Kernels::Avx512Vnni(t);
        }
        Avx2::detect().map_or(Kernels::Portable, Kernels::Avx2)
    }

    /// Every SIMD kernel set this CPU has (AVX2, and AVX-512 VNNI where detected), whatever
    /// [`Kernels::detect`] picks: what tests and benchmarks compare against the portable
    /// kernels, so that the AVX2 ones stay checked on AVX-512 hosts.
    pub fn every_simd() -> Vec<Kernels> {
        let mut ks = Vec::new();
        if let Some(t) = Avx2::detect() {
            ks.push(Kernels::Avx2(t));
        }
        if let Some(t) = Avx512Vnni::detect() {
            ks.push(Kernels::Avx512Vnni(t));
        }
        ks
    }

    /// The kernels for what has no AVX-512 kernel: AVX2 in place of AVX-512 VNNI.
    #[inline]
    fn without_avx512(self) -> Kernels {
        match self {
            Kernels::Avx512Vnni(t) => Kernels::Avx2(t.avx2()),
            k => k,
        }
    }
}

/// Bytes of a row of `ty` blocks holding `n` values; `what` names the row in the error.
///
/// # Errors
/// [`ModelError::UnsupportedType`] for a type without dequantization;
/// [`ModelError::Length`] when `n` is not a whole number of blocks.
pub(crate) fn row_bytes(ty: GgmlType, n: usize, what: &str) -> Result<usize> {
    if !ty.can_dequantize() {
        return Err(ModelError::UnsupportedType {
            name: what.into(),
            ty: ty.to_string(),
        });
    }
    match ty.bytes_for(n as u64) {
        Some(b) => Ok(b as usize),
        None => {
            let (per, _) = ty.block().unwrap_or((1, 1));
            Err(ModelError::Length {
                what: format!("values of a {what} of {ty} blocks of {per} values"),
                expected: format!("a multiple of {per}"),
                found: n,
            })
        }
    }
}

/// Check that `row_bytes` bytes of `ty` are whole blocks holding `n_acts` values.
pub(crate) fn check_row(ty: GgmlType, row_bytes: usize, n_acts: usize) -> Result<()> {
    let expected = self::row_bytes(ty, n_acts, "row")?;
    if expected != row_bytes {
        return Err(ModelError::Length {
            what: format!("bytes of a {ty} row against {n_acts} activations"),
            expected: expected.to_string(),
            found: row_bytes,
        });
    }
    Ok(())
}

/// Dot product of one row of `ty` blocks with the activations `a`, by the kernels `k`.
///
/// # Errors
/// [`ModelError::Length`] when `row` is not whole blocks of `ty` holding exactly `a.len()`
/// values; [`ModelError::UnsupportedType`] for a type without dequantization.
pub fn dot_row(ty: GgmlType, row: &[u8], a: &Q8Acts, k: Kernels) -> Result<f32> {
    check_row(ty, row.len(), a.len())?;
    Ok(dot_row_checked(ty, row, a, k))
}

/// A group of eight rows of `ty` (`group`, `row_bytes` a row, interleaved as `interleave.rs`
/// lays them out) times the activations `a` by the kernels `k`, where they multiply eight rows
/// of `ty` at once (AVX2 or AVX-512 VNNI, int8 activations, Q4_0, Q4_1, Q5_0 and Q8_0): each
/// row the same bits as [`dot_row_checked`] gives it alone. `None` elsewhere. The caller
/// checked `(ty, row_bytes, a.len())` as for [`dot_row_checked`].
#[inline]
pub(crate) fn dot_group8_checked(
    ty: GgmlType,
    group: &[u8],
    row_bytes: usize,
    a: &Q8Acts,
    k: Kernels,
) -> Option<[f32; 8]> {
    debug_assert!(group.len() == 8 * row_bytes && check_row(ty, row_bytes, a.len()).is_ok());
    #[cfg(target_arch = "x86_64")]
    {
        use super::{avx2_rows as avx2, avx512_rows as avx512};
        if a.precision != ActPrecision::Int8 {
            return None;
        }
        // Every arm: `k` is `Kernels::Avx512Vnni` only with a token from `Avx512Vnni::detect`
        // (the CPU runs AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI) and `Kernels::Avx2`
        // only with one from `Avx2::detect`; the caller's check made the group eight rows of
        // whole blocks of exactly `a.len()` values, and `a` is int8 (`Q8Acts::quantize` sized
        // its buffers).
        // SAFETY (each arm): as above.
        unsafe {
            match (ty, k) {
                (GgmlType::Q4_0, Kernels::Avx512Vnni(_)) => {
                    Some(avx512::group8_nibbles::<BlockQ4_0>(group, a))
                }
                (GgmlType::Q4_1, Kernels::Avx512Vnni(_)) => {
                    Some(avx512::group8_nibbles::<BlockQ4_1>(group, a))
                }
                (GgmlType::Q5_0, Kernels::Avx512Vnni(_)) => {
                    Some(avx512::group8_nibbles::<BlockQ5_0>(group, a))
                }
                (GgmlType::Q8_0, Kernels::Avx512Vnni(_)) => Some(avx512::group8_q8_0(group, a)),
                (GgmlType::Q4_0, Kernels::Avx2(_)) => {
                    Some(avx2::group8_nibbles::<BlockQ4_0>(group, a))
                }
                (GgmlType::Q4_1, Kernels::Avx2(_)) => {
                    Some(avx2::group8_nibbles::<BlockQ4_1>(group, a))
                }
                (GgmlType::Q5_0, Kernels::Avx2(_)) => {
                    Some(avx2::group8_nibbles::<BlockQ5_0>(group, a))
                }
                (GgmlType::Q8_0, Kernels::Avx2(_)) => Some(avx2::group8_q8_0(group, a)),
                _ => None,
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ty, group, row_bytes, a, k);
        None
    }
}

/// `row` as blocks of `B`; the caller checked the length.
#[inline]
fn blocks<B: QuantBlock>(row: &[u8]) -> &[B] {
    let v = view::<B>(row);
    debug_assert!(v.is_some(), "{} row of {} bytes", B::TYPE, row.len());
    v.unwrap_or(&[])
}

/// [`dot_row`] after [`check_row`] passed for `(ty, row.len(), a.len())`.
#[inline]
pub(crate) fn dot_row_checked(ty: GgmlType, row: &[u8], a: &Q8Acts, k: Kernels) -> f32 {
    debug_assert!(check_row(ty, row.len(), a.len()).is_ok());
    let int8 = a.precision == ActPrecision::Int8;
    // K-quant rows against int8 activations take the Q8_K form (one scale per 256 values)
    // when `a` has it: always, unless built `without_q8k` (a K-quant row holds whole 256-blocks).
    let q8k = int8 && !a.k.is_empty();
    // The AVX-512 arms: `k` is `Kernels::Avx512Vnni` only with a token from
    // `Avx512Vnni::detect` (the CPU runs AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI);
    // `check_row` made `row` whole blocks of exactly `a.len()` values and `Q8Acts::quantize`
    // gave the Q8_K form `a.k` (not empty) one block per 256 of them.
    #[cfg(target_arch = "x86_64")]
    match (ty, k, int8) {
        (GgmlType::Q5_K, Kernels::Avx512Vnni(_), true) if q8k => {
            // SAFETY: see above: features proven, `a.k` one Q8_K block per row block.
            return unsafe { super::avx512_int8::dot_q5_k_q8k(blocks(row), &a.k) };
        }
        (GgmlType::Q6_K, Kernels::Avx512Vnni(_), true) if q8k => {
            // SAFETY: see above: features proven, `a.k` one Q8_K block per row block.
            return unsafe { super::avx512_int8::dot_q6_k_q8k(blocks(row), &a.k) };
        }
        _ => {}
    }
    let k = k.without_avx512();
    // The AVX2 arms: `k` is `Kernels::Avx2` only with a token from `Avx2::detect`, so the CPU
    // runs AVX2, FMA and F16C; `check_row` made `row` whole blocks of exactly `a.len()` values,
    // and `Q8Acts::quantize` sizes every buffer of `a` for `a.len()` values (`q` when int8,
    // the Q8_K form `a.k` with one block per 256 values when not empty).
    match (ty, k, int8) {
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_1, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f_nib` and `sums` cover the row's blocks.
            unsafe { super::avx2::dot_q4_1_f32(blocks(row), &a.f_nib, &a.sums) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q8_0, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 32 values per block.
            unsafe { super::avx2::dot_q8_0_f32(blocks(row), &a.f) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_0, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 32 values per block.
            unsafe { super::avx2::dot_q4_0_f32(blocks(row), &a.f) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q5_0, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 32 values per block.
            unsafe { super::avx2::dot_q5_0_f32(blocks(row), &a.f) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_K, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 256 values per block and `sums`
            // one sum per 32 of them.
            unsafe { super::avx2::dot_q4_k_f32(blocks(row), &a.f, &a.sums) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q5_K, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 256 values per block and `sums`
            // one sum per 32 of them.
            unsafe { super::avx2::dot_q5_k_f32(blocks(row), &a.f, &a.sums) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, Kernels::Avx2(_), false) => {
            // SAFETY: see above: features proven, `f` holds 256 values per block.
            unsafe { super::avx2::dot_q6_k_f32(blocks(row), &a.f) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_1, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants per block.
            unsafe { super::avx2_rows::one_row::<BlockQ4_1>(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_0, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants per block.
            unsafe { super::avx2_rows::one_row::<BlockQ4_0>(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q8_0, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants per block.
            unsafe { super::avx2_rows::one_row_q8_0(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q5_0, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants per block.
            unsafe { super::avx2_rows::one_row::<BlockQ5_0>(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_K, Kernels::Avx2(_), true) if q8k => {
            // SAFETY: see above: features proven, `a.k` one Q8_K block per row block.
            unsafe { super::avx2_int8::dot_q4_k_q8k(blocks(row), &a.k) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q5_K, Kernels::Avx2(_), true) if q8k => {
            // SAFETY: see above: features proven, `a.k` one Q8_K block per row block.
            unsafe { super::avx2_int8::dot_q5_k_q8k(blocks(row), &a.k) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, Kernels::Avx2(_), true) if q8k => {
            // SAFETY: see above: features proven, `a.k` one Q8_K block per row block.
            unsafe { super::avx2_int8::dot_q6_k_q8k(blocks(row), &a.k) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_K, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants and one sum per 32
            // values.
            unsafe { super::avx2_int8::dot_q4_k(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q5_K, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants and one sum per 32
            // values.
            unsafe { super::avx2_int8::dot_q5_k(blocks(row), a) }
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, Kernels::Avx2(_), true) => {
            // SAFETY: see above: features proven, `a` int8 with 32 quants per block.
            unsafe { super::avx2_int8::dot_q6_k(blocks(row), a) }
        }
        (GgmlType::Q4_1, _, true) => portable::dot_q4_1(blocks(row), a),
        (GgmlType::Q4_0, _, true) => portable::dot_q4_0(blocks(row), a),
        (GgmlType::Q8_0, _, true) => portable::dot_q8_0(blocks(row), a),
        (GgmlType::Q5_0, _, true) => portable::dot_q5_0(blocks(row), a),
        (GgmlType::Q4_K, _, true) if q8k => portable::dot_q4_k_q8k(blocks(row), &a.k),
        (GgmlType::Q5_K, _, true) if q8k => portable::dot_q5_k_q8k(blocks(row), &a.k),
        (GgmlType::Q6_K, _, true) if q8k => portable::dot_q6_k_q8k(blocks(row), &a.k),
        (GgmlType::Q4_K, _, true) => portable::dot_q4_k(blocks(row), a),
        (GgmlType::Q5_K, _, true) => portable::dot_q5_k(blocks(row), a),
        (GgmlType::Q6_K, _, true) => portable::dot_q6_k(blocks(row), a),
        (GgmlType::Q4_0, ..) => portable::dot_f32::<BlockQ4_0>(blocks(row), &a.f),
        (GgmlType::Q4_1, ..) => portable::dot_f32::<BlockQ4_1>(blocks(row), &a.f),
        (GgmlType::Q5_0, ..) => portable::dot_f32::<BlockQ5_0>(blocks(row), &a.f),
        (GgmlType::Q5_1, ..) => portable::dot_f32::<BlockQ5_1>(blocks(row), &a.f),
        (GgmlType::Q8_0, ..) => portable::dot_f32::<BlockQ8_0>(blocks(row), &a.f),
        (GgmlType::Q4_K, ..) => portable::dot_f32::<BlockQ4K>(blocks(row), &a.f),
        (GgmlType::Q5_K, ..) => portable::dot_f32::<BlockQ5K>(blocks(row), &a.f),
        (GgmlType::Q6_K, ..) => portable::dot_f32::<BlockQ6K>(blocks(row), &a.f),
        (ty, ..) => portable::dot_scalar_f32(ty, row, &a.f),
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::qlinear::interleave::interleave;
    use proptest::prelude::*;

    proptest! {
        /// Each kernel gives each row of an interleaved group the bits `dot_row` gives the
        /// row-major row alone.
        #[test]
        fn every_group_kernel_gives_each_row_the_bits_of_the_row_alone(
            t in 0usize..4, nb in 1usize..6, seed in any::<u64>(), scales in any::<[u16; 16]>(),
        ) {
            let ty = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0][t];
            let block = ty.block().unwrap().1 as usize;
            let row_bytes = nb * block;
            let mut s = seed | 1;
            let mut data: Vec<u8> = (0..8 * row_bytes)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            // finite scales (and Q4_1 minimums) between -2 and 2
            for (i, blk) in data.chunks_exact_mut(block).enumerate() {
                for (f, at) in [0, 2].into_iter().enumerate().take(if ty == GgmlType::Q4_1 { 2 } else { 1 }) {
                    let v = (scales[(2 * i + f) % 16] % 4001) as f32 / 1000.0 - 2.0;
                    blk[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
            let x: Vec<f32> = (0..32 * nb).map(|j| ((j * 37 % 101) as f32 - 50.0) / (7.0 + nb as f32)).collect();
            let mut a = Q8Acts::new(ActPrecision::Int8);
            a.quantize(&x);
            let mut group = data.clone();
            prop_assert_eq!(interleave(ty, &mut group, row_bytes, 8), 8);
            for k in Kernels::every_simd() {
                let got = dot_group8_checked(ty, &group, row_bytes, &a, k);
                prop_assert!(got.is_some(), "{:?} {}", k, ty);
                for (i, v) in got.unwrap().iter().enumerate() {
                    let alone = dot_row(ty, &data[i * row_bytes..(i + 1) * row_bytes], &a, k).unwrap();
                    prop_assert_eq!(v.to_bits(), alone.to_bits(), "{:?} {} row {}", k, ty, i);
                }
            }
        }
    }
}
