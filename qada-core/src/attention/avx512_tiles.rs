//! Prefill's two tile products on 16 lanes, in place of `gemm`'s AVX2 kernels (the `gemm`
//! crate runs AVX-512 only on a nightly compiler):
//!
//! - [`scores`]: `S = Q K_t^T`, a block of `n` query rows against a tile of `w` keys. The
//!   keys are first packed by channel in panels of [`PANEL`] keys (zeros past the tile's
//!   end), so that one register holds one channel of 16 keys; each `ROWS_S x 32` block of `S`
//!   then stays in 24 registers while the `d` channels are swept: per channel, two loads of
//!   the panel and one broadcast and two FMAs per query row.
//! - [`accumulate`]: `O += P V_t`, the tile's weights times its values, straight into the
//!   running output. Values are rows of `d` (a multiple of 16), so no packing: each
//!   `ROWS_O x 64` block of `O` stays in 24 registers while the tile's `w` keys are swept.
//!
//! Each value of `S` is one chain of FMAs over the channels in order, and each value of `O`
//! one chain over the keys in order, added to what `O` held. The order differs from `gemm`'s,
//! so the results agree with it to rounding, not to the bit (`prefill.rs` tests both paths
//! against a direct softmax).
//!
//! The kernels are `unsafe` and `#[target_feature(enable = "avx512f,avx2,fma,f16c")]`, the
//! features an [`Avx512`] token proves; the safe entry points take the token and check the
//! shapes.

use std::arch::x86_64::*;

use qada_stats::simd::Avx512;

/// Keys per packed panel of [`scores`]: two registers of 16.
pub const PANEL: usize = 32;
/// Query rows per block of [`scores`]: `12 x 2` accumulators, two panel loads and one
/// broadcast fill 27 of the 32 registers.
const ROWS_S: usize = 12;
/// Query rows per block of [`accumulate`]: `6 x 4` accumulators, four value loads and one
/// broadcast.
const ROWS_O: usize = 6;
/// Registers of 16 values per column block of [`accumulate`].
const CHUNKS_O: usize = 4;

/// Packs `w` keys (rows of `d`, `keys.len() >= w d`) by channel into `pack`: panel `p`'s
/// channel `c` holds keys `p PANEL .. (p + 1) PANEL`'s value `c`, zero past `w`.
fn pack_keys(keys: &[f32], w: usize, d: usize, pack: &mut Vec<f32>) {
    let panels = w.div_ceil(PANEL);
    pack.clear();
    pack.resize(panels * d * PANEL, 0.0);
    for (j, key) in keys[..w * d].chunks_exact(d).enumerate() {
        let (p, l) = (j / PANEL, j % PANEL);
        let panel = &mut pack[p * d * PANEL..(p + 1) * d * PANEL];
        for (c, &x) in key.iter().enumerate() {
            panel[c * PANEL + l] = x;
        }
    }
}

/// `S = Q K^T`: `s[i w + j] = q_i . k_j` for the `n` query rows `q[i q_rs .. i q_rs + d]` and
/// the `w` keys `keys[j d .. (j + 1) d]`. `pack` is scratch (the packed keys).
///
/// # Panics
/// When `d == 0`, `q_rs < d`, or a slice is shorter than the shapes say (`q`: `(n - 1) q_rs
/// + d`, `keys`: `w d`, `s`: `n w`).
#[allow(clippy::too_many_arguments)]
pub fn scores(
    token: Avx512,
    q: &[f32],
    q_rs: usize,
    n: usize,
    keys: &[f32],
    w: usize,
    d: usize,
    pack: &mut Vec<f32>,
    s: &mut [f32],
) {
    if n == 0 || w == 0 {
        return;
    }
    assert!(d > 0 && q_rs >= d, "scores: d {d}, row stride {q_rs}");
    assert!(q.len() >= (n - 1) * q_rs + d, "scores: q too short");
    assert!(keys.len() >= w * d, "scores: keys too short");
    assert!(s.len() >= n * w, "scores: s too short");
    pack_keys(keys, w, d, pack);
    let (qp, sp) = (q.as_ptr(), s.as_mut_ptr());
    for p in 0..w.div_ceil(PANEL) {
        let panel = pack[p * d * PANEL..].as_ptr();
        let j0 = p * PANEL;
        let cols = (w - j0).min(PANEL);
        let mut i = 0;
        while i < n {
            let rows = (n - i).min(ROWS_S);
            // SAFETY: the token proves the features; rows `i..i + rows` of `q` hold `d`
            // values each and of `s` columns `j0..j0 + cols` (asserted above); the panel
            // holds `d PANEL` values (`pack_keys`).
            unsafe {
                let (qi, si) = (qp.add(i * q_rs), sp.add(i * w + j0));
                if rows == ROWS_S {
                    scores_block::<ROWS_S>(token, qi, q_rs, panel, d, si, w, cols);
                } else {
                    for r in 0..rows {
                        scores_block::<1>(
                            token,
                            qi.add(r * q_rs),
                            q_rs,
                            panel,
                            d,
                            si.add(r * w),
                            w,
                            cols,
                        );
                    }
                }
            }
            i += rows;
        }
    }
}

