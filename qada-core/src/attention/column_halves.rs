//! The column page masses in two halves of the pages, the second half a task another worker
//! of rayon's pool may take.
//!
//! A decoding step decides its KV groups one task a thread: SmolLM2's three groups on two
//! cores leave one core idle while the other decides its second group, and Gemma 3's one
//! group leaves one idle throughout. Every page's mass `M_hp` depends on that page's rows
//! only ([`column_page_masses`]), so the pages split into `0..n/2` and `n/2..n` give the same
//! bits, and `rayon::join` hands the second half to a worker that has nothing else to do.
//! On a worker that is busy the join runs both halves itself, about a microsecond more.

use qada_stats::ChannelColumn;

use super::column_masses::column_page_masses;
use crate::Result;

/// Pages below which the masses are not split: half of them must be worth a hand-over.
const SPLIT_PAGES: usize = 64;

/// Most columns a split call views (on the stack); more are scored in one call.
pub const MAX_SPLIT_COLUMNS: usize = 512;

/// Scratch of [`column_page_masses_in_halves`]: a tile and the masses of each half, kept
/// between calls so that a decoding step allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct HalvesScratch {
    tiles: [Vec<f32>; 2],
    halves: [Vec<f32>; 2],
}

impl HalvesScratch {
    /// Room for tiles of `tile` values and the masses of `heads` heads over `pages` pages.
    pub fn reserve(&mut self, heads: usize, tile: usize, pages: usize) {
        for t in &mut self.tiles {
            t.reserve(tile.saturating_sub(t.len()));
        }
        for h in &mut self.halves {
            h.reserve((heads * (pages / 2 + 1)).saturating_sub(h.len()));
        }
    }
}

/// [`column_page_masses`] (the same arguments, the same values bit for bit), with the pages
/// in two halves run by `rayon::join` when the caller is a worker of a pool of more than one
/// thread and there are at least 64 pages (`SPLIT_PAGES`); else one call.
///
/// # Errors
/// Those of [`column_page_masses`], for the same inputs.
pub fn column_page_masses_in_halves(
    columns: &[ChannelColumn<'_>],
    weights: &[f32],
    t: usize,
    page: usize,
    scratch: &mut HalvesScratch,
    out: &mut [f32],
) -> Result<()> {
    let n_pages = if page == 0 { 0 } else { t.div_ceil(page) };
    let r = columns.len();
    let heads = weights.len().checked_div(r).unwrap_or(0);
    let split = n_pages >= SPLIT_PAGES
        && r <= MAX_SPLIT_COLUMNS
        && out.len() == heads * n_pages
        && rayon::current_num_threads() > 1
        && rayon::current_thread_index().is_some();
    let HalvesScratch { tiles, halves } = scratch;
    if !split {
        return column_page_masses(columns, weights, t, page, &mut tiles[0], out);
    }
    // the second half's columns: codes from its first row, scales from its first page (a
    // column too short for that is left to the one call, which says what is wrong)
    let (pa, rows_a) = (n_pages / 2, n_pages / 2 * page);
    let empty = ChannelColumn {
        codes: &[],
        scales: &[],
        stride: 1,
    };
    let mut second = [empty; MAX_SPLIT_COLUMNS];
    for (to, col) in second.iter_mut().zip(columns) {
        let (Some(codes), Some(scales)) =
            (col.codes.get(rows_a..), col.scales.get(pa * col.stride..))
        else {
            return column_page_masses(columns, weights, t, page, &mut tiles[0], out);
        };
        *to = ChannelColumn {
            codes,
            scales,
            stride: col.stride,
        };
    }
    let nb = n_pages - pa;
    let ([tile_a, tile_b], [out_a, out_b]) = (tiles, halves);
    out_a.resize(heads * pa, 0.0);
    out_b.resize(heads * nb, 0.0);
    let second = &second[..r];
    let (a, b) = rayon::join(
        || column_page_masses(columns, weights, rows_a, page, tile_a, out_a),
        || column_page_masses(second, weights, t - rows_a, page, tile_b, out_b),
    );
    a?;
    b?;
    for (h, row) in out.chunks_exact_mut(n_pages).enumerate() {
        row[..pa].copy_from_slice(&out_a[h * pa..(h + 1) * pa]);
        row[pa..].copy_from_slice(&out_b[h * nb..(h + 1) * nb]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u32 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*seed >> 33) as u32
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// In a pool of two workers the halves give the one call's masses bit for bit, for
        /// any page size, length (a short last page included), heads, columns and stride.
        #[test]
        fn the_halves_equal_one_call_bit_for_bit(
            seed in 0u64..1_000_000,
            page in 1usize..48,
            extra in 0usize..3000,
            heads in 1usize..9,
            r in 1usize..20,
            stride in 1usize..4,
        ) {
            let mut s = seed;
            let t = SPLIT_PAGES * page + extra;
            let n_pages = t.div_ceil(page);
            let codes: Vec<Vec<i8>> = (0..r)
                .map(|_| (0..t).map(|_| lcg(&mut s) as i8).collect())
                .collect();
            let scales: Vec<Vec<f32>> = (0..r)
                .map(|_| {
                    (0..(n_pages - 1) * stride + 1)
                        .map(|_| (lcg(&mut s) % 1000) as f32 * 1e-4)
                        .collect()
                })
                .collect();
            let cols: Vec<ChannelColumn<'_>> = codes
                .iter()
                .zip(&scales)
                .map(|(c, sc)| ChannelColumn { codes: c, scales: sc, stride })
                .collect();
            let w: Vec<f32> = (0..heads * r)
                .map(|_| (lcg(&mut s) % 2001) as f32 * 1e-3 - 1.0)
                .collect();
            let mut tile = Vec::new();
            let mut one = vec![0.0f32; heads * n_pages];
            column_page_masses(&cols, &w, t, page, &mut tile, &mut one).unwrap();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            let mut halves = vec![0.0f32; heads * n_pages];
            let mut scratch = HalvesScratch::default();
            pool.install(|| {
                column_page_masses_in_halves(&cols, &w, t, page, &mut scratch, &mut halves)
            })
            .unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            proptest::prop_assert_eq!(bits(&one), bits(&halves));
        }
    }

    #[test]
    fn bad_shapes_are_the_one_calls_errors() {
        let codes = vec![1i8; 4096];
        let scales = vec![0.5f32; 128];
        let col = ChannelColumn {
            codes: &codes,
            scales: &scales,
            stride: 1,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut scratch = HalvesScratch::default();
        pool.install(|| {
            // rows past the codes (split: the second half has none), page 0, a wrong output
            // length
            let mut long = vec![0.0f32; 256];
            let past =
                column_page_masses_in_halves(&[col], &[1.0], 8192, 32, &mut scratch, &mut long);
            assert!(past.is_err());
            let mut out = vec![0.0f32; 128];
            assert!(
                column_page_masses_in_halves(&[col], &[1.0], 4096, 0, &mut scratch, &mut out)
                    .is_err()
            );
            assert!(column_page_masses_in_halves(
                &[col],
                &[1.0],
                4096,
                32,
                &mut scratch,
                &mut out[..100]
            )
            .is_err());
            column_page_masses_in_halves(&[col], &[1.0], 4096, 32, &mut scratch, &mut out).unwrap();
            let want = 0.5 + 32f32.ln();
            assert!(out.iter().all(|m| (m - want).abs() < 1e-5), "{out:?}");
        });
    }
}
