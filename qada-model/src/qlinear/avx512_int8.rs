//! AVX-512 VNNI kernels of Q5_K and Q6_K against the activations' Q8_K form ([`Q8K`], one
//! scale per 256 values), one row at a time: `avx2_int8.rs`'s `*_q8k` kernels with the
//! integer sums on 512-bit registers.
//!
//! A block's product is the one `avx2_int8.rs` defines: `d d_x sum_s sc_s sum_j q_j q_x,j`
//! less `dmin d_x sum_s m_s sum_j q_x,j` (Q5_K) or less the offset
//! `d d_x 32 sum_t sc_t sum_(j in t) q_x,j` (Q6_K), the activation sums from the 16-value
//! `bsums`; integers until one FMA per block. What changes is how the sums are made:
//! `vpdpbusd` multiplies 64 unsigned weight quants by 64 int8 activations and adds each four
//! products into one of sixteen i32 lanes, where AVX2 takes `vpmaddubsw` and `vpmaddwd` on half
//! the width. Such a lane fits in i16 (bounds at each kernel), so `vpdpwssd` by a scale whose
//! upper 16 bits are zero adds `sc * lane` exactly: one instruction per 64 values for the
//! scales, no saturating step anywhere.
//!
//! The same bits as AVX2: lane `j` of a register's upper 256 bits holds values `4 j .. 4 j + 3`
//! of a sub-block (or quarter) as lane `j` of its lower half does, so the two halves added give
//! a block's eight i32 lanes of `avx2_int8.rs` exactly (integer sums, exact in any order). From
//! there the float steps are AVX2's instructions in AVX2's order (the mins' 128-bit steps too):
//! a row's product is the same bits through either kernel set (the tests compare the bits).
//!
//! Which kernels are here is measured (criterion `qlinear/matvec_896x4864_*_Int8`, the two
//! kernel sets alternated): on Zen 4, whose 512-bit operations take two 256-bit passes, Q6_K
//! 75.0 against AVX2's 88.5 us, Q5_K 93.4 against 94.1 (equal), Q4_K 77.9 against 71.0; on an
//! Intel Xeon (family 6 model 207, full-width AVX-512) Q5_K 175-205 against 178-225 us and
//! Q4_K 164-181 against 167-185 (within the noise). So Q5_K and Q6_K take these kernels and
//! Q4_K stays on AVX2's (its 512-bit kernel of the same shape is in commit 34b8b0f).
//!
//! Every kernel is `unsafe` and enables AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI: the
//! caller holds a [`qada_stats::simd::Avx512Vnni`] token and has checked that `k` holds the
//! row's blocks (`dispatch`).

use std::arch::x86_64::*;

use qada_stats::simd::x86::hsum;

use super::acts::{BSUM, Q8K, QK_K};
use super::avx2::f16;
use crate::quant::{k4_scales_mins, BlockQ5K, BlockQ6K};

/// `a` in the lower 256 bits, `b` in the upper.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn halves(a: __m256i, b: __m256i) -> __m512i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
}

