//! `exp` and `max` over score vectors: [`fast_exp`] (one value, vectorizes), and
//! [`exp_in_place`] / [`sum_exp`] / [`max_score`], which take 8 lanes at a time on AVX2 CPUs.
//!
//! The constants of the reduction (`exp_constants.rs`) are shared with the AVX2 and AVX-512
//! kernels, so every path computes the same polynomial.

#[cfg(target_arch = "x86_64")]
use qada_stats::simd::Avx2;

use super::exp_constants::{EXP_FLOOR, EXP_TAYLOR, LN2_HI, LN2_LO};

/// `exp(x)` in f32 without a library call, so that loops over scores vectorize.
///
/// Cody-Waite reduction: `n = round(x / ln 2)`, `r = x - n ln2_hi - n ln2_lo` (so `|r| <= ln 2 / 2`
/// without cancellation), `exp(x) = 2^n exp(r)` with `exp(r)` by its degree-7 Taylor polynomial.
/// Relative error below 3e-7. Inputs below -87 give 0 (the result would be subnormal); callers
/// subtract the maximum score, so inputs are at most 0.
#[inline(always)]
pub fn fast_exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
                                     // branch-free so that loops over it vectorize: clamp, compute, then select
    let xc = x.max(EXP_FLOOR);
    let n = (xc * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = EXP_TAYLOR[1..]
        .iter()
        .fold(EXP_TAYLOR[0], |p, &c| p * r + c);
    let v = f32::from_bits((p.to_bits() as i32).wrapping_add((n as i32) << 23) as u32);
    if x < EXP_FLOOR {
        0.0
    } else {
        v
    }
}

/// `s_i <- exp(s_i - m)` for every score; returns their sum.
///
/// AVX2/FMA where the CPU has it (the [`fast_exp`] reduction and polynomial, 8 lanes, with
/// fused multiply-adds: relative error below 3e-7 as well); [`fast_exp`] elsewhere.
pub fn exp_in_place(s: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = Avx2::detect() {
        // SAFETY: the token proves AVX2, FMA and F16C; the kernel reads and writes `s` only
        // (any length, the tail through a padded copy).
        return unsafe { super::avx2::exp_in_place(t, s, m) };
    }
    for x in s.iter_mut() {
        *x = fast_exp(*x - m);
    }
    let mut acc = [0.0f32; 8];
    let chunks = s.chunks_exact(8);
    let mut sum: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for k in 0..8 {
            acc[k] += c[k];
        }
    }
    sum += acc.iter().sum::<f32>();
    sum
}

/// `sum_i exp(s_i - m)` in f64, the terms by [`fast_exp`] (the same polynomial on every path);
/// `s` is left as it is. AVX2/FMA where the CPU has it (8 terms at a time, widened to f64);
/// the log-sum-exp of the decisions ([`crate::lse::lse`]) sums its terms here.
pub fn sum_exp(s: &[f32], m: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = Avx2::detect() {
        // SAFETY: the token proves AVX2, FMA and F16C; the kernel reads `s` only, in whole
        // chunks of 8 and the rest through a padded copy.
        return unsafe { super::avx2::sum_exp(t, s, m) };
    }
    s.iter().map(|&x| fast_exp(x - m) as f64).sum()
}

/// `max(init, max_i s_i)`; NaN scores are skipped, as by `f32::max`.
pub fn max_score(s: &[f32], init: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = Avx2::detect() {
        // SAFETY: the token proves AVX2, FMA and F16C; the kernel reads `s` only, in whole
        // chunks of 16 and then the remainder.
        return unsafe { super::avx2::max_score(t, s, init) };
    }
    s.iter().fold(init, |a, &b| a.max(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_3e_7_relative_of_exp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 20.0 {
            let (a, b) = (fast_exp(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.001_37;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(fast_exp(-100.0), 0.0);
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(fast_exp(0.0), 1.0);
    }

    #[test]
    fn exp_in_place_is_within_3e_7_relative_and_sums_its_outputs() {
        for n in [0usize, 1, 7, 8, 9, 16, 23, 1000] {
            let m = 3.5f32;
            let x: Vec<f32> = (0..n).map(|i| m - (i as f32 * 0.0937) % 95.0).collect();
            let mut y = x.clone();
            let sum = exp_in_place(&mut y, m);
            for (&a, &b) in x.iter().zip(&y) {
                let e = ((a - m) as f64).exp();
                if a - m < -87.0 {
                    assert_eq!(b, 0.0, "exp({}) must flush to 0", a - m);
                } else {
                    assert!(
                        ((b as f64 - e) / e).abs() < 3e-7,
                        "exp({}) = {b}, not {e}",
                        a - m
                    );
                }
            }
            let want: f64 = y.iter().map(|&v| v as f64).sum();
            assert!(
                (sum as f64 - want).abs() <= 1e-6 * want.max(1.0),
                "{sum} vs {want}"
            );
        }
        let mut z = [f32::NEG_INFINITY, 0.0, -1e30];
        exp_in_place(&mut z, 0.0);
        assert_eq!(z, [0.0, 1.0, 0.0]);
    }

    proptest::proptest! {
        /// `sum_exp` is the f64 sum of the exact exponentials within the polynomial's 3e-7
        /// relative error, leaves the scores as they were, and gives 0 for no scores or
        /// scores of -inf.
        #[test]
        fn sum_exp_is_the_sum_of_the_exponentials(
            s in proptest::collection::vec(-120.0f32..30.0, 0..300),
            m in -10.0f32..40.0,
        ) {
            let before = s.clone();
            let got = sum_exp(&s, m);
            let want: f64 = s
                .iter()
                .map(|&x| x - m)
                .filter(|&x| x >= -87.0)
                .map(|x| (x as f64).exp())
                .sum();
            // terms below exp(-87) flush to 0: at most their count times exp(-87) apart
            let floor = s.len() as f64 * (-87.0f64).exp();
            proptest::prop_assert!((got - want).abs() <= 3e-7 * want + floor, "{got} vs {want}");
            proptest::prop_assert_eq!(s, before);
        }
    }

    #[test]
    fn sum_exp_of_nothing_and_of_minus_infinity_is_zero() {
        assert_eq!(sum_exp(&[], 0.0), 0.0);
        assert_eq!(sum_exp(&[f32::NEG_INFINITY; 13], 0.0), 0.0);
        assert_eq!(sum_exp(&[0.0; 9], 0.0), 9.0);
    }

    #[test]
    fn max_score_equals_the_fold_and_skips_nan() {
        for n in [0usize, 1, 5, 16, 17, 40] {
            let s: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32).sin() * 9.0).collect();
            let want = s.iter().fold(-3.0f32, |a, &b| a.max(b));
            assert_eq!(max_score(&s, -3.0), want, "n = {n}");
        }
        let mut s = vec![1.0f32; 20];
        s[3] = f32::NAN;
        s[17] = 2.0;
        assert_eq!(max_score(&s, f32::NEG_INFINITY), 2.0);
    }
}
