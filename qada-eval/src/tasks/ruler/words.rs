//! RULER's aggregation tasks, whose answer is spread over the whole context:
//!
//! - `cwe`: a numbered list `1. w 2. w ...` of haystack words where [`COMMON`] words appear
//!   `f_c` times each, the others `f_u < f_c` times or once; RULER's `f_c = 30`, `f_u = 3`,
//!   scaled down with the list's length (`f_c = clamp(0.4 n / 10, 2, 30)` for about `n` items,
//!   `f_u = clamp(f_c / 10, 1, 3)`).
//! - `fwe`: coded words (6 random letters) with counts `floor(N k^-2 / zeta(2))` for rank `k`
//!   (Zipf, alpha 2, as RULER), rank 1 being the dots `....` the question says to ignore; the
//!   answer is ranks 2 to 4, which must be strictly more frequent than every other word.
//!
//! Both fill their context exactly: the bulk grows while a reserve of tokens is left, then
//! words that appear once fill the rest token for token (`fill`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use qada_model::{ModelError, Result, Tokenizer};
use rand::seq::SliceRandom;
use rand::Rng;

use super::values::{coded_word, distinct};
use super::{Context, Frame, RulerPrompts, RulerTask};
use crate::tasks::task::TaskPrompt;

/// Words the `cwe` answer names.
pub const COMMON: usize = 10;

/// Words the `fwe` answer names.
pub const FREQUENT: usize = 3;

/// The `cwe` instruction before the list, which [`super::solve`] looks for.
pub(super) const CWE_INTRO: &str = "Below is a numbered list of words. In these words, some \
    appear more often than others. Memorize the ones that appear most often.\n";
pub(super) const CWE_QUESTION: &str =
    "Question: What are the 10 most common words in the above list?";

/// The `fwe` instruction before the coded text, which [`super::solve`] looks for.
pub(super) const FWE_INTRO: &str = "Read the following coded text and track the frequency of \
    each coded word. Find the three most frequently appeared coded words.";
pub(super) const FWE_QUESTION: &str = "Question: Do not provide any explanation. Please ignore \
    the dots '....'. What are the three most frequently appeared words in the above coded text?";

/// The noise word of `fwe`, its most frequent.
pub(super) const DOTS: &str = "....";

/// Riemann zeta(2) = pi^2 / 6, the normalizer of Zipf counts with alpha 2.
const ZETA_2: f64 = std::f64::consts::PI * std::f64::consts::PI / 6.0;

/// The words of `text` made of 3 to 12 lower-case ASCII letters, each once, in order of first
/// appearance.
fn vocabulary(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    text.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| (3..=12).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase()))
        .filter(|w| seen.insert(*w))
        .map(str::to_string)
        .collect()
}

/// Tokens of words written after a space, computed once each.
struct Pieces<'t> {
    tok: &'t Tokenizer,
    ids: HashMap<String, Vec<u32>>,
}

impl<'t> Pieces<'t> {
    fn new(tok: &'t Tokenizer) -> Self {
        Pieces {
            tok,
            ids: HashMap::new(),
        }
    }

    /// The tokens of `piece` as the context spells it.
    fn get(&mut self, piece: &str) -> Result<&[u32]> {
        if !self.ids.contains_key(piece) {
            let ids = self.tok.encode_continuation(piece)?;
            self.ids.insert(piece.to_string(), ids);
        }
        Ok(&self.ids[piece])
    }

    fn cost(&mut self, piece: &str) -> Result<usize> {
        Ok(self.get(piece)?.len())
    }

    /// The list number of item `i` (1-based): `1.` then ` 2.`, ` 3.`, ...
    fn number(&mut self, i: usize) -> Result<usize> {
        self.cost(&number(i))
    }
}

fn number(i: usize) -> String {
    if i == 1 {
        "1.".into()
    } else {
        format!(" {i}.")
    }
}

