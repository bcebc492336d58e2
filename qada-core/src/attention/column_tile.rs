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

/// Most heads one call scores (a KV group of a selecting criterion has at most 64).
pub(crate) const MAX_HEADS: usize = 64;

/// How many pages ahead the AVX2 and AVX-512 kernels prefetch the columns' codes and scales.
pub(crate) const PREFETCH_PAGES: usize = 8;
