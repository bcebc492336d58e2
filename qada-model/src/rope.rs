//! Rotary position embedding (RoPE) with the scalings GGUF files carry.
//!
//! Pair `j` of a head's first `dim` dimensions turns by `theta_j(pos) = pos * inv_freq_j`,
//! and cos and sin are both multiplied by `mscale` (the attention factor of YaRN and
//! longrope, 1 elsewhere), so `q . k` gains `mscale^2`. From `inv_freq_j = base^(-2j / dim)`:
//!
//! - linear scaling: `inv_freq_j / factor`;
//! - per-pair factors (Llama 3's `rope_freqs.weight`, Phi-3's `rope_factors_long/short`):
//!   `inv_freq_j / f_j`;
//! - YaRN: `inv_freq_j` where the pair turns often within the original context, `inv_freq_j /
//!   factor` where it turns rarely, a linear ramp between (Peng et al. 2023, as HF computes
//!   it), and `mscale = 0.1 ln(factor) + 1` unless the file gives one.

use crate::config::{LayerSpec, ModelConfig};
use crate::family::RopeStyle;
pub use crate::rope_scaling::RopeScaling;
use crate::{ModelError, Result};

/// The RoPE of one kind of layer: inverse frequencies, attention factor, pairing.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// `inv_freq_j`, one per rotary pair.
    pub inv_freq: Vec<f64>,
    /// Factor on cos and sin.
    pub mscale: f64,
    /// How dimensions are paired.
    pub style: RopeStyle,
}