/// Lanes `0..cols` of a 32-lane store as two 16-lane masks.
#[inline]
fn masks(cols: usize) -> (__mmask16, __mmask16) {
    let m = if cols >= 32 {
        u32::MAX
    } else {
        (1u32 << cols) - 1
    };
    (m as u16, (m >> 16) as u16)
}

/// One `R x PANEL` block of `S`: rows `q + r q_rs` (`d` values each) against a packed panel,
/// stored at `s + r s_rs`, columns `0..cols`.
///
/// # Safety
/// AVX-512F; `q + r q_rs` holds `d` readable values for `r < R`, `panel` `d PANEL`, and
/// `s + r s_rs` `cols` writable ones.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn scores_block<const R: usize>(
    _: Avx512,
    q: *const f32,
    q_rs: usize,
    panel: *const f32,
    d: usize,
    s: *mut f32,
    s_rs: usize,
    cols: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for c in 0..d {
        // SAFETY: channel `c < d` of the panel is 32 values; `q + r q_rs + c` is inside row r.
        let (b0, b1) = (
            _mm512_loadu_ps(panel.add(c * PANEL)),
            _mm512_loadu_ps(panel.add(c * PANEL + 16)),
        );
        for (r, a) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*q.add(r * q_rs + c));
            a[0] = _mm512_fmadd_ps(x, b0, a[0]);
            a[1] = _mm512_fmadd_ps(x, b1, a[1]);
        }
    }
    let (m0, m1) = masks(cols);
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: the masks write columns `0..cols` of row r only.
        _mm512_mask_storeu_ps(s.add(r * s_rs), m0, a[0]);
        _mm512_mask_storeu_ps(s.add(r * s_rs + 16), m1, a[1]);
    }
}

/// `O += P V`: `out[i d + c] += sum_j p[i p_rs + j] values[j d + c]` for `n` rows, the `w`
/// keys of the tile and `d` channels.
///
/// # Panics
/// When `d` is not a positive multiple of 16, `p_rs < w`, or a slice is shorter than the
/// shapes say (`p`: `(n - 1) p_rs + w`, `values`: `w d`, `out`: `n d`).
#[allow(clippy::too_many_arguments)]
pub fn accumulate(
    token: Avx512,
    p: &[f32],
    p_rs: usize,
    n: usize,
    values: &[f32],
    w: usize,
    d: usize,
    out: &mut [f32],
) {
    if n == 0 || w == 0 {
        return;
    }
    assert!(d > 0 && d.is_multiple_of(16), "accumulate: d {d}");
    assert!(p_rs >= w, "accumulate: row stride {p_rs} < {w}");
    assert!(p.len() >= (n - 1) * p_rs + w, "accumulate: p too short");
    assert!(values.len() >= w * d, "accumulate: values too short");
    assert!(out.len() >= n * d, "accumulate: out too short");
    let (pp, vp, op) = (p.as_ptr(), values.as_ptr(), out.as_mut_ptr());
    let mut c0 = 0;
    while c0 < d {
        let chunks = ((d - c0) / 16).min(CHUNKS_O);
        let mut i = 0;
        while i < n {
            let rows = (n - i).min(ROWS_O);
            // SAFETY: the token proves the features; rows `i..i + rows` of `p` hold `w`
            // weights, of `out` columns `c0..c0 + 16 chunks <= d`, and every value row `d`
            // values (asserted above).
            unsafe {
                let (pi, oi, vc) = (pp.add(i * p_rs), op.add(i * d + c0), vp.add(c0));
                macro_rules! run {
                    ($r:literal, $c:literal) => {
                        accumulate_block::<$r, $c>(token, pi, p_rs, vc, d, w, oi, d)
                    };
                }
                match (rows == ROWS_O, chunks) {
                    (true, 4) => run!(6, 4),
                    (true, 3) => run!(6, 3),
                    (true, 2) => run!(6, 2),
                    (true, _) => run!(6, 1),
                    (false, _) => {
                        for r in 0..rows {
                            let (pi, oi) = (pi.add(r * p_rs), oi.add(r * d));
                            match chunks {
                                4 => accumulate_block::<1, 4>(token, pi, p_rs, vc, d, w, oi, d),
                                3 => accumulate_block::<1, 3>(token, pi, p_rs, vc, d, w, oi, d),
                                2 => accumulate_block::<1, 2>(token, pi, p_rs, vc, d, w, oi, d),
                                _ => accumulate_block::<1, 1>(token, pi, p_rs, vc, d, w, oi, d),
                            }
                        }
                    }
                }
            }
            i += rows;
        }
        c0 += chunks * 16;
    }
}

