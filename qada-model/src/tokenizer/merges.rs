//! The merges of a SentencePiece BPE vocabulary, derived from its pieces and scores.
//!
//! SentencePiece stores no merge list: it encodes by joining, again and again, the adjacent pair
//! whose joined piece has the highest score. A rank-based BPE (the `tokenizers` crate's) joins
//! the same pairs given every normal piece `p = l + r` split at each character boundary into two
//! normal pieces `l` and `r`, as the merge `(l, r)`, ranked by
//!
//! `(score(p) desc, chars(l) desc, chars(r) desc, id(p) asc)`,
//!
//! the order transformers' GGUF converter builds (`generate_merges`). The one place the two can
//! part: two different pairs that join into the same piece at once, overlapping (`ab a ba`, both
//! giving `aba`); SentencePiece joins the leftmost, the ranks here the longer left half. The
//! reference cases (and llama.cpp, transformers) agree with the ranks on all of Gemma 3's.
//!
//! Cost: two table lookups per character boundary of each normal piece, on all cores, keyed by
//! a rolling hash that grows one byte at a time (`piece_index.rs`). A piece is at most
//! [`MAX_PIECE_BYTES`] long (SentencePiece's trainer allows 512 characters), and the merges'
//! text is at most [`MAX_MERGE_GROWTH`] times the pieces' text, so a hostile vocabulary cannot
//! ask for an allocation out of proportion to the file.

use std::collections::HashMap;

use rayon::prelude::*;

use super::piece_index::PieceIndex;

use crate::{ModelError, Result};

/// Longest normal piece accepted, in bytes (512 characters of up to 4 bytes).
pub(super) const MAX_PIECE_BYTES: usize = 2048;

/// Most bytes of merge text allowed per byte of normal pieces (Gemma 3: about 3).
pub(super) const MAX_MERGE_GROWTH: usize = 32;

/// One merge: piece `piece` split at byte `split`, the left half `left_chars` characters long.
struct Candidate {
    piece: u32,
    split: u32,
    left_chars: u32,
    right_chars: u32,
}

