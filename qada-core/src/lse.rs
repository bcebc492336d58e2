//! Log-sum-exp in f64: the log domain in which every mass comparison is made.

/// `ln sum_i exp(s_i)`, stable for any magnitude: `m + ln sum exp(s_i - m)` with `m = max s_i`,
/// the terms from [`crate::attention::fast_exp`] (relative error below 3e-7) summed in f64
/// ([`crate::attention::sum_exp`]: 8 at a time on AVX2 CPUs).
/// `-inf` for no scores; NaN if any score is NaN.
pub fn lse(scores: &[f32]) -> f64 {
    // no early exit, so that both passes vectorize
    if scores.iter().fold(false, |nan, s| nan | s.is_nan()) {
        return f64::NAN;
    }
    let m = crate::attention::max_score(scores, f32::NEG_INFINITY);
    if m.is_infinite() {
        return m as f64;
    }
    m as f64 + crate::attention::sum_exp(scores, m).ln()
}

/// `ln(exp(a) + exp(b))`.
pub fn lse2(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if hi.is_infinite() {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// Log of the local share `A_local / (A_local + A_bulk)` from the two log masses.
/// 0 (share 1) when the bulk is empty (`log_bulk = -inf`).
pub fn log_local_share(log_local: f64, log_bulk: f64) -> f64 {
    log_local - lse2(log_local, log_bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_scores_are_finite() {
        assert!((lse(&[1e4, 1e4]) - (1e4 + 2f64.ln())).abs() < 1e-9);
        assert!((lse(&[-1e4, -1e4]) - (-1e4 + 2f64.ln())).abs() < 1e-9);
        assert_eq!(lse(&[]), f64::NEG_INFINITY);
        assert!(lse(&[1.0, f32::NAN]).is_nan());
        assert!((lse2(-1e4, 1e4) - 1e4).abs() < 1e-9);
        assert_eq!(log_local_share(3.0, f64::NEG_INFINITY), 0.0);
    }
}
