//! Page bounds of the bulk keys (Quest's bound): the keys in pages of `P` consecutive rows,
//! and for each page the elementwise minimum `m` and maximum `M` of its keys.
//!
//! For a query `q` and any key `k` of page `p`, `q . k <= sum_j max(q_j m_j, q_j M_j)`, so
//! with `u_p = scale * sum_j max(q_j m_j, q_j M_j)` (`scale > 0`) and `n_p` keys in the page,
//! `A_bulk = sum_i exp(s_i) <= sum_p n_p exp(u_p)`: [`PageBounds::log_mass_upper_bound`]
//! returns the log of the right side. Cost `O(T d / P)` per query.
//!
//! For page selection each page also keeps, as f16 rows a block kernel reads (half the bytes
//! of f32; the certified selection widens its bounds by the f16 rounding, see
//! [`PageBounds::F16_ROUNDING`]):
//! - its center `c = (m + M) / 2` and radius `r = (M - m) / 2`, with which the bound is
//!   `max(q_j m_j, q_j M_j) = q_j c_j + |q_j| r_j`, so `u_p = scale (q . c_p + |q| . r_p)`;
//! - its mean `mu` and per-channel variance `v` (sums in f64), the page's diagonal Gaussian:
//!   `ln A_p_hat = ln n_p + scale q . mu_p + scale^2 (q * q) . v_p / 2` estimates the page's
//!   mass `A_p = sum_{i in p} exp(s_i)` as QAdA estimates the whole bulk's.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::{ChannelKeys, Result, Rows, StatsError};

/// Elementwise minimum and maximum of keys in pages of `page` rows, rows appended in order.
#[derive(Clone, Debug, PartialEq)]
pub struct PageBounds {
    dim: usize,
    page: usize,
    rows: usize,
    /// `n_pages x dim`, row-major.
    min: Vec<f32>,
    /// `n_pages x dim`, row-major.
    max: Vec<f32>,
    /// `(min + max) / 2` per page, `n_pages x dim`.
    center: Vec<f16>,
    /// `(max - min) / 2` per page, `n_pages x dim`.
    radius: Vec<f16>,
    /// Mean of the page's keys, `n_pages x dim`.
    mean: Vec<f16>,
    /// Per-channel (population) variance of the page's keys, `n_pages x dim`.
    var: Vec<f16>,
    /// Largest `|k_j|` over the page's keys and channels, one per page.
    abs_max: Vec<f32>,
    /// Per channel, the smallest and largest `k_j` over every key held (`dim` each).
    channel_min: Vec<f32>,
    channel_max: Vec<f32>,
    /// When kept: the keys by channel in 8 bits, a scale per page and channel.
    channel_keys: Option<ChannelKeys>,
    /// The open (last) page's per-channel sums of `k` and `k^2`, in f64.
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
}

impl PageBounds {
    /// Empty bounds of keys of length `dim` in pages of `page` rows (both at least 1).
    pub fn new(dim: usize, page: usize) -> Result<Self> {
        if dim == 0 || page == 0 {
            return Err(StatsError::ShapeMismatch {
                what: "page bounds (key length and page size, both at least 1)",
                expected: 1,
                found: 0,
            });
        }
        Ok(PageBounds {
            dim,
            page,
            rows: 0,
            min: Vec::new(),
            max: Vec::new(),
            center: Vec::new(),
            radius: Vec::new(),
            mean: Vec::new(),
            var: Vec::new(),
            abs_max: Vec::new(),
            channel_min: vec![f32::INFINITY; dim],
            channel_max: vec![f32::NEG_INFINITY; dim],
            channel_keys: None,
            sum: vec![0.0; dim],
            sum_sq: vec![0.0; dim],
        })
    }
    /// Relative rounding of the f16 summary rows (`2^-11`, round to nearest): a center or
    /// radius read from them is within `2^-11 |x|` of the f32 value (and it is finite: see
    /// [`PageBounds::centers`]).
    pub const F16_ROUNDING: f64 = 1.0 / 2048.0;

