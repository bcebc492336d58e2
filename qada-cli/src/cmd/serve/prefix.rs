//! The prefix cache: sessions kept after their request, with checkpoints ("marks") inside
//! their prompt, so that a later prompt that starts the same way restores a mark instead of
//! prefilling those tokens again. Least recently used first out, within a byte budget.
//!
//! Marks sit at multiples of [`PREFILL_BLOCK`] only: a prompt prefilled from a mark then runs
//! the same blocks a cold prefill runs, so the cache changes no number ([`Session::extend`]).
//! A prompt keeps the marks at 1, 2, 4, 8, ... blocks and the last one before its end, so a
//! kept session holds O(log n) checkpoints.
//!
//! [`PREFILL_BLOCK`]: qada_model::PREFILL_BLOCK
//! [`Session::extend`]: qada_model::Session::extend

use qada_model::PREFILL_BLOCK;

/// A kept session (`S`) with its marks (`C`: checkpoints).
pub struct Kept<S, C> {
    /// The session.
    pub state: S,
    /// The setting it was prefilled under (criterion, cache type...): only a request of the
    /// same setting may reuse it.
    pub key: String,
    /// The prompt it prefilled (its marks are prefixes of it).
    pub tokens: Vec<u32>,
    /// `(tokens before the mark, checkpoint)`, in increasing order.
    pub marks: Vec<(usize, C)>,
    /// Bytes it holds (K/V and marks, estimated by the caller).
    pub bytes: u64,
    /// When it was last used (the cache's clock).
    used: u64,
}

impl<S, C> Kept<S, C> {
    /// A session to keep.
    pub fn new(
        state: S,
        key: String,
        tokens: Vec<u32>,
        marks: Vec<(usize, C)>,
        bytes: u64,
    ) -> Self {
        Kept {
            state,
            key,
            tokens,
            marks,
            bytes,
            used: 0,
        }
    }
}

/// Whether the prefill of a prompt of `len` tokens keeps a mark after `pos` tokens (a multiple
/// of the block): at a power of two of blocks, or at the last block boundary before its end.
pub fn keeps_mark(pos: usize, len: usize) -> bool {
    let blocks = pos / PREFILL_BLOCK;
    pos.is_multiple_of(PREFILL_BLOCK)
        && pos > 0
        && pos < len
        && (blocks.is_power_of_two() || pos + PREFILL_BLOCK >= len)
}

/// The kept sessions.
pub struct PrefixCache<S, C> {
    kept: Vec<Kept<S, C>>,
    /// Most sessions kept (each holds buffers beyond its K/V, so their number is bounded
    /// too, not only their bytes).
    most: usize,
    clock: u64,
}