impl Rope {
    /// RoPE over the first `dim` (even) dimensions with frequency `base` and `scaling`.
    ///
    /// `Factors` must hold `dim / 2` divisors (the loader checks the tensor's length).
    pub fn new(base: f64, dim: usize, style: RopeStyle, scaling: &RopeScaling) -> Self {
        let half = dim / 2;
        let plain = |j: usize| base.powf(-2.0 * j as f64 / dim as f64);
        let (inv_freq, mscale) = match scaling {
            RopeScaling::None => ((0..half).map(plain).collect(), 1.0),
            RopeScaling::Linear { factor } => ((0..half).map(|j| plain(j) / factor).collect(), 1.0),
            RopeScaling::Factors { factors, mscale } => {
                debug_assert_eq!(factors.len(), half);
                let f = (0..half).map(|j| plain(j) / factors[j]).collect();
                (f, *mscale)
            }
            RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                mscale,
            } => {
                // the pair index at which a pair turns `turns` times in the original context
                let pair_at = |turns: f64| {
                    dim as f64 * (original_context / (turns * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let low = pair_at(*beta_fast).floor().max(0.0);
                let high = pair_at(*beta_slow).ceil().min(dim as f64 - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                let f = (0..half)
                    .map(|j| {
                        // 0: keep the frequency (extrapolate), 1: divide it (interpolate)
                        let ramp = ((j as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        plain(j) * (1.0 - ramp) + plain(j) / factor * ramp
                    })
                    .collect();
                (f, *mscale)
            }
        };
        Rope {
            inv_freq,
            mscale,
            style,
        }
    }

    /// Rotated dimensions per head (the leading ones).
    pub fn dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `(mscale sin theta_j, mscale cos theta_j)` of every pair at `pos`.
    pub fn table(&self, pos: usize, out: &mut Vec<(f32, f32)>) {
        out.clear();
        out.extend(self.inv_freq.iter().map(|&f| {
            let (s, c) = (pos as f64 * f).sin_cos();
            ((self.mscale * s) as f32, (self.mscale * c) as f32)
        }));
    }
}

/// The RoPE of every kind of layer of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSet {
    /// Global layers (with the file's scaling; longrope's short factors).
    pub global: Rope,
    /// Longrope's long factors and the original context: used instead of `global` in a
    /// session longer than that context (llama.cpp's rule; HF switches per forward pass,
    /// which a KV cache cannot follow).
    pub long: Option<(usize, Rope)>,
    /// Sliding layers with their own base (Gemma 3).
    pub local: Option<Rope>,
}

/// The per-pair factor tensors a file may carry, one value per rotary pair.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RopeFactors {
    /// `rope_freqs.weight` (Llama 3): divisors of the global layers' frequencies.
    pub freqs: Option<Vec<f64>>,
    /// `rope_factors_short.weight` (Phi-3 longrope): up to the original context.
    pub short: Option<Vec<f64>>,
    /// `rope_factors_long.weight`: past it.
    pub long: Option<Vec<f64>>,
}

impl RopeSet {
    /// The RoPE of every kind of layer of the model `c` describes, its global layers at
    /// frequency `base` (the file's, or an override): the metadata's scaling (linear or YaRN)
    /// with `rope_freqs` folded in, or longrope's two factor sets; cos and sin times the
    /// file's `rope.scaling.attn_factor` (longrope without one: HF's
    /// `sqrt(1 + ln(s) / ln(original))`, `s` the context over the original).
    ///
    /// # Errors
    /// [`ModelError::NotUnderstood`] for factors with a scaling they do not compose with;
    /// [`ModelError::MissingTensor`] for one longrope set without the other,
    /// [`ModelError::MissingKey`] for longrope without the original context.
    pub fn new(c: &ModelConfig, base: f64, factors: RopeFactors) -> Result<RopeSet> {
        let (dim, style) = (c.rope_dim, c.family.rope_style);
        let not_with = |what: &str| ModelError::NotUnderstood {
            what: "tensor",
            name: what.into(),
            reason: format!(
                "RoPE factors together with {:?} scaling are not implemented",
                c.rope_scaling
            ),
        };
        let missing = |name: &str| ModelError::MissingTensor(name.into());
        let (global, long) = match (factors.short, factors.long) {
            (None, None) => {
                let scaling = match (&c.rope_scaling, factors.freqs) {
                    (s, None) => s.clone(),
                    (RopeScaling::None, Some(factors)) => RopeScaling::Factors {
                        factors,
                        mscale: 1.0,
                    },
                    (RopeScaling::Linear { factor }, Some(f)) => RopeScaling::Factors {
                        factors: f.iter().map(|x| x * factor).collect(),
                        mscale: 1.0,
                    },
                    (_, Some(_)) => return Err(not_with("rope_freqs.weight")),
                };
                let mut rope = Rope::new(base, dim, style, &scaling);
                rope.mscale *= c.rope_attn_factor.unwrap_or(1.0);
                (rope, None)
            }
            (Some(short), Some(long)) => {
                if c.rope_scaling != RopeScaling::None || factors.freqs.is_some() {
                    return Err(not_with("rope_factors_long.weight"));
                }
                let key = format!("{}.rope.scaling.original_context_length", c.family.name);
                let original = c.rope_original_context.ok_or(ModelError::MissingKey(key))?;
                let s = c.context_length as f64 / original as f64;
                let mscale = c.rope_attn_factor.unwrap_or(match s > 1.0 {
                    true => (1.0 + s.ln() / (original as f64).ln()).sqrt(),
                    false => 1.0,
                });
                let rope = |factors| {
                    Rope::new(base, dim, style, &RopeScaling::Factors { factors, mscale })
                };
                (rope(short), Some((original, rope(long))))
            }
            (Some(_), None) => return Err(missing("rope_factors_long.weight")),
            (None, Some(_)) => return Err(missing("rope_factors_short.weight")),
        };
        let local = c
            .layers
            .iter()
            .find_map(|l| l.local_rope_base)
            .map(|b| Rope::new(b, dim, style, &RopeScaling::None));
        Ok(RopeSet {
            global,
            long,
            local,
        })
    }

    /// The RoPE of a layer in a session of `context` positions; `None` on a NoPE layer.
    pub fn for_layer(&self, spec: &LayerSpec, context: usize) -> Option<&Rope> {
        if !spec.rotary {
            return None;
        }
        if let (Some(_), Some(local)) = (spec.local_rope_base, &self.local) {
            return Some(local);
        }
        match &self.long {
            Some((original, long)) if context > *original => Some(long),
            _ => Some(&self.global),
        }
    }
}

/// Apply precomputed RoPE angles in place to every head of `x` (heads of `head_dim`).
pub fn rope_inplace(x: &mut [f32], head_dim: usize, table: &[(f32, f32)], style: RopeStyle) {
    let half = table.len();
    for head in x.chunks_exact_mut(head_dim) {
        for (j, &(s, c)) in table.iter().enumerate() {
            let (a, b) = match style {
                RopeStyle::Interleaved => (2 * j, 2 * j + 1),
                RopeStyle::Halves => (j, j + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rope_scaling::yarn_mscale;

    fn table(r: &Rope, pos: usize) -> Vec<(f32, f32)> {
        let mut t = Vec::new();
        r.table(pos, &mut t);
        t
    }

    #[test]
    fn linear_scaling_divides_the_position() {
        let plain = Rope::new(1e4, 8, RopeStyle::Halves, &RopeScaling::None);
        let lin = Rope::new(
            1e4,
            8,
            RopeStyle::Halves,
            &RopeScaling::Linear { factor: 4.0 },
        );
        assert_eq!(table(&lin, 12), table(&plain, 3));
        assert_ne!(table(&lin, 12), table(&plain, 12));
    }

    #[test]
    fn unit_factors_are_plain_rope_and_factors_divide_frequencies() {
        let plain = Rope::new(5e5, 8, RopeStyle::Interleaved, &RopeScaling::None);
        let ones = RopeScaling::Factors {
            factors: vec![1.0; 4],
            mscale: 1.0,
        };
        assert_eq!(Rope::new(5e5, 8, RopeStyle::Interleaved, &ones), plain);
        let f = RopeScaling::Factors {
            factors: vec![1.0, 2.0, 4.0, 8.0],
            mscale: 1.5,
        };
        let r = Rope::new(5e5, 8, RopeStyle::Interleaved, &f);
        for j in 0..4 {
            let want = plain.inv_freq[j] / [1.0, 2.0, 4.0, 8.0][j];
            assert!((r.inv_freq[j] - want).abs() <= 1e-15 * want);
        }
        let (s, c) = table(&r, 0)[0];
        assert_eq!((s, c), (0.0, 1.5));
    }

    #[test]
    fn yarn_keeps_fast_pairs_and_divides_slow_ones() {
        // head_dim 16, base 1e4, original context 32, factor 4: HF gives pair 0 its own
        // frequency, pair 1 a 50/50 blend, pairs 2..8 divided by 4
        let y = RopeScaling::Yarn {
            factor: 4.0,
            original_context: 32.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: yarn_mscale(4.0),
        };
        let r = Rope::new(1e4, 16, RopeStyle::Halves, &y);
        let plain = Rope::new(1e4, 16, RopeStyle::Halves, &RopeScaling::None);
        assert_eq!(r.inv_freq[0], plain.inv_freq[0]);
        assert!((r.inv_freq[1] - 0.625 * plain.inv_freq[1]).abs() < 1e-12);
        for j in 2..8 {
            assert!((r.inv_freq[j] - plain.inv_freq[j] / 4.0).abs() < 1e-15);
        }
        assert!((r.mscale - 1.138_629_436).abs() < 1e-9);
    }

    proptest::proptest! {
        /// Rotation preserves each pair's length (times mscale^2) and is the identity at
        /// position 0 without an attention factor.
        #[test]
        fn rope_preserves_norm(pos in 0usize..100_000, seed in 0u32..1000, halves: bool) {
            let style = if halves { RopeStyle::Halves } else { RopeStyle::Interleaved };
            let r = Rope::new(1e4, 8, style, &RopeScaling::None);
            let x: Vec<f32> = (0..8).map(|i| ((i as u32 * 7 + seed) as f32 * 0.37).sin()).collect();
            let n = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
            let mut y = x.clone();
            rope_inplace(&mut y, 8, &table(&r, pos), style);
            proptest::prop_assert!((n(&x) - n(&y)).abs() < 1e-4);
            let mut z = x.clone();
            rope_inplace(&mut z, 8, &table(&r, 0), style);
            proptest::prop_assert_eq!(z, x);
        }
    }
}
