//! [`prefetch_rows`]: ask the memory system for rows a kernel will read soon.
//!
//! The block kernels prefetch ahead within the rows they are given, never past them (a run of
//! selected pages must not fetch the unselected page after it). A run's first rows are fetched
//! by its caller instead, while the run before it is computed.

use qada_stats::simd::prefetch_lines;
use qada_stats::Rows;

/// Prefetch every cache line of `rows` into L1 (a hint: it reads nothing and never faults;
/// a no-op off x86_64).
pub fn prefetch_rows(rows: Rows<'_>) {
    let (ptr, bytes) = match rows {
        Rows::F32(r) => (r.as_ptr().cast::<u8>(), std::mem::size_of_val(r)),
        Rows::F16(r) => (r.as_ptr().cast::<u8>(), std::mem::size_of_val(r)),
        Rows::Q8(r) => (r.as_ptr().cast::<u8>(), std::mem::size_of_val(r)),
    };
    prefetch_lines(ptr, bytes);
}