/// Tokens two sequences share from their start.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<S, C> PrefixCache<S, C> {
    /// An empty cache that keeps at most `most` sessions.
    pub fn new(most: usize) -> Self {
        PrefixCache {
            kept: Vec::new(),
            most,
            clock: 0,
        }
    }

    /// Sessions kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Bytes they hold.
    pub fn bytes(&self) -> u64 {
        self.kept.iter().map(|k| k.bytes).sum()
    }

    /// Take out the kept session of setting `key` with the longest mark that is a prefix of
    /// `tokens` and leaves at least one token of it to run (the logits come from running
    /// it), with that mark's index; the most recently used among equals.
    pub fn take(&mut self, key: &str, tokens: &[u32]) -> Option<(Kept<S, C>, usize)> {
        let mut best: Option<(usize, usize, usize, u64)> = None; // (pos, kept, mark, used)
        for (i, k) in self.kept.iter().enumerate().filter(|(_, k)| k.key == key) {
            let shared = common_prefix(&k.tokens, tokens).min(tokens.len().saturating_sub(1));
            if let Some((m, &(pos, _))) = k
                .marks
                .iter()
                .enumerate()
                .rev()
                .find(|(_, (pos, _))| *pos <= shared)
            {
                if best.is_none_or(|(bp, _, _, bu)| (pos, k.used) > (bp, bu)) {
                    best = Some((pos, i, m, k.used));
                }
            }
        }
        let (_, i, m, _) = best?;
        Some((self.kept.swap_remove(i), m))
    }

    /// Keep `k` as the most recently used.
    pub fn put(&mut self, mut k: Kept<S, C>) {
        self.clock += 1;
        k.used = self.clock;
        self.kept.push(k);
    }

    /// Drop the least recently used sessions until the rest hold at most `budget` bytes and
    /// are at most as many as the cache keeps; returns how many were dropped.
    pub fn evict_to(&mut self, budget: u64) -> usize {
        let mut dropped = 0;
        while self.bytes() > budget || self.kept.len() > self.most {
            let Some(lru) = (0..self.kept.len()).min_by_key(|&i| self.kept[i].used) else {
                break;
            };
            self.kept.swap_remove(lru);
            dropped += 1;
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: usize = PREFILL_BLOCK;

    #[test]
    fn marks_sit_at_powers_of_two_blocks_and_before_the_end() {
        let len = 11 * B + 7;
        let marks: Vec<usize> = (0..=len).filter(|&p| keeps_mark(p, len)).collect();
        assert_eq!(marks, vec![B, 2 * B, 4 * B, 8 * B, 11 * B]);
        // never at the end itself: the last token must run to give the logits
        assert!(!keeps_mark(4 * B, 4 * B));
        assert!(keeps_mark(3 * B, 4 * B));
        assert!(!keeps_mark(0, 100));
    }

    fn kept(key: &str, tokens: Vec<u32>, bytes: u64) -> Kept<u32, ()> {
        let marks = (1..=tokens.len() / B).map(|b| (b * B, ())).collect();
        Kept::new(0, key.into(), tokens, marks, bytes)
    }

    #[test]
    fn take_finds_the_longest_mark_within_the_shared_prefix_and_setting() {
        let doc: Vec<u32> = (0..3 * B as u32 + 40).collect();
        let mut c = PrefixCache::new(8);
        c.put(kept("dense", doc.clone(), 10));
        c.put(kept("channels", doc.clone(), 10));
        // the same document, another question after it: the mark at 3 blocks
        let mut q = doc.clone();
        q.extend([9, 9, 9]);
        let (k, m) = c.take("dense", &q).unwrap();
        assert_eq!((k.key.as_str(), k.marks[m].0), ("dense", 3 * B));
        c.put(k);
        // differs inside the second block: the mark at 1 block
        let mut early = doc.clone();
        early[B + 5] = 7;
        let (k, m) = c.take("dense", &early).unwrap();
        assert_eq!(k.marks[m].0, B);
        c.put(k);
        // the prompt is the mark exactly: one block less, so that a token is left to run
        let (k, m) = c.take("dense", &doc[..2 * B]).unwrap();
        assert_eq!(k.marks[m].0, B);
        c.put(k);
        // shorter than a block, or another setting: nothing
        assert!(c.take("dense", &doc[..B - 1]).is_none());
        assert!(c.take("q8", &q).is_none());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn eviction_drops_the_least_recently_used_first() {
        let mut c = PrefixCache::new(8);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            c.put(kept(key, vec![i as u32; 2 * B], 100));
        }
        // use "a" again: "b" is now the oldest
        let (a, _) = c.take("a", &[0; 2 * B + 1]).unwrap();
        c.put(a);
        assert_eq!(c.evict_to(200), 1);
        assert!(c.take("b", &[1; 2 * B + 1]).is_none());
        assert_eq!(c.evict_to(0), 2);
        assert_eq!((c.len(), c.bytes()), (0, 0));
        // and beyond the count, whatever the bytes
        let mut c = PrefixCache::new(2);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            c.put(kept(key, vec![i as u32; 2 * B], 1));
        }
        assert_eq!(c.evict_to(u64::MAX), 1);
        assert!(c.take("a", &[0; 2 * B + 1]).is_none());
        assert_eq!(c.len(), 2);
    }

    proptest! {
        /// Whatever is kept, a taken mark is a prefix of the request and leaves a token to run.
        #[test]
        fn a_taken_mark_is_a_prefix_of_the_request(
            kept_lens in prop::collection::vec(1usize..5 * B, 1..4),
            cut in 0usize..5 * B,
            len in 1usize..5 * B,
        ) {
            let mut c = PrefixCache::new(8);
            for (i, n) in kept_lens.iter().enumerate() {
                let tokens: Vec<u32> = (0..*n as u32).map(|t| t + (i as u32 % 2) * (t >= cut as u32) as u32 * 1000).collect();
                c.put(kept("k", tokens, 1));
            }
            let request: Vec<u32> = (0..len as u32).collect();
            if let Some((k, m)) = c.take("k", &request) {
                let pos = k.marks[m].0;
                prop_assert!(pos < request.len());
                prop_assert_eq!(&k.tokens[..pos], &request[..pos]);
                prop_assert!(pos.is_multiple_of(B));
            }
        }
    }
}
