//! The normal pieces of a SentencePiece vocabulary, found by a polynomial hash of their bytes,
//! `h(s) = sum_j s_j B^(len - 1 - j)` (mod 2^64), so that the two halves of every split of a
//! piece are looked up without hashing either again:
//! `h(s[..k])` grows one byte at a time and `h(s[k..]) = h(s) - h(s[..k]) B^(len - k)`.
//!
//! A hit is confirmed by comparing the bytes, and when two pieces share a hash (which a hostile
//! file could arrange) the index falls back to hashing the strings themselves: the answers are
//! always exact, only the speed depends on the hash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The polynomial's base (the 64-bit FNV prime, odd).
const BASE: u64 = 0x0000_0100_0000_01b3;

/// Spreads an already computed 64-bit hash over a table's buckets (splitmix64's finalizer).
#[derive(Default)]
struct Spread(u64);

impl Hasher for Spread {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }

    fn write_u64(&mut self, x: u64) {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// `h(s)` of a whole string.
fn hash(s: &[u8]) -> u64 {
    s.iter()
        .fold(0u64, |h, &b| h.wrapping_mul(BASE).wrapping_add(b as u64))
}

enum Lookup<'v> {
    /// Every normal piece by its hash (no two share one).
    Hashed(HashMap<u64, u32, BuildHasherDefault<Spread>>),
    /// Two pieces share a hash: every piece by its text.
    Strings(&'v HashMap<&'v str, u32>),
}

/// Finds the normal pieces among a piece's splits.
pub(super) struct PieceIndex<'v> {
    pieces: &'v [&'v str],
    normal: &'v [bool],
    lookup: Lookup<'v>,
    /// `B^n` for `n` up to the longest piece.
    powers: Vec<u64>,
}

impl<'v> PieceIndex<'v> {
    /// The index of the pieces `normal[i]`; `vocab` maps every piece to its id.
    pub(super) fn new(
        pieces: &'v [&'v str],
        normal: &'v [bool],
        vocab: &'v HashMap<&'v str, u32>,
    ) -> Self {
        let mut by_hash = HashMap::with_capacity_and_hasher(pieces.len(), Default::default());
        let mut longest = 0;
        let mut collided = false;
        for (i, p) in pieces.iter().enumerate().filter(|&(i, _)| normal[i]) {
            longest = longest.max(p.len());
            collided |= by_hash.insert(hash(p.as_bytes()), i as u32).is_some();
        }
        let lookup = if collided {
            Lookup::Strings(vocab)
        } else {
            Lookup::Hashed(by_hash)
        };
        let powers = std::iter::successors(Some(1u64), |&x| Some(x.wrapping_mul(BASE)))
            .take(longest + 1)
            .collect();
        PieceIndex {
            pieces,
            normal,
            lookup,
            powers,
        }
    }

    /// Whether `s`, of hash `h`, is a normal piece.
    fn is_normal(&self, s: &str, h: u64) -> bool {
        let id = match &self.lookup {
            Lookup::Hashed(m) => m.get(&h).filter(|&&i| self.pieces[i as usize] == s),
            Lookup::Strings(m) => m.get(s),
        };
        id.is_some_and(|&i| self.normal[i as usize])
    }

    /// Calls `found(k, chars)` for every character boundary `k` of `p` (a normal piece) that
    /// splits it into two normal pieces, the left one `chars` characters long.
    pub(super) fn splits(&self, p: &str, mut found: impl FnMut(usize, usize)) {
        let bytes = p.as_bytes();
        if bytes.len() >= self.powers.len() {
            return; // longer than every normal piece: not one
        }
        let whole = hash(bytes);
        let mut left = 0u64;
        let mut done = 0;
        for (chars, (k, _)) in p.char_indices().enumerate().skip(1) {
            left = bytes[done..k]
                .iter()
                .fold(left, |h, &b| h.wrapping_mul(BASE).wrapping_add(b as u64));
            done = k;
            let right = whole.wrapping_sub(left.wrapping_mul(self.powers[p.len() - k]));
            if self.is_normal(&p[..k], left) && self.is_normal(&p[k..], right) {
                found(k, chars);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splits(index: &PieceIndex<'_>, p: &str) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        index.splits(p, |k, c| v.push((k, c)));
        v
    }

    #[test]
    fn the_halves_hash_as_the_whole_strings_would() {
        let s = "▁naïve日本";
        let whole = hash(s.as_bytes());
        for (k, _) in s.char_indices().skip(1) {
            let (l, r) = s.split_at(k);
            let pow = (0..r.len()).fold(1u64, |x, _| x.wrapping_mul(BASE));
            assert_eq!(
                hash(r.as_bytes()),
                whole.wrapping_sub(hash(l.as_bytes()).wrapping_mul(pow))
            );
        }
    }

    #[test]
    fn hashed_and_string_lookups_find_the_same_splits() {
        let pieces = ["a", "b", "ab", "▁", "▁a", "▁ab", "é", "aé", "x"];
        let normal = [true, true, true, true, true, true, true, true, false];
        let vocab: HashMap<&str, u32> = pieces
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i as u32))
            .collect();
        let hashed = PieceIndex::new(&pieces, &normal, &vocab);
        assert!(matches!(hashed.lookup, Lookup::Hashed(_)));
        let strings = PieceIndex {
            lookup: Lookup::Strings(&vocab),
            ..PieceIndex::new(&pieces, &normal, &vocab)
        };
        for p in ["▁ab", "aé", "ab", "▁a", "ax", "xa"] {
            assert_eq!(splits(&hashed, p), splits(&strings, p), "{p}");
        }
        assert_eq!(splits(&hashed, "▁ab"), [(3, 1), (4, 2)]);
        assert_eq!(splits(&hashed, "aé"), [(1, 1)]);
        assert!(splits(&hashed, "ax").is_empty(), "x is not a normal piece");
    }
}
