//! Prefill's int8 products on AMX tiles: `Y = X W^T` by `tdpbusd`, sixteen rows by sixteen
//! tokens a sub-block at a time, with `tiles_int8.rs`'s integer forms and its float steps.
//!
//! Per row `r`, token `t` and sub-block `s` (16 or 32 values) the tile gives the exact integer
//! sum `sum_j u_rj q_tj` of all 256 (row, token) pairs in one instruction; AVX-512 then adds
//! `isum (d_rs d_t) + m_rs x_ts` to a row's sixteen token lanes, in the portable kernel's order
//! (the sub-blocks in order, each step one fused multiply-add), so the result is the portable
//! kernel's bit for bit.
//!
//! Layouts:
//! - the weights: sixteen rows in integer form, row-major ([`RowTile`]); a sub-block is a
//!   16 x `S`-byte tile at a stride of `k`.
//! - the activations: sixteen tokens at a time, four values of each token side by side
//!   ([`ChunkActs`]: byte `64 e + 4 n + i` of a chunk is value `4 e + i` of its token `n`), the
//!   layout `tdpbusd` reads its second operand in; a sub-block is `S / 4` rows of 64 bytes.
//!   Their scales and sums are stored token-minor, so sixteen tokens' are one load.
//!
//! Linux hands out the tile registers on request (`qada_stats::simd::Amx::detect` asks); each
//! parallel task configures them, computes its rows, and releases them.

use std::arch::asm;
use std::arch::x86_64::*;

use rayon::prelude::*;

use super::interleave::BlockRows;
use super::tiles_int8::TokenActs;
use super::tiles_int8_matmul::gather_tiles;
use super::QK;
use crate::quant::{int_form_row, int_form_shape};
use qada_stats::simd::Amx;

/// Rows and tokens of a tile: sixteen of each (an i32 tile row is 64 bytes).
const T: usize = 16;
/// Rows a parallel task multiplies: two tiles of rows, kept in L2 while every token passes.
const TASK_ROWS: usize = 2 * T;

/// Sixteen rows of `k` values in integer form, row-major: `u[k m + j]` is value `j` of row `m`;
/// `d[16 s + m]` and `m[16 s + m]` its pair of sub-block `s`. Rows past the matrix's end are
/// zeros (their outputs are dropped).
struct RowTile {
    u: Vec<u8>,
    d: Vec<f32>,
    m: Vec<f32>,
}

impl RowTile {
    /// Rows `r0 .. r0 + 16` (those of the `rows` that exist) of `w`; `None` when a row has no
    /// integer form of `k` values.
    fn pack(w: &BlockRows, rows: usize, r0: usize, k: usize, sub: usize) -> Option<RowTile> {
        let subs = k / sub;
        let mut tile = RowTile {
            u: vec![0; T * k],
            d: vec![0.0; T * subs],
            m: vec![0.0; T * subs],
        };
        let (mut d, mut m) = (vec![0.0f32; subs], vec![0.0f32; subs]);
        let mut put = |at: usize, row: &[u8]| -> bool {
            let u = &mut tile.u[at * k..(at + 1) * k];
            if !int_form_row(w.ty, row, u, &mut d, &mut m) {
                return false;
            }
            for s in 0..subs {
                tile.d[T * s + at] = d[s];
                tile.m[T * s + at] = m[s];
            }
            true
        };
        // each row in GGUF's order, taken out of its interleaved group where it is in one
        let rb = w.row_bytes;
        let all = (r0..(r0 + T).min(rows))
            .all(|r| (r + 1) * rb <= w.data.len() && w.with_row(r, |row| put(r - r0, row)));
        if !all {
            return None;
        }
        Some(tile)
    }
}

