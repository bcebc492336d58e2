//! Streaming first and second moments of keys.
//!
//! For keys `k_1 .. k_n` (length `d`) we keep the count `n`, the mean `mu` and the centered sum
//! of outer products `M2 = sum_i (k_i - mu)(k_i - mu)^T`, all in f64. The population covariance
//! is `Sigma = M2 / n`.
//!
//! - push (Welford): `delta = k - mu_old`, `mu += delta / n`, `M2 += (n - 1) / n * delta delta^T`.
//! - merge (Chan et al.): `delta = mu_b - mu_a`, `mu = mu_a + delta n_b / n`,
//!   `M2 = M2_a + M2_b + delta delta^T n_a n_b / n`.
//!
//! Centering at the running mean keeps the covariance accurate when the spread is tiny next to
//! the offset (keys around 1e4 with standard deviation 1e-2), where the textbook
//! `E[k k^T] - mu mu^T` loses every digit.
//!
//! `M2` is symmetric, so only its upper triangle is stored, packed row by row: row `i` holds
//! `M2[i][i..d]` (see [`crate::packed`]). That halves the `O(d^2)` cost of a push.
//!
//! At the public boundary keys may come as an `ndarray` `T x d` view ([`KeyMoments::from_keys`],
//! [`KeyMoments::push_keys`]) and the moments leave as arrays ([`KeyMoments::mean_array`],
//! [`KeyMoments::covariance_array`]); the kernels inside stay on slices.

use ndarray::{Array1, Array2, ArrayView2};

use crate::{packed, quad, Result, StatsError};

/// Streaming mean and population covariance of d-dimensional keys.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyMoments {
    dim: usize,
    count: u64,
    mean: Vec<f64>,
    /// Packed upper triangle of `M2`, row-major: `d (d + 1) / 2` values.
    m2: Vec<f64>,
}

impl KeyMoments {
    /// Empty moments for keys of length `dim`.
    pub fn new(dim: usize) -> Self {
        KeyMoments {
            dim,
            count: 0,
            mean: vec![0.0; dim],
            m2: vec![0.0; packed::len(dim)],
        }
    }

    /// Rebuild moments from stored parts (count, mean, packed upper triangle of `M2`).
    pub fn from_parts(count: u64, mean: Vec<f64>, m2_packed: Vec<f64>) -> Result<Self> {
        let dim = mean.len();
        let expected = packed::len(dim);
        if m2_packed.len() != expected {
            return Err(StatsError::ShapeMismatch {
                what: "packed M2 of key moments",
                expected,
                found: m2_packed.len(),
            });
        }
        Ok(KeyMoments {
            dim,
            count,
            mean,
            m2: m2_packed,
        })
    }

    /// Moments of the rows of `keys` (row-major, `dim` values a row), by two passes over the
    /// block: first the mean, then the centered outer products.
    pub fn from_rows(dim: usize, keys: &[f32]) -> Result<Self> {
        let mut m = KeyMoments::new(dim);
        m.push_rows(keys)?;
        Ok(m)
    }

    /// Moments of the rows of `keys`, a `T x d` view (`d = keys.ncols()`). A view in standard
    /// layout is read in place; any other (transposed, strided) is read row by row, with the
    /// same arithmetic, so both give the same moments.
    pub fn from_keys(keys: ArrayView2<'_, f32>) -> Result<Self> {
        let mut m = KeyMoments::new(keys.ncols());
        m.push_keys(keys)?;
        Ok(m)
    }

    /// Key length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of keys seen.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// True when no key was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Mean of the keys (zeros when empty).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Mean of the keys as an array of length `d` (zeros when empty).
    pub fn mean_array(&self) -> Array1<f64> {
        Array1::from(self.mean.clone())
    }

    /// Packed upper triangle of `M2 = n Sigma`, row-major.
    pub fn m2_packed(&self) -> &[f64] {
        &self.m2
    }

