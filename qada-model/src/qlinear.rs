//! Linear layers whose weights stay in their GGUF blocks.
//!
//! Decoding reads every weight once per token, so the bytes read decide the speed. Q4_1,
//! Q4_0 and Q8_0 rows are multiplied directly against activations quantized to 8 bits per
//! 32-value block ([`Q8Acts`]): per block, `d_w d_x sum(q_w q_x)` (plus `m_w d_x sum(q_x)` for
//! Q4_1), with AVX2 kernels chosen at run time and a portable fallback that gives the same
//! integer sums. Every other type (F16, BF16, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) is dequantized
//! block by block into a small buffer and multiplied in f32. F32 weights use f32 products.
//!
//! The integer sums are exact; what differs from the f32 reference is the 8-bit rounding of
//! the activations (relative error up to 1/254 of a block's largest value).

use rayon::prelude::*;

use crate::ops::{gemm_strided, matmul_t};
use crate::quant::{dequantize, GgmlType};

const QK: usize = 32;

/// Weights of a linear layer: f32, or raw GGUF blocks (row-major, `cols / block` blocks a row).
#[derive(Clone, Debug)]
pub enum Storage {
    /// Row-major f32.
    F32(Vec<f32>),
    /// Raw blocks of one ggml type.
    Blocks {
        ty: GgmlType,
        data: Vec<u8>,
        row_bytes: usize,
    },
}

/// `y = W x (+ b)` with `W` of `rows x cols`.
#[derive(Clone, Debug)]
pub struct QLinear {
    /// Output size.
    pub rows: usize,
    /// Input size.
    pub cols: usize,
    /// The weights.
    pub storage: Storage,
    /// Optional bias.
    pub bias: Option<Vec<f32>>,
}

/// Activations prepared for the products: f32 with per-block sums, and (for
/// [`ActPrecision::Int8`]) quantized per block of 32: `x ~ d * q` with `q` in [-127, 127].
#[derive(Clone, Debug, Default)]
pub struct Q8Acts {
    /// The f32 activations (for the types multiplied in f32).
    pub f: Vec<f32>,
    /// Scale of each block.
    pub d: Vec<f32>,
    /// `d * sum(q)` of each block.
    pub s: Vec<f32>,
    /// Quantized values.
    pub q: Vec<i8>,
    /// Sum of the f32 values of each block.
    pub sums: Vec<f32>,
    /// The f32 activations of each 32-block in the order the AVX2 Q4 kernel unpacks nibbles
    /// ([`nibble_order`]), the last block padded with zeros.
    pub f_nib: Vec<f32>,

    /// Which product to use: f32 activations (near-exact) or int8 (faster, coarser).
    pub precision: ActPrecision,
}

/// How activations enter the quantized products.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActPrecision {
    /// f32 activations against unpacked weights: the f32 path's result up to summation order.
    #[default]
    F32,
    /// Activations rounded to 8 bits per 32-block, integer products (llama.cpp's scheme).
    Int8,
}

impl Q8Acts {
    /// Quantize `x` (any length; a partial last block is padded with zeros).
    pub fn quantize(&mut self, x: &[f32]) {
        let nb = x.len().div_ceil(QK);
        self.f.clear();
        self.f.extend_from_slice(x);
        self.sums.clear();
        self.sums
            .extend(x.chunks(QK).map(|c| c.iter().sum::<f32>()));
        self.f_nib.clear();
        self.f_nib.resize(nb * QK, 0.0);
        for (b, out) in self.f_nib.chunks_exact_mut(QK).enumerate() {
            for (p, o) in out.iter_mut().enumerate() {
                *o = x.get(b * QK + nibble_order(p)).copied().unwrap_or(0.0);
            }
        }
        if self.precision == ActPrecision::F32 {
            return;
        }
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.q.resize(nb * QK, 0);
        for b in 0..nb {
            let xs = &x[b * QK..((b + 1) * QK).min(x.len())];
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let q = &mut self.q[b * QK..(b + 1) * QK];
            let mut sum = 0i32;
            for (i, qi) in q.iter_mut().enumerate() {
                let v = xs.get(i).map_or(0, |&v| (v * inv).round() as i32);
                *qi = v.clamp(-127, 127) as i8;
                sum += *qi as i32;
            }
            self.d[b] = d;
            self.s[b] = d * sum as f32;
        }
    }
}