/// The activations of [`TokenActs`] in chunks of sixteen tokens (the last one padded with
/// zeros): `q[16 k c + 64 e + 4 n + i]` is value `4 e + i` of token `16 c + n`;
/// `d[16 (k/32 c + b) + n]` its scale of block `b`, `s[16 (k/S c + s) + n]` its sum over
/// sub-block `s`.
struct ChunkActs {
    q: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl ChunkActs {
    fn new(a: &TokenActs, sub: usize) -> ChunkActs {
        let (n, k) = (a.n, a.k);
        let chunks = n.div_ceil(T);
        let (blocks, subs) = (k / QK, k / sub);
        let mut c = ChunkActs {
            q: vec![0; chunks * T * k],
            d: vec![0.0; chunks * T * blocks],
            s: vec![0.0; chunks * T * subs],
        };
        let sums = a.sums(sub);
        // (`max(1)`: no chunk is empty but for `k == 0`, where there is nothing to lay out)
        c.q.par_chunks_mut((T * k).max(1))
            .zip(c.d.par_chunks_mut((T * blocks).max(1)))
            .zip(c.s.par_chunks_mut((T * subs).max(1)))
            .enumerate()
            .for_each(|(ci, ((q, d), s))| {
                for tn in 0..T.min(n - ci * T) {
                    let t = ci * T + tn;
                    for (e, four) in a.q[t * k..(t + 1) * k].chunks_exact(4).enumerate() {
                        q[64 * e + 4 * tn..64 * e + 4 * tn + 4].copy_from_slice(four);
                    }
                    for b in 0..blocks {
                        d[T * b + tn] = a.d[t * blocks + b];
                    }
                    for ss in 0..subs {
                        s[T * ss + tn] = sums[t * subs + ss];
                    }
                }
            });
        c
    }
}

/// The tile configuration (palette 1) for sub-blocks of `sub` values: `tmm0`, `tmm1` the
/// 16 x 16 i32 sums, `tmm2`, `tmm4` sixteen rows of `sub` weight bytes, `tmm3`, `tmm5` the
/// tokens' `sub / 4` rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn new(sub: usize) -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut set = |tmm: usize, rows: usize, bytes: usize| {
            c[16 + 2 * tmm..18 + 2 * tmm].copy_from_slice(&(bytes as u16).to_le_bytes());
            c[48 + tmm] = rows as u8;
        };
        for (sums, weights, tokens) in [(0, 2, 3), (1, 4, 5)] {
            set(sums, T, 4 * T);
            set(weights, T, sub);
            set(tokens, sub / 4, 4 * T);
        }
        TileConfig(c)
    }
}

/// Adds sub-block `s`'s integer sums `isum[16 m + n]` (row `m`, token `n`) to the
/// accumulators: `acc_m += isum (d_ms dx) + m_ms xs`, lanes the tokens.
///
/// # Safety
/// AVX-512F; `tile` holds sub-block `s` (`16 (s + 1)` scales and minimums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn add_sub_block(
    acc: &mut [__m512; T],
    isum: &[i32; T * T],
    tile: &RowTile,
    s: usize,
    dx: __m512,
    xs: __m512,
) {
    for (m, a) in acc.iter_mut().enumerate() {
        // SAFETY: `isum` holds sixteen rows of sixteen; the caller's bounds for `d`, `m`.
        let i = _mm512_cvtepi32_ps(_mm512_loadu_si512(isum.as_ptr().add(T * m).cast()));
        let dd = _mm512_mul_ps(_mm512_set1_ps(*tile.d.get_unchecked(T * s + m)), dx);
        *a = _mm512_fmadd_ps(i, dd, *a);
        *a = _mm512_fmadd_ps(_mm512_set1_ps(*tile.m.get_unchecked(T * s + m)), xs, *a);
    }
}

/// `out[16 m + n]`: row `m` of `tile` by token `n` of chunk `c`, every sub-block of `S` values.
///
/// # Safety
/// AMX-INT8 with the tile registers configured by [`TileConfig::new`]`(S)` on this thread,
/// AVX-512F; `tile` and `acts` hold `k` values (`k` a multiple of 32 and of `S`), `acts` at
/// least `c + 1` chunks.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn tile_by_chunk<const S: usize>(
    tile: &RowTile,
    acts: &ChunkActs,
    c: usize,
    k: usize,
    out: &mut [f32; T * T],
) {
    #[repr(C, align(64))]
    struct Sums([[i32; T * T]; 2]);
    let mut sums = Sums([[0; T * T]; 2]);
    let (subs, blocks) = (k / S, k / QK);
    // SAFETY (the pointers below): chunk `c` holds `16 k` values, `16 k / 32` scales and
    // `16 k / S` sums; a sub-block's weights are 16 rows of `S` bytes at a stride of `k` inside
    // `16 k` bytes, its tokens `S / 4` rows of 64 bytes inside the chunk.
    let q = acts.q.as_ptr().add(c * T * k);
    let dx = acts.d.as_ptr().add(c * T * blocks);
    let xs = acts.s.as_ptr().add(c * T * subs);
    let u = tile.u.as_ptr();
    let sums0 = sums.0[0].as_mut_ptr();
    let sums1 = sums.0[1].as_mut_ptr();
    let mut acc = [_mm512_setzero_ps(); T];
    let mut s = 0;
    while s + 2 <= subs {
        // two sub-blocks in two sum tiles: the second product runs while the first is stored
        // SAFETY: the reads and writes named above; the tiles are configured for `S`.
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tileloadd tmm2, [{w0} + {k}]",
            "tileloadd tmm3, [{x0} + {x_stride}]",
            "tileloadd tmm4, [{w1} + {k}]",
            "tileloadd tmm5, [{x1} + {x_stride}]",
            "tdpbusd tmm0, tmm2, tmm3",
            "tdpbusd tmm1, tmm4, tmm5",
            "tilestored [{s0} + {s_stride}], tmm0",
            "tilestored [{s1} + {s_stride}], tmm1",
            w0 = in(reg) u.add(s * S),
            w1 = in(reg) u.add((s + 1) * S),
            k = in(reg) k,
            x0 = in(reg) q.add(s * S / 4 * 64),
            x1 = in(reg) q.add((s + 1) * S / 4 * 64),
            x_stride = in(reg) 64usize,
            s0 = in(reg) sums0,
            s1 = in(reg) sums1,
            s_stride = in(reg) 64usize,
            options(nostack),
        );
        for (i, ss) in [s, s + 1].into_iter().enumerate() {
            let d = _mm512_loadu_ps(dx.add(T * (ss * S / QK)));
            let x = _mm512_loadu_ps(xs.add(T * ss));
            add_sub_block(&mut acc, &sums.0[i], tile, ss, d, x);
        }
        s += 2;
    }
    if s < subs {
        // SAFETY: as above, one sub-block.
        asm!(
            "tilezero tmm0",
            "tileloadd tmm2, [{w0} + {k}]",
            "tileloadd tmm3, [{x0} + {x_stride}]",
            "tdpbusd tmm0, tmm2, tmm3",
            "tilestored [{s0} + {s_stride}], tmm0",
            w0 = in(reg) u.add(s * S),
            k = in(reg) k,
            x0 = in(reg) q.add(s * S / 4 * 64),
            x_stride = in(reg) 64usize,
            s0 = in(reg) sums0,
            s_stride = in(reg) 64usize,
            options(nostack),
        );
        let d = _mm512_loadu_ps(dx.add(T * (s * S / QK)));
        let x = _mm512_loadu_ps(xs.add(T * s));
        add_sub_block(&mut acc, &sums.0[0], tile, s, d, x);
    }
    for (m, a) in acc.iter().enumerate() {
        // SAFETY: `out` holds sixteen rows of sixteen.
        _mm512_storeu_ps(out.as_mut_ptr().add(T * m), *a);
    }
}

