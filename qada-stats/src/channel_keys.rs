//! The keys by channel in 8 bits, for scoring the bulk from a few channels.
//!
//! Per channel `j` and page `p` of `P` rows, a scale `s_jp = max_{i in p} |k_ij| / 127` and
//! codes `c_ij = round(k_ij / s_jp)` in `[-127, 127]`, so `k_ij ~ s_jp c_ij` with
//! `|k_ij - s_jp c_ij| <= s_jp / 2`. A score from the channels `R`,
//! `sum_{j in R} q_j k_ij ~ sum_{j in R} (q_j s_jp) c_ij`, reads one byte a key and channel
//! (half of f16) and one scale a page and channel.
//!
//! The scales are stored page by page (`n_pages x d`) and the open (last) page keeps its keys
//! in f32 row by row, so that adding a key writes one code a channel and a few cache lines
//! besides. When a key raises a channel's maximum, that channel's codes in the page are redone
//! from them, so every code always
//! equals the one its page's final scale gives (a recomputation from the keys agrees bit for
//! bit). A NaN key makes its channel's scale in the page NaN (every score of the page NaN: the
//! page is kept); an infinite one makes it infinite (the same, through `inf x 0`).

use crate::{Result, StatsError};

/// Largest code: codes are symmetric, `[-127, 127]`.
const CODE_MAX: f32 = 127.0;

/// Keys of a run whose codes [`ChannelKeys::push_run`] takes at a time (on the stack).
const ROWS: usize = 8;

/// One channel's codes (one per key) and scales (one per page), as a kernel reads them.
#[derive(Clone, Copy, Debug)]
pub struct ChannelColumn<'a> {
    /// `c_ij` of every key `i` held.
    pub codes: &'a [i8],
    /// `s_jp` of page `p` at `scales[p * stride]`.
    pub scales: &'a [f32],
    /// Distance between two pages' scales in `scales` (at least 1).
    pub stride: usize,
}

impl ChannelColumn<'_> {
    /// Pages whose scale the column holds.
    pub fn n_scales(&self) -> usize {
        if self.scales.is_empty() {
            0
        } else {
            (self.scales.len() - 1) / self.stride.max(1) + 1
        }
    }
}

/// The keys by channel, 8-bit codes with a scale per page and channel.
#[derive(Clone, Debug)]
pub struct ChannelKeys {
    page: usize,
    rows: usize,
    /// Every channel's codes in one buffer of `dim` runs of [`ChannelKeys::cap`] (room for as
    /// many keys), channel `j`'s `rows` codes at `j cap..`: adding
    /// a key writes one byte a channel at an address known without reading memory (a
    /// decoding step's copy is out of the caches, and a code behind a vector's header would
    /// wait on two misses).
    codes: Vec<i8>,
    /// Key length `d`: channels.
    dim: usize,
    /// Every page's scales, `n_pages x dim` row-major.
    scales: Vec<f32>,
    /// The open page's keys, `page x dim` row-major.
    open: Vec<f32>,
    /// The open page's largest `|k_j|` per channel (NaN once a key was NaN); kept rather than
    /// read back as `127 s_jp`, which need not round-trip to it.
    open_max: Vec<f32>,
}

impl ChannelKeys {
    /// An empty copy of keys of length `dim` in pages of `page` rows (both at least 1).
    ///
    /// # Errors
    /// [`StatsError::ShapeMismatch`] when `dim` or `page` is 0.
    pub fn new(dim: usize, page: usize) -> Result<Self> {
        if dim == 0 || page == 0 {
            return Err(StatsError::ShapeMismatch {
                what: "keys by channel (key length and page size, both at least 1)",
                expected: 1,
                found: 0,
            });
        }
        Ok(ChannelKeys {
            page,
            rows: 0,
            codes: Vec::new(),
            dim,
            scales: Vec::new(),
            open: vec![0.0; dim * page],
            open_max: vec![0.0; dim],
        })
    }

