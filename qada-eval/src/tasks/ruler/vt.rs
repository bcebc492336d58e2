//! RULER's variable tracking: a chain `VAR A = 12345. VAR B = VAR A. ...` of [`LINKS`]
//! assignments hidden in haystack prose, and a distractor chain bound to another value; the
//! answer names every variable of the first chain.
//!
//! The chain's first link sits at the depth asked for and the others follow it in order at
//! depths drawn uniformly in `[depth, 1]`; the distractor's links are spread over `[0, 1]`.

use qada_model::Result;
use rand::Rng;

use super::values::{distinct, var_name};
use super::{Context, Frame, RulerPrompts, RulerTask};
use crate::tasks::task::TaskPrompt;

/// Variables in a chain (RULER's `num_hops` 4: four hops after the first assignment).
pub const LINKS: usize = 5;

/// The question's start, which [`super::solve`] looks for.
pub(super) const QUESTION: &str = "Question: Find all variables that are assigned the value ";

/// The assignment of `from` (a value or `VAR X`) to `name`, as inserted in the haystack.
fn link(name: &str, from: &str) -> String {
    format!(" VAR {name} = {from}.")
}

/// A chain's links in order: `name[0] = value`, then each name bound to the previous one.
fn chain(names: &[String], value: u32) -> Vec<String> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| match i {
            0 => link(n, &value.to_string()),
            _ => link(n, &format!("VAR {}", names[i - 1])),
        })
        .collect()
}

/// `n` depths: `first`, then `n - 1` drawn in `[first, 1]`, ascending.
fn ascending(rng: &mut impl Rng, first: f64, n: usize) -> Vec<f64> {
    let mut rest: Vec<f64> = (1..n).map(|_| rng.gen_range(first..=1.0)).collect();
    rest.sort_by(f64::total_cmp);
    std::iter::once(first).chain(rest).collect()
}

pub(super) fn prompt(
    p: &RulerPrompts<'_>,
    haystack: &str,
    len: usize,
    depth: f64,
    rng: &mut impl Rng,
) -> Result<TaskPrompt> {
    let names = distinct(rng, 2 * LINKS, &mut Vec::new(), |r| var_name(r));
    let value = rng.gen_range(10_000..100_000u32);
    let decoy = loop {
        let v = rng.gen_range(10_000..100_000u32);
        if v != value {
            break v;
        }
    };
    let depths = ascending(rng, depth, LINKS);
    let decoy_depths = ascending(rng, 0.0, LINKS);
    let mut statements = Vec::with_capacity(2 * LINKS);
    let links = chain(&names[..LINKS], value)
        .into_iter()
        .zip(depths)
        .chain(chain(&names[LINKS..], decoy).into_iter().zip(decoy_depths));
    for (text, d) in links {
        statements.push((d, p.tok.encode_continuation(&text)?));
    }
    let frame = Frame {
        task: RulerTask::Vt,
        intro: "Memorize and track the chain(s) of variable assignment hidden in the following \
                text.\n\n"
            .into(),
        question: format!("{QUESTION}{value} in the text above."),
        answer_prefix: format!(
            "Answer: According to the chain(s) of variable assignment in the text above, \
             {LINKS} variables are assigned the value {value}, they are:"
        ),
        answer_tokens: 30,
        depth: Some(depth),
    };
    let hay = p.haystack_tokens(haystack)?;
    p.compose(len, frame, names[..LINKS].to_vec(), |budget| {
        let ctx = p.weave(RulerTask::Vt, &hay, budget, &statements)?;
        Ok(Context {
            needles: ctx.needles[..LINKS].to_vec(),
            ids: ctx.ids,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn a_chain_binds_its_first_name_to_the_value_and_each_next_to_the_previous() {
        let names: Vec<String> = ["AAAAA", "BBBBB", "CCCCC"].map(String::from).to_vec();
        assert_eq!(
            chain(&names, 12_345),
            [
                " VAR AAAAA = 12345.",
                " VAR BBBBB = VAR AAAAA.",
                " VAR CCCCC = VAR BBBBB."
            ]
        );
    }

    #[test]
    fn depths_start_at_the_first_and_ascend_within_it_and_one() {
        let mut rng = StdRng::seed_from_u64(5);
        for first in [0.0, 0.3, 1.0] {
            let d = ascending(&mut rng, first, LINKS);
            assert_eq!(d.len(), LINKS);
            assert_eq!(d[0], first);
            assert!(d.windows(2).all(|w| w[0] <= w[1] && w[1] <= 1.0), "{d:?}");
        }
    }
}