/// Rows `r0 ..` of one task (up to two tiles) by every token: `out[t width + i]` is row
/// `r0 + i` by token `t`.
///
/// # Safety
/// AMX-INT8 granted to this process, AVX-512F; the tiles and `acts` hold `k` values, `acts`
/// chunks of `n` tokens, `sub` is 16 or 32 and divides `k`.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn task(
    tiles: &[RowTile],
    acts: &ChunkActs,
    n: usize,
    k: usize,
    sub: usize,
    width: usize,
) -> Vec<f32> {
    let config = TileConfig::new(sub);
    // SAFETY: a 64-byte palette-1 configuration within the limits (16 rows, 64 bytes).
    asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
    let mut out = vec![0.0f32; n * width];
    let mut part = [0.0f32; T * T];
    for c in 0..n.div_ceil(T) {
        for (ti, tile) in tiles.iter().enumerate() {
            // SAFETY: configured for `sub` above; the caller's bounds.
            if sub == 16 {
                tile_by_chunk::<16>(tile, acts, c, k, &mut part);
            } else {
                tile_by_chunk::<32>(tile, acts, c, k, &mut part);
            }
            let (m0, live) = (ti * T, T.min(width - ti * T));
            for tn in 0..T.min(n - c * T) {
                let t = c * T + tn;
                for m in 0..live {
                    out[t * width + m0 + m] = part[T * m + tn];
                }
            }
        }
    }
    // SAFETY: gives the tile registers back (the next task configures them again).
    asm!("tilerelease", options(nostack, nomem));
    out
}

/// `y[t rows + r] = sum_j w_rj x_tj` for every token of `a` and every row of `w` on AMX tiles,
/// [`super::tiles_int8_matmul::matmul`]'s result bit for bit (bias not added). `None` (nothing
/// written) as there.
pub(crate) fn matmul(
    _proof: Amx,
    w: &BlockRows,
    rows: usize,
    a: &TokenActs,
    y: &mut [f32],
) -> Option<()> {
    let (sub, _) = int_form_shape(w.ty)?;
    let (n, k) = (a.n, a.k);
    if k % sub != 0 || !k.is_multiple_of(QK) || y.len() < n.checked_mul(rows)? {
        return None;
    }
    if a.q.len() < n * k || a.d.len() * QK < n * k || a.sums(sub).len() * sub < n * k {
        return None;
    }
    let acts = ChunkActs::new(a, sub);
    let tiles: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(TASK_ROWS))
        .into_par_iter()
        .map(|task_i| {
            let (r0, r1) = (task_i * TASK_ROWS, ((task_i + 1) * TASK_ROWS).min(rows));
            let tiles = (r0..r1)
                .step_by(T)
                .map(|t0| RowTile::pack(w, rows, t0, k, sub))
                .collect::<Option<Vec<_>>>()?;
            // SAFETY: the token proves AMX-INT8 (granted) and AVX-512F; every tile and chunk
            // holds `k` values, `sub` is 16 or 32 and divides `k` (checked above).
            Some((r0, unsafe { task(&tiles, &acts, n, k, sub, r1 - r0) }))
        })
        .collect::<Option<Vec<_>>>()?;
    gather_tiles(&tiles, n, rows, y);
    Some(())
}