    /// Key length `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Keys held.
    pub fn n_rows(&self) -> usize {
        self.rows
    }
    /// Channel `j`'s codes and scales, `None` past the key length.
    pub fn column(&self, j: usize) -> Option<ChannelColumn<'_>> {
        if j >= self.dim {
            return None;
        }
        Some(ChannelColumn {
            codes: self.codes_of(j),
            scales: self.scales.get(j..).unwrap_or(&[]),
            stride: self.dim(),
        })
    }
    /// Channel `j`'s codes (`j < dim`).
    fn codes_of(&self, j: usize) -> &[i8] {
        let cap = self.cap();
        &self.codes[j * cap..j * cap + self.rows]
    }
    /// Keys a channel's run of the buffer has room for.
    fn cap(&self) -> usize {
        self.codes.len() / self.dim
    }
    /// Bytes of the codes and the scales (what reading every column reads).
    pub fn bytes(&self) -> usize {
        self.rows * self.dim() + self.scales.len() * std::mem::size_of::<f32>()
    }

    /// Room for `rows` keys in all, so that adding them allocates nothing.
    pub fn reserve(&mut self, rows: usize) {
        let scales = rows.div_ceil(self.page) * self.dim();
        self.scales
            .reserve(scales.saturating_sub(self.scales.len()));
        if rows > self.cap() {
            self.grow(rows);
        }
    }
    /// Forget every key (the room stays).
    pub fn clear(&mut self) {
        self.rows = 0;
        self.scales.clear();
    }

    /// Room for `cap > self.cap()` keys a channel: the codes held move to their new places.
    fn grow(&mut self, cap: usize) {
        let mut codes = vec![0i8; self.dim * cap];
        for (j, to) in codes.chunks_exact_mut(cap).enumerate() {
            to[..self.rows].copy_from_slice(self.codes_of(j));
        }
        self.codes = codes;
    }

    /// Add one key (`dim` values).
    ///
    /// # Errors
    /// [`StatsError::DimensionMismatch`] when `key` does not hold `dim` values.
    pub fn push(&mut self, key: &[f32]) -> Result<()> {
        if key.len() != self.dim() {
            return Err(StatsError::DimensionMismatch {
                expected: self.dim(),
                found: key.len(),
            });
        }
        // a run of one key (its page opened if it is the first)
        self.push_run(key);
        Ok(())
    }

    /// Add `keys.len() / dim` keys (row-major), the same as [`ChannelKeys::push`] one at a
    /// time: within a page a channel's codes end up at the scale of its largest `|k_j|`, so a
    /// run of keys raises a scale and redoes the page's codes once, not at each key.
    ///
    /// # Errors
    /// [`StatsError::DimensionMismatch`] when `keys.len()` is not a multiple of `dim`.
    pub fn push_rows(&mut self, keys: &[f32]) -> Result<()> {
        let d = self.dim();
        if !keys.len().is_multiple_of(d) {
            return Err(StatsError::DimensionMismatch {
                expected: d,
                found: keys.len() % d,
            });
        }
        let mut rest = keys;
        while !rest.is_empty() {
            let take = (self.page - self.rows % self.page).min(rest.len() / d);
            let (run, tail) = rest.split_at(take * d);
            self.push_run(run);
            rest = tail;
        }
        Ok(())
    }

    /// Keys that all fall in the open page (or open the next one), 64 channels at a time:
    ///
    /// 1. the channels' largest `|k_j|` over the run and their scales, in loops without
    ///    branches (NaN once a key is NaN, as [`ChannelKeys::push`] keeps it);
    /// 2. the run's codes at those scales, [`ROWS`] keys at a time, row by row without
    ///    branches, pushed a channel at a time where the run left the channel's scale as it
    ///    was (or opened the page);
    /// 3. where the run raised a channel's maximum in a page it did not open, that channel's
    ///    codes of the whole page redone at the raised scale (the run's own among them).
    ///
    /// A decoding step pushes a run of one key; prefill, runs up to a page.
    fn push_run(&mut self, run: &[f32]) {
        const CHUNK: usize = 64;
        let d = self.dim();
        let (at, take) = (self.rows % self.page, run.len() / d);
        let page_start = self.rows - at;
        if self.rows + take > self.cap() {
            // doubling, as a vector would: a key at a time stays amortized O(1)
            self.grow((self.rows + take).max(2 * self.cap()).max(self.page));
        }
        let cap = self.cap();
        if at == 0 {
            self.scales.resize(self.scales.len() + d, 0.0);
            self.open_max.fill(0.0);
        }
        self.open[at * d..(at + take) * d].copy_from_slice(run);
        let (mut codes, mut grew) = ([[0i8; CHUNK]; ROWS], [false; CHUNK]);
        for j0 in (0..d).step_by(CHUNK) {
            let w = CHUNK.min(d - j0);
            let scales = &mut self.scales[page_start / self.page * d + j0..][..w];
            let maxima = &mut self.open_max[j0..][..w];
            let grew = &mut grew[..w];
            grew.fill(false);
            for key in run.chunks_exact(d) {
                for ((m, g), &k) in maxima.iter_mut().zip(grew.iter_mut()).zip(&key[j0..j0 + w]) {
                    let a = k.abs();
                    let up = a > *m || (a.is_nan() && !m.is_nan());
                    *m = if up { a } else { *m };
                    *g |= up;
                }
            }
            for ((s, &m), &g) in scales.iter_mut().zip(maxima.iter()).zip(grew.iter()) {
                *s = if g { m / CODE_MAX } else { *s };
            }
            for (b, block) in run.chunks(ROWS * d).enumerate() {
                let (n, row0) = (block.len() / d, self.rows + b * ROWS);
                for (row, key) in codes.iter_mut().zip(block.chunks_exact(d)) {
                    for ((c, &k), &s) in row.iter_mut().zip(&key[j0..j0 + w]).zip(scales.iter()) {
                        *c = code(k, s);
                    }
                }
                for (i, &g) in grew.iter().enumerate() {
                    if !g || at == 0 {
                        let to = &mut self.codes[(j0 + i) * cap + row0..][..n];
                        for (c, row) in to.iter_mut().zip(&codes[..n]) {
                            *c = row[i];
                        }
                    }
                }
            }
            for (i, &g) in grew.iter().enumerate() {
                if g && at > 0 {
                    let (j, s) = (j0 + i, scales[i]);
                    let to = &mut self.codes[j * cap + page_start..][..at + take];
                    for (r, c) in to.iter_mut().enumerate() {
                        *c = code(self.open[r * d + j], s);
                    }
                }
            }
        }
        self.rows += take;
    }
}