/// Which value of a Q4 block the AVX2 kernel finds in position `p` (0..32) of its four 8-lane
/// vectors: vector `k = p / 8` shifts the block's four 32-bit words (read twice) right by
/// `8k` in lanes 0-3 and `8k + 4` in lanes 4-7, so lane `l < 4` holds the low nibble of byte
/// `4l + k` (value `4l + k`) and lane `4 + l` its high nibble (value `16 + 4l + k`).
pub fn nibble_order(p: usize) -> usize {
    let (k, lane) = (p / 8, p % 8);
    if lane < 4 {
        4 * lane + k
    } else {
        16 + 4 * (lane - 4) + k
    }
}

#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Portable kernels: integer sums per block, then f32.
pub mod portable {
    use super::*;

    /// One Q4_1 row against quantized activations.
    pub fn dot_q4_1(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = 0.0f32;
        for (b, blk) in row.chunks_exact(20).enumerate() {
            let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
            let q = &a.q[b * QK..];
            let mut s = 0i32;
            for j in 0..16 {
                s += (blk[4 + j] & 0x0f) as i32 * q[j] as i32
                    + (blk[4 + j] >> 4) as i32 * q[j + 16] as i32;
            }
            acc += d * a.d[b] * s as f32 + m * a.s[b];
        }
        acc
    }

    /// One Q4_0 row.
    pub fn dot_q4_0(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = 0.0f32;
        for (b, blk) in row.chunks_exact(18).enumerate() {
            let d = f16_at(blk, 0);
            let q = &a.q[b * QK..];
            let mut s = 0i32;
            for j in 0..16 {
                s += ((blk[2 + j] & 0x0f) as i32 - 8) * q[j] as i32
                    + ((blk[2 + j] >> 4) as i32 - 8) * q[j + 16] as i32;
            }
            acc += d * a.d[b] * s as f32;
        }
        acc
    }

