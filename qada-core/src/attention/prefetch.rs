//! [`prefetch_rows`]: ask the memory system for rows a kernel will read soon.
//!
//! The block kernels prefetch ahead within the rows they are given, never past them (a run of
//! selected pages must not fetch the unselected page after it). A run's first rows are fetched
//! by its caller instead, while the run before it is computed.

use qada_stats::Rows;

/// Bytes of one cache line.
const LINE: usize = 64;

/// Prefetch every cache line of `rows` into L1 (a hint: it reads nothing and never faults;
/// a no-op off x86_64).
pub fn prefetch_rows(rows: Rows<'_>) {
    let (ptr, bytes) = match rows {
        Rows::F32(r) => (r.as_ptr().cast::<i8>(), std::mem::size_of_val(r)),
        Rows::F16(r) => (r.as_ptr().cast::<i8>(), std::mem::size_of_val(r)),
        Rows::Q8(r) => (r.as_ptr().cast::<i8>(), std::mem::size_of_val(r)),
    };
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes).step_by(LINE) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing and cannot fault (SSE, part of every x86_64); the
        // address is within the borrowed rows (line < bytes).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr.add(line)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ptr, bytes, LINE);
}
