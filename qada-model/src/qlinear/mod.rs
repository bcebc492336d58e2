//! Linear layers whose weights stay in their GGUF blocks.
//!
//! Decoding reads every weight once per token, so the bytes read decide the speed. Rows are
//! multiplied in their blocks against activations prepared once per product ([`Q8Acts`]).
//! With f32 activations (the default) Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K rows have
//! AVX2 kernels (quants unpacked to f32 lanes by shifts and masks, FMA with the activations);
//! with int8 activations (8 bits per 32-value block) the same types have integer kernels,
//! per 32 values `d_w d_x sum(q_w q_x)` (plus `m_w` times the activations' block sum for
//! Q4_1), AVX2 or portable with the same integer sums. K-quant rows (Q4_K, Q5_K, Q6_K) meet
//! the activations' Q8_K form instead (one scale per 256 values, llama.cpp's scheme): per
//! block `d_w d_x (sum_s sc_s sum(q_w q_x) - sum_s m_s sum(q_x))` with the sub-block scales
//! and mins as integers, one float product per 256 values. With AVX-512 VNNI the int8
//! products of the 32-value types (eight rows at a time) and of Q5_K and Q6_K against Q8_K
//! take `vpdpbusd` kernels, the same bits as AVX2's. Every other combination is dequantized
//! block by block into a small buffer and multiplied in f32. F32 weights use f32 products.
//! The SIMD kernels run only with a token from CPU detection ([`Kernels::detect`]).
//!
//! The integer sums are exact; what differs from the f32 reference is the 8-bit rounding of
//! the activations (error up to 1/254 of the largest value of their block: 32 values, 256
//! for K-quant rows).
//!
//! Files, one idea each: `acts.rs` ([`Q8Acts`], the activations prepared once per product),
//! `dispatch.rs` ([`Kernels`], [`dot_row`]: length checks and the choice of kernel),
//! `avx2.rs` (f32 activations), `avx2_rows.rs` (int8 activations, the 32-value types eight
//! rows at a time) and `avx512_rows.rs` (the same with AVX-512 VNNI), `avx2_int8.rs` (int8
//! activations, the K-quants), `avx512_int8.rs` (Q5_K and Q6_K against Q8_K with AVX-512 VNNI)
//! and `portable.rs` (the kernels), `tiles_int8.rs` and `tiles_int8_x86.rs` (prefill's
//! products with int8 activations: weights in integer form, eight rows by four tokens per
//! kernel call), this file ([`QLinear`]: products of a whole layer, and prefill's f32 tiles).
//! Blocks are read through the typed views of [`crate::quant`].
//!
//! A 1 x 32 Q4_1 layer (one block, `q d + m` with d = 0.5, m = -1) multiplied in its blocks:
//!
//! ```
//! use qada_model::qlinear::{dot_row, ActPrecision, Kernels, Q8Acts, QLinear};
//! use qada_model::quant::GgmlType;
//!
//! let half = |v: f32| half::f16::from_f32(v).to_le_bytes();
//! let q: Vec<u8> = (0..32).map(|i| i % 16).collect();
//! let mut bytes = [half(0.5), half(-1.0)].concat();
//! bytes.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
//! let values: Vec<f32> = q.iter().map(|&q| q as f32 * 0.5 - 1.0).collect();
//!
//! // a 1 x 32 layer in its blocks against x = 1: the sum of the row
//! let layer = QLinear::from_blocks(1, 32, GgmlType::Q4_1, bytes, None)?;
//! let mut x = Q8Acts::new(ActPrecision::F32);
//! x.quantize(&[1.0; 32]);
//! let mut out = [0.0f32];
//! layer.matvec(&x, &mut out)?;
//! assert!((out[0] - values.iter().sum::<f32>()).abs() < 1e-4);
//!
//! // lengths are checked: 31 activations do not fit a row of 32
//! x.quantize(&[1.0; 31]);
//! assert!(layer.matvec(&x, &mut out).is_err());
//! assert!(dot_row(GgmlType::Q4_1, &[0; 19], &x, Kernels::detect()).is_err());
//! # Ok::<(), qada_model::ModelError>(())
//! ```

