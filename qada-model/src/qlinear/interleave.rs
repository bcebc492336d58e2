//! Eight rows' blocks interleaved field by field: the layout decoding's eight-row kernels read.
//!
//! A GGUF matrix keeps each row's blocks one after another. Decoding multiplies eight rows at
//! a time (`avx2_rows.rs`, `avx512_rows.rs`), and in that order the eight rows' scales lie
//! `block` bytes apart and their quants in eight places: a kernel gathers them with eight
//! inserts per field and asks for eight streams of memory. Interleaved, block `b` of rows
//! `8g .. 8g + 8` is one run of `8 * block` bytes, each field of the block (Q4_1: scale `d`,
//! minimum `m`, quants `qs`) eight times in a row, row order inside:
//!
//! ```text
//! row-major:   [d0 m0 qs0][d0' m0' qs0'] ... | [d1 m1 qs1] ...        (row 0, then row 1)
//! interleaved: [d0 d1 .. d7][m0 .. m7][qs0 qs1 .. qs7] | [d0' .. d7'] ...  (block 0, block 1)
//! ```
//!
//! so the eight scales are one 16-byte load and four rows' quants one 64-byte load. A group
//! takes the bytes its eight rows took (`8 * row_bytes`, at the same offset); rows past the
//! last whole group stay row-major. The types: Q4_0, Q4_1, Q5_0 and Q8_0, those with
//! eight-row kernels.

use crate::quant::GgmlType;

/// Rows per group.
pub(crate) const GROUP: usize = 8;

/// The byte widths of the fields of one `ty` block, in the block's order (GGUF's layouts:
/// `block_q4_0 { d; qs[16] }`, `block_q4_1 { d; m; qs[16] }`, `block_q5_0 { d; qh[4];
/// qs[16] }`, `block_q8_0 { d; qs[32] }`); `None` for a type that is not interleaved.
pub(crate) fn fields(ty: GgmlType) -> Option<&'static [usize]> {
    match ty {
        GgmlType::Q4_0 => Some(&[2, 16]),
        GgmlType::Q4_1 => Some(&[2, 2, 16]),
        GgmlType::Q5_0 => Some(&[2, 4, 16]),
        GgmlType::Q8_0 => Some(&[2, 32]),
        _ => None,
    }
}

/// Each field of a block: `(offset in a row-major block, offset in an interleaved 8-block,
/// width)`.
fn layout(fields: &[usize]) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    fields.iter().scan(0, |off, &w| {
        let at = *off;
        *off += w;
        Some((at, GROUP * at, w))
    })
}

/// One group's eight rows (`group`, row-major, `8 * row_bytes`) into `out` interleaved.
fn interleave_group(fields: &[usize], row_bytes: usize, group: &[u8], out: &mut [u8]) {
    let block: usize = fields.iter().sum();
    for b in 0..row_bytes / block {
        for (row_at, at, w) in layout(fields) {
            for i in 0..GROUP {
                let from = i * row_bytes + b * block + row_at;
                let to = b * GROUP * block + at + i * w;
                out[to..to + w].copy_from_slice(&group[from..from + w]);
            }
        }
    }
}

/// One interleaved group (`group`) back into its eight rows, row-major, into `out`
/// (`8 * row_bytes`); `fields` as [`fields`] gives them.
pub(crate) fn deinterleave_group(fields: &[usize], row_bytes: usize, group: &[u8], out: &mut [u8]) {
    let block: usize = fields.iter().sum();
    for b in 0..row_bytes / block {
        for (row_at, at, w) in layout(fields) {
            for i in 0..GROUP {
                let from = b * GROUP * block + at + i * w;
                let to = i * row_bytes + b * block + row_at;
                out[to..to + w].copy_from_slice(&group[from..from + w]);
            }
        }
    }
}

/// Row `i` of an interleaved group (`group`) into `out` (`row_bytes`), row-major.
pub(crate) fn row_of_group(
    fields: &[usize],
    row_bytes: usize,
    group: &[u8],
    i: usize,
    out: &mut [u8],
) {
    let block: usize = fields.iter().sum();
    for b in 0..row_bytes / block {
        for (row_at, at, w) in layout(fields) {
            let from = b * GROUP * block + at + i * w;
            let to = b * block + row_at;
            out[to..to + w].copy_from_slice(&group[from..from + w]);
        }
    }
}

/// Interleaves every whole group of eight rows of `data` (`rows` rows of `row_bytes` of
/// `ty` blocks) in place; returns the rows now interleaved (a multiple of 8; 0 for a type
/// [`fields`] does not name, and `data` unchanged).
pub(crate) fn interleave(ty: GgmlType, data: &mut [u8], row_bytes: usize, rows: usize) -> usize {
    let Some(fields) = fields(ty) else { return 0 };
    if row_bytes == 0 {
        return 0; // rows of no values: nothing to interleave
    }
    let groups = rows / GROUP;
    let mut scratch = vec![0u8; GROUP * row_bytes];
    for group in data.chunks_exact_mut(GROUP * row_bytes).take(groups) {
        interleave_group(fields, row_bytes, group, &mut scratch);
        group.copy_from_slice(&scratch);
    }
    groups * GROUP
}