/// The merges of the normal pieces (`normal[i]`), best first. `vocab` maps every piece to its
/// id; `scores` must hold no NaN. The pieces are searched and the merges sorted on all cores.
pub(super) fn derive(
    pieces: &[&str],
    scores: &[f32],
    normal: &[bool],
    vocab: &HashMap<&str, u32>,
) -> Result<Vec<(String, String)>> {
    let mut piece_bytes = 0usize;
    for (i, p) in pieces.iter().enumerate() {
        if !normal[i] {
            continue;
        }
        if p.len() > MAX_PIECE_BYTES {
            return Err(ModelError::BadMetadata {
                key: "tokenizer.ggml.tokens".into(),
                found: format!("piece {i} of {} bytes", p.len()),
                reason: format!(
                    "a SentencePiece piece is at most 512 characters; this build takes pieces of \
                     up to {MAX_PIECE_BYTES} bytes"
                ),
            });
        }
        piece_bytes += p.len();
    }
    let index = PieceIndex::new(pieces, normal, vocab);
    let mut found: Vec<Candidate> = pieces
        .par_chunks(4096)
        .enumerate()
        .flat_map_iter(|(chunk, ps)| {
            let mut out = Vec::new();
            for (j, p) in ps.iter().enumerate() {
                let i = chunk * 4096 + j;
                if !normal[i] {
                    continue;
                }
                let total_chars = p.chars().count();
                index.splits(p, |k, left_chars| {
                    out.push(Candidate {
                        piece: i as u32,
                        split: k as u32,
                        left_chars: left_chars as u32,
                        right_chars: (total_chars - left_chars) as u32,
                    })
                });
            }
            out
        })
        .collect();
    let merge_bytes: usize = found.iter().map(|c| pieces[c.piece as usize].len()).sum();
    let limit = MAX_MERGE_GROWTH * piece_bytes + (1 << 20);
    if merge_bytes > limit {
        return Err(ModelError::BadMetadata {
            key: "tokenizer.ggml.tokens".into(),
            found: format!(
                "{} merges of {merge_bytes} bytes from {piece_bytes} bytes of pieces",
                found.len()
            ),
            reason: format!(
                "more than {MAX_MERGE_GROWTH} bytes of merges per byte of pieces: not a \
                 SentencePiece vocabulary"
            ),
        });
    }

    // -0.0 and 0.0 rank alike (as in transformers' converter): `+ 0.0` makes -0.0 into 0.0
    let score = |c: &Candidate| scores[c.piece as usize] + 0.0;
    found.par_sort_unstable_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
            .then(a.piece.cmp(&b.piece))
    });
    Ok(found
        .par_iter()
        .map(|c| {
            let (l, r) = pieces[c.piece as usize].split_at(c.split as usize);
            (l.to_string(), r.to_string())
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab<'a>(pieces: &[&'a str]) -> HashMap<&'a str, u32> {
        pieces
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i as u32))
            .collect()
    }

    fn merges(pieces: &[&str], scores: &[f32]) -> Vec<(String, String)> {
        derive(pieces, scores, &vec![true; pieces.len()], &vocab(pieces)).unwrap()
    }

    fn pair(l: &str, r: &str) -> (String, String) {
        (l.to_string(), r.to_string())
    }

    #[test]
    fn merges_rank_by_the_joined_piece_score_not_by_vocabulary_order() {
        let m = merges(&["a", "b", "c", "ab", "bc"], &[0.0, 0.0, 0.0, -2.0, -1.0]);
        assert_eq!(m, [pair("b", "c"), pair("a", "b")]);
    }

    #[test]
    fn splits_of_one_piece_rank_the_longer_left_half_first() {
        let m = merges(
            &["a", "b", "c", "ab", "bc", "abc"],
            &[0.0, 0.0, 0.0, -3.0, -2.0, -1.0],
        );
        assert_eq!(
            m,
            [
                pair("ab", "c"),
                pair("a", "bc"),
                pair("b", "c"),
                pair("a", "b")
            ]
        );
    }

    #[test]
    fn splits_fall_on_character_boundaries_and_only_between_normal_pieces() {
        let pieces = ["é", "▁", "▁é", "x", "▁x"];
        let normal = [true, true, true, false, true];
        let scores = [0.0, 0.0, -1.0, 0.0, -2.0];
        let m = derive(&pieces, &scores, &normal, &vocab(&pieces)).unwrap();
        assert_eq!(m, [pair("▁", "é")]);
    }

    #[test]
    fn negative_zero_ties_with_zero_and_the_piece_id_breaks_the_tie() {
        let m = merges(&["a", "b", "ab", "ba"], &[1.0, 1.0, -0.0, 0.0]);
        assert_eq!(m, [pair("a", "b"), pair("b", "a")]);
    }

    #[test]
    fn an_overlong_piece_is_refused() {
        let long = "a".repeat(MAX_PIECE_BYTES + 1);
        let pieces = ["a", long.as_str()];
        let e = derive(&pieces, &[0.0, -1.0], &[true, true], &vocab(&pieces)).unwrap_err();
        assert!(e.to_string().contains("2049 bytes"), "{e}");
    }

    #[test]
    fn merges_out_of_proportion_to_the_pieces_are_refused() {
        // every a^k, k <= 400: a^n has n - 1 splits of n bytes each, about n^3 / 3 bytes in all,
        // against 32 n^2 / 2 allowed
        let pieces: Vec<String> = (1..=400).map(|k| "a".repeat(k)).collect();
        let refs: Vec<&str> = pieces.iter().map(|s| s.as_str()).collect();
        let scores: Vec<f32> = (0..refs.len()).map(|i| -(i as f32)).collect();
        let e = derive(&refs, &scores, &vec![true; refs.len()], &vocab(&refs)).unwrap_err();
        assert!(e.to_string().contains("bytes of merges per byte"), "{e}");
    }
}
