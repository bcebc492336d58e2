//! The x86 kernels of prefill's int8 tiles (`tiles_int8.rs`): one [`Group`] of eight rows by
//! up to four tokens, the rows in the eight i32 lanes.
//!
//! Per sub-block every four values of a token are broadcast to all lanes and meet four values
//! of each row: AVX-VNNI (or AVX-512 VNNI, the same instruction in its EVEX form) adds the
//! four u8 x i8 products to the lane in one `vpdpbusd`; AVX2
//! takes `vpmaddubsw` (pairs into i16) twice, adds the two (four products of at most
//! `63 * 127`: `|.| <= 32004`, no saturation, which is why AVX2 takes weights up to 63 only)
//! and widens by `vpmaddwd` with ones. Then per token one conversion and two FMAs:
//! `acc = isum (d_w d_x) + acc`, `acc = m_w x_s + acc`, the portable kernel's order.
//!
//! Loads are plain 32-byte loads and 4-byte broadcasts: no gather, no variable shift (both slow
//! on Zen 1).

use std::arch::x86_64::*;

use qada_stats::simd::{Avx2, Avx512Vnni, AvxVnni};

use super::tiles_int8::{Group, TokenActs, CHUNK, GROUP};
use super::QK;

/// The bounds every kernel relies on (the portable kernel's panics).
fn check(g: &Group, sub: usize, a: &TokenActs, t0: usize, count: usize, out: &[f32]) {
    let k = a.k;
    assert!(sub == 16 || sub == 32, "sub-blocks of 16 or 32 values");
    assert!((1..=CHUNK).contains(&count) && t0 + count <= a.n && out.len() >= GROUP * count);
    assert!(k.is_multiple_of(QK) && g.u.len() == GROUP * k && g.d.len() * sub == GROUP * k);
    assert!(g.m.len() == g.d.len() && a.q.len() >= a.n * k && a.d.len() * QK >= a.n * k);
    assert!(a.sums(sub).len() * sub >= a.n * k);
}

/// One kernel per instruction set: `$name` runs `$step` for each sub-block's integer sums.
macro_rules! group_kernel {
    ($name:ident, $features:literal, $step:ident) => {
        /// # Safety
        /// The CPU has the features; [`check`] passed for these arguments with `count == C`
        /// and `sub == S`.
        #[target_feature(enable = $features)]
        unsafe fn $name<const C: usize, const S: usize>(
            g: &Group,
            a: &TokenActs,
            t0: usize,
            out: &mut [f32],
        ) {
            let k = a.k;
            let sums = a.sums(S);
            let u = g.u.as_ptr();
            // SAFETY (all pointer reads below): `check` guarantees `k` values of each token
            // `t0 + c < a.n` in `q`, `k / 32` scales and `k / S` sums per token, `8 k` bytes
            // and `8 k / S` pairs in the group, so every offset stays inside its slice.
            let q: [*const i8; C] = std::array::from_fn(|c| a.q.as_ptr().add((t0 + c) * k));
            let dx: [*const f32; C] = std::array::from_fn(|c| a.d.as_ptr().add((t0 + c) * k / QK));
            let xs: [*const f32; C] = std::array::from_fn(|c| sums.as_ptr().add((t0 + c) * k / S));
            let mut acc = [_mm256_setzero_ps(); C];
            for s in 0..k / S {
                let mut isum = [_mm256_setzero_si256(); C];
                $step::<C, S>(&mut isum, u.add(8 * s * S), &q, s * S);
                let dv = _mm256_loadu_ps(g.d.as_ptr().add(GROUP * s));
                let mv = _mm256_loadu_ps(g.m.as_ptr().add(GROUP * s));
                for c in 0..C {
                    let dd = _mm256_mul_ps(dv, _mm256_set1_ps(*dx[c].add(s * S / QK)));
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), dd, acc[c]);
                    acc[c] = _mm256_fmadd_ps(mv, _mm256_set1_ps(*xs[c].add(s)), acc[c]);
                }
            }
            for (c, v) in acc.iter().enumerate() {
                // SAFETY: `out` holds `8 C` values (`check`).
                _mm256_storeu_ps(out.as_mut_ptr().add(GROUP * c), *v);
            }
        }
    };
}

/// Four values of a token at `p`, broadcast to the eight lanes.
///
/// # Safety
/// `p` is valid for four bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn four(p: *const i8) -> __m256i {
    // SAFETY: the caller's guarantee; unaligned read.
    _mm256_set1_epi32(std::ptr::read_unaligned(p.cast::<i32>()))
}

