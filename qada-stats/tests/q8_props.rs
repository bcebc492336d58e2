//! q8_0 blocks: every value comes back within `d / 2` (and the product's rounding), quants stay in `[-127, 127]`, and the
//! scale is the smallest f16 not below `amax / 127`.

use proptest::prelude::*;
use qada_stats::{f16, Q8Block, Rows};

/// Blocks of every kind: ordinary, zeros, huge, tiny (f16-subnormal scales) and one outlier.
fn block() -> impl Strategy<Value = [f32; 32]> {
    let plain = prop::array::uniform32(-4.0f32..4.0);
    let zeros = Just([0.0f32; 32]);
    let huge = prop::array::uniform32(-8e6f32..8e6);
    let tiny = prop::array::uniform32(-1e-5f32..1e-5);
    let outlier = (
        prop::array::uniform32(-0.1f32..0.1),
        0usize..32,
        -2e3f32..2e3,
    )
        .prop_map(|(mut x, i, v)| {
            x[i] = v;
            x
        });
    prop_oneof![plain, zeros, huge, tiny, outlier]
}

proptest! {
    #[test]
    fn round_trip_within_half_a_step(x in block()) {
        let b = Q8Block::quantize(&x);
        let d = b.d.to_f32();
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // the scale: not below amax / 127, and the f16 below it would be
        prop_assert!(d >= amax / 127.0);
        if amax > 0.0 && b.d.to_bits() > 1 {
            prop_assert!(f16::from_bits(b.d.to_bits() - 1).to_f32() < amax / 127.0);
        }
        let mut y = [0.0f32; 32];
        b.dequantize(&mut y);
        for (&a, (&r, &q)) in x.iter().zip(y.iter().zip(&b.qs)) {
            prop_assert!((-127..=127).contains(&q));
            // x * (1/d) in f32 is x / d within 2 ulps, and |x / d| <= 127: the rounding can
            // land past the half step by up to 127 * 2^-23 of d (found at x = 1.85e6, d = 62656)
            let bound = d * (0.5 + 128.0 * f32::EPSILON);
            prop_assert!((a - r).abs() <= bound, "{a} -> {r}, d = {d}");
        }
        // the rows view dequantizes the same
        let blocks = [b, b];
        let rows = Rows::Q8(&blocks);
        prop_assert_eq!(rows.len(), 64);
        prop_assert_eq!(rows.bytes(), 68);
        let mut row = [0.0f32; 32];
        rows.row_f32(1, &mut row);
        prop_assert_eq!(row, y);
    }
}

proptest! {
    /// Moments of q8 rows are those of the dequantized rows (rows of 64, blocks across the
    /// 256-row chunks the conversion works in); rows off the block size are refused.
    #[test]
    fn moments_of_q8_rows_are_those_of_the_dequantized_rows(
        rows in 1usize..600,
        seed in any::<u64>(),
    ) {
        use qada_stats::KeyMoments;
        use rand::{Rng, SeedableRng};
        let d = 64;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let x: Vec<f32> = (0..rows * d).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
        let mut blocks = Vec::new();
        Q8Block::quantize_into(&x, &mut blocks);
        let mut deq = vec![0.0f32; x.len()];
        Q8Block::dequantize_into(&blocks, &mut deq);
        let mut a = KeyMoments::new(d);
        a.push_rows_of(Rows::Q8(&blocks)).unwrap();
        let mut b = KeyMoments::new(d);
        b.push_rows_of(Rows::F32(&deq)).unwrap();
        prop_assert_eq!(a.count(), b.count());
        for (x, y) in a.mean().iter().zip(b.mean()) {
            prop_assert!((x - y).abs() <= 1e-9 * (1.0 + y.abs()), "mean {x} vs {y}");
        }
        for (x, y) in a.covariance().iter().zip(b.covariance()) {
            prop_assert!((x - y).abs() <= 1e-9 * (1.0 + y.abs()), "cov {x} vs {y}");
        }
        let mut odd = KeyMoments::new(48);
        prop_assert!(odd.push_rows_of(Rows::Q8(&blocks[..1])).is_err());
    }
}
