//! The machine's read bandwidth, against which the byte limits of decoding are stated.

use std::time::Instant;

/// Read bandwidth with every thread: the best of 5 parallel passes over 512 MiB (bytes / s).
/// The pass sums 64-bit words with wrapping adds (no chain of dependent float additions). It
/// reads less than the same loop in C (`scripts/read_bandwidth.c`, up to 1.5x more here), so
/// the limits derived from it are a floor of the physical limit.
pub fn read_bandwidth() -> f64 {
    use rayon::prelude::*;
    let buf: Vec<u64> = (0..(64usize << 20)).map(|i| i as u64 * 0x9e37).collect();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        let s: u64 = buf
            .par_chunks(1 << 15)
            .map(|c| c.iter().fold(0u64, |a, &b| a.wrapping_add(b)))
            .reduce(|| 0, u64::wrapping_add);
        let secs = t0.elapsed().as_secs_f64();
        std::hint::black_box(s);
        best = best.max((buf.len() * 8) as f64 / secs);
    }
    best
}
