//! [`Elem`]: the element types of cached rows (f32, f16, q8_0 blocks) and their kernels, with
//! the safe entry points that check shapes once and choose between the AVX-512, the AVX2 and
//! the portable kernels (AVX-512's block kernels give the AVX2 ones' bits).
//!
//! An element holds [`Elem::VALUES`] values: 1 for f32 and f16, 32 for a [`Q8Block`]
//! (`x_i ~ d q_i`). Lengths `d`, `h`, `n` below count values and rows; a row of `d` values is
//! `d / VALUES` elements.
//!
//! Contract of the block kernels (checked at entry, an error otherwise): `d > 0`, `d` a
//! multiple of `VALUES`, `queries` (or `acc`) holds `h` whole rows of `d` and `keys` (or
//! `values`) `n` whole rows of `d` values, and `out` (or `weights`) holds at least `h * n`
//! entries, head-major (`[j * n + i]`).

#[cfg(target_arch = "x86_64")]
use qada_stats::simd::{Avx2, Avx512};
use qada_stats::{f16, Q8Block};

use super::portable::{
    axpy_f16, axpy_f32, axpy_q8, block_accumulate_portable, block_scores_portable, dot, dot_f16,
    dot_q8,
};
use crate::{CoreError, Result};

/// Element types of cached rows: the dot product with an f32 query and the update
/// `acc += w * row`.
///
/// The two block kernels serve the query heads of one GQA group at once: every key and value
/// row is read (and converted) once for all of them. Their shapes are checked once per call
/// (see the module's contract); `dot` and `axpy` work over the common prefix of their slices
/// (in whole elements: for q8, the whole blocks that both cover).
pub trait Elem: Copy + Send + Sync {
    /// Values per element: a row of `d` values is `d / VALUES` elements.
    const VALUES: usize = 1;
    /// `q . row`, over the common prefix of `q` and `row`.
    fn dot(q: &[f32], row: &[Self]) -> f32;
    /// `acc += w * row`, over the common prefix of `acc` and `row`.
    fn axpy(acc: &mut [f32], w: f32, row: &[Self]);

    /// Scores of `h = queries.len() / d` heads against the `n = keys.len() / d` rows of a block:
    /// `out[j * n + i] = scale * q_j . k_i`.
    ///
    /// # Errors
    /// [`CoreError::DimensionMismatch`] when `d == 0`, a slice is not whole rows of `d`, or
    /// `out.len() < h * n`.
    fn block_scores(
        queries: &[f32],
        keys: &[Self],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) -> Result<()> {
        check_block(
            "scores of a block (h x n)",
            d,
            Self::VALUES,
            queries.len(),
            keys.len(),
            out.len(),
        )?;
        block_scores_portable(queries, keys, d, scale, out);
        Ok(())
    }

    /// `acc_j += sum_i w[j * n + i] v_i` for the `h = acc.len() / d` heads, `n = values.len() / d`.
    ///
    /// # Errors
    /// [`CoreError::DimensionMismatch`] when `d == 0`, a slice is not whole rows of `d`, or
    /// `weights.len() < h * n`.
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[Self], d: usize) -> Result<()> {
        check_block(
            "weights of a block (h x n)",
            d,
            Self::VALUES,
            acc.len(),
            values.len(),
            weights.len(),
        )?;
        block_accumulate_portable(acc, weights, values, d);
        Ok(())
    }
}

/// The block contract: `d > 0`, `d % per == 0`, `heads_len = h d`, `rows_len * per = n d`
/// (`rows_len` elements of `per` values each), `table_len >= h n`.
fn check_block(
    what: &'static str,
    d: usize,
    per: usize,
    heads_len: usize,
    rows_len: usize,
    table_len: usize,
) -> Result<()> {
    if d == 0 {
        return Err(CoreError::DimensionMismatch {
            what: "row length d of a block (must be positive)",
            expected: 1,
            found: 0,
        });
    }
    if !d.is_multiple_of(per) {
        return Err(CoreError::DimensionMismatch {
            what: "row length d of a block of q8 rows (a multiple of 32)",
            expected: d - d % per,
            found: d,
        });
    }
    let rows_len = rows_len.saturating_mul(per);
    for (part, len) in [
        ("queries or accumulators of a block (h x d)", heads_len),
        ("keys or values of a block (n x d)", rows_len),
    ] {
        if len % d != 0 {
            return Err(CoreError::DimensionMismatch {
                what: part,
                expected: len - len % d,
                found: len,
            });
        }
    }
    let need = (heads_len / d).saturating_mul(rows_len / d);
    if table_len < need {
        return Err(CoreError::DimensionMismatch {
            what,
            expected: need,
            found: table_len,
        });
    }
    Ok(())
}