    /// One Q8_0 row.
    pub fn dot_q8_0(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = 0.0f32;
        for (b, blk) in row.chunks_exact(34).enumerate() {
            let d = f16_at(blk, 0);
            let q = &a.q[b * QK..b * QK + QK];
            let s: i32 = blk[2..34]
                .iter()
                .zip(q)
                .map(|(&w, &x)| (w as i8) as i32 * x as i32)
                .sum();
            acc += d * a.d[b] * s as f32;
        }
        acc
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Q8Acts, QK};

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn f16(blk: &[u8], i: usize) -> f32 {
        let bits = u16::from_le_bytes([blk[i], blk[i + 1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(bits as i16)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// 16 bytes of nibbles -> 32 unsigned bytes: low nibbles then high nibbles.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let raw = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(raw, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    /// Sum of u8 x i8 products of 32 pairs, as 8 f32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_u8_i8(w: __m256i, x: __m256i) -> __m256 {
        let p16 = _mm256_maddubs_epi16(w, x);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }

    /// Q4_1 row against f32 activations: `sum_b d_b sum_j q_j x_j + m_b sum_j x_j`.
    ///
    /// Few cross-lane shuffles (the shuffle port bound the kernel before): the 16 quant bytes
    /// are loaded into both halves of a register, each of four variable right shifts
    /// (`vpsrlvd`) and a mask leaves one nibble per 32-bit lane, converted to f32 and multiplied
    /// by the activations stored in that order ([`super::nibble_order`]). `[d, m]` is
    /// converted straight from memory.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds whole Q4_1 blocks for `x_nib` (the activations in nibble
    /// order) and `sums` the block sums of the activations.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_1_f32(row: &[u8], x_nib: &[f32], sums: &[f32]) -> f32 {
        let nb = row.len() / 20;
        assert!(x_nib.len() >= nb * QK && sums.len() >= nb);
        let mask = _mm256_set1_epi32(0x0f);
        let shifts = [
            _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4),
            _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12),
            _mm256_setr_epi32(16, 16, 16, 16, 20, 20, 20, 20),
            _mm256_setr_epi32(24, 24, 24, 24, 28, 28, 28, 28),
        ];
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut mins = _mm_setzero_ps();
        let (r, x) = (row.as_ptr(), x_nib.as_ptr());
        for (b, sum) in sums[..nb].iter().enumerate() {
            let blk = r.add(20 * b);
            // [d, m, 0, 0]: only the 4 scale bytes
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()));
            // lane 1 gathers m * sum(x); the broadcast is a load, not a shuffle
            mins = _mm_fmadd_ps(dm, _mm_broadcast_ss(sum), mins);
            let w = _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(4) as *const __m128i));
            let xb = x.add(QK * b);
            let q = |k: usize| {
                _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(w, shifts[k]), mask))
            };
            let s0 = _mm256_fmadd_ps(
                q(0),
                _mm256_loadu_ps(xb),
                _mm256_mul_ps(q(1), _mm256_loadu_ps(xb.add(8))),
            );
            let s1 = _mm256_fmadd_ps(
                q(2),
                _mm256_loadu_ps(xb.add(16)),
                _mm256_mul_ps(q(3), _mm256_loadu_ps(xb.add(24))),
            );
            let d = _mm256_broadcastss_ps(dm);
            acc0 = _mm256_fmadd_ps(d, s0, acc0);
            acc1 = _mm256_fmadd_ps(d, s1, acc1);
        }
        hsum(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(mins))
    }

    /// Q8_0 row against f32 activations.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `row` holds whole Q8_0 blocks for `x`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_f32(row: &[u8], x: &[f32]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (b, blk) in row.chunks_exact(34).enumerate() {
            let d = f16(blk, 0);
            let xp = x.as_ptr().add(b * QK);
            let mut s = _mm256_setzero_ps();
            for k in 0..4 {
                let w = _mm_loadl_epi64(blk.as_ptr().add(2 + 8 * k) as *const __m128i);
                s = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(w)),
                    _mm256_loadu_ps(xp.add(8 * k)),
                    s,
                );
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
        hsum(acc)
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `row` holds whole Q4_1 blocks for `a`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_1(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut mins = 0.0f32;
        for (b, blk) in row.chunks_exact(20).enumerate() {
            let (d, m) = (f16(blk, 0), f16(blk, 2));
            let w = nibbles(blk.as_ptr().add(4));
            let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK) as *const __m256i);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), dot_u8_i8(w, x), acc);
            mins += m * a.s[b];
        }
        hsum(acc) + mins
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `row` holds whole Q4_0 blocks for `a`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let eight = _mm256_set1_epi8(8);
        for (b, blk) in row.chunks_exact(18).enumerate() {
            let d = f16(blk, 0);
            let w = _mm256_sub_epi8(nibbles(blk.as_ptr().add(2)), eight);
            let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK) as *const __m256i);
            let p = dot_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), p, acc);
        }
        hsum(acc)
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `row` holds whole Q8_0 blocks for `a`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0(row: &[u8], a: &Q8Acts) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (b, blk) in row.chunks_exact(34).enumerate() {
            let d = f16(blk, 0);
            let w = _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i);
            let x = _mm256_loadu_si256(a.q.as_ptr().add(b * QK) as *const __m256i);
            let p = dot_u8_i8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), p, acc);
        }
        hsum(acc)
    }
}

/// Which kernels this CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// AVX2 + FMA + F16C.
    Avx2,
    /// Plain Rust.
    Portable,
}

/// Detected once: AVX2 kernels when the CPU has AVX2, FMA and F16C (and `QADA_PORTABLE` is not
/// set), the portable ones otherwise.
pub fn kernels() -> Kernels {
    static K: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::env::var_os("QADA_PORTABLE").is_none()
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Kernels::Avx2;
            }
        }
        Kernels::Portable
    })
}

