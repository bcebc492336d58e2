//! The constants of `exp` and `ln` over scores, shared by the scalar path (`exp.rs`) and the
//! AVX2 and AVX-512 kernels, so that every path computes the same polynomials. One exception:
//! the AVX2 and AVX-512 page masses take their exponentials by [`EXP2_TAYLOR`], cheaper and
//! within `6e-6` (the masses of every path agree within `1e-4`, the kernels' test).

/// `ln 2` split for the Cody-Waite reduction of `fast_exp`: `LN2_HI` has few enough bits
/// that `n * LN2_HI` is exact for the `n` that occur.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
/// The low part of `ln 2` (`ln 2 - LN2_HI`).
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients of `exp(r)`, highest degree first (Horner order): `1/7!, ..., 1/1!, 1`.
pub(crate) const EXP_TAYLOR: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
/// Cephes' `logf` coefficients of `(ln(1 + f) - f + f^2 / 2) / f^3`, highest degree first, for
/// `f` in `[sqrt(1/2) - 1, sqrt 2 - 1)` (the vector `ln` of the column page masses).
pub(crate) const LOGF: [f32; 9] = [
    7.037_683_6e-2,
    -1.151_461e-1,
    1.167_699_9e-1,
    -1.242_014_1e-1,
    1.424_932_3e-1,
    -1.666_805_8e-1,
    2.000_071_5e-1,
    -2.499_999_4e-1,
    3.333_333e-1,
];
/// Inputs below this give 0 (`exp` would be subnormal).
pub(crate) const EXP_FLOOR: f32 = -87.0;
/// Taylor coefficients of `2^f = exp(f ln 2)` for `f` in `[-1/2, 1/2]`, highest degree first
/// (Horner order): `(ln 2)^k / k!` for `k = 5, ..., 0`. Relative error below `2.5e-6`
/// (`(ln 2 / 2)^6 / 6!`): the exponentials of the AVX2 and AVX-512 page masses, estimates that
/// need less than the attention's own weights.
pub(crate) const EXP2_TAYLOR: [f32; 6] = [
    1.333_355_8e-3,
    9.618_129e-3,
    5.550_411e-2,
    2.402_265e-1,
    std::f32::consts::LN_2,
    1.0,
];

/// The largest relative error of an `exp` estimate on `L` lanes against f64's, over inputs
/// from the floor (-87) to 20 in steps finer than the polynomial's range (the estimates'
/// tests on 8 and 16 lanes).
#[cfg(test)]
pub(crate) fn worst_relative_error<const L: usize>(estimate: impl Fn([f32; L]) -> [f32; L]) -> f64 {
    let mut worst = 0.0f64;
    let mut x = EXP_FLOOR;
    while x < 20.0 {
        let lanes: [f32; L] = std::array::from_fn(|i| x + i as f32 * 1.7e-4);
        for (&a, &b) in lanes.iter().zip(&estimate(lanes)) {
            let e = (a as f64).exp();
            worst = worst.max(((b as f64 - e) / e).abs());
        }
        x += 0.001_37;
    }
    worst
}
