//! Dequantization of one block of each quantized type, read through its typed view.

use super::blocks::{
    f16_value, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0,
    QuantBlock,
};

/// A block that can be turned into its f32 values.
pub trait Dequantize: QuantBlock {
    /// Write the block's [`QuantBlock::VALUES`] values to `y`.
    ///
    /// # Panics
    /// When `y` holds fewer than `VALUES` values.
    fn dequantize(&self, y: &mut [f32]);
}

impl Dequantize for BlockQ4_0 {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_value(self.d);
        for (j, &q) in self.qs.iter().enumerate() {
            y[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
            y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

impl Dequantize for BlockQ4_1 {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let (d, m) = (f16_value(self.d), f16_value(self.m));
        for (j, &q) in self.qs.iter().enumerate() {
            y[j] = (q & 0x0f) as f32 * d + m;
            y[j + 16] = (q >> 4) as f32 * d + m;
        }
    }
}

impl Dequantize for BlockQ5_0 {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_value(self.d);
        let qh = u32::from_le_bytes(self.qh);
        for (j, &q) in self.qs.iter().enumerate() {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            y[j] = (((q & 0x0f) as u32 | h0) as i32 - 16) as f32 * d;
            y[j + 16] = (((q >> 4) as u32 | h1) as i32 - 16) as f32 * d;
        }
    }
}

impl Dequantize for BlockQ5_1 {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let (d, m) = (f16_value(self.d), f16_value(self.m));
        let qh = u32::from_le_bytes(self.qh);
        for (j, &q) in self.qs.iter().enumerate() {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            y[j] = ((q & 0x0f) as u32 | h0) as f32 * d + m;
            y[j + 16] = ((q >> 4) as u32 | h1) as f32 * d + m;
        }
    }
}

impl Dequantize for BlockQ8_0 {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_value(self.d);
        for (o, &q) in y[..32].iter_mut().zip(&self.qs) {
            *o = q as f32 * d;
        }
    }
}

impl Dequantize for BlockQ4K {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_value(self.d), f16_value(self.dmin));
        for (g, q) in self.qs.chunks_exact(32).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * g, &self.scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, &self.scales);
            let (d1, mm1, d2, mm2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
            let out = &mut y[g * 64..g * 64 + 64];
            for l in 0..32 {
                out[l] = d1 * (q[l] & 0x0f) as f32 - mm1;
                out[l + 32] = d2 * (q[l] >> 4) as f32 - mm2;
            }
        }
    }
}

impl Dequantize for BlockQ5K {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let (d, dmin) = (f16_value(self.d), f16_value(self.dmin));
        let qh = &self.qh;
        for (g, q) in self.qs.chunks_exact(32).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * g, &self.scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, &self.scales);
            let (d1, mm1, d2, mm2) = (d * sc1, dmin * m1, d * sc2, dmin * m2);
            let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
            let out = &mut y[g * 64..g * 64 + 64];
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                out[l] = d1 * ((q[l] & 0x0f) + h1) as f32 - mm1;
                out[l + 32] = d2 * ((q[l] >> 4) + h2) as f32 - mm2;
            }
        }
    }
}

impl Dequantize for BlockQ6K {
    #[inline]
    fn dequantize(&self, y: &mut [f32]) {
        let d = f16_value(self.d);
        for n in 0..2 {
            let (ql, qh, sc) = (
                &self.ql[n * 64..],
                &self.qh[n * 32..],
                &self.scales[n * 8..],
            );
            let out = &mut y[n * 128..n * 128 + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                out[l] = d * sc[is] as f32 * q1 as f32;
                out[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                out[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                out[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a K-quant block.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8; 12]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        (
            ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4)) as f32,
            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f32,
        )
    }
}

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K / Q5_K block from its 12 bytes,
/// `[sc_0, .., sc_7, m_0, .., m_7]` (ggml's `get_scale_min_k4` for every `j` at once), by
/// four 32-bit words: `sc_0..3 = q[0..4] & 63`, `m_0..3 = q[4..8] & 63`,
/// `sc_j = q[j + 4] & 15 | (q[j - 4] >> 6) << 4` and `m_j = q[j + 4] >> 4 | (q[j] >> 6) << 4`
/// for `j >= 4`.
#[inline]
pub(crate) fn k4_scales_mins(q: &[u8; 12]) -> [u8; 16] {
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (word(0), word(1), word(2));
    let (low6, low4, top2) = (0x3f3f_3f3f, 0x0f0f_0f0f, 0x0303_0303);
    let words = [
        u0 & low6,
        (u2 & low4) | (((u0 >> 6) & top2) << 4),
        u1 & low6,
        ((u2 >> 4) & low4) | (((u1 >> 6) & top2) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k4_scales_mins_unpacks_as_get_scale_min_k4() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let q: [u8; 12] = std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            });
            let sm = k4_scales_mins(&q);
            for j in 0..8 {
                let (sc, m) = scale_min_k4(j, &q);
                assert_eq!((sm[j] as f32, sm[8 + j] as f32), (sc, m), "j {j} of {q:?}");
            }
        }
        let sm = k4_scales_mins(&[0xff; 12]);
        assert!(sm.iter().all(|&v| v == 63));
    }
}