    /// Add one key: `O(d^2)`.
    pub fn push(&mut self, key: &[f32]) -> Result<()> {
        self.check_dim(key.len())?;
        let d = self.dim;
        self.count += 1;
        let n = self.count as f64;
        // delta = k - mu_old; the update of M2 uses delta delta^T (n - 1) / n, which equals
        // delta (k - mu_new)^T and stays exactly symmetric.
        let (mut stack, mut heap) = ([0.0f64; STACK_DIM], Vec::new());
        let delta = scratch(&mut stack, &mut heap, d);
        for ((dl, &k), mu) in delta.iter_mut().zip(key).zip(self.mean.iter_mut()) {
            *dl = k as f64 - *mu;
            *mu += *dl / n;
        }
        let c = (n - 1.0) / n;
        for (i, r) in packed::rows(d) {
            let a = c * delta[i];
            for (m, &dj) in self.m2[r].iter_mut().zip(&delta[i..]) {
                *m += a * dj;
            }
        }
        Ok(())
    }

    /// Add every row of `keys` (row-major, `d` values a row). A block is reduced by two passes
    /// (mean, then centered outer products) and merged, which is both faster and more accurate
    /// than one push per row.
    pub fn push_rows(&mut self, keys: &[f32]) -> Result<()> {
        let d = self.dim;
        if d == 0 {
            return if keys.is_empty() {
                Ok(())
            } else {
                Err(StatsError::DimensionMismatch {
                    expected: 0,
                    found: keys.len(),
                })
            };
        }
        if !keys.len().is_multiple_of(d) {
            return Err(StatsError::DimensionMismatch {
                expected: d,
                found: keys.len() % d,
            });
        }
        let n = keys.len() / d;
        if n == 0 {
            return Ok(());
        }
        if n == 1 {
            return self.push(keys);
        }
        self.merge(&KeyMoments::two_pass(d, n, || keys.chunks_exact(d)))
    }

    /// Add every row of `keys`, a `T x d` view with `d = dim()`: in place when the view is in
    /// standard layout, else row by row with the same arithmetic as [`KeyMoments::push_rows`].
    pub fn push_keys(&mut self, keys: ArrayView2<'_, f32>) -> Result<()> {
        self.check_dim(keys.ncols())?;
        if let Some(x) = keys.as_slice() {
            return self.push_rows(x);
        }
        let (n, d) = keys.dim();
        match n {
            0 => Ok(()),
            1 => self.push(&keys.row(0).to_vec()),
            _ => self.merge(&KeyMoments::two_pass(d, n, || keys.rows().into_iter())),
        }
    }

    /// Moments of a block of `n >= 1` rows of length `d` by two passes: the mean, then the
    /// centered outer products. `rows` yields the block's rows, once per pass.
    fn two_pass<'a, R, I>(d: usize, n: usize, rows: impl Fn() -> I) -> KeyMoments
    where
        R: IntoIterator<Item = &'a f32>,
        I: Iterator<Item = R>,
    {
        let mut block = KeyMoments::new(d);
        block.count = n as u64;
        for row in rows() {
            for (mu, &k) in block.mean.iter_mut().zip(row) {
                *mu += k as f64;
            }
        }
        for mu in &mut block.mean {
            *mu /= n as f64;
        }
        let mut centered = vec![0.0f64; d];
        for row in rows() {
            for ((c, &k), mu) in centered.iter_mut().zip(row).zip(&block.mean) {
                *c = k as f64 - mu;
            }
            for (i, r) in packed::rows(d) {
                let a = centered[i];
                for (m, &cj) in block.m2[r].iter_mut().zip(&centered[i..]) {
                    *m += a * cj;
                }
            }
        }
        block
    }