use rayon::prelude::*;

use crate::ops::{gemm_strided, matmul_t};
use crate::quant::{dequantize, int_form_shape, GgmlType};
use crate::{ModelError, Result};
use interleave::BlockRows;
use tiles_int8::TokenActs;
use tiles_int8_matmul::TileKernel;

mod acts;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_int8;
#[cfg(target_arch = "x86_64")]
mod avx2_rows;
#[cfg(target_arch = "x86_64")]
mod avx512_int8;
#[cfg(target_arch = "x86_64")]
mod avx512_rows;
mod dispatch;
mod interleave;
mod portable;
mod prefetch;
mod tiles_int8;
#[cfg(target_arch = "x86_64")]
mod tiles_int8_amx;
mod tiles_int8_matmul;
#[cfg(target_arch = "x86_64")]
mod tiles_int8_x86;

pub use acts::{ActPrecision, Q8Acts};
pub use dispatch::{dot_row, Kernels};

/// Values per block of the 32-value types, and per block of [`Q8Acts`].
const QK: usize = 32;

/// Weights of a linear layer: f32, or raw GGUF blocks (row-major, `cols / block` blocks a row).
#[derive(Clone, Debug)]
pub(crate) enum Storage {
    /// Row-major f32, `rows * cols` values.
    F32(Vec<f32>),
    /// Raw blocks of one ggml type that [`dequantize`] handles, `rows` rows of `cols`
    /// values, whole groups of eight rows interleaved for decoding's eight-row kernels where
    /// the type has them (`interleave.rs`: Q4_0, Q4_1, Q5_0 and Q8_0).
    Blocks(BlockRows),
}

/// `y = W x (+ b)` with `W` of `rows x cols`.
///
/// The constructors check that the weights and the bias have the stated shape; the products
/// check the activations and the output against it once per call.
#[derive(Clone, Debug)]
pub struct QLinear {
    rows: usize,
    cols: usize,
    storage: Storage,
    bias: Option<Vec<f32>>,
}

fn length(what: impl Into<String>, expected: usize, found: usize) -> ModelError {
    ModelError::Length {
        what: what.into(),
        expected: expected.to_string(),
        found,
    }
}

