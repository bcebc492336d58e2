//! The workspace's one CPU-feature detection, and the SIMD helpers every kernel shares.
//!
//! A kernel that uses AVX2 takes an [`Avx2`] token. Only [`Avx2::detect`] makes one, and it does
//! so only on a CPU with AVX2, FMA and F16C, so a safe function that holds a token may call the
//! `#[target_feature(enable = "avx2,fma,f16c")]` kernels behind it. Setting the environment
//! variable `QADA_PORTABLE` (to any value) before the first detection makes every kernel of the
//! workspace take its portable path: the one switch for tests and comparisons.
//!
//! It lives in this crate because every other crate of the workspace depends on it.

use std::sync::OnceLock;

/// Proof that this CPU runs AVX2, FMA and F16C code (and that `QADA_PORTABLE` is not set).
///
/// The field is private: the only way to get a token is [`Avx2::detect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx2 {
    _detected: (),
}

impl Avx2 {
    /// The token when the CPU has AVX2, FMA and F16C and `QADA_PORTABLE` is unset; detected
    /// once per process.
    #[inline]
    pub fn detect() -> Option<Avx2> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let ok = *DETECTED.get_or_init(|| !portable_forced() && cpu_has_avx2_fma_f16c());
        ok.then_some(Avx2 { _detected: () })
    }
}

/// Proof that this CPU runs AVX-VNNI code (`vpdpbusd` on 256-bit registers: 32 u8 x i8
/// products summed into eight i32 lanes in one instruction) besides AVX2, FMA and F16C, and
/// that neither `QADA_PORTABLE` nor `QADA_NO_VNNI` is set (the latter keeps the AVX2 int8
/// kernels on such a CPU, for tests and comparisons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvxVnni {
    avx2: Avx2,
}

impl AvxVnni {
    /// The token when [`Avx2::detect`] gives one, the CPU has AVX-VNNI and `QADA_NO_VNNI` is
    /// unset; detected once per process.
    #[inline]
    pub fn detect() -> Option<AvxVnni> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let avx2 = Avx2::detect()?;
        let ok = *DETECTED
            .get_or_init(|| std::env::var_os("QADA_NO_VNNI").is_none() && cpu_has_avx_vnni());
        ok.then_some(AvxVnni { avx2 })
    }

    /// The AVX2 token this one implies.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        self.avx2
    }
}

/// Proof that this CPU runs AVX-512 Foundation code (16 f32 lanes, `vcvtph2ps` on 16 halves,
/// `vscalefps`; the page masses, the GQA block kernels, the quadratic forms) besides AVX2,
/// FMA and F16C, and that neither `QADA_PORTABLE` nor
/// `QADA_NO_AVX512` is set (the latter keeps the AVX2 kernels on such a CPU, for tests and
/// comparisons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx512 {
    avx2: Avx2,
}

impl Avx512 {
    /// The token when [`Avx2::detect`] gives one, the CPU has AVX-512F and `QADA_NO_AVX512`
    /// is unset; detected once per process.
    #[inline]
    pub fn detect() -> Option<Avx512> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let avx2 = Avx2::detect()?;
        let ok = *DETECTED
            .get_or_init(|| std::env::var_os("QADA_NO_AVX512").is_none() && cpu_has_avx512f());
        ok.then_some(Avx512 { avx2 })
    }

    /// The AVX2 token this one implies.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        self.avx2
    }
}

/// Proof that this CPU runs AVX-512 VNNI code on 512- and 256-bit registers (`vpdpbusd` in its
/// EVEX form: 64 u8 x i8 products summed into sixteen i32 lanes in one instruction) with
/// AVX-512 BW (byte masks, `vpabsb`) and VL besides what an [`Avx512`] token proves, and that
/// `QADA_NO_VNNI` is unset as well as what [`Avx512::detect`] asks. Zen 4 and the Xeons since
/// Cascade Lake have it; AVX-VNNI ([`AvxVnni`], the VEX form) is a different CPUID bit, which
/// Zen 4 lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx512Vnni {
    avx512: Avx512,
}

impl Avx512Vnni {
    /// The token when [`Avx512::detect`] gives one, the CPU has AVX-512 BW, VL and VNNI and
    /// `QADA_NO_VNNI` is unset; detected once per process.
    #[inline]
    pub fn detect() -> Option<Avx512Vnni> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let avx512 = Avx512::detect()?;
        let ok = *DETECTED.get_or_init(|| {
            std::env::var_os("QADA_NO_VNNI").is_none() && cpu_has_avx512_bw_vl_vnni()
        });
        ok.then_some(Avx512Vnni { avx512 })
    }

    /// The AVX2 token this one implies.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        self.avx512.avx2
    }

    /// The AVX-512F token this one implies.
    #[inline]
    pub fn avx512(self) -> Avx512 {
        self.avx512
    }
}

/// Proof that this CPU runs AMX int8 code (`tdpbusd`: a 16 x 16 tile of i32 sums of u8 x i8
/// products over up to 64 bytes a row, in one instruction) and that Linux let this process use
/// the tile registers (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` succeeded, asked
/// once), besides what an [`Avx512Vnni`] token proves; and that `QADA_NO_AMX` is unset (the
/// AVX-512 VNNI tiles then run, for tests and comparisons). Sapphire Rapids and later Xeons
/// have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amx {
    vnni: Avx512Vnni,
}