    /// Add every row of `keys`, f32, f16 or q8 (converted to f32 first, a block of rows at a
    /// time).
    pub fn push_rows_of(&mut self, keys: crate::Rows<'_>) -> Result<()> {
        match keys {
            crate::Rows::F32(x) => self.push_rows(x),
            crate::Rows::F16(x) if x.len() == self.dim && x.len() <= 256 => {
                // one row, as at every decoding step: converted on the stack
                let mut row = [0.0f32; 256];
                let row = &mut row[..x.len()];
                row.iter_mut().zip(x).for_each(|(r, v)| *r = v.to_f32());
                self.push(row)
            }
            crate::Rows::F16(x) => {
                let d = self.dim.max(1);
                let mut buf = Vec::with_capacity(256 * d);
                for chunk in x.chunks(256 * d) {
                    buf.clear();
                    buf.extend(chunk.iter().map(|v| v.to_f32()));
                    self.push_rows(&buf)?;
                }
                Ok(())
            }
            crate::Rows::Q8(x) => {
                // whole rows of whole blocks, as a cache hands them out; dequantized a
                // block of rows at a time (approximate moments: exact ones come from the
                // f32 keys before quantization, as a q8 cache folds them)
                let d = self.dim.max(1);
                if !d.is_multiple_of(crate::Q8_BLOCK)
                    || !(x.len() * crate::Q8_BLOCK).is_multiple_of(d)
                {
                    return Err(StatsError::DimensionMismatch {
                        expected: self.dim,
                        found: x.len() * crate::Q8_BLOCK,
                    });
                }
                let per = 256 * d / crate::Q8_BLOCK;
                let mut buf = vec![0.0f32; 256 * d];
                for chunk in x.chunks(per) {
                    let buf = &mut buf[..chunk.len() * crate::Q8_BLOCK];
                    crate::Q8Block::dequantize_into(chunk, buf);
                    self.push_rows(buf)?;
                }
                Ok(())
            }
        }
    }

    /// Combine with the moments of another, disjoint set of keys (Chan et al.).
    pub fn merge(&mut self, other: &KeyMoments) -> Result<()> {
        self.check_dim(other.dim)?;
        if other.count == 0 {
            return Ok(());
        }
        if self.count == 0 {
            self.clone_from(other);
            return Ok(());
        }
        let d = self.dim;
        let na = self.count as f64;
        let nb = other.count as f64;
        let n = na + nb;
        let delta: Vec<f64> = other
            .mean
            .iter()
            .zip(&self.mean)
            .map(|(b, a)| b - a)
            .collect();
        let c = na * nb / n;
        for (i, r) in packed::rows(d) {
            let a = c * delta[i];
            let other_row = &other.m2[r.clone()];
            for ((m, &o), &dj) in self.m2[r].iter_mut().zip(other_row).zip(&delta[i..]) {
                *m += o + a * dj;
            }
        }
        for (mu, dl) in self.mean.iter_mut().zip(&delta) {
            *mu += dl * nb / n;
        }
        self.count += other.count;
        Ok(())
    }

    /// Population covariance `Sigma = M2 / n`, full `d x d`, row-major and exactly symmetric.
    /// Zeros when fewer than one key was seen.
    pub fn covariance(&self) -> Vec<f64> {
        let d = self.dim;
        let mut out = vec![0.0; d * d];
        if self.count == 0 {
            return out;
        }
        let n = self.count as f64;
        for (i, r) in packed::rows(d) {
            for (j, &m) in (i..).zip(&self.m2[r]) {
                let v = m / n;
                out[i * d + j] = v;
                out[j * d + i] = v;
            }
        }
        out
    }

    /// Population covariance `Sigma = M2 / n` as a full, exactly symmetric `d x d` array (see
    /// [`KeyMoments::covariance`]).
    pub fn covariance_array(&self) -> Array2<f64> {
        let d = self.dim;
        Array2::from_shape_vec((d, d), self.covariance()).expect("covariance() is d x d")
    }

    /// `q . mu`, summed in f64 in eight lanes (the same order for every key distribution).
    pub fn mean_dot(&self, q: &[f32]) -> Result<f64> {
        self.check_dim(q.len())?;
        Ok(dot_f64(q, &self.mean))
    }

    /// `q^T Sigma q` in f64 from the packed upper triangle: `O(d^2 / 2)` (the batch kernel of
    /// `quad.rs`, with one query).
    pub fn quad_form(&self, q: &[f32]) -> Result<f64> {
        let mut out = [0.0];
        self.quad_forms(&[q], &mut out)?;
        Ok(out[0])
    }