    /// Keep a copy of the keys by channel from now on ([`PageBounds::channel_keys`]); only
    /// while empty.
    ///
    /// # Errors
    /// [`StatsError::ShapeMismatch`] when keys are already held.
    pub fn keep_channel_keys(&mut self) -> Result<()> {
        if self.rows > 0 {
            return Err(StatsError::ShapeMismatch {
                what: "page bounds asked to copy keys by channel (only while empty)",
                expected: 0,
                found: self.rows,
            });
        }
        self.channel_keys = Some(ChannelKeys::new(self.dim, self.page)?);
        Ok(())
    }
    /// The keys by channel in 8 bits (pages as these bounds'), when the copy is kept: a score
    /// from a few channels, `sum_{j in R} q_j k_ij`, reads `|R| n_rows` bytes instead of
    /// `2 d n_rows` (f16 rows).
    pub fn channel_keys(&self) -> Option<&ChannelKeys> {
        self.channel_keys.as_ref()
    }

    /// Room for `rows` keys in all, so that adding them allocates nothing.
    pub fn reserve(&mut self, rows: usize) {
        if let Some(c) = &mut self.channel_keys {
            c.reserve(rows);
        }
        let more = rows.saturating_sub(self.rows).div_ceil(self.page) * self.dim;
        for v in [&mut self.min, &mut self.max] {
            v.reserve(more);
        }
        for v in [
            &mut self.center,
            &mut self.radius,
            &mut self.mean,
            &mut self.var,
        ] {
            v.reserve(more);
        }
        self.abs_max.reserve(more / self.dim);
    }
    /// Key length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Rows per page `P`.
    pub fn page_size(&self) -> usize {
        self.page
    }
    /// Keys seen.
    pub fn n_rows(&self) -> usize {
        self.rows
    }
    /// Pages (the last one may be partial).
    pub fn n_pages(&self) -> usize {
        self.rows.div_ceil(self.page)
    }
    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }
    /// Keys in page `p`.
    pub fn page_len(&self, p: usize) -> usize {
        (self.rows - p * self.page).min(self.page)
    }
    /// Elementwise minimum of page `p`'s keys.
    pub fn page_min(&self, p: usize) -> &[f32] {
        &self.min[p * self.dim..(p + 1) * self.dim]
    }
    /// Elementwise maximum of page `p`'s keys.
    pub fn page_max(&self, p: usize) -> &[f32] {
        &self.max[p * self.dim..(p + 1) * self.dim]
    }
    /// Every page's center `(m + M) / 2` in f16, `n_pages x d` row-major. Values beyond
    /// f16's range are infinite (a selection then reads every page).
    pub fn centers(&self) -> &[f16] {
        &self.center
    }
    /// Every page's radius `(M - m) / 2` in f16, rounded as [`PageBounds::centers`].
    pub fn radii(&self) -> &[f16] {
        &self.radius
    }
    /// Every page's mean key in f16, `n_pages x d` row-major.
    pub fn means(&self) -> &[f16] {
        &self.mean
    }
    /// Every page's per-channel variance in f16, `n_pages x d` row-major.
    pub fn variances(&self) -> &[f16] {
        &self.var
    }
    /// Every page's largest `|k_j|` (over its keys and channels); NaN if a key had a NaN.
    pub fn abs_maxima(&self) -> &[f32] {
        &self.abs_max
    }
    /// Channel `j`'s half range over every key held, `(max_i k_ij - min_i k_ij) / 2` (`j <
    /// dim`; 0 when empty, NaN where a key was NaN): how far channel `j`
    /// can move one key's score away from another's, `|q_j| (max k_j - min k_j)`. A channel
    /// with a large value common to every key (an offset, a key bias RoPE turns slowly) moves
    /// every score alike, so it ranks no page above another and has a small spread.
    /// `None` for `j >= dim`.
    pub fn channel_spread(&self, j: usize) -> Option<f32> {
        let (lo, hi) = (self.channel_min.get(j)?, self.channel_max.get(j)?);
        Some(if self.rows == 0 {
            0.0
        } else {
            0.5 * hi - 0.5 * lo
        })
    }
    /// Bytes a query reads: the minimum and maximum of every page.
    pub fn bytes(&self) -> usize {
        (self.min.len() + self.max.len()) * std::mem::size_of::<f32>()
    }
    /// Forget every key.
    pub fn clear(&mut self) {
        self.rows = 0;
        self.min.clear();
        self.max.clear();
        for v in [
            &mut self.center,
            &mut self.radius,
            &mut self.mean,
            &mut self.var,
        ] {
            v.clear();
        }
        self.abs_max.clear();
        self.channel_min.iter_mut().for_each(|x| *x = f32::INFINITY);
        self.channel_max
            .iter_mut()
            .for_each(|x| *x = f32::NEG_INFINITY);
        if let Some(c) = &mut self.channel_keys {
            c.clear();
        }
        self.sum.iter_mut().for_each(|x| *x = 0.0);
        self.sum_sq.iter_mut().for_each(|x| *x = 0.0);
    }

    /// Add one key. A NaN coordinate makes the page's bounds NaN there (and so every bound
    /// computed from them), never a bound that is too small.
    pub fn push(&mut self, key: &[f32]) -> Result<()> {
        if key.len() != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found: key.len(),
            });
        }
        // a run of one key
        self.push_rows_of(Rows::F32(key))
    }

    /// Add one key (of length `dim`) to the bounds and sums, not to the keys by channel;
    /// the page's f16 rows are left to [`PageBounds::derive_last_page`], which the caller
    /// runs before the next page opens and before returning.
    fn push_bounds(&mut self, key: &[f32]) {
        if self.rows.is_multiple_of(self.page) {
            self.min.extend_from_slice(key);
            self.max.extend_from_slice(key);
            for v in [
                &mut self.center,
                &mut self.radius,
                &mut self.mean,
                &mut self.var,
            ] {
                v.resize(v.len() + self.dim, f16::ZERO);
            }
            self.abs_max.push(0.0);
            self.sum.iter_mut().for_each(|x| *x = 0.0);
            self.sum_sq.iter_mut().for_each(|x| *x = 0.0);
        } else {
            let at = self.min.len() - self.dim;
            for ((lo, hi), &k) in self.min[at..].iter_mut().zip(&mut self.max[at..]).zip(key) {
                // NaN-propagating: a NaN key poisons the page instead of being skipped
                *lo = if k < *lo || k.is_nan() { k } else { *lo };
                *hi = if k > *hi || k.is_nan() { k } else { *hi };
            }
        }
        self.rows += 1;
        self.accumulate_sums(key);
    }

    /// The last page's center, radius, mean and variance (`E[k^2] - E[k]^2` from the f64
    /// sums, never below 0) in f16, from its bounds and sums: a function of the page's keys
    /// alone, so deriving them once after a run of keys gives what deriving them after each
    /// key gives.
    fn derive_last_page(&mut self) {
        // in f32 and f64 on the stack, then to f16 a slice at a time: the conversions
        // `f16::from_f32` and `from_f64` make one by one, in vectors
        const CHUNK: usize = 64;
        let at = self.min.len() - self.dim;
        let n = self.page_len(self.n_pages() - 1) as f64;
        let (mut center, mut radius) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
        let (mut mean, mut var) = ([0.0f64; CHUNK], [0.0f64; CHUNK]);
        for j0 in (0..self.dim).step_by(CHUNK) {
            let w = CHUNK.min(self.dim - j0);
            let (lo, hi) = (&self.min[at + j0..][..w], &self.max[at + j0..][..w]);
            let (sum, sum_sq) = (&self.sum[j0..][..w], &self.sum_sq[j0..][..w]);
            for k in 0..w {
                center[k] = 0.5 * lo[k] + 0.5 * hi[k];
                radius[k] = 0.5 * hi[k] - 0.5 * lo[k];
                let m = sum[k] / n;
                mean[k] = m;
                let v = sum_sq[k] / n - m * m;
                var[k] = if v > 0.0 || v.is_nan() { v } else { 0.0 };
            }
            let rows = at + j0..at + j0 + w;
            self.center[rows.clone()].convert_from_f32_slice(&center[..w]);
            self.radius[rows.clone()].convert_from_f32_slice(&radius[..w]);
            self.mean[rows.clone()].convert_from_f64_slice(&mean[..w]);
            self.var[rows].convert_from_f64_slice(&var[..w]);
        }
    }

    /// `key`'s share of the last page's f64 sums, its largest `|k_j|` and the channels'
    /// ranges.
    fn accumulate_sums(&mut self, key: &[f32]) {
        // three loops a compiler can vectorize (one with the NaN-sticky fold could not)
        for ((s, s2), &kf) in self.sum.iter_mut().zip(&mut self.sum_sq).zip(key) {
            let k = kf as f64;
            *s += k;
            *s2 += k * k;
        }
        // NaN-propagating, as the pages' bounds
        let ranges = self.channel_min.iter_mut().zip(&mut self.channel_max);
        for ((lo, hi), &k) in ranges.zip(key) {
            *lo = if k < *lo || k.is_nan() { k } else { *lo };
            *hi = if k > *hi || k.is_nan() { k } else { *hi };
        }
        // the largest |k_j|, NaN for good once a key had a NaN
        if let Some(last) = self.abs_max.last_mut() {
            let a = key.iter().fold(0.0f32, |m, &k| m.max(k.abs()));
            if !last.is_nan() {
                *last = if key.iter().any(|k| k.is_nan()) {
                    f32::NAN
                } else {
                    last.max(a)
                };
            }
        }
    }

    /// Add every row of `keys` (f32, f16 or q8 rows, taken as f32 exactly as attention reads
    /// them). One key (a decoding step) is converted on the stack; more go through a buffer of
    /// up to a page allocated for the call ([`PageBounds::push_rows_with`] takes one kept by
    /// the caller instead).
    pub fn push_rows_of(&mut self, keys: Rows<'_>) -> Result<()> {
        self.check_rows(keys)?;
        let mut stack = [0.0f32; 256];
        if keys.n_rows(self.dim) * self.dim <= stack.len() {
            self.push_runs(keys, &mut stack)
        } else {
            self.push_rows_with(keys, &mut Vec::new())
        }
    }

    /// [`PageBounds::push_rows_of`] converting into `scratch`, grown to `min(n, page) x dim`
    /// values when shorter and kept by the caller between calls, so that adding keys in runs
    /// (a page at a time while decoding) allocates nothing once it is large enough.
    pub fn push_rows_with(&mut self, keys: Rows<'_>, scratch: &mut Vec<f32>) -> Result<()> {
        self.check_rows(keys)?;
        let n = keys.n_rows(self.dim);
        if n == 0 {
            return Ok(());
        }
        let want = n.min(self.page) * self.dim;
        if scratch.len() < want {
            scratch.resize(want, 0.0);
        }
        self.push_runs(keys, scratch)
    }

    /// Refuse rows that are not whole keys (or q8 rows of a key length that is not whole
    /// blocks).
    fn check_rows(&self, keys: Rows<'_>) -> Result<()> {
        let d = self.dim;
        if !keys.len().is_multiple_of(d) {
            return Err(StatsError::DimensionMismatch {
                expected: d,
                found: keys.len() % d,
            });
        }
        if matches!(keys, Rows::Q8(_)) && !d.is_multiple_of(crate::Q8_BLOCK) {
            return Err(StatsError::DimensionMismatch {
                expected: d.next_multiple_of(crate::Q8_BLOCK),
                found: d,
            });
        }
        Ok(())
    }

    /// Add the (checked) rows of `keys` in runs within a page, each converted into `buf` (at
    /// least one key long). A page's f16 rows are derived once, when it closes or the run of
    /// keys ends, and the keys by channel coded once a run.
    fn push_runs(&mut self, keys: Rows<'_>, buf: &mut [f32]) -> Result<()> {
        let d = self.dim;
        let n = keys.n_rows(d);
        let cap = buf.len() / d;
        debug_assert!(cap >= 1 || n == 0);
        let mut i = 0;
        while i < n {
            let take = (self.page - self.rows % self.page).min(cap).min(n - i);
            let run = &mut buf[..take * d];
            for (r, row) in run.chunks_exact_mut(d).enumerate() {
                keys.row_f32(i + r, row);
            }
            for row in run.chunks_exact(d) {
                self.push_bounds(row);
            }
            if let Some(c) = &mut self.channel_keys {
                c.push_rows(run)?;
            }
            i += take;
            if self.rows.is_multiple_of(self.page) || i == n {
                self.derive_last_page();
            }
        }
        Ok(())
    }

    /// `u_p = scale * sum_j max(q_j m_j, q_j M_j)`, an upper bound of `scale * q . k` over
    /// the keys `k` of page `p` (`scale > 0`), in f64.
    pub fn score_upper_bound(&self, p: usize, q: &[f32], scale: f64) -> f64 {
        let (lo, hi) = (self.page_min(p), self.page_max(p));
        let mut u = 0.0f64;
        for ((&qj, &l), &h) in q.iter().zip(lo).zip(hi) {
            let (a, b) = (qj as f64 * l as f64, qj as f64 * h as f64);
            u += if a > b || a.is_nan() { a } else { b };
        }
        scale * u
    }

    /// `ln sum_p n_p exp(u_p)`, the log of an upper bound of `A_bulk = sum_i exp(s_i)` over
    /// every key added; `-inf` with no key, NaN when a bound is NaN.
    pub fn log_mass_upper_bound(&self, q: &[f32], scale: f64) -> Result<f64> {
        if q.len() != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found: q.len(),
            });
        }
        // streaming log-sum-exp: running maximum and the sum scaled to it
        let (mut m, mut l) = (f64::NEG_INFINITY, 0.0f64);
        for p in 0..self.n_pages() {
            let x = (self.page_len(p) as f64).ln() + self.score_upper_bound(p, q, scale);
            if x.is_nan() {
                return Ok(f64::NAN);
            }
            if x > m {
                l = l * (m - x).exp() + 1.0;
                m = x;
            } else {
                l += (x - m).exp();
            }
        }
        Ok(if l == 0.0 { m } else { m + l.ln() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The last page's f16 rows are, to the bit, `f16::from_f32` of its center and radius
        /// and `f16::from_f64` of its mean and variance, one channel at a time, after every
        /// key pushed (head dimensions past one chunk of 64 included).
        #[test]
        fn derived_rows_are_the_scalar_conversions(
            d in prop_oneof![1usize..12, 60usize..140],
            page in 1usize..9,
            keys in prop::collection::vec(-1e5f32..1e5, 1..2000),
        ) {
            let mut b = PageBounds::new(d, page).unwrap();
            for key in keys.chunks_exact(d).take(20) {
                b.push_rows_of(Rows::F32(key)).unwrap();
                let at = b.min.len() - d;
                let n = b.page_len(b.n_pages() - 1) as f64;
                for j in 0..d {
                    let (lo, hi) = (b.min[at + j], b.max[at + j]);
                    let mean = b.sum[j] / n;
                    let var = b.sum_sq[j] / n - mean * mean;
                    let var = if var > 0.0 || var.is_nan() { var } else { 0.0 };
                    prop_assert_eq!(b.center[at + j].to_bits(), f16::from_f32(0.5 * lo + 0.5 * hi).to_bits());
                    prop_assert_eq!(b.radius[at + j].to_bits(), f16::from_f32(0.5 * hi - 0.5 * lo).to_bits());
                    prop_assert_eq!(b.mean[at + j].to_bits(), f16::from_f64(mean).to_bits());
                    prop_assert_eq!(b.var[at + j].to_bits(), f16::from_f64(var).to_bits());
                }
            }
        }
    }

    #[test]
    fn pages_fill_in_order_and_bound_every_key() {
        let mut b = PageBounds::new(2, 2).unwrap();
        for k in [[1.0f32, -1.0], [3.0, 0.5], [-2.0, 4.0]] {
            b.push(&k).unwrap();
        }
        assert_eq!((b.n_rows(), b.n_pages(), b.page_len(1)), (3, 2, 1));
        assert_eq!(
            (b.page_min(0), b.page_max(0)),
            (&[1.0, -1.0][..], &[3.0, 0.5][..])
        );
        // q = (1, -1): page 0 bound max(1,3) + max(1,-0.5) = 4; page 1: -2 - 4 = -6
        let q = [1.0f32, -1.0];
        assert_eq!(b.score_upper_bound(0, &q, 1.0), 4.0);
        assert_eq!(b.score_upper_bound(1, &q, 1.0), -6.0);
        let ub = b.log_mass_upper_bound(&q, 1.0).unwrap();
        assert!((ub - (2.0 * 4f64.exp() + (-6f64).exp()).ln()).abs() < 1e-12);
        // the true mass: exp(2) + exp(2.5) + exp(-6) is below
        let truth = (2f64.exp() + 2.5f64.exp() + (-6f64).exp()).ln();
        assert!(truth <= ub);
    }

    #[test]
    fn empty_and_nan() {
        let mut b = PageBounds::new(1, 4).unwrap();
        assert_eq!(
            b.log_mass_upper_bound(&[1.0], 1.0).unwrap(),
            f64::NEG_INFINITY
        );
        b.push(&[1.0]).unwrap();
        b.push(&[f32::NAN]).unwrap();
        b.push(&[2.0]).unwrap();
        assert!(b.log_mass_upper_bound(&[1.0], 1.0).unwrap().is_nan());
        assert!(PageBounds::new(0, 1).is_err() && PageBounds::new(1, 0).is_err());
        assert!(b.push(&[1.0, 2.0]).is_err());
    }
}