/// Sixteen i32 lanes to eight: lane `j` plus lane `8 + j`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: register operations only; the CPU features are the caller's proof.
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Q5_K row against the Q8_K activations `k`: per block `b`,
/// `d d_x sum_s sc_s sum_j q_j q_x,j - dmin d_x sum_s m_s sum_j q_x,j` over the eight
/// sub-blocks `s` of 32 values, both sums in i32, one FMA each per block
/// (`avx2_int8::dot_q5_k_q8k`'s bits). The block's 32 bytes of fifth bits `qh` sit in both
/// halves of a register: bit `s` of byte `l` is the fifth bit of value `l` of sub-block `s`.
///
/// Pair `g` of sub-blocks: the 32 bytes `qs[32 g ..]` in both halves, the upper half shifted
/// right by 4, masked to nibbles (sub-block `2 g` below, `2 g + 1` above), plus 16 where the
/// fifth bit is set, meet the 64 activations `64 g ..` as they lie.
///
/// Bounds: `q <= 31`, `|q_x| <= 127`: a `vpdpbusd` lane is at most
/// `4 * 31 * 127 = 15748 < 2^15`, so its low 16 bits are its value; `vpdpwssd` by the scale
/// (`<= 63`, upper 16 bits zero) adds `<= 992124` per pair, four pairs `<= 3968496` per lane,
/// the halves added `<= 7.9e6 < 2^24` (AVX2's lanes: exact in f32). Mins as AVX2: a
/// sub-block's activation sum `<= 4064` (i16), `vpmaddwd` by the mins (`<= 63`) `<= 512064`.
///
/// # Safety
/// The CPU supports the features enabled; `k` holds at least `row.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn dot_q5_k_q8k(row: &[BlockQ5K], k: &Q8K) -> f32 {
    let nb = row.len();
    assert!(k.q.len() >= QK_K * nb && k.d.len() >= nb && k.bsums.len() >= QK_K / BSUM * nb);
    let (low, fifth) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x10));
    let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm_setzero_ps());
    for (b, blk) in row.iter().enumerate() {
        let sm = k4_scales_mins(&blk.scales);
        // SAFETY: the 16-byte load reads exactly `sm`, the 32-byte one exactly `qh`; the
        // assert makes `k.bsums` hold 16 sums per block and `k.q` 256 values per block, so
        // the loads at 16 b and at 256 b + 64 g (64 bytes) are in them; 32 g + 32 <= 128
        // bytes of `qs`.
        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.qh.as_ptr().cast::<__m256i>()));
        let sm = _mm_loadu_si128(sm.as_ptr().cast::<__m128i>());
        // the eight scales as i32 (lanes 0-7; 8-15 the mins), upper 16 bits zero
        let scales = _mm512_cvtepu8_epi32(sm);
        // the mins: AVX2's steps
        let mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm));
        let bs = _mm256_loadu_si256(k.bsums.as_ptr().add(QK_K / BSUM * b).cast::<__m256i>());
        let sub = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        let mins = _mm_madd_epi16(mins, sub);
        let dx = k.d[b];
        acc_m = _mm_fmadd_ps(
            _mm_set1_ps(f16(blk.dmin) * dx),
            _mm_cvtepi32_ps(mins),
            acc_m,
        );
        let mut sums = _mm512_setzero_si512();
        for g in 0..4 {
            let q = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                blk.qs.as_ptr().add(32 * g).cast::<__m256i>(),
            ));
            let x = _mm512_loadu_si512(k.q.as_ptr().add(QK_K * b + 64 * g).cast());
            // low nibbles (sub-block 2 g) below, high nibbles (2 g + 1) above
            let mut w = _mm512_and_si512(_mm512_mask_srli_epi16::<4>(q, 0xffff_0000, q), low);
            let bits = halves(
                _mm256_set1_epi8((1u8 << (2 * g)) as i8),
                _mm256_set1_epi8((1u8 << (2 * g + 1)) as i8),
            );
            w = _mm512_mask_add_epi8(w, _mm512_test_epi8_mask(qh, bits), w, fifth);
            let sc = _mm512_permutexvar_epi32(
                halves(
                    _mm256_set1_epi32(2 * g as i32),
                    _mm256_set1_epi32(2 * g as i32 + 1),
                ),
                scales,
            );
            let lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
            sums = _mm512_dpwssd_epi32(sums, lanes, sc);
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16(blk.d) * dx),
            _mm256_cvtepi32_ps(fold(sums)),
            acc,
        );
    }
    hsum(acc) - hsum(_mm256_zextps128_ps256(acc_m))
}

