//! The tile in which the column page masses are taken (`column_masses.rs` and its AVX2 and
//! AVX-512 kernels): its stride per head, how many heads it holds, and how far ahead the
//! kernels prefetch.

/// Values per head in the tile: the page size rounded up to 16, whole vectors of 8 or 16
/// lanes (the rows past the page hold `-inf`).
pub(crate) fn tile_stride(page: usize) -> usize {
    page.div_ceil(16) * 16
}

/// Values of the whole tile for `heads` heads and pages of `page` rows: 16 pages of every
/// head (the AVX-512 kernel scores pages in blocks of 16; the others use the first page's
/// part).
pub(crate) fn tile_len(heads: usize, page: usize) -> usize {
    heads * 16 * tile_stride(page)
}

/// The end of one page's scores in the tile, after a kernel's vectors: rows `from..len` of
/// page `p` (bulk rows from `start`) scored one at a time for every head, `sum_c w_hc (s_cp
/// c_ic)` summed column by column as the vectors and the portable loop sum them, then `-inf`
/// from `len` to `stride`, so that whole vectors can be read. Head `h`'s row `i` is at
/// `tile[at(h) + i]`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_page(
    columns: &[qada_stats::ChannelColumn<'_>],
    weights: &[f32],
    p: usize,
    start: usize,
    (from, len, stride): (usize, usize, usize),
    tile: &mut [f32],
    at: impl Fn(usize) -> usize,
) {
    if from == len && len == stride {
        // a whole page of whole vectors: nothing left
        return;
    }
    let r = columns.len();
    for h in 0..weights.len() / r {
        let row = &mut tile[at(h)..at(h) + stride];
        for (i, x) in row.iter_mut().enumerate().take(len).skip(from) {
            *x = columns.iter().enumerate().fold(0.0f32, |x, (c, col)| {
                x + weights[h * r + c] * (col.scales[p * col.stride] * col.codes[start + i] as f32)
            });
        }
        row[len..].fill(f32::NEG_INFINITY);
    }
}

/// Most heads one call scores (a KV group of a selecting criterion has at most 64).
pub(crate) const MAX_HEADS: usize = 64;

/// How many pages ahead the AVX2 and AVX-512 kernels prefetch the columns' codes and scales.
const PREFETCH_PAGES: usize = 8;

/// Ask for the codes and scales of page `p + PREFETCH_PAGES` of every column (pages of `page`
/// rows, `n_pages` in all) while page `p` is scored: a step finds the copy out of the caches,
/// and the hardware's prefetch does not follow many columns a page at a time. Nothing past
/// the last page.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn prefetch_ahead(
    columns: &[qada_stats::ChannelColumn<'_>],
    p: usize,
    page: usize,
    n_pages: usize,
) {
    use qada_stats::simd::prefetch_lines;
    let ahead = p + PREFETCH_PAGES;
    if ahead >= n_pages {
        return;
    }
    for col in columns {
        // the line of the page's first code and that of its scale (both exist: page `ahead`
        // < n_pages in a column checked by the kernel's caller)
        prefetch_lines(col.codes.as_ptr().wrapping_add(ahead * page).cast(), 1);
        prefetch_lines(
            col.scales.as_ptr().wrapping_add(ahead * col.stride).cast(),
            1,
        );
    }
}
