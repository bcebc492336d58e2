//! Prefill's int8 products over tiles of rows: the kernel chosen for the CPU and the weights
//! ([`TileKernel`]), and `Y = X W^T` with the rows packed into [`Group`]s once per tile and every
//! token multiplied by each group (the layout and the portable kernel: `tiles_int8.rs`).

use rayon::prelude::*;

use super::interleave::BlockRows;
use super::tiles_int8::{group_tokens_portable, Group, TokenActs, CHUNK, GROUP};
use crate::quant::int_form_shape;

/// Rows a parallel task multiplies: its groups stay in L2 while every token passes.
const TILE_ROWS: usize = 32;

/// Which kernel multiplies groups by tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileKernel {
    /// Plain Rust: the reference the others are tested against.
    Portable,
    /// `vpmaddubsw` + `vpmaddwd`: weights up to 63 only (pairs of products stay in i16).
    #[cfg(target_arch = "x86_64")]
    Avx2(qada_stats::simd::Avx2),
    /// `vpdpbusd`: every integer form, Q8_0's 0..255 included.
    #[cfg(target_arch = "x86_64")]
    Vnni(qada_stats::simd::AvxVnni),
    /// `vpdpbusd` in its EVEX form on 256-bit registers (AVX-512 VNNI and VL, as on Zen 4,
    /// which lacks AVX-VNNI): as `Vnni`.
    #[cfg(target_arch = "x86_64")]
    Vnni512(qada_stats::simd::Avx512Vnni),
    /// `tdpbusd` on AMX tiles, sixteen rows by sixteen tokens (`tiles_int8_amx.rs`): every
    /// integer form, `Vnni512`'s results.
    #[cfg(target_arch = "x86_64")]
    Amx(qada_stats::simd::Amx),
}

impl TileKernel {
    /// The fastest kernel this CPU runs for weights whose integers reach `umax`: AMX, else
    /// AVX-VNNI or AVX-512 VNNI, else AVX2 for integers up to 63, else (no AVX2, or `QADA_PORTABLE` set) the portable
    /// one, whose results are the same bit for bit. `None` for Q8_0 on an AVX2 CPU without
    /// VNNI: the f32 tiles are faster there than the portable kernel.
    pub(crate) fn for_weights(umax: u8) -> Option<TileKernel> {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(t) = qada_stats::simd::Amx::detect() {
                return Some(TileKernel::Amx(t));
            }
            if let Some(v) = qada_stats::simd::AvxVnni::detect() {
                return Some(TileKernel::Vnni(v));
            }
            if let Some(v) = qada_stats::simd::Avx512Vnni::detect() {
                return Some(TileKernel::Vnni512(v));
            }
            if let Some(a) = qada_stats::simd::Avx2::detect() {
                let k = TileKernel::Avx2(a);
                return k.handles(umax).then_some(k);
            }
        }
        let _ = umax;
        Some(TileKernel::Portable)
    }

    /// Whether this kernel multiplies integers up to `umax` without overflow.
    pub(crate) fn handles(self, umax: u8) -> bool {
        match self {
            TileKernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            TileKernel::Avx2(_) => umax <= 63,
            #[cfg(target_arch = "x86_64")]
            TileKernel::Vnni(_) | TileKernel::Vnni512(_) | TileKernel::Amx(_) => true,
        }
    }
}