/// One `R x 16 C` block of `O`: `o + r o_rs` (16 C values) plus the weights at `p + r p_rs`
/// (`w` of them) times the value rows at `v + j v_rs` (16 C values each).
///
/// # Safety
/// AVX-512F; `p + r p_rs` holds `w` readable values and `o + r o_rs` 16 C writable ones for
/// `r < R`, and `v + j v_rs` 16 C readable ones for `j < w`.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn accumulate_block<const R: usize, const C: usize>(
    _: Avx512,
    p: *const f32,
    p_rs: usize,
    v: *const f32,
    v_rs: usize,
    w: usize,
    o: *mut f32,
    o_rs: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        for (k, x) in a.iter_mut().enumerate() {
            // SAFETY: 16 values at column 16 k < 16 C of output row r.
            *x = _mm512_loadu_ps(o.add(r * o_rs + 16 * k));
        }
    }
    for j in 0..w {
        let mut b = [_mm512_setzero_ps(); C];
        for (k, x) in b.iter_mut().enumerate() {
            // SAFETY: value row j < w holds 16 C values.
            *x = _mm512_loadu_ps(v.add(j * v_rs + 16 * k));
        }
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: weight j < w of row r.
            let x = _mm512_set1_ps(*p.add(r * p_rs + j));
            for (ak, bk) in a.iter_mut().zip(&b) {
                *ak = _mm512_fmadd_ps(x, *bk, *ak);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        for (k, x) in a.iter().enumerate() {
            // SAFETY: as the loads above.
            _mm512_storeu_ps(o.add(r * o_rs + 16 * k), *x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_noise::noise;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Both products equal the direct f64 sums to f32 rounding, for every shape: row
        /// tails, a partial last panel, strided query rows and weight rows, and `d` in
        /// chunks of 16 (one to five registers).
        #[test]
        fn tile_products_equal_the_direct_sums(
            n in 1usize..30,
            w in 1usize..80,
            chunks in 1usize..6,
            pad in 0usize..5,
            seed in any::<u64>(),
        ) {
            let Some(token) = Avx512::detect() else {
                eprintln!("skipped: no AVX-512 here (or QADA_NO_AVX512 set)");
                return Ok(());
            };
            let d = 16 * chunks;
            let q_rs = d + pad;
            let q = noise((n - 1) * q_rs + d, seed);
            let keys = noise(w * d, seed ^ 1);
            let values = noise(w * d, seed ^ 2);
            let mut s = vec![f32::NAN; n * w];
            let mut pack = Vec::new();
            scores(token, &q, q_rs, n, &keys, w, d, &mut pack, &mut s);
            let p_rs = w + pad;
            let p = noise((n - 1) * p_rs + w, seed ^ 3);
            let o0 = noise(n * d, seed ^ 4);
            let mut o = o0.clone();
            accumulate(token, &p, p_rs, n, &values, w, d, &mut o);
            for i in 0..n {
                for j in 0..w {
                    let want: f64 = (0..d)
                        .map(|c| q[i * q_rs + c] as f64 * keys[j * d + c] as f64)
                        .sum();
                    prop_assert!((s[i * w + j] as f64 - want).abs() < 1e-5 * d as f64, "s[{i},{j}]");
                }
                for c in 0..d {
                    let want: f64 = o0[i * d + c] as f64
                        + (0..w)
                            .map(|j| p[i * p_rs + j] as f64 * values[j * d + c] as f64)
                            .sum::<f64>();
                    prop_assert!((o[i * d + c] as f64 - want).abs() < 1e-5 * w as f64, "o[{i},{c}]");
                }
            }
        }
    }

    /// Shapes the safe entry points cannot run are refused before any kernel.
    #[test]
    #[should_panic(expected = "accumulate: d 8")]
    fn a_head_dimension_not_a_multiple_of_16_is_refused() {
        let Some(token) = Avx512::detect() else {
            panic!("accumulate: d 8 (skipped: no AVX-512 here)");
        };
        accumulate(token, &[0.0; 4], 2, 2, &[0.0; 16], 2, 8, &mut [0.0; 16]);
    }
}
