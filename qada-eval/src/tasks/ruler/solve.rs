//! A reference solver that reads a RULER prompt's decoded text and nothing else: the values
//! stated for the keys asked, the variables of the chain bound to the value asked, the words
//! that appear most often. It shows the expected answer is derivable from the prompt alone.

use std::collections::BTreeMap;

use super::words::{CWE_INTRO, CWE_QUESTION, DOTS, FWE_INTRO, FWE_QUESTION};
use super::{niah, vt, RulerTask};

/// The answer to the prompt whose text is `prompt_text`, read from that text alone: `None`
/// if the text is not a prompt of `task` or has no unique answer (no statement for a key
/// asked, a tie at the edge of the most common words).
pub fn solve(task: RulerTask, prompt_text: &str) -> Option<Vec<String>> {
    match task {
        RulerTask::NiahSingle
        | RulerTask::NiahMultikey
        | RulerTask::NiahMultivalue
        | RulerTask::NiahMultiquery => needles(prompt_text),
        RulerTask::Vt => chain(prompt_text),
        RulerTask::Cwe => most_common(between(prompt_text, CWE_INTRO, CWE_QUESTION)?, None, 10),
        RulerTask::Fwe => most_common(
            between(prompt_text, FWE_INTRO, FWE_QUESTION)?,
            Some(DOTS),
            3,
        ),
    }
}

/// The text between the last `start` and the `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.rfind(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

/// Every value stated for every key the question asks, keys in the question's order.
fn needles(text: &str) -> Option<Vec<String>> {
    let q = &text[text.rfind(niah::QUESTION)? + niah::QUESTION.len()..];
    let (kind, rest) = q.split_once(" for ")?;
    let (query, _) = rest.split_once(" mentioned in the provided text?")?;
    // keys are hyphenated words: `a`, `a and b`, `a, b, and c`
    let keys = query
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|k| !k.is_empty() && *k != "and");
    let mut out = Vec::new();
    for key in keys {
        let marker = format!("One of the special magic {kind} for {key} is: ");
        let before = out.len();
        for (at, _) in text.match_indices(&marker) {
            let value = &text[at + marker.len()..];
            out.push(value[..value.find('.')?].to_string());
        }
        if out.len() == before {
            return None;
        }
    }
    Some(out)
}

/// The variables whose chain of `VAR X = VAR Y` ends in the value the question asks, in the
/// order their assignments appear.
fn chain(text: &str) -> Option<Vec<String>> {
    let q = &text[text.rfind(vt::QUESTION)? + vt::QUESTION.len()..];
    let value = q.split_once(" in the text above.")?.0;
    let mut bound: Vec<(&str, &str)> = Vec::new();
    for (at, _) in text.match_indices("VAR ") {
        let s = &text[at + 4..];
        let name = &s[..s.find(|c: char| !c.is_ascii_uppercase()).unwrap_or(s.len())];
        if let Some(rhs) = s[name.len()..].strip_prefix(" = ") {
            if !name.is_empty() {
                bound.push((name, &rhs[..rhs.find('.')?]));
            }
        }
    }
    let lookup = |name: &str| bound.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
    let resolves = |name: &str| {
        let mut rhs = lookup(name);
        for _ in 0..=bound.len() {
            match rhs?.strip_prefix("VAR ") {
                Some(next) => rhs = lookup(next),
                None => return Some(rhs? == value),
            }
        }
        None // a cycle
    };
    let out: Vec<String> = bound
        .iter()
        .filter(|(n, _)| resolves(n) == Some(true))
        .map(|(n, _)| n.to_string())
        .collect();
    (!out.is_empty()).then_some(out)
}

/// The `n` most frequent words of `text` (list numbers such as `12.` and `skip` aside), most
/// frequent first; `None` if the `n`-th ties the next.
fn most_common(text: &str, skip: Option<&str>, n: usize) -> Option<Vec<String>> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for w in text.split_whitespace() {
        let number = w.ends_with('.') && w[..w.len() - 1].bytes().all(|b| b.is_ascii_digit());
        if !number && Some(w) != skip {
            *counts.entry(w).or_default() += 1;
        }
    }
    let mut ranked: Vec<(&str, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if ranked.len() < n || ranked.get(n).is_some_and(|next| next.1 == ranked[n - 1].1) {
        return None;
    }
    Some(ranked[..n].iter().map(|(w, _)| w.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_followed_to_its_value_and_a_decoy_is_not() {
        let text = "x VAR AAAAA = 12345. y VAR QQQQQ = 54321. VAR BBBBB = VAR AAAAA. \
                    VAR RRRRR = VAR QQQQQ. VAR CCCCC = VAR BBBBB.\n\
                    Question: Find all variables that are assigned the value 12345 in the \
                    text above.";
        assert_eq!(chain(text).unwrap(), ["AAAAA", "BBBBB", "CCCCC"]);
        let none = text.replace("value 12345", "value 99999");
        assert_eq!(chain(&none), None);
    }

    #[test]
    fn ties_at_the_edge_of_the_most_common_words_have_no_answer() {
        assert_eq!(
            most_common("1. a 2. b 3. a 4. c 5. b 6. a", None, 2).unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            most_common("1. a 2. b 3. a 4. c 5. a", None, 1).unwrap(),
            ["a"]
        );
        assert_eq!(most_common("1. a 2. b 3. c 4. c", None, 2), None);
        assert_eq!(
            most_common(".... x .... y x", Some("...."), 1).unwrap(),
            ["x"]
        );
    }
}