/// [`group_tokens_portable`] by `kernel`.
#[inline]
pub(crate) fn group_tokens(
    kernel: TileKernel,
    g: &Group,
    sub: usize,
    a: &TokenActs,
    t0: usize,
    count: usize,
    out: &mut [f32],
) {
    match kernel {
        TileKernel::Portable => group_tokens_portable(g, sub, a, t0, count, out),
        #[cfg(target_arch = "x86_64")]
        TileKernel::Avx2(t) => {
            super::tiles_int8_x86::group_tokens_avx2(t, g, sub, a, t0, count, out)
        }
        #[cfg(target_arch = "x86_64")]
        TileKernel::Vnni(t) => {
            super::tiles_int8_x86::group_tokens_vnni(t, g, sub, a, t0, count, out)
        }
        #[cfg(target_arch = "x86_64")]
        TileKernel::Vnni512(t) => {
            super::tiles_int8_x86::group_tokens_vnni512(t, g, sub, a, t0, count, out)
        }
        // AMX multiplies whole tiles of sixteen (`matmul`); a group takes its VNNI kernel
        #[cfg(target_arch = "x86_64")]
        TileKernel::Amx(t) => {
            let v = t.avx512_vnni();
            super::tiles_int8_x86::group_tokens_vnni512(v, g, sub, a, t0, count, out)
        }
    }
}

/// `y[t rows + r] = sum_j w_rj x_tj` for every token of `a` and every row of the `rows` rows
/// of blocks in `w`, by `kernel` (bias not added). `None` (nothing written) when the type has
/// no integer form, `kernel` cannot take its integers, a row is not `a.k` values or `y` is
/// shorter than `a.n * rows`.
pub(crate) fn matmul(
    kernel: TileKernel,
    w: &BlockRows,
    rows: usize,
    a: &TokenActs,
    y: &mut [f32],
) -> Option<()> {
    let (ty, data, row_bytes) = (w.ty, &w.data[..], w.row_bytes);
    let (sub, umax) = int_form_shape(ty)?;
    let (n, k) = (a.n, a.k);
    if !kernel.handles(umax) || k % sub != 0 || y.len() < n.checked_mul(rows)? {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if let TileKernel::Amx(t) = kernel {
        return super::tiles_int8_amx::matmul(t, w, rows, a, y);
    }
    let tiles: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(TILE_ROWS))
        .into_par_iter()
        .map(|tile| {
            let (r0, r1) = (tile * TILE_ROWS, ((tile + 1) * TILE_ROWS).min(rows));
            let groups = (r0..r1)
                .step_by(GROUP)
                .map(|g0| {
                    if g0 + GROUP <= w.grouped {
                        // an interleaved group: its rows in GGUF's order first
                        w.with_group_rows(g0, |eight| Group::pack(ty, eight, row_bytes, 8, 0, k))
                    } else {
                        Group::pack(ty, data, row_bytes, rows, g0, k)
                    }
                })
                .collect::<Option<Vec<Group>>>()?;
            let width = r1 - r0;
            let mut out = vec![0.0f32; n * width];
            let mut part = [0.0f32; GROUP * CHUNK];
            for t0 in (0..n).step_by(CHUNK) {
                let count = CHUNK.min(n - t0);
                for (gi, g) in groups.iter().enumerate() {
                    group_tokens(kernel, g, sub, a, t0, count, &mut part);
                    let (c0, live) = (gi * GROUP, GROUP.min(width - gi * GROUP));
                    for c in 0..count {
                        out[(t0 + c) * width + c0..][..live]
                            .copy_from_slice(&part[GROUP * c..GROUP * c + live]);
                    }
                }
            }
            Some((r0, out))
        })
        .collect::<Option<Vec<_>>>()?;
    gather_tiles(&tiles, n, rows, y);
    Some(())
}