/// AVX2: one sub-block of `S` values (`S / 4` group loads, an even number) into `isum`.
///
/// # Safety
/// AVX2; `u` holds `8 S` bytes, each `q[c] + j0` holds `S` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn step_avx2<const C: usize, const S: usize>(
    isum: &mut [__m256i; C],
    u: *const u8,
    q: &[*const i8; C],
    j0: usize,
) {
    let ones = _mm256_set1_epi16(1);
    let mut e = 0;
    // SAFETY: by the contract, the 32-byte loads at `u + 32 e` (e < S / 4) and the four
    // values at `q[c] + j0 + 4 e` are in bounds.
    while e < S / 4 {
        let w0 = _mm256_loadu_si256(u.add(32 * e).cast::<__m256i>());
        let w1 = _mm256_loadu_si256(u.add(32 * e + 32).cast::<__m256i>());
        for c in 0..C {
            let x0 = four(q[c].add(j0 + 4 * e));
            let x1 = four(q[c].add(j0 + 4 * e + 4));
            // each i16: two products of u <= 63 and |q| <= 127, twice: |.| <= 32004
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
        }
        e += 2;
    }
}

/// `$name`: one sub-block of `S` values into `isum`, one `vpdpbusd` (`$dpbusd`, the VEX form
/// of AVX-VNNI or the EVEX form of AVX-512 VNNI: the same products and sums) per four values.
macro_rules! vnni_step {
    ($name:ident, $features:literal, $dpbusd:ident) => {
        /// # Safety
        /// The CPU has the features; `u` holds `8 S` bytes, each `q[c] + j0` holds `S` values.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name<const C: usize, const S: usize>(
            isum: &mut [__m256i; C],
            u: *const u8,
            q: &[*const i8; C],
            j0: usize,
        ) {
            // SAFETY: by the contract, the 32-byte loads at `u + 32 e` (e < S / 4) and the
            // four values at `q[c] + j0 + 4 e` are in bounds.
            for e in 0..S / 4 {
                let w = _mm256_loadu_si256(u.add(32 * e).cast::<__m256i>());
                for c in 0..C {
                    isum[c] = $dpbusd(isum[c], w, four(q[c].add(j0 + 4 * e)));
                }
            }
        }
    };
}

vnni_step!(step_vnni, "avx2,fma,f16c,avxvnni", _mm256_dpbusd_avx_epi32);
vnni_step!(
    step_vnni512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    _mm256_dpbusd_epi32
);

group_kernel!(kernel_avx2, "avx2,fma,f16c", step_avx2);
group_kernel!(kernel_vnni, "avx2,fma,f16c,avxvnni", step_vnni);
group_kernel!(
    kernel_vnni512,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    step_vnni512
);

/// Picks the kernel instance for `count` tokens and `sub`-value sub-blocks.
macro_rules! dispatch {
    ($kernel:ident, $g:expr, $sub:expr, $a:expr, $t0:expr, $count:expr, $out:expr) => {
        match ($count, $sub) {
            (1, 16) => $kernel::<1, 16>($g, $a, $t0, $out),
            (2, 16) => $kernel::<2, 16>($g, $a, $t0, $out),
            (3, 16) => $kernel::<3, 16>($g, $a, $t0, $out),
            (4, 16) => $kernel::<4, 16>($g, $a, $t0, $out),
            (1, _) => $kernel::<1, 32>($g, $a, $t0, $out),
            (2, _) => $kernel::<2, 32>($g, $a, $t0, $out),
            (3, _) => $kernel::<3, 32>($g, $a, $t0, $out),
            _ => $kernel::<4, 32>($g, $a, $t0, $out),
        }
    };
}

/// The AVX2 kernel (weights up to 63): `super::tiles_int8::group_tokens_portable`'s result.
///
/// # Panics
/// As the portable kernel, and for a `count` of 0.
pub(crate) fn group_tokens_avx2(
    _proof: Avx2,
    g: &Group,
    sub: usize,
    a: &TokenActs,
    t0: usize,
    count: usize,
    out: &mut [f32],
) {
    check(g, sub, a, t0, count, out);
    // SAFETY: the token proves AVX2, FMA and F16C; `check` passed with this count and sub.
    unsafe { dispatch!(kernel_avx2, g, sub, a, t0, count, out) }
}

/// The AVX-VNNI kernel (any weights up to 255).
///
/// # Panics
/// As [`group_tokens_avx2`].
pub(crate) fn group_tokens_vnni(
    _proof: AvxVnni,
    g: &Group,
    sub: usize,
    a: &TokenActs,
    t0: usize,
    count: usize,
    out: &mut [f32],
) {
    check(g, sub, a, t0, count, out);
    // SAFETY: the token proves AVX2, FMA, F16C and AVX-VNNI; `check` passed.
    unsafe { dispatch!(kernel_vnni, g, sub, a, t0, count, out) }
}

/// The AVX-512 VNNI kernel (any weights up to 255): [`group_tokens_vnni`]'s results.
///
/// # Panics
/// As [`group_tokens_avx2`].
pub(crate) fn group_tokens_vnni512(
    _proof: Avx512Vnni,
    g: &Group,
    sub: usize,
    a: &TokenActs,
    t0: usize,
    count: usize,
    out: &mut [f32],
) {
    check(g, sub, a, t0, count, out);
    // SAFETY: the token proves AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI; `check` passed.
    unsafe { dispatch!(kernel_vnni512, g, sub, a, t0, count, out) }
}