/// Q6_K row against the Q8_K activations `k`: per block,
/// `d d_x (sum_j sc_t(j) q_j q_x,j - 32 sum_t sc_t sum_(j in t) q_x,j)`, `q_j` the unsigned
/// 6-bit quant, `t` the 16 groups of 16 values (`avx2_int8::dot_q6_k_q8k`'s bits).
///
/// Half `n` (values `128 n ..`) is two runs of 64 values, each one register: low four bits
/// from the 64 bytes `ql[64 n ..]`, low nibbles (run `2 n`) or high (run `2 n + 1`); high two
/// from `qh[32 n + l]`, bits 0-1 (values `l`) and 2-3 (`32 + l`) for run `2 n`, bits 4-5 and
/// 6-7 for run `2 n + 1`. Lane `m` of run `u` sums values `64 u + 4 m ..`, of group `4 u + m / 4`.
///
/// Bounds: `q <= 63`, `|q_x| <= 127`: a `vpdpbusd` lane is at most `4 * 63 * 127 = 32004
/// < 2^15`; `vpdpwssd` by the scale (`|sc| <= 128`, its 16 bits zero-extended) adds `<= 4.1e6`
/// per run, four runs `<= 1.7e7` per lane, the halves added `<= 3.3e7` (AVX2's lanes). The
/// offset as AVX2: `|bsum| <= 2032`, `vpmaddwd` by the scales `<= 520192`, times 32
/// `<= 1.7e7`; the difference stays below `5e7 < 2^31`.
///
/// # Safety
/// The CPU supports the features enabled; `k` holds at least `row.len()` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn dot_q6_k_q8k(row: &[BlockQ6K], k: &Q8K) -> f32 {
    let nb = row.len();
    assert!(k.q.len() >= QK_K * nb && k.d.len() >= nb && k.bsums.len() >= QK_K / BSUM * nb);
    let (m4, m30) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    let groups = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let mut acc = _mm256_setzero_ps();
    for (b, blk) in row.iter().enumerate() {
        // SAFETY: the 16-byte load reads exactly `scales`; the assert makes `k.bsums` hold
        // 16 sums per block and `k.q` 256 values per block, so the loads at 16 b and at
        // 256 b + 64 u (64 bytes, u < 4) are in them; n < 2: 64 n + 64 <= 128 bytes of `ql`,
        // 32 n + 32 <= 64 of `qh`.
        let sc8 = _mm_loadu_si128(blk.scales.as_ptr().cast::<__m128i>());
        let bs = _mm256_loadu_si256(k.bsums.as_ptr().add(QK_K / BSUM * b).cast::<__m256i>());
        let offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bs);
        // the 16 scales as i16 zero-extended to i32: `vpdpwssd` multiplies by the low 16 bits
        let scales = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), _mm512_set1_epi32(0xffff));
        let mut sums = _mm512_setzero_si512();
        for n in 0..2 {
            let l = _mm512_loadu_si512(blk.ql.as_ptr().add(64 * n).cast());
            let h = _mm256_loadu_si256(blk.qh.as_ptr().add(32 * n).cast::<__m256i>());
            // bits 0-1 and 4-5 below, 2-3 and 6-7 above; 16-bit shifts move bits across
            // bytes, every mask keeps only a byte's own bits
            let h = halves(h, _mm256_srli_epi16::<2>(h));
            let runs = [
                _mm512_or_si512(
                    _mm512_and_si512(l, m4),
                    _mm512_and_si512(_mm512_slli_epi16::<4>(h), m30),
                ),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                    _mm512_and_si512(h, m30),
                ),
            ];
            for (c, q) in runs.into_iter().enumerate() {
                let u = 2 * n + c;
                let x = _mm512_loadu_si512(k.q.as_ptr().add(QK_K * b + 64 * u).cast());
                let at = _mm512_add_epi32(groups, _mm512_set1_epi32(4 * u as i32));
                let sc = _mm512_permutexvar_epi32(at, scales);
                let lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x);
                sums = _mm512_dpwssd_epi32(sums, lanes, sc);
            }
        }
        let sums = _mm256_sub_epi32(fold(sums), _mm256_slli_epi32(offset, 5));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16(blk.d) * k.d[b]),
            _mm256_cvtepi32_ps(sums),
            acc,
        );
    }
    hsum(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qlinear::{avx2_int8, ActPrecision, Q8Acts};
    use crate::quant::{view, GgmlType};
    use proptest::prelude::*;
    use qada_stats::simd::Avx512Vnni;

    /// `n` bytes of the xorshift stream from `seed`.
    fn stream(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// `nb` blocks of `ty`: random bytes (`fill` 0), every byte 0xff (1: every quant, scale and
    /// min at its largest, Q6_K's scales -1) or 0 (2); f16 scales in [-2, 2] from `scales`.
    fn row(ty: GgmlType, nb: usize, seed: u64, fill: u8, scales: &[u16; 8]) -> Vec<u8> {
        let bytes = ty.block().unwrap().1 as usize;
        let mut row = match fill {
            0 => stream(seed, nb * bytes),
            1 => vec![0xff; nb * bytes],
            _ => vec![0; nb * bytes],
        };
        let at: &[usize] = if ty == GgmlType::Q6_K {
            &[208]
        } else {
            &[0, 2]
        };
        for (b, blk) in row.chunks_exact_mut(bytes).enumerate() {
            for (i, &at) in at.iter().enumerate() {
                let v = (scales[(2 * b + i) % 8] % 4001) as f32 / 1000.0 - 2.0;
                blk[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        row
    }

    /// `nb` blocks of 256 activations: random in (-1, 1) times `2^e` per block, `e` in
    /// -20..20, block 1 all zero (`kind` 0); every value 1 (1: every quant 127), -1 (2) or
    /// alternating 1, -1 (3).
    fn acts(nb: usize, seed: u64, kind: u8) -> Vec<f32> {
        let r = stream(seed ^ 0x9e37_79b9_7f4a_7c15, 256 * nb + nb);
        (0..256 * nb)
            .map(|i| match kind {
                0 if i / 256 == 1 => 0.0,
                0 => {
                    let e = (r[256 * nb + i / 256] % 40) as i32 - 20;
                    (r[i] as f32 - 127.5) / 128.0 * 2f32.powi(e)
                }
                1 => 1.0,
                2 => -1.0,
                _ => [1.0, -1.0][i % 2],
            })
            .collect()
    }

    /// The AVX-512 VNNI and the AVX2 product of one row against the Q8_K form of `x`.
    fn both(ty: GgmlType, row: &[u8], x: &[f32], _t: Avx512Vnni) -> (f32, f32) {
        let mut a = Q8Acts::new(ActPrecision::Int8);
        a.quantize(x);
        assert_eq!(a.k.d.len(), row.len() / ty.block().unwrap().1 as usize);
        // SAFETY: the token proves AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI, every
        // feature either kernel enables; `a.k` holds one block per block of the row (assert).
        unsafe {
            match ty {
                GgmlType::Q5_K => {
                    let r = view::<BlockQ5K>(row).unwrap();
                    (dot_q5_k_q8k(r, &a.k), avx2_int8::dot_q5_k_q8k(r, &a.k))
                }
                _ => {
                    let r = view::<BlockQ6K>(row).unwrap();
                    (dot_q6_k_q8k(r, &a.k), avx2_int8::dot_q6_k_q8k(r, &a.k))
                }
            }
        }
    }

    const TYPES: [GgmlType; 2] = [GgmlType::Q5_K, GgmlType::Q6_K];

    /// At the bounds: every quant, scale and min at its largest against activations all 127,
    /// all -127 or alternating, and random rows against them: the bits of AVX2.
    #[test]
    fn extreme_rows_give_the_bits_of_avx2() {
        let Some(t) = Avx512Vnni::detect() else {
            eprintln!("skipped: no AVX-512 VNNI here (or QADA_NO_VNNI, QADA_NO_AVX512 set)");
            return;
        };
        for ty in TYPES {
            for fill in 0..3 {
                for kind in 0..4 {
                    let row = row(
                        ty,
                        3,
                        7 + kind as u64,
                        fill,
                        &[1500, 3700, 2999, 4000, 0, 2, 10, 77],
                    );
                    let x = acts(3, 11, kind);
                    let (fast, avx2) = both(ty, &row, &x, t);
                    assert_eq!(
                        fast.to_bits(),
                        avx2.to_bits(),
                        "{ty} fill {fill} kind {kind}"
                    );
                }
            }
        }
    }

    proptest! {
        /// On random rows (any bytes, all ones or all zero, f16 scales in [-2, 2]) and
        /// activations the AVX-512 VNNI K-quant kernels give the AVX2 ones' bits: the same
        /// integer lanes, the same float steps.
        #[test]
        fn k_quant_kernels_give_the_bits_of_avx2(
            t in 0usize..TYPES.len(), nb in 1usize..6, seed in any::<u64>(), fill in 0u8..3,
            kind in 0u8..4, scales in any::<[u16; 8]>(),
        ) {
            let Some(token) = Avx512Vnni::detect() else { return Ok(()) };
            let ty = TYPES[t];
            let row = row(ty, nb, seed, fill, &scales);
            let x = acts(nb, seed, kind);
            let (fast, avx2) = both(ty, &row, &x, token);
            prop_assert_eq!(fast.to_bits(), avx2.to_bits(), "{} {} vs {}", ty, fast, avx2);
        }
    }
}
