//! Page masses from keys stored by column: the channel rule's scoring in one pass.
//!
//! For heads `h`, chosen key channels `c` with weights `w_hc = scale q_hc`, and pages `p` of
//! `P` bulk rows whose keys are held in 8 bits ([`ChannelColumn`]: `k_ic ~ s_cp c_ic`),
//!
//! `M_hp = ln sum_{i in p} exp(s_hi)`, with `s_hi = sum_c w_hc (s_cp c_ic)`,
//!
//! computed page by page: a page's scores of every head live in a small tile (in L1), and its
//! maximum and exponentials are taken there, so the `heads x T` scores are never written out
//! and every column is read once for the group. `ln sum exp` is `m + ln sum exp(s - m)` with
//! `m` the page's largest score. NaN scores are skipped by the maximum and contribute nothing
//! to the sum, as [`super::max_score`] and [`super::exp_in_place`] treat them; a page whose
//! scores are all NaN or `-inf` gets NaN when one of them is NaN (so it is always kept) and
//! `-inf` otherwise.

use qada_stats::ChannelColumn;

use super::column_tile::{tile_len, MAX_HEADS};
use super::exp::fast_exp;
#[cfg(target_arch = "x86_64")]
use qada_stats::simd::{Avx2, Avx512};

use crate::{CoreError, Result};

