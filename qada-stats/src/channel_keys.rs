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
    /// Per channel, the codes of every key held.
    codes: Vec<Vec<i8>>,
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
            codes: vec![Vec::new(); dim],
            scales: Vec::new(),
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
            scales: self.scales.get(j..).unwrap_or(&[]),
            stride: self.dim(),
        })
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
        for c in &mut self.codes {
            c.reserve(rows.saturating_sub(c.len()));
        }
    }
    /// Forget every key.
    pub fn clear(&mut self) {
        self.rows = 0;
        self.codes.iter_mut().for_each(Vec::clear);
        self.scales.clear();
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
        let (d, at) = (self.dim(), self.rows % self.page);
        let page_start = self.rows - at;
        if at == 0 {
            self.scales.resize(self.scales.len() + d, 0.0);
            self.open_max.fill(0.0);
        }
        self.open[at * d..(at + 1) * d].copy_from_slice(key);
        let scales = &mut self.scales[page_start / self.page * d..];
        for (j, ((&k, codes), max)) in key
            .iter()
            .zip(&mut self.codes)
            .zip(&mut self.open_max)
            .enumerate()
        {
            let a = k.abs();
            if a > *max || (a.is_nan() && !max.is_nan()) {
                // a new maximum (or the first NaN): a new scale, the page's codes redone
                *max = a;
                let s = a / CODE_MAX;
                scales[j] = s;
                codes.truncate(page_start);
                let open = self.open[j..(at + 1) * d].iter().step_by(d);
                codes.extend(open.map(|&x| code(x, s)));
            } else {
                codes.push(code(k, scales[j]));
            }
        }
        self.rows += 1;
        Ok(())
    }
}

/// Equal when they hold the same codes and scales and the same keys of the open page (what
/// is left in the open page's buffer from earlier pages does not count).
impl PartialEq for ChannelKeys {
    fn eq(&self, other: &Self) -> bool {
        let open = self.rows % self.page * self.dim();
        self.page == other.page
            && self.rows == other.rows
            && self.codes == other.codes
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
