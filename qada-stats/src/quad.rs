//! The quadratic form `q M q^T` over a packed symmetric matrix, for a batch of queries.
//!
//! `q M q^T = sum_i q_i (M_ii q_i + 2 sum_{j > i} M_ij q_j)`: one walk over the packed rows
//! ([`crate::packed`]). Each row is read once for every query of the batch (the query heads of
//! a GQA group share their KV head's moments), so a group reads the matrix once, not once a
//! head. Every query keeps its own f64 accumulators, in an order that does not depend on the
//! batch: a query's result is the same alone or batched, on either path.
//!
//! The SIMD paths sum in another order than the portable one: `2 sum_i q_i (M_ii q_i / 2 +
//! sum_{j > i} M_ij q_j)`, each row's products with `q[i..]` (the diagonal halved) lane by
//! lane in one register (four f64 lanes on AVX2, eight on AVX-512), scaled by `q_i` into the
//! query's register, whose lanes are summed once at the end and doubled. No row ends in a sum
//! across lanes or a scalar tail (the last chunk of a row is a masked load): such per-row
//! reductions were most of an earlier kernel's time at `d = 64`. The paths differ from one
//! another and from the definition by that order of summation and the rounding of fused
//! multiply-adds (within `1e-12` of the definition, the tests).

use crate::packed;
use crate::simd::{Avx2, Avx512};

/// Queries per pass over the matrix: their accumulators stay in registers.
pub(crate) const BATCH: usize = 8;

/// `out[h] = q_h M q_h^T` for the f64 queries `qs` (`out.len()` rows of `d`), `m` the packed
/// upper triangle of a `d x d` symmetric matrix.
///
/// The caller checks the lengths: `m.len() == d (d + 1) / 2`, `qs.len() == out.len() * d`.
pub(crate) fn packed_quad_forms(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
    debug_assert_eq!(m.len(), packed::len(d));
    debug_assert_eq!(qs.len(), out.len() * d);
    if d == 0 {
        out.fill(0.0);
        return;
    }
    let path = Path::detect();
    for (qs, out) in qs.chunks(BATCH * d).zip(out.chunks_mut(BATCH)) {
        path.batch(m, d, qs, out);
    }
}

/// Which kernel computes a batch.
#[derive(Clone, Copy, Debug)]
enum Path {
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    Portable,
}

impl Path {
    /// The fastest path this CPU runs.
    fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(t) = Avx512::detect() {
                return Path::Avx512(t);
            }
            if let Some(t) = Avx2::detect() {
                return Path::Avx2(t);
            }
        }
        Path::Portable
    }

    /// One batch of at most [`BATCH`] queries (`qs` whole rows of `d`, `out` one value a
    /// row, `m` the packed triangle).
    fn batch(self, m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
        debug_assert!(out.len() <= BATCH && qs.len() == out.len() * d);
        debug_assert_eq!(m.len(), packed::len(d));
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the token proves AVX-512F, AVX2 and FMA; the caller's lengths are the
            // kernel's contract (`m` the packed triangle, `qs` whole rows of `d`, at most BATCH
            // of them).
            Path::Avx512(_) => unsafe { avx512::quad_forms(m, d, qs, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the token proves AVX2 and FMA; the same contract.
            Path::Avx2(_) => unsafe { avx2::quad_forms(m, d, qs, out) },
            Path::Portable => portable(m, d, qs, out),
        }
    }
}