impl Amx {
    /// The token when [`Avx512Vnni::detect`] gives one, CPUID reports AMX-TILE and AMX-INT8,
    /// the kernel grants the tile data permission and `QADA_NO_AMX` is unset; detected once
    /// per process.
    #[inline]
    pub fn detect() -> Option<Amx> {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        let vnni = Avx512Vnni::detect()?;
        let ok = *DETECTED
            .get_or_init(|| std::env::var_os("QADA_NO_AMX").is_none() && cpu_and_os_allow_amx());
        ok.then_some(Amx { vnni })
    }

    /// The AVX-512 VNNI token this one implies.
    #[inline]
    pub fn avx512_vnni(self) -> Avx512Vnni {
        self.vnni
    }
}

/// CPUID leaf 7 reports AMX-TILE (EDX bit 24) and AMX-INT8 (bit 25), and Linux grants this
/// process the tile data state (component 18): without the grant the first tile instruction
/// faults.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn cpu_and_os_allow_amx() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    if leaf7.edx & (1 << 24) == 0 || leaf7.edx & (1 << 25) == 0 {
        return false;
    }
    // SAFETY: arch_prctl with ARCH_REQ_XCOMP_PERM takes two integers and touches no memory of
    // ours; it returns 0 when the permission is granted and -1 otherwise.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn cpu_and_os_allow_amx() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512_bw_vl_vnni() -> bool {
    is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512_bw_vl_vnni() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512f() -> bool {
    is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512f() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx_vnni() -> bool {
    is_x86_feature_detected!("avxvnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx_vnni() -> bool {
    false
}

/// The kernel sets this process runs, by the tokens detection gives: `portable` alone, or
/// `avx2` (every kernel with an AVX2 path) plus `avx-vnni` (int8 prefill tiles), `avx512f`
/// (the channel rule's column page masses, the f16 and f32 GQA block kernels, the
/// moments' quadratic forms) and `avx512-vnni` (decoding's int8 products of eight rows and of
/// Q5_K and Q6_K rows, int8 prefill tiles) and `amx` (int8 prefill tiles) where they are
/// detected. What `qada bench` records beside its figures.
pub fn kernel_sets() -> Vec<&'static str> {
    if Avx2::detect().is_none() {
        return vec!["portable"];
    }
    let mut sets = vec!["avx2"];
    if AvxVnni::detect().is_some() {
        sets.push("avx-vnni");
    }
    if Avx512::detect().is_some() {
        sets.push("avx512f");
    }
    if Avx512Vnni::detect().is_some() {
        sets.push("avx512-vnni");
    }
    if Amx::detect().is_some() {
        sets.push("amx");
    }
    sets
}

/// True when `QADA_PORTABLE` is set: every kernel takes its portable path.
pub fn portable_forced() -> bool {
    std::env::var_os("QADA_PORTABLE").is_some()
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx2_fma_f16c() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx2_fma_f16c() -> bool {
    false
}

/// Ask for every 64-byte cache line of the `len` bytes from `p` into L1 (`prefetcht0`): a
/// hint that reads nothing and faults on no address, so `p` is never dereferenced and need
/// not point into an allocation. A no-op off x86_64. The prefetch loop every crate's kernels
/// share (attention's block kernels and `prefetch_rows` in qada-core, the weight streams in
/// qada-model).
#[inline(always)]
pub fn prefetch_lines(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetcht0` (SSE, in every x86_64 CPU) is a hint: it reads nothing
        // architecturally and does not fault on any address; the pointer is only computed
        // (wrapping_add), never dereferenced.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// Register-level helpers for the AVX2 kernels of every crate.
///
/// Each is `unsafe` and `#[target_feature(enable = "avx2,fma,f16c")]`: the caller holds an
/// [`Avx2`] token (or is itself such a kernel), so inlining into the kernels works across crates.
#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use std::arch::x86_64::*;

    /// The sum of the 8 lanes of `v`.
    ///
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C (an [`super::Avx2`] token exists).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn hsum(v: __m256) -> f32 {
        // SAFETY: register operations only; the CPU features are the caller's proof.
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// `[sum(a[0]), sum(a[1]), sum(a[2]), sum(a[3])]`: four horizontal sums in three `hadd`s.
    ///
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C (an [`super::Avx2`] token exists).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn hsum4(a: &[__m256; 4]) -> __m128 {
        // SAFETY: register operations only; the CPU features are the caller's proof.
        let t = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1))
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn hsum_adds_every_lane() {
        let Some(_t) = Avx2::detect() else { return };
        let v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.5];
        // SAFETY: the token proves AVX2/FMA/F16C; the array holds 8 f32.
        let s = unsafe { x86::hsum(std::arch::x86_64::_mm256_loadu_ps(v.as_ptr())) };
        assert_eq!(s, 36.5);
    }

    #[test]
    fn hsum4_sums_each_vector() {
        let Some(_t) = Avx2::detect() else { return };
        let rows: [[f32; 8]; 4] =
            std::array::from_fn(|r| std::array::from_fn(|i| (r * 10 + i) as f32));
        // SAFETY: the token proves AVX2/FMA/F16C; each row holds 8 f32.
        let got = unsafe {
            let v = rows.map(|r| std::arch::x86_64::_mm256_loadu_ps(r.as_ptr()));
            let mut out = [0.0f32; 4];
            std::arch::x86_64::_mm_storeu_ps(out.as_mut_ptr(), x86::hsum4(&v));
            out
        };
        for (r, g) in rows.iter().zip(got) {
            assert_eq!(g, r.iter().sum::<f32>());
        }
    }
}