impl QLinear {
    /// A layer from raw GGUF blocks: `data` holds `rows` rows of `cols` values of type `ty`.
    ///
    /// # Errors
    /// [`ModelError::UnsupportedType`] for a type without dequantization,
    /// [`ModelError::Length`] when `cols` is not whole blocks, `data` not `rows` rows of them,
    /// or the bias not `rows` values.
    pub fn from_blocks(
        rows: usize,
        cols: usize,
        ty: GgmlType,
        data: Vec<u8>,
        bias: Option<Vec<f32>>,
    ) -> Result<Self> {
        let row_bytes = dispatch::row_bytes(ty, cols, "layer")?;
        let total = rows.checked_mul(row_bytes);
        if total != Some(data.len()) {
            return Err(length(
                format!("bytes of {rows} rows of {cols} {ty} values"),
                total.unwrap_or(usize::MAX),
                data.len(),
            ));
        }
        let storage = if ty == GgmlType::F32 {
            Storage::F32(
                data.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
        } else {
            Storage::Blocks(BlockRows::new(ty, data, row_bytes, rows))
        };
        Self::with_bias(rows, cols, storage, bias)
    }

    /// A layer from row-major f32 weights, `rows * cols` values.
    ///
    /// # Errors
    /// [`ModelError::Length`] when `w` or the bias has another length.
    pub fn from_f32(rows: usize, cols: usize, w: Vec<f32>, bias: Option<Vec<f32>>) -> Result<Self> {
        let total = rows.checked_mul(cols);
        if total != Some(w.len()) {
            return Err(length(
                format!("weights of a {rows} x {cols} layer"),
                total.unwrap_or(usize::MAX),
                w.len(),
            ));
        }
        Self::with_bias(rows, cols, Storage::F32(w), bias)
    }

    fn with_bias(
        rows: usize,
        cols: usize,
        storage: Storage,
        bias: Option<Vec<f32>>,
    ) -> Result<Self> {
        if let Some(b) = &bias {
            if b.len() != rows {
                return Err(length(
                    format!("bias of a layer of {rows} rows"),
                    rows,
                    b.len(),
                ));
            }
        }
        Ok(QLinear {
            rows,
            cols,
            storage,
            bias,
        })
    }

    /// Output size.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input size.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The type the weights are kept in (F32 once dequantized).
    pub fn weight_type(&self) -> GgmlType {
        match &self.storage {
            Storage::F32(_) => GgmlType::F32,
            Storage::Blocks(b) => b.ty,
        }
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    /// Bytes of weights read per product.
    pub fn weight_bytes(&self) -> usize {
        match &self.storage {
            Storage::F32(w) => w.len() * 4,
            Storage::Blocks(b) => b.data.len(),
        }
    }

    /// Row `r` as f32, into `out` of `cols` values.
    ///
    /// # Errors
    /// [`ModelError::Length`] when `r` is not a row or `out` not `cols` long.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<()> {
        if r >= self.rows {
            return Err(length(
                format!("row index of a layer of {} rows (at most)", self.rows),
                self.rows.saturating_sub(1),
                r,
            ));
        }
        if out.len() != self.cols {
            return Err(length("output of one row", self.cols, out.len()));
        }
        self.row_into(r, out);
        Ok(())
    }

    /// [`QLinear::row_f32`] after its checks.
    fn row_into(&self, r: usize, out: &mut [f32]) {
        match &self.storage {
            Storage::F32(w) => out.copy_from_slice(&w[r * self.cols..(r + 1) * self.cols]),
            Storage::Blocks(b) => {
                let ok = b.with_row(r, |row| dequantize(b.ty, row, out));
                debug_assert!(ok, "checked by from_blocks");
            }
        }
    }

    /// `y = W x (+ b)`, with `a` holding `x` prepared ([`Q8Acts::quantize`]); output rows split
    /// across threads.
    ///
    /// # Errors
    /// [`ModelError::Length`] when `a` does not hold `cols` values or `y` is not `rows` long.
    pub fn matvec(&self, a: &Q8Acts, y: &mut [f32]) -> Result<()> {
        Self::matvec_stacked(&[self], a, y)
    }

    /// `y = [W_1; W_2; ...] x (+ b)`: several matrices of `cols` columns against one prepared
    /// input, their outputs one after another in `y` (`rows_1 + rows_2 + ...` long). One
    /// parallel loop over all the rows, where a `matvec` each would start and join the pool once
    /// per matrix (a layer's query, key and value products: three times).
    ///
    /// # Errors
    /// [`ModelError::Length`] when a matrix's `cols` is not `a.len()` or `y` is not the sum of
    /// the rows long.
    pub fn matvec_stacked(ws: &[&QLinear], a: &Q8Acts, y: &mut [f32]) -> Result<()> {
        for w in ws {
            if a.len() != w.cols {
                return Err(length(
                    "activations of a matrix-vector product",
                    w.cols,
                    a.len(),
                ));
            }
        }
        let rows: usize = ws.iter().map(|w| w.rows).sum();
        if y.len() != rows {
            return Err(length("output of a matrix-vector product", rows, y.len()));
        }
        let k = Kernels::detect();
        // chunks of whole groups of eight rows (a group's rows in one chunk)
        let chunk = (rows / (4 * rayon::current_num_threads().max(1))).max(16) / 8 * 8;
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, out)| {
            // the matrix of the chunk's first row, and where that matrix starts in `y`
            let (mut m, mut start) = (0, 0);
            let mut i = 0;
            while i < out.len() {
                let r = c * chunk + i;
                while r >= start + ws[m].rows {
                    start += ws[m].rows;
                    m += 1;
                }
                // a group of eight rows at once where this matrix interleaved them and they
                // are all this chunk's; a row's product is the same bits either way
                let (local, end) = (r - start, c * chunk + out.len());
                if local.is_multiple_of(8) && local + 8 <= ws[m].grouped() && r + 8 <= end {
                    ws[m].group_dot(local, a, k, &mut out[i..i + 8]);
                    i += 8;
                    continue;
                }
                out[i] = ws[m].row_dot(local, a, k);
                i += 1;
            }
        });
        let mut start = 0;
        for w in ws {
            if let Some(b) = &w.bias {
                y[start..start + w.rows]
                    .iter_mut()
                    .zip(b)
                    .for_each(|(v, b)| *v += b);
            }
            start += w.rows;
        }
        Ok(())
    }

    /// Rows interleaved by groups of eight (0 for f32 weights and types without eight-row
    /// kernels).
    #[inline]
    fn grouped(&self) -> usize {
        match &self.storage {
            Storage::F32(_) => 0,
            Storage::Blocks(b) => b.grouped,
        }
    }

    /// Rows `g0..g0 + 8` of `W` (an interleaved group: `g0 % 8 == 0`, `g0 + 8 <=
    /// grouped()`) times the prepared activations into `out`: by the eight-row kernels where
    /// they take these activations, else row by row out of the group; lengths checked by the
    /// caller.
    #[inline]
    fn group_dot(&self, g0: usize, a: &Q8Acts, k: Kernels, out: &mut [f32]) {
        let Storage::Blocks(b) = &self.storage else {
            return out
                .iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = self.row_dot(g0 + i, a, k));
        };
        // checked: `from_blocks` made rows of `cols` values, `a` holds `cols`; the eight-row
        // kernels prefetch block by block
        if let Some(v) = dispatch::dot_group8_checked(b.ty, b.group(g0), b.row_bytes, a, k) {
            out.copy_from_slice(&v);
            return;
        }
        prefetch::ahead(&b.data, g0 * b.row_bytes, 8 * b.row_bytes);
        b.with_group_rows(g0, |rows| {
            for (o, row) in out.iter_mut().zip(rows.chunks_exact(b.row_bytes)) {
                *o = dispatch::dot_row_checked(b.ty, row, a, k);
            }
        });
    }

    /// Row `r` of `W` times the prepared activations (lengths checked by the caller).
    #[inline]
    fn row_dot(&self, r: usize, a: &Q8Acts, k: Kernels) -> f32 {
        match &self.storage {
            Storage::F32(w) => {
                qada_core::attention::dot(&w[r * self.cols..(r + 1) * self.cols], &a.f)
            }
            // checked: `from_blocks` made rows of `cols` values, `a` holds `cols`
            Storage::Blocks(b) => {
                prefetch::ahead(&b.data, r * b.row_bytes, b.row_bytes);
                b.with_row(r, |row| dispatch::dot_row_checked(b.ty, row, a, k))
            }
        }
    }

    /// `Y = X W^T (+ b)` for the first `n` rows of `X` (`n x cols`, row-major) into the first
    /// `n` rows of `Y` (`n x rows`): f32 products, weights dequantized a tile of rows at a time
    /// (tiles in parallel) for quantized storage.
    ///
    /// # Errors
    /// [`ModelError::Length`] when `x` holds fewer than `n * cols` values or `y` fewer than
    /// `n * rows`.
    pub fn matmul_rows(&self, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        let (need_x, need_y) = (n.checked_mul(cols), n.checked_mul(rows));
        if need_x.is_none_or(|v| x.len() < v) {
            return Err(length(
                format!("inputs of {n} rows of {cols} (at least)"),
                need_x.unwrap_or(usize::MAX),
                x.len(),
            ));
        }
        if need_y.is_none_or(|v| y.len() < v) {
            return Err(length(
                format!("outputs of {n} rows of {rows} (at least)"),
                need_y.unwrap_or(usize::MAX),
                y.len(),
            ));
        }
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
                            self.row_into(r, &mut w[i * cols..(i + 1) * cols]);
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
        self.add_bias(n, y);
        Ok(())
    }

    /// `Y = X W^T (+ b)` as [`QLinear::matmul_rows`], with the activations rounded to 8 bits
    /// per 32 values and integer products where the weights have an integer form and this
    /// CPU a kernel for it (AVX2 for integers up to 63, AVX-VNNI for Q8_0 too, the portable
    /// kernel without AVX2, all with the same results); otherwise (Q8_0 without VNNI) the
    /// f32 tiles of [`QLinear::matmul_rows`]. `xq` is `x` prepared by
    /// [`QLinear::prepare_int8`] (once for several matrices of the same input).
    ///
    /// # Errors
    /// As [`QLinear::matmul_rows`].
    pub fn matmul_rows_int8(
        &self,
        x: &[f32],
        xq: &Int8Rows,
        n: usize,
        y: &mut [f32],
    ) -> Result<()> {
        if let Storage::Blocks(blocks) = &self.storage {
            let ty = &blocks.ty;
            let a = &xq.0;
            let kernel = int_form_shape(*ty).and_then(|(_, umax)| TileKernel::for_weights(umax));
            if let (Some(kernel), true) = (kernel, a.n == n && a.k == self.cols) {
                if tiles_int8_matmul::matmul(kernel, blocks, self.rows, a, y).is_some() {
                    self.add_bias(n, y);
                    return Ok(());
                }
            }
        }
        self.matmul_rows(x, n, y)
    }

    /// The first `n` rows of `x` (`n x cols`) quantized for [`QLinear::matmul_rows_int8`];
    /// `None` when `cols` is not a multiple of 32 or `x` is short (the f32 tiles then run).
    pub fn prepare_int8(x: &[f32], n: usize, cols: usize) -> Option<Int8Rows> {
        TokenActs::quantize(x, n, cols).map(Int8Rows)
    }

    /// Adds the bias to each of the first `n` rows of `y`.
    fn add_bias(&self, n: usize, y: &mut [f32]) {
        if let (Some(b), true) = (&self.bias, self.rows > 0) {
            for row in y[..n * self.rows].chunks_exact_mut(self.rows) {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
    }
}

/// Rows of activations quantized once for several [`QLinear::matmul_rows_int8`] products.
#[derive(Clone, Debug)]
pub struct Int8Rows(TokenActs);

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
        let mut a = Q8Acts::new(ActPrecision::Int8);
        a.quantize(&x);
        let mut row = Vec::new();
        for b in 0..cols / 32 {
            let q: [u8; 32] = std::array::from_fn(|i| ((i * 7 + b * 3) % 16) as u8);
            row.extend(q4_1_block(0.05 + b as f32 * 0.01, -0.3, &q));
        }
        let mut w = vec![0.0; cols];
        assert!(dequantize(GgmlType::Q4_1, &row, &mut w));
        let exact: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
        let p = dot_row(GgmlType::Q4_1, &row, &a, Kernels::Portable).unwrap();
        let v = dot_row(GgmlType::Q4_1, &row, &a, Kernels::detect()).unwrap();
        assert!(
            (p - v).abs() <= 1e-4 * (1.0 + p.abs()),
            "portable {p} vs {:?} {v}",
            Kernels::detect()
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
        for k in [Kernels::Portable, Kernels::detect()] {
            let v = dot_row(GgmlType::Q4_1, &row, &f, k).unwrap();
            assert!(
                (v - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                "{k:?}: {v} vs {exact}"
            );
        }
        let full = q4_1_block(0.5, -0.25, &[15; 32]).repeat(cols / 32);
        let want: f32 = x.iter().map(|&v| (0.5 * 15.0 - 0.25) * v).sum();
        for k in [Kernels::Portable, Kernels::detect()] {
            let v = dot_row(GgmlType::Q4_1, &full, &f, k).unwrap();
            assert!(
                (v - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "{k:?}: {v} vs {want}"
            );
        }
    }
}