    /// `out[h] = q_h^T Sigma q_h` for a batch of queries (the query heads of a GQA group), with
    /// one read of `Sigma` per batch of 8 queries: each value equals
    /// [`KeyMoments::quad_form`] of its query alone, bit for bit.
    pub fn quad_forms(&self, qs: &[&[f32]], out: &mut [f64]) -> Result<()> {
        if qs.len() != out.len() {
            return Err(StatsError::ShapeMismatch {
                what: "quadratic forms: outputs vs queries",
                expected: qs.len(),
                found: out.len(),
            });
        }
        for q in qs {
            self.check_dim(q.len())?;
        }
        if self.count == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let d = self.dim;
        let n = self.count as f64;
        // f64 copies of as many queries as fit in STACK_QUERIES values (one at least)
        let per = (STACK_QUERIES / d.max(1)).clamp(1, quad::BATCH);
        let (mut stack, mut heap) = ([0.0f64; STACK_QUERIES], Vec::new());
        for (qs, out) in qs.chunks(per).zip(out.chunks_mut(per)) {
            let buf: &mut [f64] = if qs.len() * d <= STACK_QUERIES {
                &mut stack[..qs.len() * d]
            } else {
                heap.resize(qs.len() * d, 0.0);
                &mut heap
            };
            for (row, q) in buf.chunks_exact_mut(d).zip(qs) {
                row.iter_mut()
                    .zip(q.iter())
                    .for_each(|(a, &b)| *a = b as f64);
            }
            quad::packed_quad_forms(&self.m2, d, buf, out);
            out.iter_mut().for_each(|o| *o /= n);
        }
        Ok(())
    }

    fn check_dim(&self, found: usize) -> Result<()> {
        if found != self.dim {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim,
                found,
            });
        }
        Ok(())
    }
}

/// `q . m` in f64 over the shorter length, in eight partial sums (lane `j mod 8`, so that the
/// loop vectorizes) added in pairs: the `q . mu` of every key distribution, so that a mean
/// gives the same bits whichever form keeps it.
pub(crate) fn dot_f64(q: &[f32], m: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let (qc, mc) = (q.chunks_exact(8), m.chunks_exact(8));
    let tail: f64 = qc
        .remainder()
        .iter()
        .zip(mc.remainder())
        .map(|(&a, &b)| a as f64 * b)
        .sum();
    for (q, m) in qc.zip(mc) {
        for k in 0..8 {
            lanes[k] += q[k] as f64 * m[k];
        }
    }
    let [a, b, c, d, e, f, g, h] = lanes;
    (((a + e) + (b + f)) + ((c + g) + (d + h))) + tail
}

/// Head dimensions up to this use stack scratch in the per-token paths (no allocation).
const STACK_DIM: usize = 256;

/// f64 values of queries [`KeyMoments::quad_forms`] converts on the stack: 8 heads of 64.
const STACK_QUERIES: usize = 512;

/// `d` f64 of scratch: on the stack when `d <= STACK_DIM`, else in `heap`.
fn scratch<'a>(stack: &'a mut [f64; STACK_DIM], heap: &'a mut Vec<f64>, d: usize) -> &'a mut [f64] {
    if d <= STACK_DIM {
        &mut stack[..d]
    } else {
        heap.resize(d, 0.0);
        heap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_has_zero_covariance() {
        let mut m = KeyMoments::new(3);
        m.push(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(m.mean(), &[1.0, 2.0, 3.0]);
        assert!(m.covariance().iter().all(|&v| v == 0.0));
    }

    #[test]
    fn wrong_length_is_an_error() {
        let mut m = KeyMoments::new(3);
        assert!(matches!(
            m.push(&[1.0, 2.0]),
            Err(StatsError::DimensionMismatch {
                expected: 3,
                found: 2
            })
        ));
        assert!(m.push_rows(&[1.0; 7]).is_err());
        assert!(m.merge(&KeyMoments::new(4)).is_err());
    }
}