/// `y[t rows + r0 + i] = out[t width + i]` for every tile `(r0, out)` of `width = out.len() / n`
/// rows by `n` tokens: token by token in parallel, each token's row of `y` gathers its part of
/// every tile.
pub(crate) fn gather_tiles(tiles: &[(usize, Vec<f32>)], n: usize, rows: usize, y: &mut [f32]) {
    y[..n * rows]
        .par_chunks_mut(rows.max(1))
        .enumerate()
        .for_each(|(t, yt)| {
            for (r0, out) in tiles {
                let width = out.len() / n;
                yt[*r0..r0 + width].copy_from_slice(&out[t * width..(t + 1) * width]);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qlinear::QK;
    use crate::quant::{dequantize, int_form_row, GgmlType};
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const TYPES: [GgmlType; 8] = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// Offsets of the f16 fields of a block of `ty` (scales and minimums).
    fn f16_fields(ty: GgmlType) -> &'static [usize] {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q6_K => &[208],
            _ => &[0, 2],
        }
    }

    /// `rows` rows of `k` values of random blocks of `ty`, every f16 field a finite value of
    /// magnitude `scale` times a random factor in [0.5, 2) (random sign).
    fn random_rows(ty: GgmlType, rows: usize, k: usize, scale: f32, rng: &mut StdRng) -> Vec<u8> {
        let (per, bytes) = ty.block().unwrap();
        let (per, bytes) = (per as usize, bytes as usize);
        let mut data: Vec<u8> = (0..rows * k / per * bytes).map(|_| rng.gen()).collect();
        for block in data.chunks_exact_mut(bytes) {
            for &at in f16_fields(ty) {
                let v = scale * rng.gen_range(0.5f32..2.0) * if rng.gen() { 1.0 } else { -1.0 };
                block[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        data
    }

    /// Every kernel this CPU has for `umax`, the portable one first.
    fn kernels(umax: u8) -> Vec<TileKernel> {
        let mut ks = vec![TileKernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(a) = qada_stats::simd::Avx2::detect() {
                ks.push(TileKernel::Avx2(a));
            }
            if let Some(v) = qada_stats::simd::AvxVnni::detect() {
                ks.push(TileKernel::Vnni(v));
            }
            if let Some(v) = qada_stats::simd::Avx512Vnni::detect() {
                ks.push(TileKernel::Vnni512(v));
            }
            if let Some(t) = qada_stats::simd::Amx::detect() {
                ks.push(TileKernel::Amx(t));
            }
        }
        ks.retain(|k| k.handles(umax));
        ks
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// `d u + m` is the dequantized value of every type, for scales from 1e-6 to 1e3.
        #[test]
        fn integer_form_is_the_dequantized_value(
            t in 0usize..8, seed in any::<u64>(), exp in -6i32..4,
        ) {
            let ty = TYPES[t];
            let mut rng = StdRng::seed_from_u64(seed);
            let k = 512;
            let scale = 10f32.powi(exp);
            let row = random_rows(ty, 1, k, scale, &mut rng);
            let (sub, umax) = int_form_shape(ty).unwrap();
            let (mut u, mut d, mut m) = (vec![0u8; k], vec![0.0; k / sub], vec![0.0; k / sub]);
            prop_assert!(int_form_row(ty, &row, &mut u, &mut d, &mut m));
            let mut want = vec![0.0f32; k];
            prop_assert!(dequantize(ty, &row, &mut want));
            for j in 0..k {
                prop_assert!(u[j] <= umax, "{ty}: u {} above {umax}", u[j]);
                let got = d[j / sub] * u[j] as f32 + m[j / sub];
                let tol = 1e-5 * (d[j / sub].abs() * 256.0 + m[j / sub].abs());
                prop_assert!((got - want[j]).abs() <= tol, "{ty} value {j}: {got} vs {}", want[j]);
            }
        }

        /// Every kernel gives the portable kernel's result bit for bit, that result is the
        /// exact integer sum scaled (within f32 rounding), and it is the f32 product within
        /// the activations' 8-bit rounding: `|err| <= sum_j |w_j| d_x / 2` per block.
        #[test]
        fn tiles_are_the_product_up_to_the_activations_rounding(
            t in 0usize..8, seed in any::<u64>(), rows in 1usize..41, n in 1usize..37,
            blocks in 1usize..3,
        ) {
            let ty = TYPES[t];
            let mut rng = StdRng::seed_from_u64(seed);
            let k = 256 * blocks;
            let data = random_rows(ty, rows, k, 0.01, &mut rng);
            let row_bytes = data.len() / rows;
            let x: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
            let a = TokenActs::quantize(&x, n, k).unwrap();
            let (sub, umax) = int_form_shape(ty).unwrap();
            let mut results = Vec::new();
            for kernel in kernels(umax) {
                let mut y = vec![f32::NAN; n * rows];
                let w = BlockRows::new(ty, data.clone(), row_bytes, rows);
                prop_assert!(matmul(kernel, &w, rows, &a, &mut y).is_some());
                results.push((kernel, y));
            }
            let (_, base) = &results[0];
            for (kernel, y) in &results[1..] {
                for (i, (g, b)) in y.iter().zip(base).enumerate() {
                    prop_assert!(g.to_bits() == b.to_bits(), "{ty} {kernel:?} output {i}: {g} vs portable {b}");
                }
            }
            let mut w = vec![0.0f32; k];
            let (mut u, mut d, mut m) = (vec![0u8; k], vec![0.0; k / sub], vec![0.0; k / sub]);
            for r in 0..rows {
                let row = &data[r * row_bytes..(r + 1) * row_bytes];
                prop_assert!(dequantize(ty, row, &mut w));
                prop_assert!(int_form_row(ty, row, &mut u, &mut d, &mut m));
                for tk in 0..n {
                    let got = base[tk * rows + r];
                    let (mut exact, mut mag, mut f32_product, mut bound) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
                    for s in 0..k / sub {
                        let j = s * sub..(s + 1) * sub;
                        let isum: i64 = j.clone().map(|j| u[j] as i64 * a.q[tk * k + j] as i64).sum();
                        let dx = a.d[(tk * k + s * sub) / QK] as f64;
                        let term = isum as f64 * d[s] as f64 * dx + m[s] as f64 * a.sums(sub)[(tk * k) / sub + s] as f64;
                        exact += term;
                        mag += term.abs() + (isum as f64 * d[s] as f64 * dx).abs();
                        for j in j {
                            f32_product += w[j] as f64 * x[tk * k + j] as f64;
                            bound += (w[j] as f64).abs() * dx / 2.0;
                        }
                    }
                    prop_assert!((got as f64 - exact).abs() <= 1e-5 * mag + 1e-30, "{ty} row {r} token {tk}: {got} vs exact {exact}");
                    prop_assert!((got as f64 - f32_product).abs() <= bound * 1.001 + 1e-4 * mag + 1e-30,
                        "{ty} row {r} token {tk}: {got} vs f32 {f32_product} (bound {bound})");
                }
            }
        }
    }

    /// Rows of no values (a tensor with a zero dimension) give zeros on every kernel.
    #[test]
    fn rows_of_no_values_give_zeros() {
        let a = TokenActs::quantize(&[], 20, 0).unwrap();
        for ty in TYPES {
            let w = BlockRows::new(ty, Vec::new(), 0, 19);
            for kernel in kernels(int_form_shape(ty).unwrap().1) {
                let mut y = vec![f32::NAN; 20 * 19];
                assert!(
                    matmul(kernel, &w, 19, &a, &mut y).is_some(),
                    "{ty} {kernel:?}"
                );
                assert!(y.iter().all(|&v| v == 0.0), "{ty} {kernel:?}");
            }
        }
    }

    #[test]
    fn types_without_an_integer_form_and_short_outputs_are_refused() {
        let x = vec![0.5f32; 2 * 64];
        let a = TokenActs::quantize(&x, 2, 64).unwrap();
        let run = |ty: GgmlType, row: &[u8], y: &mut [f32]| {
            let w = BlockRows::new(ty, row.to_vec(), row.len(), 1);
            matmul(TileKernel::Portable, &w, 1, &a, y).is_some()
        };
        let (f16_row, q8_row) = (vec![0u8; 2 * 64], vec![0u8; 2 * 34]);
        assert!(!run(GgmlType::F16, &f16_row, &mut [0.0; 2]));
        assert!(!run(GgmlType::Q8_0, &q8_row, &mut [0.0; 1]));
        assert!(run(GgmlType::Q8_0, &q8_row, &mut [0.0; 2]));
        assert!(TokenActs::quantize(&x, 2, 48).is_none());
        assert!(TokenActs::quantize(&x, 3, 64).is_none());
    }
}
