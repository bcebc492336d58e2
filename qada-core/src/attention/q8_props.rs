//! Properties of the q8 kernels: the AVX2 ones (through [`Elem`]'s dispatch, where the CPU has
//! AVX2) and the portable ones (called directly) equal the f32 kernels on the dequantized rows.
//!
//! `d q` is exact in f32, so the only difference is the order of the f32 sums: each output is
//! within `TOL = 2 (d + 8) eps_f32` times the sum of the absolute terms it adds (the bound of
//! a reordered f32 sum of `d` products, with room for the 8-lane partial sums), for rows of
//! every kind of block: ordinary, all zeros, huge (`|x| ~ 8e6`, scale near the f16 maximum),
//! tiny (f16-subnormal scales) and one outlier among small values.

use proptest::prelude::*;
use qada_stats::{Q8Block, Q8_BLOCK};

use super::portable::{axpy_q8, block_accumulate_portable, block_scores_portable, dot_q8};
use super::Elem;

/// One block of 32 values of a random kind.
fn block_values(kind: u8, rng: &mut impl rand::Rng) -> [f32; 32] {
    let mut x = [0.0f32; 32];
    match kind % 5 {
        0 => x.iter_mut().for_each(|v| *v = rng.gen_range(-3.0..3.0)),
        1 => {}
        2 => x.iter_mut().for_each(|v| *v = rng.gen_range(-8e6..8e6)),
        3 => x.iter_mut().for_each(|v| *v = rng.gen_range(-1e-5..1e-5)),
        _ => {
            x.iter_mut().for_each(|v| *v = rng.gen_range(-0.05..0.05));
            x[rng.gen_range(0..32)] = rng.gen_range(-500.0..500.0);
        }
    }
    x
}

/// `n` rows of `d` values as q8 blocks, and the same rows dequantized.
fn rows(n: usize, d: usize, kinds: &[u8], rng: &mut impl rand::Rng) -> (Vec<Q8Block>, Vec<f32>) {
    let blocks: Vec<Q8Block> = (0..n * d / Q8_BLOCK)
        .map(|b| Q8Block::quantize(&block_values(kinds[b % kinds.len()], rng)))
        .collect();
    let mut deq = vec![0.0f32; n * d];
    Q8Block::dequantize_into(&blocks, &mut deq);
    (blocks, deq)
}

fn tol(d: usize) -> f64 {
    2.0 * (d + 8) as f64 * f32::EPSILON as f64
}

/// `|a - b| <= tol * mag` for every pair.
fn within(a: &[f32], b: &[f32], mag: &[f64], tol: f64, what: &str) -> Result<(), TestCaseError> {
    for (i, ((x, y), m)) in a.iter().zip(b).zip(mag).enumerate() {
        let diff = (*x as f64 - *y as f64).abs();
        prop_assert!(
            diff <= tol * m + 1e-30,
            "{what} {i}: {x} vs {y} (|terms| {m})"
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn q8_kernels_equal_f32_kernels_on_dequantized_rows(
        d in prop_oneof![Just(32usize), Just(64), Just(96), Just(128), Just(256)],
        h in 1usize..=10,
        n in 1usize..80,
        kinds in prop::collection::vec(any::<u8>(), 1..6),
        seed in any::<u64>(),
    ) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (blocks, deq) = rows(n, d, &kinds, &mut rng);
        let q: Vec<f32> = (0..h * d).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
        let w: Vec<f32> = (0..h * n).map(|_| rng.gen_range(0.0f32..1.0)).collect();
        let scale = 0.125f32;
        // magnitudes: sum of |terms| of every score and every accumulated value
        let mut s_mag = vec![0.0f64; h * n];
        let mut a_mag = vec![1.0f64; h * d];
        for j in 0..h {
            for i in 0..n {
                for k in 0..d {
                    let r = deq[i * d + k].abs() as f64;
                    s_mag[j * n + i] += scale as f64 * q[j * d + k].abs() as f64 * r;
                    a_mag[j * d + k] += w[j * n + i] as f64 * r;
                }
            }
        }
        let t = tol(d);
        // scores: f32 reference, dispatched q8 (AVX2 here), portable q8
        let mut s = [vec![0.0f32; h * n], vec![0.0f32; h * n], vec![0.0f32; h * n]];
        f32::block_scores(&q, &deq, d, scale, &mut s[0]).unwrap();
        Q8Block::block_scores(&q, &blocks, d, scale, &mut s[1]).unwrap();
        block_scores_portable(&q, &blocks, d, scale, &mut s[2]);
        within(&s[1], &s[0], &s_mag, t, "block scores")?;
        within(&s[2], &s[0], &s_mag, t, "portable block scores")?;
        // weighted sums
        let mut acc = [vec![1.0f32; h * d], vec![1.0f32; h * d], vec![1.0f32; h * d]];
        f32::block_accumulate(&mut acc[0], &w, &deq, d).unwrap();
        Q8Block::block_accumulate(&mut acc[1], &w, &blocks, d).unwrap();
        block_accumulate_portable(&mut acc[2], &w, &blocks, d);
        let t_acc = 2.0 * (n + 8) as f64 * f32::EPSILON as f64;
        within(&acc[1], &acc[0], &a_mag, t_acc, "block accumulate")?;
        within(&acc[2], &acc[0], &a_mag, t_acc, "portable block accumulate")?;
        // one row: dot and axpy, dispatched and portable
        let (row, row_f) = (&blocks[..d / Q8_BLOCK], &deq[..d]);
        let qd = &q[..d];
        let mag = [s_mag[0] / scale as f64];
        let want = f32::dot(qd, row_f);
        within(&[Q8Block::dot(qd, row)], &[want], &mag, t, "dot")?;
        within(&[dot_q8(qd, row)], &[want], &mag, t, "portable dot")?;
        let mut a = [qd.to_vec(), qd.to_vec(), qd.to_vec()];
        f32::axpy(&mut a[0], 0.75, row_f);
        Q8Block::axpy(&mut a[1], 0.75, row);
        axpy_q8(&mut a[2], 0.75, row);
        let mag: Vec<f64> = qd.iter().zip(row_f).map(|(x, r)| (x.abs() + 0.75 * r.abs()) as f64).collect();
        within(&a[1], &a[0], &mag, 2.0 * f32::EPSILON as f64, "axpy")?;
        within(&a[2], &a[0], &mag, 2.0 * f32::EPSILON as f64, "portable axpy")?;
    }
}
