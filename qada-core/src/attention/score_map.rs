//! What turns a dot product into an attention score: `s = scale * q . k`, then, on a
//! soft-capped model (Gemma 2's `attn_logit_softcapping`), `s = cap * tanh(s / cap)`.
//!
//! The criteria estimate the bulk's scores from `scale` alone: a cap only lowers large scores,
//! so an estimate of the bulk's mass errs towards reading it.

/// Scale and optional soft cap of a layer's scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreMap {
    /// Factor on `q . k`.
    pub scale: f32,
    /// `cap` of `cap * tanh(s / cap)`, on soft-capped models.
    pub softcap: Option<f32>,
}

impl From<f32> for ScoreMap {
    /// Scores `scale * q . k` without a cap.
    fn from(scale: f32) -> Self {
        ScoreMap {
            scale,
            softcap: None,
        }
    }
}

impl ScoreMap {
    /// The score of one dot product.
    #[inline]
    pub fn apply(&self, dot: f32) -> f32 {
        let s = self.scale * dot;
        match self.softcap {
            Some(cap) => cap * (s / cap).tanh(),
            None => s,
        }
    }

    /// [`ScoreMap::apply`] on every dot product of `s`, in place: a scaling pass that
    /// vectorizes, then the cap where the model has one.
    pub fn apply_in_place(&self, s: &mut [f32]) {
        s.iter_mut().for_each(|x| *x *= self.scale);
        self.cap_in_place(s);
    }

    /// Cap scores that are already scaled, in place (nothing without a cap).
    pub fn cap_in_place(&self, s: &mut [f32]) {
        if let Some(cap) = self.softcap {
            softcap(s, cap);
        }
    }
}

/// `z = cap * tanh(z / cap)` for every value (also Gemma 2's final logits).
pub fn softcap(z: &mut [f32], cap: f32) {
    for v in z {
        *v = cap * (*v / cap).tanh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A capped score keeps its sign and order, stays below the cap, and equals the scaled
        /// dot product where that is small against the cap.
        #[test]
        fn capped_scores_keep_order_and_stay_below_the_cap(
            a in -1e4f32..1e4, b in -1e4f32..1e4, cap in 0.5f32..100.0, scale in 0.01f32..2.0,
        ) {
            let map = ScoreMap { scale, softcap: Some(cap) };
            let (sa, sb) = (map.apply(a), map.apply(b));
            proptest::prop_assert!(sa.abs() <= cap && sb.abs() <= cap);
            proptest::prop_assert!((a <= b) == (sa <= sb) || sa == sb);
            proptest::prop_assert!(sa * a >= 0.0);
            let small = scale * a;
            if small.abs() < 1e-2 * cap {
                proptest::prop_assert!((sa - small).abs() <= 1e-4 * cap);
            }
            let mut v = [scale * a];
            map.cap_in_place(&mut v);
            proptest::prop_assert_eq!(v[0], sa);
            proptest::prop_assert_eq!(ScoreMap::from(scale).apply(a), scale * a);
        }
    }
}
