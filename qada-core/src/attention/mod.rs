//! Softmax attention for one head over borrowed key/value slices, and the kernels beneath it.
//!
//! Public for qada-model, which runs these kernels, and hidden from the documentation: not
//! part of the API. A user's entry points are re-exported at the crate root
//! (`dense_attention`, `local_attention`, `KvSegments`, `ScoreMap`).
//!
//! `o = softmax(s) V` with `s_i = scale * q . k_i` (soft-capped on Gemma 2). One idea per
//! module:
//! - [`ScoreMap`] (`score_map`): scale and soft cap of the scores;
//! - [`KvSegments`] (`segments`): one KV head's sink, bulk and window rows and bulk moments;
//! - `exp`: [`fast_exp`], [`exp_in_place`], [`max_score`] and the constants of the reduction;
//! - `column_masses`: [`column_page_masses`], per page the log mass of scores from keys stored
//!   by column (the channel rule's scoring, the scores kept in a tile per page);
//! - `column_halves`: [`column_page_masses_in_halves`], the same masses with the pages in two
//!   halves, one a task another worker of the pool may take;
//! - [`Elem`] (`elem`): f32, f16 and q8 rows ([`qada_stats::Q8Block`], read in place), the safe entry points that check shapes and choose a
//!   kernel (the AVX-512 one for f32 and f16 block scores and accumulates when
//!   [`qada_stats::simd::Avx512::detect`] gives a token and `d % 8 == 0` or `d % 16 == 0`, else
//!   the AVX2 one when [`qada_stats::simd::Avx2::detect`] does);
//! - `portable`, `avx2`, `avx2_q8` (q8 rows), `avx512` (the column page masses),
//!   `avx512_blocks` (the GQA block kernels on 16 lanes, AVX2's bits) and `avx512_tiles` (prefill's
//!   `S = Q K^T` and `O += P V` tiles): the kernels themselves;
//! - `softmax`: the reference [`scores`], [`softmax_attend`], [`dense_attention`] and
//!   [`local_attention`];
//! - `prefetch`: [`prefetch_rows`], a run's first rows asked for while the run before it is
//!   computed (the kernels prefetch only within the rows they are given);
//! - `prefill`: [`prefill_attention`], prefill's causal attention of a block of queries in
//!   tiles of keys with a running softmax, its products through `avx512_tiles` or
//!   [`gemm_strided`] (`gemm`).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_q8;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_blocks;
#[cfg(target_arch = "x86_64")]
mod avx512_tiles;
mod column_halves;
mod column_masses;
mod column_tile;
mod elem;
mod exp;
mod exp_constants;
mod matmul;
mod portable;
mod prefetch;
mod prefill;
#[cfg(test)]
mod q8_props;
mod score_map;
mod segments;
mod softmax;
#[cfg(all(test, target_arch = "x86_64"))]
mod test_noise;

pub use column_halves::{column_page_masses_in_halves, HalvesScratch, MAX_SPLIT_COLUMNS};
pub use column_masses::column_page_masses;
pub use elem::Elem;
pub use exp::{exp_in_place, fast_exp, max_score, sum_exp};
pub use matmul::gemm_strided;
pub use portable::dot;
pub use prefetch::prefetch_rows;
pub use prefill::{prefill_attention, PrefillHead, PrefillShape, TILE as PREFILL_TILE};
pub use score_map::{softcap, ScoreMap};
pub use segments::KvSegments;
pub use softmax::{dense_attention, local_attention, scores, softmax_attend, weighted_sum};