/// Dot product of one row of blocks with the activations, by the given kernels.
pub fn dot_row(ty: GgmlType, row: &[u8], a: &Q8Acts, k: Kernels) -> f32 {
    match (ty, k) {
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_1, Kernels::Avx2) if a.precision == ActPrecision::F32 => unsafe {
            avx2::dot_q4_1_f32(row, &a.f_nib, &a.sums)
        },
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q8_0, Kernels::Avx2) if a.precision == ActPrecision::F32 => unsafe {
            avx2::dot_q8_0_f32(row, &a.f)
        },
        (GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q4_0, _)
            if a.precision == ActPrecision::F32 =>
        {
            dot_dequant(ty, row, &a.f)
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_1, Kernels::Avx2) => unsafe { avx2::dot_q4_1(row, a) },
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q4_0, Kernels::Avx2) => unsafe { avx2::dot_q4_0(row, a) },
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q8_0, Kernels::Avx2) => unsafe { avx2::dot_q8_0(row, a) },
        (GgmlType::Q4_1, _) => portable::dot_q4_1(row, a),
        (GgmlType::Q4_0, _) => portable::dot_q4_0(row, a),
        (GgmlType::Q8_0, _) => portable::dot_q8_0(row, a),
        (ty, _) => dot_dequant(ty, row, &a.f),
    }
}

/// Dequantize block by block into a stack buffer and multiply in f32.
fn dot_dequant(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    let (per, bytes) = ty.block().expect("loaded types have blocks");
    let (per, bytes) = (per as usize, bytes as usize);
    let mut buf = [0.0f32; 256];
    let mut acc = 0.0f32;
    for (blk, xs) in row.chunks_exact(bytes).zip(x.chunks(per)) {
        let ok = dequantize(ty, blk, &mut buf[..per]);
        debug_assert!(ok);
        acc += qada_core::attention::dot(&buf[..per], xs);
    }
    acc
}