/// Picks from `pool` (index, cost) distinct entries whose costs, plus `extra(k)` for the
/// `k`-th pick, sum to exactly `room`: a depth-first search, costliest entries first, that
/// remembers the states it found hopeless. `None` if no choice sums to `room`.
fn fill(
    room: usize,
    pool: &[(usize, usize)],
    mut extra: impl FnMut(usize) -> Result<usize>,
) -> Result<Option<Vec<usize>>> {
    let mut by_cost: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(i, c) in pool.iter().rev() {
        by_cost.entry(c).or_default().push(i);
    }
    let costs: Vec<usize> = by_cost.keys().copied().collect();
    let mut left: Vec<usize> = by_cost.values().map(Vec::len).collect();
    // every pick costs at least one token, so there are at most `room` of them
    let extras = (0..=room).map(&mut extra).collect::<Result<Vec<_>>>()?;
    let mut path = Vec::new();
    let mut hopeless = HashSet::new();
    if !search(room, &costs, &extras, &mut left, &mut path, &mut hopeless) {
        return Ok(None);
    }
    Ok(Some(
        path.iter()
            .map(|&c| {
                let bucket = by_cost.get_mut(&costs[c]).expect("c indexes a key");
                bucket.pop().expect("the search counts what is left")
            })
            .collect(),
    ))
}

/// One step of [`fill`]'s search: `path` holds the cost indices picked so far.
fn search(
    room: usize,
    costs: &[usize],
    extras: &[usize],
    left: &mut Vec<usize>,
    path: &mut Vec<usize>,
    hopeless: &mut HashSet<(usize, Vec<usize>)>,
) -> bool {
    if room == 0 {
        return true;
    }
    if hopeless.contains(&(room, left.clone())) {
        return false;
    }
    let e = extras[path.len()];
    for c in (0..costs.len()).rev() {
        if left[c] > 0 && room >= e + costs[c] {
            left[c] -= 1;
            path.push(c);
            if search(room - e - costs[c], costs, extras, left, path, hopeless) {
                return true;
            }
            path.pop();
            left[c] += 1;
        }
    }
    hopeless.insert((room, left.clone()));
    false
}

fn unfillable(task: RulerTask, budget: usize) -> ModelError {
    ModelError::Input(format!(
        "could not fill the {} context to exactly {budget} tokens with the words at hand: pass \
         more haystack text",
        task.name()
    ))
}

/// The `cwe` prompt of `len` tokens over the vocabulary of `haystack`.
pub(super) fn cwe(
    p: &RulerPrompts<'_>,
    haystack: &str,
    len: usize,
    rng: &mut impl Rng,
) -> Result<TaskPrompt> {
    let mut vocab = vocabulary(haystack);
    vocab.shuffle(rng);
    // no common word inside another word, so that naming a longer word never scores it
    let common: Vec<String> = vocab
        .iter()
        .filter(|w| !vocab.iter().any(|v| v != *w && v.contains(w.as_str())))
        .take(COMMON)
        .cloned()
        .collect();
    let rest: Vec<String> = vocab.into_iter().filter(|w| !common.contains(w)).collect();
    if common.len() < COMMON || rest.len() < 2 * COMMON {
        return Err(ModelError::Input(format!(
            "the haystack has too few distinct lower-case words for a cwe list ({} usable as \
             common words, {} others): pass more text",
            common.len(),
            rest.len()
        )));
    }
    let frame = Frame {
        task: RulerTask::Cwe,
        intro: CWE_INTRO.into(),
        question: CWE_QUESTION.into(),
        answer_prefix: "Answer: The top 10 words that appear most often in the list are:".into(),
        answer_tokens: 120,
        depth: None,
    };
    p.compose(len, frame, common.clone(), |budget| {
        cwe_list(p.tok, &common, &rest, budget, rng)
    })
}