/// Equal when they hold the same codes and scales and the same keys of the open page (what
/// is left in the open page's buffer from earlier pages does not count).
impl PartialEq for ChannelKeys {
    fn eq(&self, other: &Self) -> bool {
        let open = self.rows % self.page * self.dim();
        self.page == other.page
            && self.rows == other.rows
            && self.dim == other.dim
            && (0..self.dim).all(|j| self.codes_of(j) == other.codes_of(j))
            && self.scales == other.scales
            && self.open[..open] == other.open[..open]
    }
}

/// `round(x / s)` in `[-127, 127]`; 0 for a scale of 0 and where the quotient is NaN (an
/// infinite or NaN scale: the scale alone carries it into the scores).
fn code(x: f32, s: f32) -> i8 {
    if s == 0.0 {
        return 0;
    }
    // clamped first (a NaN stays NaN), then rounded half away from zero by truncation:
    // `y - t` is exact for |y| <= 127, and `as` sends NaN to 0 (`f32::round` is a libm call
    // on the baseline target, a tenth of the time of coding a key)
    let y = (x / s).clamp(-CODE_MAX, CODE_MAX);
    let t = y as i32;
    let frac = y - t as f32;
    // without branches: a key's fraction is as likely above a half as below
    (t + (frac >= 0.5) as i32 - (frac <= -0.5) as i32) as i8
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys mostly finite, some 0, NaN or infinite.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => -100.0f32..100.0,
            1 => Just(0.0f32),
            1 => prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY)],
        ]
    }

    /// `keys` (rows of `d`) pushed into a new copy in runs cut at the given rows.
    fn pushed_in_runs(d: usize, page: usize, keys: &[f32], cuts: Vec<usize>) -> ChannelKeys {
        let n = keys.len() / d;
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(n) * d).collect();
        cuts.sort_unstable();
        let mut copy = ChannelKeys::new(d, page).unwrap();
        let mut from = 0;
        for c in cuts.into_iter().chain([keys.len()]) {
            copy.push_rows(&keys[from..c]).unwrap();
            from = c;
        }
        copy
    }

    proptest! {
        /// The code is `round(x / s)` (half away from zero) clamped to `[-127, 127]`, 0 for
        /// a NaN quotient, for any key and scale.
        #[test]
        fn a_code_is_the_rounded_clamped_quotient(
            x in prop_oneof![value(), any::<f32>(), (-254i32..=254).prop_map(|h| h as f32 * 0.5)],
            s in prop_oneof![Just(1.0f32), Just(0.0f32), any::<f32>(), 1e-3f32..10.0],
        ) {
            let want = if s == 0.0 { 0 } else { (x / s).round().clamp(-CODE_MAX, CODE_MAX) as i8 };
            prop_assert_eq!(code(x, s), want, "x {} s {}", x, s);
        }

        /// Keys pushed in runs split anywhere give the codes, scales and open page that
        /// pushing them one at a time gives.
        #[test]
        fn runs_of_keys_are_the_keys_one_at_a_time(
            // past one chunk of 64 channels too
            d in prop_oneof![1usize..6, 63usize..70], page in 1usize..9, n in 0usize..40,
            cuts in prop::collection::vec(0usize..40, 0..4),
            values in prop::collection::vec(value(), 40 * 70),
        ) {
            let keys = &values[..n * d];
            let mut one = ChannelKeys::new(d, page).unwrap();
            for k in keys.chunks_exact(d) {
                one.push(k).unwrap();
            }
            let mut runs = pushed_in_runs(d, page, keys, cuts);
            // bit for bit (a NaN scale is not equal to itself)
            let bits = |c: &ChannelKeys| {
                let open = c.rows % c.page * c.dim();
                let f = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let codes: Vec<Vec<i8>> =
                    (0..c.dim()).map(|j| c.column(j).unwrap().codes.to_vec()).collect();
                (c.rows, codes, f(&c.scales), f(&c.open[..open]), f(&c.open_max))
            };
            prop_assert_eq!(bits(&runs), bits(&one));
            prop_assert!(runs.push_rows(&values[..d + 1]).is_err() || d == 1);
        }

        /// After any runs of keys, every page's scale is its largest `|k_j|` (NaN where a
        /// key is NaN) over 127 and every code is its key's at that scale: the copy equals a
        /// recomputation from the keys, bit for bit.
        #[test]
        fn the_copy_equals_a_recomputation_from_the_keys(
            d in prop_oneof![1usize..6, 63usize..70], page in 1usize..20, n in 0usize..45,
            cuts in prop::collection::vec(0usize..45, 0..4),
            values in prop::collection::vec(value(), 45 * 70),
        ) {
            let keys = &values[..n * d];
            let copy = pushed_in_runs(d, page, keys, cuts);
            for j in 0..d {
                let col = copy.column(j).unwrap();
                prop_assert_eq!(col.codes.len(), n);
                for (p, rows) in keys.chunks(page * d).enumerate() {
                    let channel = rows.chunks_exact(d).map(|k| k[j]);
                    let max = if channel.clone().any(f32::is_nan) {
                        f32::NAN
                    } else {
                        channel.clone().map(f32::abs).fold(0.0, f32::max)
                    };
                    let s = max / CODE_MAX;
                    prop_assert_eq!(col.scales[p * d].to_bits(), s.to_bits(), "page {} channel {}", p, j);
                    for (i, k) in channel.enumerate() {
                        prop_assert_eq!(col.codes[p * page + i], code(k, s), "page {} row {} channel {}", p, i, j);
                    }
                }
            }
        }
    }

    #[test]
    fn codes_follow_the_page_maximum_and_round_to_nearest() {
        let mut c = ChannelKeys::new(1, 3).unwrap();
        for k in [63.4f32, 0.5, -127.0, 0.0] {
            c.push(&[k]).unwrap();
        }
        let col = c.column(0).unwrap();
        assert_eq!((col.stride, col.n_scales()), (1, 2));
        // page 0: max 127, scale 1 (63.4 and 0.5 redone from 0.5 and 63.4 / 127 at
        // -127): 63, 1 (half away from zero), -127; page 1: all zero, scale 0, code 0
        assert_eq!(col.codes, &[63, 1, -127, 0]);
        assert_eq!(col.scales, &[1.0, 0.0]);
        assert!(c.column(1).is_none());
        assert_eq!(c.bytes(), 4 + 2 * 4);
        assert!(ChannelKeys::new(0, 1).is_err() && ChannelKeys::new(1, 0).is_err());
    }

    #[test]
    fn nan_and_infinity_reach_the_scale() {
        let mut c = ChannelKeys::new(2, 2).unwrap();
        c.push(&[1.0, f32::INFINITY]).unwrap();
        c.push(&[f32::NAN, 1.0]).unwrap();
        c.push(&[1.0, 1.0]).unwrap();
        assert!(c.push(&[1.0]).is_err() && c.n_rows() == 3);
        let (a, b) = (c.column(0).unwrap(), c.column(1).unwrap());
        // page-major scales: channel 0's at 0 and 2, channel 1's at 1 and 3
        assert!(a.scales[0].is_nan() && a.scales[2] == 1.0 / 127.0);
        assert!(b.scales[0].is_infinite() && b.codes[..2] == [0, 0]);
        assert_eq!((a.n_scales(), b.n_scales(), b.stride), (2, 2, 2));
        c.clear();
        assert_eq!((c.n_rows(), c.column(0).unwrap().codes.len()), (0, 0));
    }
}