/// The portable batch: at most [`BATCH`] queries.
fn portable(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
    out.fill(0.0);
    for (i, r) in packed::rows(d) {
        let row = &m[r];
        for (q, total) in qs.chunks_exact(d).zip(out.iter_mut()) {
            let q = &q[i..];
            let mut acc = [0.0f64; 4];
            let (head, tail) = (row[1..].chunks_exact(4), q[1..].chunks_exact(4));
            let (rr, qr) = (head.remainder(), tail.remainder());
            for (a, x) in head.zip(tail) {
                for k in 0..4 {
                    acc[k] += a[k] * x[k];
                }
            }
            let mut off_diag = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            for (a, x) in rr.iter().zip(qr) {
                off_diag += a * x;
            }
            *total += q[0] * (row[0] * q[0] + 2.0 * off_diag);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::BATCH;
    use crate::packed;

    /// The quadratic forms with each query's products in the four lanes of one register.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `m` holds `d (d + 1) / 2` values, `qs` a multiple of `d`
    /// values, at most [`BATCH`] rows, and `out` one value per row.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quad_forms(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
        // a batch size known at compile time keeps every accumulator in a register
        // SAFETY (each arm): the caller's contract, with H = out.len() rows.
        match out.len() {
            1 => batch::<1>(m, d, qs, out),
            2 => batch::<2>(m, d, qs, out),
            3 => batch::<3>(m, d, qs, out),
            4 => batch::<4>(m, d, qs, out),
            5 => batch::<5>(m, d, qs, out),
            6 => batch::<6>(m, d, qs, out),
            7 => batch::<7>(m, d, qs, out),
            8 => batch::<8>(m, d, qs, out),
            _ => {}
        }
        const _: () = assert!(BATCH == 8);
    }

    /// [`quad_forms`] for exactly `H` queries, as the AVX-512 kernel sums them (see there) on
    /// four lanes: row `i` (its diagonal halved) times `q[i..]` lane by lane in chunks of 4
    /// (the last masked), scaled by `q_i` into the query's register; its lanes are summed once
    /// at the end, in pairs, and doubled.
    ///
    /// # Safety
    /// As [`quad_forms`], with `qs.len() == H d` and `out.len() == H`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn batch<const H: usize>(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
        let (qs, out) = (&qs[..H * d], &mut out[..H]);
        let half_first = _mm256_setr_pd(0.5, 1.0, 1.0, 1.0);
        let lane = _mm256_setr_epi64x(0, 1, 2, 3);
        // lanes below `left` set (all four from 4 on)
        let mask_of = |left: usize| _mm256_cmpgt_epi64(_mm256_set1_epi64x(left as i64), lane);
        let mut acc = [_mm256_setzero_pd(); H];
        for (i, r) in packed::rows(d) {
            let row = &m[r];
            let n = row.len();
            let first = mask_of(n);
            // SAFETY: `row` holds n >= 1 values; the mask enables lanes 0 .. min(4, n) only,
            // and masked-off lanes are neither read nor fault.
            let a = _mm256_mul_pd(_mm256_maskload_pd(row.as_ptr(), first), half_first);
            let mut t = [_mm256_setzero_pd(); H];
            for (k, t) in t.iter_mut().enumerate() {
                // SAFETY: query k's values i .. i + min(4, n) lie within its d values
                // (i + n = d, k < H rows in `qs`); the same mask as the row's.
                let x = _mm256_maskload_pd(qs.as_ptr().add(k * d + i), first);
                *t = _mm256_mul_pd(a, x);
            }
            let mut c = 4;
            while c + 4 <= n {
                // SAFETY: c + 4 <= n: the 4 values at c lie inside `row`, and query k's at
                // i + c inside its d values.
                let a = _mm256_loadu_pd(row.as_ptr().add(c));
                for (k, t) in t.iter_mut().enumerate() {
                    let x = _mm256_loadu_pd(qs.as_ptr().add(k * d + i + c));
                    *t = _mm256_fmadd_pd(a, x, *t);
                }
                c += 4;
            }
            if c < n {
                let last = mask_of(n - c);
                // SAFETY: c < n: the pointers lie inside `row` and query k's values; the mask
                // enables lanes c .. n only.
                let a = _mm256_maskload_pd(row.as_ptr().add(c), last);
                for (k, t) in t.iter_mut().enumerate() {
                    let x = _mm256_maskload_pd(qs.as_ptr().add(k * d + i + c), last);
                    *t = _mm256_fmadd_pd(a, x, *t);
                }
            }
            for (k, (acc, t)) in acc.iter_mut().zip(&t).enumerate() {
                *acc = _mm256_fmadd_pd(*t, _mm256_set1_pd(qs[k * d + i]), *acc);
            }
        }
        for (acc, total) in acc.iter().zip(out.iter_mut()) {
            let mut l = [0.0f64; 4];
            // SAFETY: `l` holds 4 f64.
            _mm256_storeu_pd(l.as_mut_ptr(), *acc);
            *total = 2.0 * ((l[0] + l[1]) + (l[2] + l[3]));
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::BATCH;
    use crate::packed;

    /// The quadratic forms with each query's products in the lanes of one register.
    ///
    /// # Safety
    /// The CPU supports AVX-512F, AVX2 and FMA; `m` holds `d (d + 1) / 2` values, `qs` a
    /// multiple of `d` values, at most [`BATCH`] rows, and `out` one value per row.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn quad_forms(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
        // SAFETY (each arm): the caller's contract, with H = out.len() rows.
        match out.len() {
            1 => batch::<1>(m, d, qs, out),
            2 => batch::<2>(m, d, qs, out),
            3 => batch::<3>(m, d, qs, out),
            4 => batch::<4>(m, d, qs, out),
            5 => batch::<5>(m, d, qs, out),
            6 => batch::<6>(m, d, qs, out),
            7 => batch::<7>(m, d, qs, out),
            8 => batch::<8>(m, d, qs, out),
            _ => {}
        }
        const _: () = assert!(BATCH == 8);
    }

    /// [`quad_forms`] for exactly `H` queries, with no reduction across lanes inside the walk:
    /// row `i` (its diagonal halved) is multiplied lane by lane with `q[i..]` in chunks of 8
    /// (the last masked), the chunks' products summed into one register `t`, and `t` scaled by
    /// `q_i` into the query's accumulator; the accumulator's lanes are summed once at the end
    /// and doubled: `2 sum_i q_i (M_ii q_i / 2 + sum_{j > i} M_ij q_j)`.
    ///
    /// # Safety
    /// As [`quad_forms`], with `qs.len() == H d` and `out.len() == H`.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn batch<const H: usize>(m: &[f64], d: usize, qs: &[f64], out: &mut [f64]) {
        let (qs, out) = (&qs[..H * d], &mut out[..H]);
        // lane 0 of a row's first chunk is its diagonal, counted once where the rest count twice
        let half_first = _mm512_setr_pd(0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0);
        // lanes below `left` set (all eight from 8 on)
        let mask_of = |left: usize| -> __mmask8 {
            if left >= 8 {
                0xff
            } else {
                (1u8 << left) - 1
            }
        };
        let mut acc = [_mm512_setzero_pd(); H];
        for (i, r) in packed::rows(d) {
            let row = &m[r];
            let n = row.len();
            // the first chunk, from the diagonal (n >= 1): products, not sums
            let first = mask_of(n);
            // SAFETY: `row` holds n >= 1 values; the mask enables lanes 0 .. min(8, n) only,
            // and masked-off lanes are neither read nor fault.
            let a = _mm512_mul_pd(_mm512_maskz_loadu_pd(first, row.as_ptr()), half_first);
            let mut t = [_mm512_setzero_pd(); H];
            for (k, t) in t.iter_mut().enumerate() {
                // SAFETY: query k's values i .. i + min(8, n) lie within its d values
                // (i + n = d, k < H rows in `qs`); the same mask as the row's.
                let x = _mm512_maskz_loadu_pd(first, qs.as_ptr().add(k * d + i));
                *t = _mm512_mul_pd(a, x);
            }
            let mut c = 8;
            while c + 8 <= n {
                // SAFETY: c + 8 <= n: the 8 values at c lie inside `row`, and query k's at
                // i + c inside its d values.
                let a = _mm512_loadu_pd(row.as_ptr().add(c));
                for (k, t) in t.iter_mut().enumerate() {
                    let x = _mm512_loadu_pd(qs.as_ptr().add(k * d + i + c));
                    *t = _mm512_fmadd_pd(a, x, *t);
                }
                c += 8;
            }
            if c < n {
                let last = mask_of(n - c);
                // SAFETY: c < n: the pointers lie inside `row` and query k's values; the mask
                // enables lanes c .. n only.
                let a = _mm512_maskz_loadu_pd(last, row.as_ptr().add(c));
                for (k, t) in t.iter_mut().enumerate() {
                    let x = _mm512_maskz_loadu_pd(last, qs.as_ptr().add(k * d + i + c));
                    *t = _mm512_fmadd_pd(a, x, *t);
                }
            }
            for (k, (acc, t)) in acc.iter_mut().zip(&t).enumerate() {
                *acc = _mm512_fmadd_pd(*t, _mm512_set1_pd(qs[k * d + i]), *acc);
            }
        }
        for (acc, total) in acc.iter().zip(out.iter_mut()) {
            let mut l = [0.0f64; 8];
            // SAFETY: `l` holds 8 f64.
            _mm512_storeu_pd(l.as_mut_ptr(), *acc);
            *total = 2.0 * (((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7])));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `q M q^T` from the full matrix, two plain loops.
    fn naive(m: &[f64], d: usize, q: &[f64]) -> f64 {
        let full = |i: usize, j: usize| {
            let (a, b) = if i <= j { (i, j) } else { (j, i) };
            m[a * d - a * a.saturating_sub(1) / 2 + (b - a)]
        };
        let mut s = 0.0;
        for i in 0..d {
            for j in 0..d {
                s += q[i] * full(i, j) * q[j];
            }
        }
        s
    }

    proptest! {
        /// Both paths agree with the definition, and a query's value does not depend on the
        /// batch it is in (bit for bit, on the path this CPU takes).
        #[test]
        fn batched_forms_match_the_definition_and_each_query_alone(
            d in 1usize..72,
            h in 1usize..12,
            seed in any::<u64>(),
        ) {
            let mut state = seed | 1;
            let mut next = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            };
            let m: Vec<f64> = (0..packed::len(d)).map(|_| next() * 3.0).collect();
            let qs: Vec<f64> = (0..h * d).map(|_| next() * 5.0).collect();
            let mut batched = vec![f64::NAN; h];
            packed_quad_forms(&m, d, &qs, &mut batched);
            let mut portable_out = vec![f64::NAN; h];
            for (q, o) in qs.chunks(BATCH * d).zip(portable_out.chunks_mut(BATCH)) {
                portable(&m, d, q, o);
            }
            // every path this CPU has, not only the one `packed_quad_forms` takes
            let mut paths = vec![Path::Portable];
            #[cfg(target_arch = "x86_64")]
            {
                paths.extend(Avx2::detect().map(Path::Avx2));
                paths.extend(Avx512::detect().map(Path::Avx512));
            }
            let per_path: Vec<Vec<f64>> = paths
                .iter()
                .map(|p| {
                    let mut o = vec![f64::NAN; h];
                    for (q, o) in qs.chunks(BATCH * d).zip(o.chunks_mut(BATCH)) {
                        p.batch(&m, d, q, o);
                    }
                    o
                })
                .collect();
            for k in 0..h {
                let q = &qs[k * d..(k + 1) * d];
                let want = naive(&m, d, q);
                let scale = 1.0 + m.iter().map(|x| x.abs()).sum::<f64>() * 25.0;
                prop_assert!((batched[k] - want).abs() <= 1e-12 * scale, "{} vs {want}", batched[k]);
                prop_assert!((portable_out[k] - want).abs() <= 1e-12 * scale);
                for (p, o) in paths.iter().zip(&per_path) {
                    prop_assert!((o[k] - want).abs() <= 1e-12 * scale, "{:?}: {} vs {want}", p, o[k]);
                }
                let mut alone = [f64::NAN];
                packed_quad_forms(&m, d, q, &mut alone);
                prop_assert_eq!(alone[0].to_bits(), batched[k].to_bits());
            }
        }
    }
}