fn cwe_list(
    tok: &Tokenizer,
    common: &[String],
    rest: &[String],
    budget: usize,
    rng: &mut impl Rng,
) -> Result<Context> {
    let mut pieces = Pieces::new(tok);
    let mut cost = HashMap::new();
    for w in common.iter().chain(rest) {
        cost.insert(w.as_str(), pieces.cost(&format!(" {w}"))?);
    }
    let mean = common.iter().map(|w| cost[w.as_str()]).sum::<usize>() as f64 / COMMON as f64;
    let mut items = 1.0f64;
    for _ in 0..3 {
        items = budget as f64 / (mean + pieces.number(items as usize + 1)? as f64);
    }
    let f_c = ((0.4 * items / COMMON as f64) as usize).clamp(2, 30);
    let f_u = (f_c / 10).clamp(1, 3);
    let widest = rest.iter().map(|w| cost[w.as_str()]).max().unwrap_or(1);
    let reserve = 2 * (pieces.number(2 * items as usize + 10)? + widest);
    // the tokens of `times` more items of a word costing `c`, the list having `n` items
    let mut group = |n: usize, c: usize, times: usize| -> Result<usize> {
        (n + 1..=n + times).try_fold(0, |t, i| Ok(t + pieces.number(i)? + c))
    };
    let mut words: Vec<&str> = Vec::new();
    let mut total = 0;
    for w in common {
        total += group(words.len(), cost[w.as_str()], f_c)?;
        words.extend(std::iter::repeat_n(w.as_str(), f_c));
    }
    if total + reserve > budget {
        return Err(ModelError::Input(format!(
            "the cwe context has {budget} tokens, too few for {COMMON} common words {f_c} times \
             each ({total} tokens) and the other words: ask for a longer context"
        )));
    }
    let mut used = 0;
    for w in rest {
        let t = group(words.len(), cost[w.as_str()], f_u)?;
        if total + t + reserve > budget {
            break;
        }
        total += t;
        words.extend(std::iter::repeat_n(w.as_str(), f_u));
        used += 1;
    }
    let pool: Vec<(usize, usize)> = (used..rest.len())
        .map(|i| (i, cost[rest[i].as_str()]))
        .collect();
    let n = words.len();
    let picks = fill(budget - total, &pool, |k| pieces.number(n + k + 1))?
        .ok_or_else(|| unfillable(RulerTask::Cwe, budget))?;
    words.extend(picks.iter().map(|&i| rest[i].as_str()));
    words.shuffle(rng);
    let mut ids = Vec::with_capacity(budget);
    for (i, w) in words.iter().enumerate() {
        ids.extend_from_slice(pieces.get(&number(i + 1))?);
        ids.extend_from_slice(pieces.get(&format!(" {w}"))?);
    }
    Ok(Context {
        ids,
        needles: Vec::new(),
    })
}

/// Zipf counts with alpha 2 of `n` words over `ranks` ranks: `floor(n k^-2 / zeta(2))`.
fn zipf_counts(n: usize, ranks: usize) -> Vec<usize> {
    (1..=ranks)
        .map(|k| (n as f64 / (k * k) as f64 / ZETA_2) as usize)
        .collect()
}

/// True when ranks 2 to 4 of `counts` (rank 1 is the dots) each appear more often than every
/// later rank and than once (the filling words' count).
fn top_is_strict(counts: &[usize]) -> bool {
    let after = counts.get(FREQUENT + 1).copied().unwrap_or(0).max(1);
    counts.len() > FREQUENT && counts[1..=FREQUENT].iter().all(|&c| c > after)
}

/// The `fwe` prompt of `len` tokens.
pub(super) fn fwe(p: &RulerPrompts<'_>, len: usize, rng: &mut impl Rng) -> Result<TaskPrompt> {
    let mut taken = vec![DOTS.to_string()];
    let ranks = 200;
    let coded = distinct(rng, ranks - 1, &mut taken, |r| coded_word(r, 6));
    let vocab: Vec<String> = std::iter::once(DOTS.to_string()).chain(coded).collect();
    let fillers = distinct(rng, 120, &mut taken, |r| {
        let n = r.gen_range(2..=6);
        coded_word(r, n)
    });
    let frame = Frame {
        task: RulerTask::Fwe,
        intro: FWE_INTRO.into(),
        question: FWE_QUESTION.into(),
        answer_prefix: "Answer: According to the coded text above, the three most frequently \
                        appeared words are:"
            .into(),
        answer_tokens: 50,
        depth: None,
    };
    let expected = vocab[1..=FREQUENT].to_vec();
    p.compose(len, frame, expected, |budget| {
        fwe_text(p.tok, &vocab, &fillers, budget, rng)
    })
}