/// A matrix's rows of GGUF blocks in the layout decoding reads: whole groups of eight rows
/// interleaved where the type has eight-row kernels ([`fields`]), the rest row-major. Rows
/// and groups are handed out in GGUF's row-major order for every other reader.
#[derive(Clone, Debug)]
pub(crate) struct BlockRows {
    /// The block type.
    pub(crate) ty: GgmlType,
    /// The rows' bytes, `rows * row_bytes`.
    pub(crate) data: Vec<u8>,
    /// Bytes per row.
    pub(crate) row_bytes: usize,
    /// Rows interleaved by groups of eight: the first `grouped` (a multiple of 8).
    pub(crate) grouped: usize,
}

thread_local! {
    /// The rows taken out of a group for readers of row-major rows: grows once per thread.
    static ROWS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl BlockRows {
    /// `rows` rows of `row_bytes` of `ty` blocks from `data` (row-major, GGUF's order; the
    /// caller checked the length), interleaved where the type has eight-row kernels.
    pub(crate) fn new(ty: GgmlType, mut data: Vec<u8>, row_bytes: usize, rows: usize) -> Self {
        let grouped = interleave(ty, &mut data, row_bytes, rows);
        BlockRows {
            ty,
            data,
            row_bytes,
            grouped,
        }
    }

    /// The interleaved bytes of the group of rows `g0 .. g0 + 8` (`g0` a multiple of 8,
    /// `g0 + 8 <= grouped`).
    pub(crate) fn group(&self, g0: usize) -> &[u8] {
        debug_assert!(g0.is_multiple_of(GROUP) && g0 + GROUP <= self.grouped);
        &self.data[g0 * self.row_bytes..(g0 + GROUP) * self.row_bytes]
    }

    /// `f` of row `r`'s bytes in GGUF's order: in place where row-major, else taken out of its
    /// group into a buffer of the thread's (no allocation after the first call).
    pub(crate) fn with_row<T>(&self, r: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        let rb = self.row_bytes;
        if r >= self.grouped {
            return f(&self.data[r * rb..(r + 1) * rb]);
        }
        let fields = fields(self.ty).unwrap_or(&[]);
        let g0 = r / GROUP * GROUP;
        ROWS.with_borrow_mut(|buf| {
            buf.resize(rb, 0);
            row_of_group(fields, rb, self.group(g0), r - g0, buf);
            f(buf)
        })
    }

    /// `f` of the eight rows `g0 .. g0 + 8` in GGUF's order, one after another (`g0` as for
    /// [`BlockRows::group`]), taken out of the group into a buffer of the thread's.
    pub(crate) fn with_group_rows<T>(&self, g0: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        let fields = fields(self.ty).unwrap_or(&[]);
        ROWS.with_borrow_mut(|buf| {
            buf.resize(GROUP * self.row_bytes, 0);
            deinterleave_group(fields, self.row_bytes, self.group(g0), buf);
            f(buf)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TYPES: [GgmlType; 4] = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ];

    #[test]
    fn the_fields_fill_the_block() {
        for ty in TYPES {
            let (_, bytes) = ty.block().unwrap();
            assert_eq!(
                fields(ty).unwrap().iter().sum::<usize>(),
                bytes as usize,
                "{ty}"
            );
        }
    }

    proptest! {
        /// Interleaving moves bytes only inside whole groups, leaves the rows after them as
        /// they were, puts field `f` of block `b` of the group's row `i` where the kernels
        /// read it, and deinterleaving gives the rows back.
        #[test]
        fn interleaving_is_a_permutation_within_each_group(
            t in 0usize..4, nb in 1usize..5, rows in 1usize..30, seed in any::<u64>(),
        ) {
            let ty = TYPES[t];
            let fields = fields(ty).unwrap();
            let block: usize = fields.iter().sum();
            let row_bytes = nb * block;
            let mut s = seed | 1;
            let data: Vec<u8> = (0..rows * row_bytes)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            let mut inter = data.clone();
            let grouped = interleave(ty, &mut inter, row_bytes, rows);
            prop_assert_eq!(grouped, rows / 8 * 8);
            prop_assert_eq!(&inter[grouped * row_bytes..], &data[grouped * row_bytes..]);
            for g in 0..grouped / 8 {
                let (lo, hi) = (g * 8 * row_bytes, (g + 1) * 8 * row_bytes);
                for b in 0..nb {
                    let mut at = 0;
                    for &w in fields {
                        for i in 0..8 {
                            let from = lo + i * row_bytes + b * block + at;
                            let to = lo + b * 8 * block + 8 * at + i * w;
                            prop_assert_eq!(&inter[to..to + w], &data[from..from + w]);
                        }
                        at += w;
                    }
                }
                let mut back = vec![0u8; 8 * row_bytes];
                deinterleave_group(fields, row_bytes, &inter[lo..hi], &mut back);
                prop_assert_eq!(&back[..], &data[lo..hi]);
            }
            // and a matrix hands every row out as it was
            let m = BlockRows::new(ty, data.clone(), row_bytes, rows);
            for r in 0..rows {
                let want = &data[r * row_bytes..(r + 1) * row_bytes];
                prop_assert!(m.with_row(r, |row| row == want), "row {}", r);
            }
            for g0 in (0..m.grouped).step_by(8) {
                let want = &data[g0 * row_bytes..(g0 + 8) * row_bytes];
                prop_assert!(m.with_group_rows(g0, |rows| rows == want), "group {}", g0);
            }
        }
    }

    #[test]
    fn other_types_stay_row_major() {
        let mut data = vec![7u8; 8 * 144];
        assert_eq!(interleave(GgmlType::Q4_K, &mut data, 144, 8), 0);
        assert!(data.iter().all(|&b| b == 7));
    }
}
