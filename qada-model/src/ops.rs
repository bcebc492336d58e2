//! Dense math of the transformer: RMSNorm, RoPE, gated activations, matrix products.

use qada_core::attention::fast_exp;
use rayon::prelude::*;

use crate::family::Activation;

/// `1 / sqrt(mean(x^2) + eps)`, the sum of squares in f64.
fn rms_factor(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    (1.0 / (ss / x.len() as f64 + eps as f64).sqrt()) as f32
}

/// `y = x / sqrt(mean(x^2) + eps) * w` (sum of squares in f64).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let inv = rms_factor(x, eps);
    for ((o, &xi), &wi) in y.iter_mut().zip(x).zip(w) {
        *o = xi * inv * wi;
    }
}

/// [`rms_norm`] in place.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let inv = rms_factor(x, eps);
    for (o, &wi) in x.iter_mut().zip(w) {
        *o = *o * inv * wi;
    }
}

/// `x / (1 + e^(-z))` with `e^(-z)` from [`fast_exp`] (relative error below 3e-7, no library
/// call, so loops over it vectorize); its argument is held at 87 or below so that it stays
/// finite (`e^87` already makes the result 0 to f32 precision).
#[inline(always)]
fn over_one_plus_exp(x: f32, z: f32) -> f32 {
    x / (1.0 + fast_exp((-z).min(87.0)))
}

/// `silu(g) * u`, in place into `g`: `silu(g) = g / (1 + e^(-g))`.
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    for (a, &b) in g.iter_mut().zip(u) {
        *a = over_one_plus_exp(*a, *a) * b;
    }
}

/// `gelu_tanh(g) * u`, in place into `g`, with
/// `gelu_tanh(g) = g/2 (1 + tanh y) = g / (1 + e^(-2 y))`, `y = sqrt(2/pi) (g + 0.044715 g^3)`
/// (the second form has no cancellation where `tanh y` nears -1).
pub fn geglu_tanh(g: &mut [f32], u: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for (a, &b) in g.iter_mut().zip(u) {
        let x = *a;
        let y = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
        *a = over_one_plus_exp(x, 2.0 * y) * b;
    }
}

/// `act(g) * u` in place into `g`, for the family's activation.
pub fn gated(act: Activation, g: &mut [f32], u: &[f32]) {
    match act {
        Activation::SiLU => swiglu(g, u),
        Activation::GeluTanh => geglu_tanh(g, u),
    }
}

/// `y = W x` for a row-major `rows x cols` matrix, output rows split across threads.
///
/// # Panics
/// When `w` is shorter than `rows * cols` or `y` than `rows` (safe indexing).
pub fn matvec(w: &[f32], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(w.len(), rows * cols);
    let chunk = (rows / (4 * rayon::current_num_threads().max(1))).max(16);
    y[..rows]
        .par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(c, out)| {
            let r0 = c * chunk;
            for (i, o) in out.iter_mut().enumerate() {
                let row = &w[(r0 + i) * cols..(r0 + i + 1) * cols];
                *o = qada_core::attention::dot(row, x);
            }
        });
}

/// Whether `len` holds `a * b` values (false when the product overflows).
fn holds(len: usize, a: usize, b: usize) -> bool {
    a.checked_mul(b).is_some_and(|need| len >= need)
}

/// `Y = X W^T`: `X` is `n x k` row-major, `W` is `m x k` row-major, `Y` is `n x m` (the first
/// `n * k`, `m * k` and `n * m` values of the slices).
///
/// # Panics
/// When a slice is shorter than its shape (checked once per call).
pub fn matmul_t(x: &[f32], n: usize, k: usize, w: &[f32], m: usize, y: &mut [f32]) {
    assert!(
        holds(x.len(), n, k) && holds(w.len(), m, k) && holds(y.len(), n, m),
        "matmul_t: X {n} x {k}, W {m} x {k}, Y {n} x {m} do not fit slices of {}, {}, {}",
        x.len(),
        w.len(),
        y.len()
    );
    if n == 0 || m == 0 {
        return;
    }
    // SAFETY: the assert above keeps every index the strides describe (row-major `n x k`,
    // `m x k`, `n x m`) inside the three slices; `y` is borrowed mutably, so it aliases neither
    // `x` nor `w`.
    unsafe {
        gemm::gemm(
            n,
            m,
            k,
            y.as_mut_ptr(),
            1,
            m as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(rayon::current_num_threads()),
        );
    }
}

pub use qada_core::attention::gemm_strided;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_matches_naive() {
        let (n, k, m) = (5, 7, 3);
        let x: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.3).sin()).collect();
        let w: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.7).cos()).collect();
        let mut y = vec![0.0; n * m];
        matmul_t(&x, n, k, &w, m, &mut y);
        for i in 0..n {
            for j in 0..m {
                let e: f32 = (0..k).map(|t| x[i * k + t] * w[j * k + t]).sum();
                assert!((y[i * m + j] - e).abs() < 1e-4);
            }
        }
        let mut v = vec![0.0; m];
        matvec(&w, m, k, &x[..k], &mut v);
        for j in 0..m {
            assert!((v[j] - y[j]).abs() < 1e-4);
        }
    }

    proptest::proptest! {
        /// The gated activations agree with their library-call definitions
        /// (`g / (1 + exp(-g))`, `g/2 (1 + tanh(y))`) to f32 precision, overflow included.
        #[test]
        fn gated_activations_equal_their_definitions(x in -120.0f32..120.0, u in -3.0f32..3.0) {
            let silu = x / (1.0 + (-x as f64).exp() as f32) * u;
            let y = 0.797_884_6 * (x + 0.044715 * x * x * x);
            let gelu = 0.5 * x * (1.0 + (y as f64).tanh() as f32) * u;
            for (act, want) in [(Activation::SiLU, silu), (Activation::GeluTanh, gelu)] {
                let mut g = [x];
                gated(act, &mut g, &[u]);
                let tol = 1e-6 * (1.0 + want.abs());
                proptest::prop_assert!((g[0] - want).abs() <= tol, "{:?}({}) * {}: {} vs {}", act, x, u, g[0], want);
            }
        }
    }

    #[test]
    fn gelu_tanh_matches_known_values() {
        // gelu_tanh(x) from PyTorch's gelu(approximate="tanh")
        for (x, want) in [
            (-3.0f32, -0.003_637_392),
            (-1.0, -0.158_808),
            (0.0, 0.0),
            (0.5, 0.345_714),
            (2.0, 1.954_597_7),
        ] {
            let mut g = [x];
            geglu_tanh(&mut g, &[2.0]);
            assert!(
                (g[0] - 2.0 * want).abs() < 1e-5,
                "{x}: {} vs {want}",
                g[0] / 2.0
            );
        }
        let mut g = [1.5f32];
        gated(Activation::SiLU, &mut g, &[1.0]);
        assert!((g[0] - 1.5 / (1.0 + (-1.5f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn rms_norm_in_place_equals_the_copying_one() {
        let x: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let w: Vec<f32> = (0..16).map(|i| 1.0 + i as f32 * 0.1).collect();
        let mut y = vec![0.0; 16];
        rms_norm(&x, &w, 1e-6, &mut y);
        let mut z = x.clone();
        rms_norm_inplace(&mut z, &w, 1e-6);
        assert_eq!(y, z);
    }
}
