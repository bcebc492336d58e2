//! The keys by channel in 8 bits, for scoring the bulk from a few channels.
//!
//! Per channel `j` and page `p` of `P` rows, a scale `s_jp = max_{i in p} |k_ij| / 127` and
//! codes `c_ij = round(k_ij / s_jp)` in `[-127, 127]`, so `k_ij ~ s_jp c_ij` with
//! `|k_ij - s_jp c_ij| <= s_jp / 2`. A score from the channels `R`,
//! `sum_{j in R} q_j k_ij ~ sum_{j in R} (q_j s_jp) c_ij`, reads one byte a key and channel
//! (half of f16) and one scale a page and channel.
//!
//! The open (last) page keeps its keys in f32 as well: when a key raises a channel's
//! maximum, that channel's codes in the page are redone from them, so every code always
//! equals the one its page's final scale gives (a recomputation from the keys agrees bit for
//! bit). A NaN key makes its channel's scale in the page NaN (every score of the page NaN: the
//! page is kept); an infinite one makes it infinite (the same, through `inf x 0`).

use crate::{Result, StatsError};

/// Largest code: codes are symmetric, `[-127, 127]`.
const CODE_MAX: f32 = 127.0;

/// One channel's codes (one per key) and scales (one per page), as a kernel reads them.
#[derive(Clone, Copy, Debug)]
pub struct ChannelColumn<'a> {
    /// `c_ij` of every key `i` held.
    pub codes: &'a [i8],
    /// `s_jp` of every page `p`.
    pub scales: &'a [f32],
}

/// The keys by channel, 8-bit codes with a scale per page and channel.
#[derive(Clone, Debug)]
pub struct ChannelKeys {
    page: usize,
    rows: usize,
    /// Per channel, the codes of every key held.
    codes: Vec<Vec<i8>>,
    /// Per channel, the scale of every page.
    scales: Vec<Vec<f32>>,
    /// The open page's keys by channel, `dim x page` (channel `j` at `j page..`).
    open: Vec<f32>,
    /// The open page's largest `|k_j|` per channel (NaN once a key was NaN).
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
            codes: vec![Vec::new(); dim],
            scales: vec![Vec::new(); dim],
            open: vec![0.0; dim * page],
            open_max: vec![0.0; dim],
        })
    }

    /// Key length `d`.
    pub fn dim(&self) -> usize {
        self.codes.len()
    }
    /// Keys held.
    pub fn n_rows(&self) -> usize {
        self.rows
    }
    /// Channel `j`'s codes and scales, `None` past the key length.
    pub fn column(&self, j: usize) -> Option<ChannelColumn<'_>> {
        Some(ChannelColumn {
            codes: self.codes.get(j)?,
            scales: self.scales.get(j)?,
        })
    }
    /// Bytes held: the codes and the scales.
    pub fn bytes(&self) -> usize {
        let scales: usize = self.scales.iter().map(Vec::len).sum();
        self.rows * self.dim() + scales * std::mem::size_of::<f32>()
    }

    /// Room for `rows` keys in all, so that adding them allocates nothing.
    pub fn reserve(&mut self, rows: usize) {
        let pages = rows.div_ceil(self.page);
        for (c, s) in self.codes.iter_mut().zip(&mut self.scales) {
            c.reserve(rows.saturating_sub(c.len()));
            s.reserve(pages.saturating_sub(s.len()));
        }
    }
    /// Forget every key.
    pub fn clear(&mut self) {
        self.rows = 0;
        self.codes.iter_mut().for_each(Vec::clear);
        self.scales.iter_mut().for_each(Vec::clear);
    }

    /// Add one key (the caller checked its length: `dim` values).
    pub(crate) fn push(&mut self, key: &[f32]) {
        let (page, at) = (self.page, self.rows % self.page);
        let page_start = self.rows - at;
        for (j, &k) in key.iter().enumerate() {
            let (codes, scales) = (&mut self.codes[j], &mut self.scales[j]);
            let max = &mut self.open_max[j];
            if at == 0 {
                scales.push(0.0);
                *max = 0.0;
            }
            let open = &mut self.open[j * page..(j + 1) * page];
            open[at] = k;
            let a = k.abs();
            if a > *max || (a.is_nan() && !max.is_nan()) {
                // a new maximum (or the first NaN): a new scale, the page's codes redone
                *max = a;
                let s = a / CODE_MAX;
                if let Some(last) = scales.last_mut() {
                    *last = s;
                }
                codes.truncate(page_start);
                codes.extend(open[..=at].iter().map(|&x| code(x, s)));
            } else {
                codes.push(code(k, *max / CODE_MAX));
            }
        }
        self.rows += 1;
    }
}

/// Equal when they hold the same codes and scales and the same keys of the open page (what
/// is left in the open page's buffer from earlier pages does not count).
impl PartialEq for ChannelKeys {
    fn eq(&self, other: &Self) -> bool {
        let (at, p) = (self.rows % self.page, self.page);
        self.page == other.page
            && self.rows == other.rows
            && self.codes == other.codes
            && self.scales == other.scales
            && (0..self.dim())
                .all(|j| self.open[j * p..j * p + at] == other.open[j * p..j * p + at])
    }
}

/// `round(x / s)` in `[-127, 127]`; 0 for a scale of 0 and where the quotient is NaN (an
/// infinite or NaN scale: the scale alone carries it into the scores).
fn code(x: f32, s: f32) -> i8 {
    if s == 0.0 {
        return 0;
    }
    // `as` saturates and sends NaN to 0
    (x / s).round().clamp(-CODE_MAX, CODE_MAX) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_page_maximum_and_round_to_nearest() {
        let mut c = ChannelKeys::new(1, 3).unwrap();
        for k in [63.4f32, 0.5, -127.0, 0.0] {
            c.push(&[k]);
        }
        let col = c.column(0).unwrap();
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
        c.push(&[1.0, f32::INFINITY]);
        c.push(&[f32::NAN, 1.0]);
        c.push(&[1.0, 1.0]);
        let (a, b) = (c.column(0).unwrap(), c.column(1).unwrap());
        assert!(a.scales[0].is_nan() && a.scales[1] == 1.0 / 127.0);
        assert!(b.scales[0].is_infinite() && b.codes[..2] == [0, 0]);
        c.clear();
        assert_eq!((c.n_rows(), c.column(0).unwrap().codes.len()), (0, 0));
    }
}
