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