/// `out[h n_pages + p] = ln sum_{i in page p} exp(sum_c weights[h r + c] s_cp c_ci)` for the
/// `heads = weights.len() / r` heads, the `r = columns.len()` columns (codes `c_ci`, scales
/// `s_cp`) and the pages of `page` rows of the first `t` rows (the last page may be shorter).
///
/// `tile` is scratch (16 pages of `heads` times `page` rounded up to 16, f32), grown as needed and kept
/// between calls so that a decoding step allocates nothing.
///
/// # Errors
/// [`CoreError::DimensionMismatch`] when a column holds fewer than `t` codes or fewer scales
/// than pages, `weights` is not `heads x r` with at most 64 heads, or `out` does not hold
/// `heads x ceil(t / page)` values; [`CoreError::InvalidParameter`] for a page size or a
/// scale stride of 0.
pub fn column_page_masses(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    t: usize,
    page: usize,
    tile: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<()> {
    if page == 0 {
        return Err(CoreError::InvalidParameter {
            what: "rows per page of the column scores",
            expected: "at least 1",
            found: 0.0,
        });
    }
    let r = columns.len();
    let heads = weights.len().checked_div(r).unwrap_or(0);
    if r == 0 || weights.len() != heads * r || heads > MAX_HEADS {
        return Err(CoreError::DimensionMismatch {
            what: "column weights (heads x columns)",
            expected: heads.max(1) * r.max(1),
            found: weights.len(),
        });
    }
    if let Some(short) = columns.iter().find(|c| c.codes.len() < t) {
        return Err(CoreError::DimensionMismatch {
            what: "rows of a key column",
            expected: t,
            found: short.codes.len(),
        });
    }
    let n_pages = t.div_ceil(page);
    if columns.iter().any(|c| c.stride == 0) {
        return Err(CoreError::InvalidParameter {
            what: "distance between a key column's page scales",
            expected: "at least 1",
            found: 0.0,
        });
    }
    if let Some(short) = columns.iter().find(|c| c.n_scales() < n_pages) {
        return Err(CoreError::DimensionMismatch {
            what: "page scales of a key column",
            expected: n_pages,
            found: short.n_scales(),
        });
    }
    if out.len() != heads * n_pages {
        return Err(CoreError::DimensionMismatch {
            what: "page masses (heads x pages)",
            expected: heads * n_pages,
            found: out.len(),
        });
    }
    tile.resize(tile_len(heads, page), 0.0);
    #[cfg(target_arch = "x86_64")]
    if let Some(token) = Avx512::detect() {
        // SAFETY: the token proves AVX-512F, AVX2, FMA and F16C; the checks above give the
        // kernel's contract (as for the AVX2 kernel below).
        unsafe {
            super::avx512::column_page_masses(token, columns, weights, t, page, tile, out);
        }
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(token) = Avx2::detect() {
        // SAFETY: the token proves AVX2, FMA and F16C; the checks above give every column at
        // least `t` codes and `ceil(t / page)` scales, `weights` `heads x r` with
        // `heads <= MAX_HEADS`, `out` `heads x n_pages` and `tile` `tile_len(heads, page)` values,
        // the kernel's contract.
        unsafe {
            super::avx2::column_page_masses(token, columns, weights, t, page, tile, out);
        }
        return Ok(());
    }
    portable(columns, weights, t, page, tile, out);
    Ok(())
}

/// The portable loop of [`column_page_masses`] (same checks done by the caller).
fn portable(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    t: usize,
    page: usize,
    tile: &mut [f32],
    out: &mut [f32],
) {
    let r = columns.len();
    let heads = weights.len() / r;
    let n_pages = t.div_ceil(page);
    for p in 0..n_pages {
        let rows = p * page..t.min((p + 1) * page);
        let len = rows.len();
        for h in 0..heads {
            let s = &mut tile[h * len..(h + 1) * len];
            s.iter_mut().for_each(|x| *x = 0.0);
            for (c, col) in columns.iter().enumerate() {
                let (w, scale) = (weights[h * r + c], col.scales[p * col.stride]);
                for (x, &k) in s.iter_mut().zip(&col.codes[rows.clone()]) {
                    *x += w * (scale * k as f32);
                }
            }
            out[h * n_pages + p] = log_sum_exp(s);
        }
    }
}

/// `ln sum exp(s_i)` as the module describes (NaN skipped unless nothing else is finite).
pub(crate) fn log_sum_exp(s: &[f32]) -> f32 {
    let top = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    if top == f32::NEG_INFINITY {
        return s.iter().copied().find(|x| x.is_nan()).unwrap_or(top);
    }
    let sum: f32 = s
        .iter()
        .map(|&x| if x.is_nan() { 0.0 } else { fast_exp(x - top) })
        .sum();
    top + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codes and scales of one column, owned.
    struct Owned {
        codes: Vec<i8>,
        scales: Vec<f32>,
    }

    impl Owned {
        fn view(&self) -> ChannelColumn<'_> {
            ChannelColumn {
                codes: &self.codes,
                scales: &self.scales,
                stride: 1,
            }
        }
    }

    fn reference(cols: &[Owned], w: &[f32], t: usize, page: usize) -> Vec<f64> {
        let r = cols.len();
        let heads = w.len() / r;
        let n_pages = t.div_ceil(page);
        let mut out = vec![0.0; heads * n_pages];
        for h in 0..heads {
            for p in 0..n_pages {
                let s: Vec<f64> = (p * page..t.min((p + 1) * page))
                    .map(|i| {
                        (0..r)
                            .map(|c| {
                                let k = cols[c].scales[p] as f64 * cols[c].codes[i] as f64;
                                w[h * r + c] as f64 * k
                            })
                            .sum::<f64>()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                out[h * n_pages + p] = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            }
        }
        out
    }

    /// The masses by every kernel this CPU runs (portable, AVX2, AVX-512), whatever the
    /// environment picks.
    fn every_path(cols: &[ChannelColumn<'_>], w: &[f32], t: usize, page: usize) -> Vec<Vec<f32>> {
        let heads = w.len() / cols.len();
        let n = heads * t.div_ceil(page);
        let mut tile = vec![0.0; tile_len(heads, page)];
        let mut out = vec![vec![0.0; n]];
        portable(cols, w, t, page, &mut tile, &mut out[0]);
        #[cfg(target_arch = "x86_64")]
        if let Some(token) = Avx2::detect() {
            let mut o = vec![0.0; n];
            // SAFETY: the token proves the features; shapes as the safe entry checks them.
            unsafe {
                crate::attention::avx2::column_page_masses(
                    token, cols, w, t, page, &mut tile, &mut o,
                )
            };
            out.push(o);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(token) = Avx512::detect() {
            let mut o = vec![0.0; n];
            // SAFETY: as above.
            unsafe {
                crate::attention::avx512::column_page_masses(
                    token, cols, w, t, page, &mut tile, &mut o,
                )
            };
            out.push(o);
        }
        out
    }

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn masses_match_a_f64_recomputation_for_odd_shapes() {
        let mut seed = 7;
        for &(r, heads, t, page) in &[
            (1usize, 1usize, 1usize, 1usize),
            (3, 2, 37, 8),
            (4, 7, 100, 32),
            (5, 3, 64, 32),
            (8, 7, 1000, 32),
            (9, 1, 77, 13),
            (2, 4, 300, 128),
        ] {
            let cols: Vec<Owned> = (0..r)
                .map(|_| Owned {
                    codes: (0..t + 3)
                        .map(|_| (127.0 * lcg(&mut seed)).round() as i8)
                        .collect(),
                    scales: (0..t.div_ceil(page) + 1)
                        .map(|_| 0.04 * (1.0 + lcg(&mut seed)))
                        .collect(),
                })
                .collect();
            let w: Vec<f32> = (0..heads * r).map(|_| 2.0 * lcg(&mut seed)).collect();
            let views: Vec<ChannelColumn<'_>> = cols.iter().map(Owned::view).collect();
            let n_pages = t.div_ceil(page);
            let mut out = vec![0.0; heads * n_pages];
            let mut tile = Vec::new();
            column_page_masses(&views, &w, t, page, &mut tile, &mut out).unwrap();
            let paths = every_path(&views, &w, t, page);
            let want = reference(&cols, &w, t, page);
            for i in 0..want.len() {
                for got in std::iter::once(out[i]).chain(paths.iter().map(|o| o[i])) {
                    assert!(
                        (got as f64 - want[i]).abs() < 1e-4 * (1.0 + want[i].abs()),
                        "r {r} heads {heads} t {t} page {page} at {i}: {got} vs {}",
                        want[i]
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Every kernel against the f64 recomputation, over column counts across passes,
        /// group sizes, page sizes and bulk lengths that end in whole and partial blocks of
        /// 16 pages, whole and partial pages; a page of very low scores next to high ones.
        #[test]
        fn every_kernel_matches_a_f64_recomputation(
            r in 1usize..40,
            heads in 1usize..10,
            page in 1usize..140,
            t in 1usize..1200,
            seed in 0u64..u64::MAX,
            low in proptest::prelude::any::<bool>(),
        ) {
            let mut seed = seed;
            let n_pages = t.div_ceil(page);
            let cols: Vec<Owned> = (0..r)
                .map(|_| Owned {
                    codes: (0..t).map(|_| (127.0 * lcg(&mut seed)).round() as i8).collect(),
                    scales: (0..n_pages)
                        .map(|p| {
                            let s = 0.04 * (1.0 + lcg(&mut seed));
                            // the second page far below the rest: its own maximum, not the
                            // block's, keeps its exponentials from underflowing
                            if low && p == 1 { s * 40.0 } else { s }
                        })
                        .collect(),
                })
                .collect();
            let w: Vec<f32> = (0..heads * r).map(|_| 2.0 * lcg(&mut seed)).collect();
            let views: Vec<ChannelColumn<'_>> = cols.iter().map(Owned::view).collect();
            let want = reference(&cols, &w, t, page);
            for (k, got) in every_path(&views, &w, t, page).iter().enumerate() {
                for i in 0..want.len() {
                    proptest::prop_assert!(
                        (got[i] as f64 - want[i]).abs() < 1e-4 * (1.0 + want[i].abs()),
                        "path {k} at {i}: {} vs {}", got[i], want[i]
                    );
                }
            }
        }
    }

    #[test]
    fn equal_scores_give_the_score_plus_ln_of_the_page_length() {
        // every exponential is exp(0) = 1, so the sum is the page's length exactly and the
        // logarithm alone is measured
        let mut tile = Vec::new();
        for page in 1..=130 {
            let t = 3 * page - 1;
            for (code, scale) in [(-13i8, 0.25f32), (0, 1.0), (1, 0.5), (127, 7.0 / 127.0)] {
                let v = code as f32 * scale;
                let col = Owned {
                    codes: vec![code; t],
                    scales: vec![scale; t.div_ceil(page)],
                };
                let col = [col.view()];
                let mut out = vec![0.0; t.div_ceil(page)];
                column_page_masses(&col, &[1.0], t, page, &mut tile, &mut out).unwrap();
                let paths = every_path(&col, &[1.0], t, page);
                let all = paths.iter().flat_map(|o| o.iter().enumerate());
                for (p, &got) in out.iter().enumerate().chain(all) {
                    let n = page.min(t - p * page);
                    let want = v as f64 + (n as f64).ln();
                    assert!(
                        (got as f64 - want).abs() <= 2e-6 * (1.0 + want.abs()),
                        "page {page} of {n} rows at {v}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn nan_pages_stay_nan_and_bad_shapes_are_refused() {
        // a NaN scale (a NaN key in the page) makes every score of the page NaN; an infinite
        // one makes the codes' zeros NaN (`inf x 0`) and the rest infinite
        let col = Owned {
            codes: vec![1; 16],
            scales: vec![f32::NAN, 1.0],
        };
        let cols = [col.view()];
        let mut out = vec![0.0; 2];
        let mut tile = Vec::new();
        column_page_masses(&cols, &[1.0], 16, 8, &mut tile, &mut out).unwrap();
        assert!(out[0].is_nan(), "{}", out[0]);
        assert!((out[1] - (1.0 + 8.0f32.ln())).abs() < 1e-5, "{}", out[1]);
        let mut inf = Owned {
            codes: vec![0; 16],
            scales: vec![f32::INFINITY, 1.0],
        };
        inf.codes[8] = 2;
        let cols = [inf.view()];
        column_page_masses(&cols, &[1.0], 16, 8, &mut tile, &mut out).unwrap();
        assert!(out[0].is_nan(), "{}", out[0]);
        let want = (2f32.exp() + 7.0).ln();
        assert!((out[1] - want).abs() < 1e-5, "{} vs {want}", out[1]);
        for o in every_path(&cols, &[1.0], 16, 8) {
            assert!(o[0].is_nan() && (o[1] - want).abs() < 1e-5);
        }
        let few_scales = Owned {
            codes: vec![0; 16],
            scales: vec![1.0],
        };
        assert!(
            column_page_masses(&[few_scales.view()], &[1.0], 16, 8, &mut tile, &mut out).is_err()
        );
        let no_stride = ChannelColumn {
            stride: 0,
            ..cols[0]
        };
        assert!(column_page_masses(&[no_stride], &[1.0], 16, 8, &mut tile, &mut out).is_err());
        assert!(column_page_masses(&cols, &[1.0], 16, 0, &mut tile, &mut out).is_err());
        assert!(column_page_masses(&cols, &[1.0], 17, 8, &mut tile, &mut out).is_err());
        assert!(column_page_masses(&cols, &[1.0, 2.0, 3.0], 16, 8, &mut tile, &mut out).is_err());
        assert!(column_page_masses(&cols, &[1.0], 16, 8, &mut tile, &mut out[..1]).is_err());
        let mut many = vec![0.0; 65 * 2];
        assert!(column_page_masses(&cols, &[1.0; 65], 16, 8, &mut tile, &mut many).is_err());
    }
}
