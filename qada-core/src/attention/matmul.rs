//! [`gemm_strided`]: the f32 matrix product with explicit strides (through `gemm`) that
//! prefill's attention uses for `S = Q K^T` and `O += P V` over tiles of cached rows.

/// General strided product `dst (n x m) = lhs (n x k) * rhs (k x m)` with explicit row and
/// column strides, for attention over cached keys and values.
///
/// # Panics
/// When a stride pattern reaches past its slice (checked once per call).
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided(
    n: usize,
    m: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    lhs: &[f32],
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: &[f32],
    rhs_rs: usize,
    rhs_cs: usize,
) {
    if n == 0 || m == 0 {
        return;
    }
    // the largest index of an `r x c` pattern (r, c >= 1), `None` when it overflows
    let last = |rs: usize, cs: usize, r: usize, c: usize| {
        (r - 1)
            .checked_mul(rs)?
            .checked_add((c - 1).checked_mul(cs)?)
    };
    let inside = |i: Option<usize>, len: usize| i.is_some_and(|i| i < len);
    assert!(
        inside(last(dst_rs, 1, n, m), dst.len()),
        "gemm_strided: dst too short"
    );
    assert!(
        k == 0 || inside(last(lhs_rs, lhs_cs, n, k), lhs.len()),
        "gemm_strided: lhs too short"
    );
    assert!(
        k == 0 || inside(last(rhs_rs, rhs_cs, k, m), rhs.len()),
        "gemm_strided: rhs too short"
    );
    // SAFETY: the asserts bound the largest index each stride pattern reaches (computed
    // without overflow) inside its slice; `dst` is borrowed mutably, so it aliases neither
    // input.
    unsafe {
        gemm::gemm(
            n,
            m,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