impl Elem for f32 {
    #[inline]
    fn dot(q: &[f32], row: &[f32]) -> f32 {
        dot(q, row)
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[f32]) {
        axpy_f32(acc, w, row)
    }
    fn block_scores(
        queries: &[f32],
        keys: &[f32],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) -> Result<()> {
        check_block(
            "scores of a block (h x n)",
            d,
            Self::VALUES,
            queries.len(),
            keys.len(),
            out.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx512::detect()) {
            // SAFETY: the token proves AVX-512F, AVX2, FMA and F16C; `check_block` proved
            // `d > 0`, whole rows and `out.len() >= h * n`, and `d % 8 == 0` here.
            unsafe { super::avx512_blocks::block_scores_f32(t, queries, keys, d, scale, out) };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx2::detect()) {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // whole rows and `out.len() >= h * n`, and `d % 8 == 0` here: the kernel's contract.
            unsafe { super::avx2::block_scores_f32(t, queries, keys, d, scale, out) };
            return Ok(());
        }
        block_scores_portable(queries, keys, d, scale, out);
        Ok(())
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f32], d: usize) -> Result<()> {
        check_block(
            "weights of a block (h x n)",
            d,
            Self::VALUES,
            acc.len(),
            values.len(),
            weights.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 16, Avx512::detect()) {
            // SAFETY: the token proves AVX-512F, AVX2, FMA and F16C; `check_block` proved
            // `d > 0`, whole rows and `weights.len() >= h * n`, and `d % 16 == 0` here.
            unsafe { super::avx512_blocks::block_accumulate_f32(t, acc, weights, values, d) };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx2::detect()) {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // whole rows and `weights.len() >= h * n`, and `d % 8 == 0` here.
            unsafe { super::avx2::block_accumulate_f32(t, acc, weights, values, d) };
            return Ok(());
        }
        block_accumulate_portable(acc, weights, values, d);
        Ok(())
    }
}

impl Elem for f16 {
    #[inline]
    fn dot(q: &[f32], row: &[f16]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; the kernel reads the common prefix
            // of `q` and `row` only.
            return unsafe { super::avx2::dot(t, q, row) };
        }
        dot_f16(q, row)
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[f16]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; the kernel touches the common
            // prefix of `acc` and `row` only.
            return unsafe { super::avx2::axpy(t, acc, w, row) };
        }
        axpy_f16(acc, w, row)
    }
    fn block_scores(
        queries: &[f32],
        keys: &[f16],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) -> Result<()> {
        check_block(
            "scores of a block (h x n)",
            d,
            Self::VALUES,
            queries.len(),
            keys.len(),
            out.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx512::detect()) {
            // SAFETY: the token proves AVX-512F, AVX2, FMA and F16C; `check_block` proved
            // `d > 0`, whole rows and `out.len() >= h * n`, and `d % 8 == 0` here.
            unsafe { super::avx512_blocks::block_scores(t, queries, keys, d, scale, out) };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx2::detect()) {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // whole rows and `out.len() >= h * n`, and `d % 8 == 0` here.
            unsafe { super::avx2::block_scores(t, queries, keys, d, scale, out) };
            return Ok(());
        }
        block_scores_portable(queries, keys, d, scale, out);
        Ok(())
    }
    fn block_accumulate(acc: &mut [f32], weights: &[f32], values: &[f16], d: usize) -> Result<()> {
        check_block(
            "weights of a block (h x n)",
            d,
            Self::VALUES,
            acc.len(),
            values.len(),
            weights.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 16, Avx512::detect()) {
            // SAFETY: the token proves AVX-512F, AVX2, FMA and F16C; `check_block` proved
            // `d > 0`, whole rows and `weights.len() >= h * n`, and `d % 16 == 0` here.
            unsafe { super::avx512_blocks::block_accumulate(t, acc, weights, values, d) };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if let (0, Some(t)) = (d % 8, Avx2::detect()) {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // whole rows and `weights.len() >= h * n`, and `d % 8 == 0` here.
            unsafe { super::avx2::block_accumulate(t, acc, weights, values, d) };
            return Ok(());
        }
        block_accumulate_portable(acc, weights, values, d);
        Ok(())
    }
}

