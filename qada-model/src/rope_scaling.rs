//! How a file scales the RoPE frequencies (read by `config.rs` from the file's keys, applied
//! by `rope.rs`): none, linear, per-pair factors, or YaRN with its attention factor.

/// How a file scales the RoPE frequencies of its global layers (keys and tensors together).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Position divisor.
        factor: f64,
    },
    /// One divisor per rotary pair, and a factor on cos and sin.
    Factors {
        /// `dim / 2` divisors.
        factors: Vec<f64>,
        /// Factor on cos and sin.
        mscale: f64,
    },
    /// YaRN.
    Yarn {
        /// Context extension factor `s`.
        factor: f64,
        /// The context the model was trained for before extension.
        original_context: f64,
        /// Pairs with more than this many turns in the original context keep their frequency
        /// (32 by default).
        beta_fast: f64,
        /// Pairs with fewer turns than this are fully interpolated (1 by default).
        beta_slow: f64,
        /// Factor on cos and sin.
        mscale: f64,
    },
}

/// YaRN's default attention factor for extension `s`: `0.1 ln(s) + 1` (1 for `s <= 1`).
pub fn yarn_mscale(factor: f64) -> f64 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * factor.ln() + 1.0
    }
}
