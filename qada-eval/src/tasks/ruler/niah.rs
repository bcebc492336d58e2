//! RULER's needle-in-a-haystack tasks: statements "One of the special magic {type} for {key}
//! is: {value}." hidden in haystack prose, the values of some keys asked for at the end.
//!
//! | task | keys | values per key | keys asked | value |
//! |---|---|---|---|---|
//! | `niah-single` | 1 | 1 | 1 | number, word pair, UUID for `seed % 3` = 0, 1, 2 |
//! | `niah-multikey` | 4 | 1 | 1 (3 distractors) | number |
//! | `niah-multivalue` | 1 | 4 | 1 | number |
//! | `niah-multiquery` | 4 | 1 | 4 | number |
//!
//! The first key's first value sits at the depth asked for, every other statement at a depth
//! drawn uniformly from the seed, as RULER spreads its needles.

use qada_model::Result;
use rand::Rng;

use super::values::{distinct, word_pair, ValueKind};
use super::{Context, Frame, RulerPrompts, RulerTask};
use crate::tasks::task::TaskPrompt;

/// The statement hiding `value` for `key`, as inserted in the haystack.
pub(super) fn needle(kind_plural: &str, key: &str, value: &str) -> String {
    format!(" One of the special magic {kind_plural} for {key} is: {value}.")
}

/// The question's start, which [`super::solve`] looks for.
pub(super) const QUESTION: &str = "What are all the special magic ";

/// Keys as RULER lists them: `a`, `a and b`, `a, b, and c`.
fn list(keys: &[String]) -> String {
    match keys {
        [] => String::new(),
        [k] => k.clone(),
        [a, b] => format!("{a} and {b}"),
        [init @ .., last] => format!("{}, and {last}", init.join(", ")),
    }
}

pub(super) fn prompt(
    p: &RulerPrompts<'_>,
    task: RulerTask,
    haystack: &str,
    len: usize,
    depth: f64,
    seed: u64,
    rng: &mut impl Rng,
) -> Result<TaskPrompt> {
    let kind = match task {
        RulerTask::NiahSingle => {
            [ValueKind::Number, ValueKind::Words, ValueKind::Uuid][(seed % 3) as usize]
        }
        _ => ValueKind::Number,
    };
    let (n_keys, n_values, n_asked) = match task {
        RulerTask::NiahMultikey => (4, 1, 1),
        RulerTask::NiahMultivalue => (1, 4, 1),
        RulerTask::NiahMultiquery => (4, 1, 4),
        _ => (1, 1, 1),
    };
    let mut taken = Vec::new();
    let keys = distinct(rng, n_keys, &mut taken, |r| word_pair(r));
    let values: Vec<Vec<String>> = keys
        .iter()
        .map(|_| distinct(rng, n_values, &mut taken, |r| kind.draw(r)))
        .collect();
    let t = kind.plural();
    let mut statements = Vec::with_capacity(n_keys * n_values);
    let mut asked = Vec::new();
    for (i, (key, vals)) in keys.iter().zip(&values).enumerate() {
        for v in vals {
            let d = if statements.is_empty() {
                depth
            } else {
                rng.gen_range(0.0..=1.0)
            };
            if i < n_asked {
                asked.push(statements.len());
            }
            statements.push((d, p.tok.encode_continuation(&needle(t, key, v))?));
        }
    }
    let query = list(&keys[..n_asked]);
    let expected: Vec<String> = values[..n_asked].concat();
    let frame = Frame {
        task,
        intro: format!(
            "Some special magic {t} are hidden within the following text. Make sure to \
             memorize it. I will quiz you about the {t} afterwards.\n"
        ),
        question: format!("{QUESTION}{t} for {query} mentioned in the provided text?"),
        answer_prefix: format!(
            "The special magic {t} for {query} mentioned in the provided text are"
        ),
        answer_tokens: match (task, kind) {
            (RulerTask::NiahSingle, ValueKind::Uuid) => 32,
            (RulerTask::NiahSingle, _) => 16,
            _ => 64,
        },
        depth: Some(depth),
    };
    let hay = p.haystack_tokens(haystack)?;
    p.compose(len, frame, expected, |budget| {
        let ctx = p.weave(task, &hay, budget, &statements)?;
        Ok(Context {
            needles: asked.iter().map(|&k| ctx.needles[k].clone()).collect(),
            ids: ctx.ids,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_listed_as_ruler_lists_them() {
        let k = |v: &[&str]| list(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(k(&["a"]), "a");
        assert_eq!(k(&["a", "b"]), "a and b");
        assert_eq!(k(&["a", "b", "c", "d"]), "a, b, c, and d");
    }
}