/// q8_0 blocks, read in place: `q . row = sum_b d_b sum_i q_i x_{b,i}` and
/// `acc += w d_b q_{b,i}`, the quants widened to f32; the block kernels apply each block's
/// f16 scale once per block (see `avx2_q8`).
impl Elem for Q8Block {
    const VALUES: usize = qada_stats::Q8_BLOCK;
    #[inline]
    fn dot(q: &[f32], row: &[Q8Block]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; the kernel reads the whole blocks
            // both slices cover only.
            return unsafe { super::avx2_q8::dot_q8(t, q, row) };
        }
        dot_q8(q, row)
    }
    #[inline]
    fn axpy(acc: &mut [f32], w: f32, row: &[Q8Block]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; the kernel touches the whole blocks
            // both slices cover only.
            return unsafe { super::avx2_q8::axpy_q8(t, acc, w, row) };
        }
        axpy_q8(acc, w, row)
    }
    fn block_scores(
        queries: &[f32],
        keys: &[Q8Block],
        d: usize,
        scale: f32,
        out: &mut [f32],
    ) -> Result<()> {
        check_block(
            "scores of a block (h x n)",
            d,
            Self::VALUES,
            queries.len(),
            keys.len(),
            out.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // `d % 32 == 0`, whole rows and `out.len() >= h * n`: the kernel's contract.
            unsafe { super::avx2_q8::block_scores_q8(t, queries, keys, d, scale, out) };
            return Ok(());
        }
        block_scores_portable(queries, keys, d, scale, out);
        Ok(())
    }
    fn block_accumulate(
        acc: &mut [f32],
        weights: &[f32],
        values: &[Q8Block],
        d: usize,
    ) -> Result<()> {
        check_block(
            "weights of a block (h x n)",
            d,
            Self::VALUES,
            acc.len(),
            values.len(),
            weights.len(),
        )?;
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = Avx2::detect() {
            // SAFETY: the token proves AVX2, FMA and F16C; `check_block` proved `d > 0`,
            // `d % 32 == 0`, whole rows and `weights.len() >= h * n`.
            unsafe { super::avx2_q8::block_accumulate_q8(t, acc, weights, values, d) };
            return Ok(());
        }
        block_accumulate_portable(acc, weights, values, d);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_kernels_reject_wrong_shapes_instead_of_reading_past_them() {
        let q = [1.0f32; 16];
        let k = [1.0f32; 24];
        let mut out = [0.0f32; 6];
        assert!(f32::block_scores(&q, &k, 8, 1.0, &mut out).is_ok());
        assert_eq!(out, [8.0; 6]);
        // out one short, d = 0, ragged rows: errors, on both element types
        assert!(f32::block_scores(&q, &k, 8, 1.0, &mut out[..5]).is_err());
        assert!(f32::block_scores(&q, &k, 0, 1.0, &mut out).is_err());
        assert!(f32::block_scores(&q[..15], &k, 8, 1.0, &mut out).is_err());
        let k16 = [f16::ONE; 24];
        assert!(f16::block_scores(&q, &k16, 8, 1.0, &mut out[..5]).is_err());
        assert!(f16::block_scores(&q, &k16[..23], 8, 1.0, &mut out).is_err());
        let mut acc = [0.0f32; 16];
        let w = [1.0f32; 6];
        assert!(f32::block_accumulate(&mut acc, &w[..5], &k, 8).is_err());
        assert!(f16::block_accumulate(&mut acc, &w[..5], &k16, 8).is_err());
        assert!(f16::block_accumulate(&mut acc, &w, &k16, 0).is_err());
        assert!(f16::block_accumulate(&mut acc, &w, &k16, 8).is_ok());
        assert_eq!(acc, [3.0; 16]);
        // q8: d must be a multiple of 32, rows whole blocks
        let one = Q8Block {
            d: f16::ONE,
            qs: [1; 32],
        };
        let (q32, k8) = ([1.0f32; 64], [one; 3]);
        let mut out = [0.0f32; 6];
        assert!(Q8Block::block_scores(&q32, &k8, 16, 1.0, &mut out).is_err());
        assert!(Q8Block::block_scores(&q32, &k8, 64, 1.0, &mut out).is_err());
        assert!(Q8Block::block_scores(&q32, &k8, 32, 1.0, &mut out[..5]).is_err());
        assert!(Q8Block::block_scores(&q32, &k8, 32, 1.0, &mut out).is_ok());
        assert_eq!(out, [32.0; 6]);
        let mut acc = [0.0f32; 64];
        assert!(Q8Block::block_accumulate(&mut acc, &w[..5], &k8, 32).is_err());
        assert!(Q8Block::block_accumulate(&mut acc, &w, &k8, 32).is_ok());
        assert_eq!(acc, [3.0; 64]);
    }
}