fn fwe_text(
    tok: &Tokenizer,
    vocab: &[String],
    fillers: &[String],
    budget: usize,
    rng: &mut impl Rng,
) -> Result<Context> {
    let mut pieces = Pieces::new(tok);
    let cost = vocab
        .iter()
        .map(|w| pieces.cost(&format!(" {w}")))
        .collect::<Result<Vec<_>>>()?;
    let pool = fillers
        .iter()
        .enumerate()
        .map(|(i, w)| Ok((i, pieces.cost(&format!(" {w}"))?)))
        .collect::<Result<Vec<_>>>()?;
    let reserve = 2 * pool.iter().map(|&(_, c)| c).max().unwrap_or(1);
    let total = |n| -> usize {
        let counts = zipf_counts(n, vocab.len());
        counts.iter().zip(&cost).map(|(k, c)| k * c).sum()
    };
    let mut n = 0;
    while total(n + 1) + reserve <= budget {
        n += 1;
    }
    let counts = zipf_counts(n, vocab.len());
    if !top_is_strict(&counts) {
        return Err(ModelError::Input(format!(
            "the fwe context has {budget} tokens, room for {n} coded words, too few for the \
             {FREQUENT} most frequent to stand out: ask for a longer context"
        )));
    }
    let mut words: Vec<&str> = Vec::new();
    for (w, &k) in vocab.iter().zip(&counts) {
        words.extend(std::iter::repeat_n(w.as_str(), k));
    }
    let picks = fill(budget - total(n), &pool, |_| Ok(0))?
        .ok_or_else(|| unfillable(RulerTask::Fwe, budget))?;
    words.extend(picks.iter().map(|&i| fillers[i].as_str()));
    words.shuffle(rng);
    let mut ids = Vec::with_capacity(budget);
    for w in words {
        ids.extend_from_slice(pieces.get(&format!(" {w}"))?);
    }
    Ok(Context {
        ids,
        needles: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_counts_fall_as_k_to_the_minus_2() {
        let c = zipf_counts(1000, 6);
        assert_eq!(c, [607, 151, 67, 37, 24, 16]);
        assert!(zipf_counts(0, 3).iter().all(|&k| k == 0));
    }

    #[test]
    fn the_top_three_are_strict_only_when_they_beat_the_fourth_and_the_fillers() {
        // ranks 2..4 of 1000 words: 151, 67, 37 against 24: strict
        assert!(top_is_strict(&zipf_counts(1000, 200)));
        // 28 words: 17, 4, 1, 1, 0: rank 4 ties the fillers' single count
        assert!(!top_is_strict(&zipf_counts(28, 200)));
        // a tie between ranks 4 and 5
        assert!(!top_is_strict(&[50, 9, 5, 3, 3]));
        assert!(top_is_strict(&[50, 9, 5, 3, 2]));
        assert!(!top_is_strict(&[50, 9, 5]));
        // with the fillers' count, strict from 53 words on (31, 7, 3, 1, 1 at 52 words)
        assert!((53..2000).all(|n| top_is_strict(&zipf_counts(n, 200))));
        assert!((0..53).all(|n| !top_is_strict(&zipf_counts(n, 200))));
    }

    #[test]
    fn fill_sums_costs_and_extras_to_the_room_exactly() {
        let pool: Vec<(usize, usize)> = (0..30).map(|i| (i, 1 + i % 3)).collect();
        // one pick fills 3 to 5, two picks 7 to 11, three 10 to 17, ...; 6 none
        assert_eq!(fill(6, &pool, |k| Ok(2 + k % 2)).unwrap(), None);
        for room in (3..6).chain(7..120) {
            let picks = fill(room, &pool, |k| Ok(2 + k % 2)).unwrap().unwrap();
            let sum: usize = picks
                .iter()
                .enumerate()
                .map(|(k, &i)| pool[i].1 + 2 + k % 2)
                .sum();
            assert_eq!(sum, room);
            let mut distinct = picks.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), picks.len());
        }
        // a room smaller than one pick cannot be filled
        assert_eq!(fill(2, &pool, |_| Ok(2)).unwrap(), None);
        assert_eq!(fill(0, &pool, |_| Ok(2)).unwrap(), Some(vec![]));
    }

    #[test]
    fn the_vocabulary_keeps_lower_case_words_once_in_order() {
        let v = vocabulary("The cat and the dog, the CAT's 1900 doghouse; an ox and cat.");
        assert_eq!(v, ["cat", "and", "the", "dog", "doghouse"]);
    }
}
