//! Quality metrics of a sparse decode against dense: pure functions of logits,
//! log-probabilities, answers and sweep points.
//!
//! Everything here reads slices; nothing knows of tokens beyond their index into a vocabulary.
//! Probabilities stay in the log domain in f64 until a sum needs them.

/// The log-probabilities of a vocabulary from its logits, in f64:
/// `log p_i = l_i - (m + ln sum_j exp(l_j - m))` with `m = max_j l_j`, so that any magnitude of
/// logits is stable and `sum_i exp(log p_i) = 1` up to rounding.
///
/// Empty logits give an empty vector; if no logit is finite the result is NaN throughout.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let z: f64 = logits
        .iter()
        .map(|&l| (l as f64 - m).exp())
        .sum::<f64>()
        .ln()
        + m;
    logits.iter().map(|&l| l as f64 - z).collect()
}

/// The Kullback-Leibler divergence `KL(P || Q) = sum_i p_i (log p_i - log q_i)` of two
/// distributions given as log-probabilities over the same vocabulary (`p`: dense, the
/// reference; `q`: sparse).
///
/// Non-negative in exact arithmetic (Gibbs' inequality) and 0 when `P = Q`; rounding can leave
/// it a few ulps below 0, which callers that report it may clamp. Terms with `p_i = 0`
/// contribute 0 as long as `log q_i` is finite. Only the common prefix of the two slices is
/// read.
pub fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(&a, &b)| a.exp() * (a - b)).sum()
}

/// The index of the largest value (the last of equal largest values); `None` for an empty
/// slice. NaN orders above every number ([`f64::total_cmp`]).
pub fn argmax(v: &[f64]) -> Option<usize> {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|x| x.0)
}

/// Top-1 agreement: whether two distributions (log-probabilities or logits) put their largest
/// value on the same token, `argmax p = argmax q`. Two empty slices agree.
pub fn top1_agreement(p: &[f64], q: &[f64]) -> bool {
    argmax(p) == argmax(q)
}

/// The negative log-likelihood of `token` under log-probabilities `log_probs`,
/// `NLL = -log p_token`; `None` if the token is outside the vocabulary.
pub fn nll(log_probs: &[f64], token: usize) -> Option<f64> {
    log_probs.get(token).map(|&lp| -lp)
}

/// The value of a sweep at sparsity `s`, interpolated linearly between the two points around
/// it: with points `(s_0, y_0)`, `(s_1, y_1)` sorted by sparsity and `s_0 <= s <= s_1`,
/// `y = y_0 + (y_1 - y_0) (s - s_0) / (s_1 - s_0)` (their mean if `s_1 - s_0 < 1e-12`).
///
/// Points with a non-finite coordinate are ignored. `None` outside the sweep's range, except
/// that a single point answers at its own sparsity (within 1e-9).
pub fn interpolate(points: &[(f64, f64)], s: f64) -> Option<f64> {
    let mut p: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    for w in p.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x0 <= s && s <= x1 {
            return Some(if x1 - x0 < 1e-12 {
                0.5 * (y0 + y1)
            } else {
                y0 + (y1 - y0) * (s - x0) / (x1 - x0)
            });
        }
    }
    p.iter().find(|q| (q.0 - s).abs() < 1e-9).map(|q| q.1)
}

/// RULER's `string_match_all` score of an answer: the fraction of the expected strings that
/// occur in it, ignoring case, `|{e : e in answer}| / |expected|`. In `[0, 1]`; 1 when nothing
/// is expected.
pub fn recall<S: AsRef<str>>(answer: &str, expected: &[S]) -> f64 {
    if expected.is_empty() {
        return 1.0;
    }
    let answer = answer.to_lowercase();
    let found = expected
        .iter()
        .filter(|e| answer.contains(&e.as_ref().to_lowercase()))
        .count();
    found as f64 / expected.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_is_linear_between_points_and_none_outside() {
        let p = [(0.2, 1.0), (0.6, 0.0), (0.4, 0.5)];
        assert_eq!(interpolate(&p, 0.5), Some(0.25));
        assert_eq!(interpolate(&p, 0.2), Some(1.0));
        assert_eq!(interpolate(&p, 0.9), None);
        assert_eq!(interpolate(&[(0.3, 2.0)], 0.3), Some(2.0));
    }

    #[test]
    fn kl_of_two_coins_matches_the_closed_form() {
        let (a, b) = (0.3f64, 0.6f64);
        let p = [a.ln(), (1.0 - a).ln()];
        let q = [b.ln(), (1.0 - b).ln()];
        let want = a * (a / b).ln() + (1.0 - a) * ((1.0 - a) / (1.0 - b)).ln();
        assert!((kl_divergence(&p, &q) - want).abs() < 1e-15);
    }

    #[test]
    fn nll_and_argmax_read_the_right_token() {
        let lp = log_softmax(&[0.0, 2.0, 1.0]);
        assert_eq!(argmax(&lp), Some(1));
        assert_eq!(argmax(&[]), None);
        assert_eq!(nll(&lp, 1), Some(-lp[1]));
        assert_eq!(nll(&lp, 3), None);
        assert!(top1_agreement(&lp, &[0.0, 5.0, -1.0]));
        assert!(!top1_agreement(&lp, &[9.0, 5.0, -1.0]));
    }

    #[test]
    fn recall_counts_the_expected_strings_found() {
        assert_eq!(recall("The pass key is 12345.", &["12345"]), 1.0);
        assert_eq!(recall("The pass key is 1234.", &["12345"]), 0.0);
        assert_eq!(
            recall("Paris and ROME", &["rome", "paris", "oslo", "bern"]),
            0.5
        );
        assert_eq!(recall::<&str>("anything", &[]), 1.0);
    }
}
