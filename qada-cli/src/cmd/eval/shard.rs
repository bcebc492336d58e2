//! `--shard K/N`: a fixed share of a sweep's work, for one of N machines or processes.
//!
//! The unit of work is a (task, length) with all its samples: the gate compares every
//! configuration with dense on the same prompts, so a unit split across shards would have to
//! run dense twice. Units go to shards by longest processing time first: from the longest
//! prompts down (run order among equals), each to the shard with the fewest prompt tokens so
//! far (the lowest K among equals). The assignment depends only on the units and N, so every
//! shard computes the same split without talking to the others, and the shards' records
//! together are one run's.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::common::{fail, CliResult};

/// Shard `k` of `n`, counted from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--shard {s:?}: expected K/N with 1 <= K <= N, e.g. 2/8 for the second of 8 \
                 shards (schedulers that count from 0 pass their index + 1)"
            )
        };
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let k: usize = k.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if k == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// The shard (0-based) of every unit, given the units' costs in run order and `n` shards.
pub fn assign(costs: &[u64], n: usize) -> Vec<usize> {
    let n = n.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    // longest first; the sort is stable, so equal costs keep run order
    order.sort_by(|&a, &b| costs[b].cmp(&costs[a]));
    let mut load = vec![0u64; n];
    let mut shard = vec![0; costs.len()];
    for u in order {
        let (least, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(i, &l)| (l, i))
            .expect("n >= 1");
        shard[u] = least;
        load[least] += costs[u];
    }
    shard
}

/// The units of `units` (run order kept) that fall to `shard`, each costing `cost(unit)`.
pub fn units_of<T: Copy>(units: &[T], shard: Shard, cost: impl Fn(&T) -> u64) -> Vec<T> {
    let costs: Vec<u64> = units.iter().map(cost).collect();
    let owner = assign(&costs, shard.n);
    units
        .iter()
        .zip(owner)
        .filter(|&(_, o)| o + 1 == shard.k)
        .map(|(&u, _)| u)
        .collect()
}

/// What a shard's folder says of it (`shard.json`): which shard of which sweep, its units,
/// and whether it ran to the end. A resumed shard and a merge of shards check it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShardFile {
    pub k: usize,
    pub n: usize,
    /// The whole sweep's definition (tasks, lengths, samples, configurations, gate): every
    /// shard of one sweep has the same.
    pub sweep: serde_json::Value,
    /// The (task, length) units of this shard, in run order.
    pub units: Vec<(String, usize)>,
    pub finished: bool,
}

/// The file a shard's folder describes it in.
pub const SHARD_FILE: &str = "shard.json";

impl ShardFile {
    /// The shard description in `dir`, if there is one.
    pub fn read(dir: &Path) -> CliResult<Option<ShardFile>> {
        let path = dir.join(SHARD_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let f = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some(f))
    }

    pub fn write(&self, dir: &Path) -> CliResult<()> {
        let path = dir.join(SHARD_FILE);
        std::fs::write(&path, serde_json::to_string_pretty(self)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(())
    }

    /// Refuse to continue, in `dir`, a shard of another split or sweep than `self`.
    pub fn check_resume(&self, dir: &Path) -> CliResult<()> {
        let Some(old) = ShardFile::read(dir)? else {
            return Ok(());
        };
        if (old.k, old.n) != (self.k, self.n) || old.sweep != self.sweep {
            return fail(format!(
                "--resume: {} holds shard {}/{} of {}; this run is shard {}/{} of {}; resume \
                 it with the same flags, or use another --out-dir",
                dir.join(SHARD_FILE).display(),
                old.k,
                old.n,
                old.sweep,
                self.k,
                self.n,
                self.sweep
            ));
        }
        Ok(())
    }
}

/// Check that the shard folders `dirs` come from one sweep split once: the same N and sweep,
/// no shard twice. Returns what is still missing or unfinished, to be said (a merge of some
/// shards is allowed, e.g. to look at a sweep half done).
pub fn check_shards(dirs: &[PathBuf]) -> CliResult<Vec<String>> {
    let mut seen: Vec<(ShardFile, &PathBuf)> = Vec::new();
    for d in dirs {
        let Some(f) = ShardFile::read(d)? else {
            continue;
        };
        if let Some((first, at)) = seen.first() {
            if f.n != first.n || f.sweep != first.sweep {
                return fail(format!(
                    "--merge: {} is shard {}/{} of {}, but {} is shard {}/{} of {}: shards of \
                     different sweeps or splits cannot be merged",
                    d.display(),
                    f.k,
                    f.n,
                    f.sweep,
                    at.display(),
                    first.k,
                    first.n,
                    first.sweep
                ));
            }
        }
        if let Some((_, at)) = seen.iter().find(|(g, _)| g.k == f.k) {
            return fail(format!(
                "--merge: {} and {} are both shard {}/{}",
                d.display(),
                at.display(),
                f.k,
                f.n
            ));
        }
        seen.push((f, d));
    }
    let mut said = Vec::new();
    if let Some((first, _)) = seen.first() {
        let missing: Vec<String> = (1..=first.n)
            .filter(|k| !seen.iter().any(|(f, _)| f.k == *k))
            .map(|k| format!("{k}/{}", first.n))
            .collect();
        if !missing.is_empty() {
            said.push(format!("shards not merged here: {}", missing.join(", ")));
        }
        for (f, d) in &seen {
            if !f.finished {
                said.push(format!(
                    "shard {}/{} in {} did not finish: run it again with --resume, then merge \
                     it again",
                    f.k,
                    f.n,
                    d.display()
                ));
            }
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shards_parse_from_one_and_name_the_fault() {
        assert_eq!("2/8".parse::<Shard>().unwrap(), Shard { k: 2, n: 8 });
        assert_eq!("1/1".parse::<Shard>().unwrap().to_string(), "1/1");
        for bad in ["0/3", "4/3", "3", "a/3", "1/0", "-1/3", ""] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("1 <= K <= N"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_longest_units_are_spread_first() {
        // lengths of two tasks at 1k..16k, run order task-major
        let costs = [1024, 2048, 4096, 8192, 16384, 1024, 2048, 4096, 8192, 16384];
        let shard = assign(&costs, 2);
        assert_eq!(shard[4], 0);
        assert_eq!(shard[9], 1);
        let load = |k| {
            (0..10)
                .filter(|&u| shard[u] == k)
                .map(|u| costs[u])
                .sum::<u64>()
        };
        assert_eq!(load(0), load(1));
    }

    proptest! {
        #[test]
        fn every_unit_falls_to_exactly_one_shard_and_loads_stay_within_one_unit(
            costs in proptest::collection::vec(1u64..20_000, 0..60),
            n in 1usize..9,
        ) {
            let units: Vec<usize> = (0..costs.len()).collect();
            let mut seen = vec![0; units.len()];
            let mut loads = Vec::new();
            for k in 1..=n {
                let mine = units_of(&units, Shard { k, n }, |&u| costs[u]);
                // run order kept within a shard
                prop_assert!(mine.windows(2).all(|w| w[0] < w[1]));
                for &u in &mine {
                    seen[u] += 1;
                }
                loads.push(mine.iter().map(|&u| costs[u]).sum::<u64>());
            }
            prop_assert!(seen.iter().all(|&c| c == 1), "{seen:?}");
            // longest-first greedy: no shard exceeds another by more than the largest unit
            let biggest = costs.iter().copied().max().unwrap_or(0);
            let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            prop_assert!(hi - lo <= biggest, "{loads:?}");
            // the same split every time it is computed
            prop_assert_eq!(assign(&costs, n), assign(&costs, n));
        }
    }
}
