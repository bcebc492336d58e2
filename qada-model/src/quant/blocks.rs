//! Typed views of ggml's quantized blocks.
//!
//! Each struct is one block exactly as llama.cpp's `ggml-common.h` lays it out: `#[repr(C)]`,
//! fields of bytes only (an f16 is its two little-endian bytes), so the alignment is 1, there
//! is no padding and every byte pattern is a valid block: `bytemuck::Pod`, derived (the derive
//! checks the layout). [`view`] therefore turns a row of bytes into `&[Block]` with one length
//! check and no copy.

use super::GgmlType;

/// An f16 as ggml stores it: two little-endian bytes (alignment 1, unlike [`half::f16`]).
pub type F16Bytes = [u8; 2];

/// The value of an f16 stored as bytes.
#[inline]
pub fn f16_value(h: F16Bytes) -> f32 {
    half::f16::from_le_bytes(h).to_f32()
}

mod sealed {
    pub trait Sealed {}
}

/// A ggml block layout: the blocks of this crate only (the trait is sealed), each of alignment 1
/// with every byte pattern valid (`Pod`), which [`view`] relies on.
pub trait QuantBlock: sealed::Sealed + bytemuck::Pod {
    /// The ggml type of this layout.
    const TYPE: GgmlType;
    /// Values per block.
    const VALUES: usize;
}

/// Declares the layout's `QuantBlock` impl and asserts at compile time that its size is ggml's
/// and its alignment 1.
macro_rules! layout {
    ($block:ty, $ty:expr, $values:expr, $bytes:expr) => {
        const _: () = assert!(std::mem::size_of::<$block>() == $bytes);
        const _: () = assert!(std::mem::align_of::<$block>() == 1);
        impl sealed::Sealed for $block {}
        impl QuantBlock for $block {
            const TYPE: GgmlType = $ty;
            const VALUES: usize = $values;
        }
    };
}

/// Q4_0: 32 values `(q - 8) d`; value `j < 16` in the low nibble of `qs[j]`, value `16 + j` in
/// its high nibble.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: F16Bytes,
    /// Quants, two 4-bit values a byte.
    pub qs: [u8; 16],
}
layout!(BlockQ4_0, GgmlType::Q4_0, 32, 18);

/// Q4_1: 32 values `q d + m`, nibbles as [`BlockQ4_0`].
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: F16Bytes,
    /// Minimum.
    pub m: F16Bytes,
    /// Quants, two 4-bit values a byte.
    pub qs: [u8; 16],
}
layout!(BlockQ4_1, GgmlType::Q4_1, 32, 20);

/// Q5_0: 32 values `(q - 16) d`; the low 4 bits as [`BlockQ4_0`], bit `j` of `qh` the fifth
/// bit of value `j`.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: F16Bytes,
    /// Fifth bits, a little-endian `u32`.
    pub qh: [u8; 4],
    /// Low 4 bits, two values a byte.
    pub qs: [u8; 16],
}
layout!(BlockQ5_0, GgmlType::Q5_0, 32, 22);

/// Q5_1: 32 values `q d + m`, bits as [`BlockQ5_0`].
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: F16Bytes,
    /// Minimum.
    pub m: F16Bytes,
    /// Fifth bits, a little-endian `u32`.
    pub qh: [u8; 4],
    /// Low 4 bits, two values a byte.
    pub qs: [u8; 16],
}
layout!(BlockQ5_1, GgmlType::Q5_1, 32, 24);

/// Q8_0: 32 values `q d`.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: F16Bytes,
    /// Quants.
    pub qs: [i8; 32],
}
layout!(BlockQ8_0, GgmlType::Q8_0, 32, 34);

/// Q4_K: 256 values in 8 sub-blocks of 32, value `d sc q - dmin m` with a 6-bit scale and min
/// per sub-block packed in `scales`.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale of the scales.
    pub d: F16Bytes,
    /// Super-block scale of the mins.
    pub dmin: F16Bytes,
    /// Eight 6-bit scales and eight 6-bit mins.
    pub scales: [u8; 12],
    /// Quants: 64 values per 32 bytes, low nibbles first.
    pub qs: [u8; 128],
}
layout!(BlockQ4K, GgmlType::Q4_K, 256, 144);

/// Q5_K: as [`BlockQ4K`] with a fifth bit per value in `qh`.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale of the scales.
    pub d: F16Bytes,
    /// Super-block scale of the mins.
    pub dmin: F16Bytes,
    /// Eight 6-bit scales and eight 6-bit mins.
    pub scales: [u8; 12],
    /// Fifth bits: bit `2g` / `2g + 1` of `qh[l]` for value `l` of sub-block pair `g`.
    pub qh: [u8; 32],
    /// Low 4 bits.
    pub qs: [u8; 128],
}
layout!(BlockQ5K, GgmlType::Q5_K, 256, 176);

/// Q6_K: 256 values `d sc (q - 32)`, an 8-bit scale per 16 values.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; 128],
    /// High 2 bits of the quants.
    pub qh: [u8; 64],
    /// Scales, one per 16 values.
    pub scales: [i8; 16],
    /// Super-block scale.
    pub d: F16Bytes,
}
layout!(BlockQ6K, GgmlType::Q6_K, 256, 210);

/// `bytes` as whole blocks of `B`, `None` when its length is not a multiple of the block size.
#[inline]
pub fn view<B: QuantBlock>(bytes: &[u8]) -> Option<&[B]> {
    // alignment 1: the cast fails only on a length that is not whole blocks
    bytemuck::try_cast_slice(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agrees_with_ggml_type<B: QuantBlock>() {
        let (per, bytes) = B::TYPE.block().unwrap();
        assert_eq!(
            (per as usize, bytes as usize),
            (B::VALUES, std::mem::size_of::<B>())
        );
    }

    #[test]
    fn layouts_agree_with_the_type_table() {
        agrees_with_ggml_type::<BlockQ4_0>();
        agrees_with_ggml_type::<BlockQ4_1>();
        agrees_with_ggml_type::<BlockQ5_0>();
        agrees_with_ggml_type::<BlockQ5_1>();
        agrees_with_ggml_type::<BlockQ8_0>();
        agrees_with_ggml_type::<BlockQ4K>();
        agrees_with_ggml_type::<BlockQ5K>();
        agrees_with_ggml_type::<BlockQ6K>();
    }

    #[test]
    fn views_take_whole_blocks_only_and_read_fields_in_place() {
        let mut bytes = vec![0u8; 41];
        bytes[20..22].copy_from_slice(&half::f16::from_f32(1.5).to_le_bytes());
        bytes[24] = 0xab;
        assert!(view::<BlockQ4_1>(&bytes).is_none());
        // an odd start: alignment 1
        let v = view::<BlockQ4_1>(&bytes[..40]).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(f16_value(v[1].d), 1.5);
        assert_eq!(v[1].qs[0], 0xab);
        let odd = view::<BlockQ4_1>(&bytes[1..41]).unwrap();
        assert_eq!(odd[1].qs[0], bytes[25]);
        assert!(view::<BlockQ8_0>(&[]).unwrap().is_empty());
    }
}
