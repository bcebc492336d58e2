//! Decoding's weights read as one stream, fetched ahead by software.
//!
//! A matrix-vector product reads every byte of the matrix once, rows (or interleaved groups of
//! eight rows) one after another: one run of memory per thread. On the Xeons the hardware
//! prefetcher alone leaves the kernels' loads waiting on L3 (a profile of SmolLM2's decoding
//! put two thirds of the eight-row kernel's samples on its first loads of a block). So the
//! bytes [`DISTANCE`] beyond those being multiplied are asked for: by the eight-row kernels
//! block by block ([`lines_ahead`], in `avx2_rows.rs`'s shared loop: spread between the
//! products, where a whole group asked for at once made the requests wait for free fill
//! buffers, SmolLM2 244, 263 against 288, 272 tokens/s alternated), and before each row by
//! the other kernels ([`ahead`]). Prefetching is a hint: an address past the matrix's end is
//! not read and cannot fault.
//!
//! `QADA_NO_PREFETCH` (any value, read once) turns it off, for comparisons.

use std::sync::OnceLock;

/// Bytes between what a product reads and what it asks for: 4 KiB. On the Xeon (family 6
/// model 167, 2 threads) 2, 4 and 8 KiB were within that host's noise of each other, all well
/// ahead of no prefetch (the sweep and its figures: `docs/notebook/results-log.md`, section
/// "Xeon family 6 model 167"; change this constant and rebuild to repeat it).
pub(crate) const DISTANCE: usize = 4096;

/// Whether `QADA_NO_PREFETCH` leaves the stream to the hardware.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("QADA_NO_PREFETCH").is_none())
}

/// Asks for the cache lines of `bytes[at + DISTANCE .. at + DISTANCE + len]` (whatever part
/// of it exists; nothing is read), into L1: before a row whose kernel reads it whole.
#[inline]
pub(crate) fn ahead(bytes: &[u8], at: usize, len: usize) {
    lines_ahead(bytes.as_ptr().wrapping_add(at), len);
}

/// Asks for the cache lines of the `len` bytes [`DISTANCE`] beyond `p`, into L1: inside a
/// kernel's loop, a block's worth at a time, so that the requests are spread between the
/// products (a whole group's asked for at once waits for free fill buffers). `p` is never
/// dereferenced: any address will do.
#[inline(always)]
pub(crate) fn lines_ahead(p: *const u8, len: usize) {
    if enabled() {
        qada_stats::simd::prefetch_lines(p.wrapping_add(DISTANCE), len);
    }
}