impl QLinear {
    /// A layer from raw GGUF blocks (`data` holds `rows` rows of `cols` values).
    pub fn from_blocks(
        rows: usize,
        cols: usize,
        ty: GgmlType,
        data: Vec<u8>,
        bias: Option<Vec<f32>>,
    ) -> Option<Self> {
        let row_bytes = ty.bytes_for(cols as u64)? as usize;
        if data.len() != rows * row_bytes || !ty.can_dequantize() {
            return None;
        }
        let storage = if ty == GgmlType::F32 {
            Storage::F32(
                data.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
        } else {
            Storage::Blocks {
                ty,
                data,
                row_bytes,
            }
        };
        Some(QLinear {
            rows,
            cols,
            storage,
            bias,
        })
    }

    /// A layer from f32 weights.
    pub fn from_f32(rows: usize, cols: usize, w: Vec<f32>, bias: Option<Vec<f32>>) -> Self {
        QLinear {
            rows,
            cols,
            storage: Storage::F32(w),
            bias,
        }
    }

    /// Bytes of weights read per product.
    pub fn weight_bytes(&self) -> usize {
        match &self.storage {
            Storage::F32(w) => w.len() * 4,
            Storage::Blocks { data, .. } => data.len(),
        }
    }

    /// Row `r` as f32.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        match &self.storage {
            Storage::F32(w) => out.copy_from_slice(&w[r * self.cols..(r + 1) * self.cols]),
            Storage::Blocks {
                ty,
                data,
                row_bytes,
            } => {
                let ok = dequantize(*ty, &data[r * row_bytes..(r + 1) * row_bytes], out);
                debug_assert!(ok);
            }
        }
    }

    /// `y = W x (+ b)`; `a` holds `x` quantized (and as f32). Output rows split across threads.
    pub fn matvec(&self, a: &Q8Acts, y: &mut [f32]) {
        let k = kernels();
        let chunk = (self.rows / (4 * rayon::current_num_threads().max(1))).max(16);
        y[..self.rows]
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(c, out)| {
                let r0 = c * chunk;
                match &self.storage {
                    Storage::F32(w) => {
                        for (i, o) in out.iter_mut().enumerate() {
                            *o = qada_core::attention::dot(
                                &w[(r0 + i) * self.cols..(r0 + i + 1) * self.cols],
                                &a.f,
                            );
                        }
                    }
                    Storage::Blocks {
                        ty,
                        data,
                        row_bytes,
                    } => {
                        for (i, o) in out.iter_mut().enumerate() {
                            let r = r0 + i;
                            *o = dot_row(*ty, &data[r * row_bytes..(r + 1) * row_bytes], a, k);
                        }
                    }
                }
            });
        if let Some(b) = &self.bias {
            y.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
    }

    /// `Y = X W^T (+ b)` for `n` rows of `X`: f32 products, weights dequantized a tile of rows at
    /// a time (tiles in parallel) for quantized storage.
    pub fn matmul_rows(&self, x: &[f32], n: usize, y: &mut [f32]) {
        let (rows, cols) = (self.rows, self.cols);
        match &self.storage {
            Storage::F32(w) => matmul_t(x, n, cols, w, rows, y),
            Storage::Blocks { .. } => {
                const TILE: usize = 128;
                let tiles: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(TILE))
                    .into_par_iter()
                    .map(|t| {
                        let (r0, r1) = (t * TILE, ((t + 1) * TILE).min(rows));
                        let mut w = vec![0.0f32; (r1 - r0) * cols];
                        for (i, r) in (r0..r1).enumerate() {
                            self.row_f32(r, &mut w[i * cols..(i + 1) * cols]);
                        }
                        // out tile: (r1 - r0) x n = W_tile X^T
                        let mut out = vec![0.0f32; (r1 - r0) * n];
                        gemm_strided(r1 - r0, n, cols, &mut out, n, &w, cols, 1, x, 1, cols);
                        (r0, out)
                    })
                    .collect();
                for (r0, out) in tiles {
                    let m = out.len() / n.max(1);
                    for i in 0..n {
                        for j in 0..m {
                            y[i * rows + r0 + j] = out[j * n + i];
                        }
                    }
                }
            }
        }
        if let Some(b) = &self.bias {
            for row in y[..n * rows].chunks_exact_mut(rows) {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q4_1_block(d: f32, m: f32, q: &[u8; 32]) -> Vec<u8> {
        let mut b = half::f16::from_f32(d).to_le_bytes().to_vec();
        b.extend_from_slice(&half::f16::from_f32(m).to_le_bytes());
        for j in 0..16 {
            b.push((q[j] & 0x0f) | (q[j + 16] << 4));
        }
        b
    }

    #[test]
    fn kernels_agree_with_dequantized_f32_products() {
        let cols = 128;
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let mut a = Q8Acts {
            precision: ActPrecision::Int8,
            ..Default::default()
        };
        a.quantize(&x);
        let mut row = Vec::new();
        for b in 0..cols / 32 {
            let q: [u8; 32] = std::array::from_fn(|i| ((i * 7 + b * 3) % 16) as u8);
            row.extend(q4_1_block(0.05 + b as f32 * 0.01, -0.3, &q));
        }
        let mut w = vec![0.0; cols];
        assert!(dequantize(GgmlType::Q4_1, &row, &mut w));
        let exact: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
        let p = dot_row(GgmlType::Q4_1, &row, &a, Kernels::Portable);
        let v = dot_row(GgmlType::Q4_1, &row, &a, kernels());
        assert!(
            (p - v).abs() <= 1e-4 * (1.0 + p.abs()),
            "portable {p} vs {:?} {v}",
            kernels()
        );
        // activation rounding: at most half a step (d_x / 2) per value
        let bound: f32 = (0..cols).map(|i| w[i].abs() * a.d[i / 32] * 0.5).sum();
        assert!(
            (p - exact).abs() <= bound + 1e-4,
            "{p} vs exact {exact}, bound {bound}"
        );
        // f32 activations: the exact product up to summation order, also for quants of 15
        // (bytes 0xff, NaN if read as f16) and a row of more than one 8-block group
        let mut f = Q8Acts::default();
        f.quantize(&x);
        for k in [Kernels::Portable, kernels()] {
            let v = dot_row(GgmlType::Q4_1, &row, &f, k);
            assert!(
                (v - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                "{k:?}: {v} vs {exact}"
            );
        }
        let full = q4_1_block(0.5, -0.25, &[15; 32]).repeat(cols / 32);
        let want: f32 = x.iter().map(|&v| (0.5 * 15.0 - 0.25) * v).sum();
        for k in [Kernels::Portable, kernels()] {
            let v = dot_row(GgmlType::Q4_1, &full, &f, k);
            assert!(
                (v - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{k:?}: {v} vs {want}"
            );
        }
    }
}
