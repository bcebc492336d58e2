//! Test data for the kernels' property tests.

/// `n` values in `[-1, 1]` in steps of 1/1000 from a xorshift generator: distinct seeds give
/// independent sequences (so queries, keys and values drawn with seeds 1, 2, 3 are not near
/// copies of each other, which could hide a kernel that swaps their indices).
pub(super) fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}
