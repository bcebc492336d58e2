//! What the criterion saved: decisions, sparsity, attention FLOPs and K/V bytes against dense.
//!
//! Per head and step, dense attention costs `4 T d` FLOPs (scores and weighted sum); a local
//! head costs `4 |I| d` plus the criterion's decision cost. A KV head's keys and values
//! (`2 T d` elements) are read in full if any query head of its GQA group is long-context,
//! otherwise only the local `2 |I| d`.
//!
//! Sliding-window layers (Gemma 3's local layers) read their last `W` keys by construction:
//! no criterion decides there. Their reads are counted apart
//! ([`Accounting::sliding_kv_bytes`]), never in the ratios the criterion is judged by.

use ndarray::Array2;

use crate::{Decision, LayerReads};

/// Decision counts of one (layer, head).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadCounts {
    /// Decisions taken with a non-empty bulk (a real choice).
    pub decisions: u64,
    /// Of those, the local ones.
    pub local: u64,
    /// Of those, the ones whose estimated share was not finite (labeled long-context).
    pub nonfinite: u64,
}

/// Totals over a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Accounting {
    n_layers: usize,
    n_heads: usize,
    heads: Vec<HeadCounts>,
    /// Attention FLOPs spent (criterion included).
    pub flops: f64,
    /// Attention FLOPs dense attention would have spent.
    pub dense_flops: f64,
    /// Bytes of K/V read.
    pub kv_bytes: f64,
    /// Bytes of K/V dense attention would have read.
    pub dense_kv_bytes: f64,
    /// Bytes of K/V read by sliding-window layers (not in `kv_bytes` or `dense_kv_bytes`).
    pub sliding_kv_bytes: f64,
    /// Layer-steps recorded as sliding-window layers.
    pub sliding_layer_steps: u64,
    /// Wall time of the recorded (non-sliding) layers' attention, by phase.
    pub times: PhaseTimes,
    /// KV group-steps that read chosen pages ([`crate::ReusePages`] may reuse a choice).
    pub selected_groups: u64,
    /// Of `selected_groups`, those that read a choice made at an earlier step.
    pub reused_groups: u64,
}

/// Wall time of attention steps by phase, in seconds, as [`crate::attend_layer`] measures
/// them: the local scores, the decisions (and the page choice), the bulk rows read, and local
/// and bulk merged. Measured, not counted: they differ between runs and hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Phase 1: the sink and window scores of every head.
    pub local: f64,
    /// Phase 2: the criterion's decisions and, for a selecting criterion, its page choice.
    pub decide: f64,
    /// Part of phase 2: the criterion's own work, the slowest thread's `select_group` calls
    /// (one task a thread, of consecutive groups) where the groups run in parallel (their sum
    /// where they run in turn). The rest of `decide` is handing the tasks to the threads and
    /// waiting for the last.
    pub select: f64,
    /// Phase 3: the bulk rows the long heads read.
    pub bulk: f64,
    /// Phase 4: the local weights and values, merged with the bulk's partial states.
    pub merge: f64,
}

impl PhaseTimes {
    /// The four phases together (`select` is part of `decide`).
    pub fn total(&self) -> f64 {
        self.local + self.decide + self.bulk + self.merge
    }

    /// Add `other`'s times phase by phase.
    pub fn add(&mut self, other: &PhaseTimes) {
        self.local += other.local;
        self.decide += other.decide;
        self.select += other.select;
        self.bulk += other.bulk;
        self.merge += other.merge;
    }
}

/// What one decision costs beyond the local scores: FLOPs per query head and bytes read per
/// KV head (page bounds, say), from [`crate::LocalityCriterion::decision_cost`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionCost {
    /// FLOPs per query head.
    pub flops: u64,
    /// Bytes per KV head, counted in the K/V bytes read.
    pub bytes: u64,
}

/// The shape of one layer's step, as [`Accounting::record_layer`] takes it.
#[derive(Clone, Copy, Debug)]
struct LayerShape {
    total_len: usize,
    local_len: usize,
    d: usize,
    n_kv_heads: usize,
    bytes_per_value: f64,
}

impl Accounting {
    /// Zero counts for a model of `n_layers` x `n_heads` query heads.
    pub fn new(n_layers: usize, n_heads: usize) -> Self {
        Accounting {
            n_layers,
            n_heads,
            heads: vec![HeadCounts::default(); n_layers * n_heads],
            flops: 0.0,
            dense_flops: 0.0,
            kv_bytes: 0.0,
            dense_kv_bytes: 0.0,
            sliding_kv_bytes: 0.0,
            sliding_layer_steps: 0,
            times: PhaseTimes::default(),
            selected_groups: 0,
            reused_groups: 0,
        }
    }

    /// Record one step of a sliding-window layer: `window_len` positions read by each of
    /// `n_kv_heads` KV heads of dimension `d`. Counted apart: no decision, no savings.
    pub fn record_sliding_layer(
        &mut self,
        window_len: usize,
        d: usize,
        n_kv_heads: usize,
        bytes_per_value: f64,
    ) {
        self.sliding_kv_bytes += (window_len * 2 * d * n_kv_heads.max(1)) as f64 * bytes_per_value;
        self.sliding_layer_steps += 1;
    }

    /// Record the decisions of one layer at one step, each long-context head reading the whole
    /// bulk (all-or-nothing criteria).
    ///
    /// `total_len` is `T`, `local_len` is `|I|`, `d` the head dimension, `n_kv_heads` the KV
    /// heads (query head `h` reads KV head `h / (n_heads / n_kv_heads)`), `bytes_per_value`
    /// the bytes of one cached K or V value (scales included), `cost` the criterion's own
    /// cost: FLOPs per head and bytes per KV head ([`DecisionCost`]).
    #[allow(clippy::too_many_arguments)]
    pub fn record_layer(
        &mut self,
        layer: usize,
        decisions: &[Decision],
        total_len: usize,
        local_len: usize,
        d: usize,
        n_kv_heads: usize,
        bytes_per_value: f64,
        cost: DecisionCost,
    ) {
        let bulk = total_len.saturating_sub(local_len);
        let n_kv = n_kv_heads.max(1);
        let group = (decisions.len().min(self.n_heads) / n_kv).max(1);
        let head_rows = |h: usize| if decisions[h].local { 0 } else { bulk };
        let group_rows = |g: usize| {
            let long = decisions
                .iter()
                .skip(g * group)
                .take(group)
                .any(|x| !x.local);
            if long {
                bulk
            } else {
                0
            }
        };
        let shape = LayerShape {
            total_len,
            local_len,
            d,
            n_kv_heads,
            bytes_per_value,
        };
        self.record(layer, decisions, shape, cost, head_rows, group_rows, |_| {
            (0, 0)
        });
    }

    /// Record one layer's step from what attention read ([`LayerReads`], from
    /// [`crate::LayerScratch::reads`]): each head computes over `|I|` plus the bulk rows it
    /// attended to, each KV group reads its local rows, the union of its heads' bulk rows and
    /// the page summaries it scored (in the bytes and FLOPs too). Arguments as
    /// [`Accounting::record_layer`].
    #[allow(clippy::too_many_arguments)]
    pub fn record_layer_reads(
        &mut self,
        layer: usize,
        decisions: &[Decision],
        reads: &LayerReads,
        total_len: usize,
        local_len: usize,
        d: usize,
        n_kv_heads: usize,
        bytes_per_value: f64,
        cost: DecisionCost,
    ) {
        let shape = LayerShape {
            total_len,
            local_len,
            d,
            n_kv_heads,
            bytes_per_value,
        };
        let head_rows = |h: usize| reads.head_rows.get(h).copied().unwrap_or(0);
        let group_rows = |g: usize| reads.group_rows.get(g).copied().unwrap_or(0);
        let summaries = |g: usize| {
            (
                reads.summary_bytes.get(g).copied().unwrap_or(0),
                reads.summary_flops.get(g).copied().unwrap_or(0),
            )
        };
        self.record(
            layer, decisions, shape, cost, head_rows, group_rows, summaries,
        );
        self.times.add(&reads.times);
        self.selected_groups += reads.selected_groups as u64;
        self.reused_groups += reads.reused_groups as u64;
    }

    /// The one place a layer's step is counted: FLOPs `4 (|I| + rows_h) d` per head plus the
    /// decision's, bytes `2 d (|I| + rows_g)` per KV group plus the decision's and the
    /// summaries'.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        layer: usize,
        decisions: &[Decision],
        shape: LayerShape,
        cost: DecisionCost,
        head_rows: impl Fn(usize) -> usize,
        group_rows: impl Fn(usize) -> usize,
        summaries: impl Fn(usize) -> (u64, u64),
    ) {
        let LayerShape {
            total_len,
            local_len,
            d,
            n_kv_heads,
            bytes_per_value,
        } = shape;
        let has_bulk = total_len > local_len;
        let n_heads = decisions.len().min(self.n_heads);
        let (t, l, d) = (total_len as f64, local_len as f64, d as f64);
        let bulk_max = (total_len - local_len.min(total_len)) as f64;
        for (h, dec) in decisions.iter().take(n_heads).enumerate() {
            if has_bulk {
                if let Some(c) = self.heads.get_mut(layer * self.n_heads + h) {
                    c.decisions += 1;
                    c.local += dec.local as u64;
                    c.nonfinite += dec.is_nonfinite() as u64;
                }
            }
            self.dense_flops += 4.0 * t * d;
            let rows = (head_rows(h) as f64).min(bulk_max);
            self.flops += cost.flops as f64 + 4.0 * (l.min(t) + rows) * d;
        }
        let n_kv = n_kv_heads.max(1);
        let bytes_row = 2.0 * d * bytes_per_value;
        for g in 0..n_kv {
            let rows = (group_rows(g) as f64).min(bulk_max);
            self.dense_kv_bytes += t * bytes_row;
            self.kv_bytes += (l.min(t) + rows) * bytes_row;
            if has_bulk {
                let (bytes, flops) = summaries(g);
                self.kv_bytes += cost.bytes as f64 + bytes as f64;
                self.flops += flops as f64;
            }
        }
    }

    /// Counts of one head.
    pub fn head(&self, layer: usize, head: usize) -> HeadCounts {
        self.heads
            .get(layer * self.n_heads + head)
            .copied()
            .unwrap_or_default()
    }

    /// Layers counted.
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }

    /// Query heads per layer.
    pub fn n_heads(&self) -> usize {
        self.n_heads
    }

    fn sum<'a>(it: impl Iterator<Item = &'a HeadCounts>) -> HeadCounts {
        it.fold(HeadCounts::default(), |a, c| HeadCounts {
            decisions: a.decisions + c.decisions,
            local: a.local + c.local,
            nonfinite: a.nonfinite + c.nonfinite,
        })
    }

    /// Counts over every head.
    pub fn total(&self) -> HeadCounts {
        Self::sum(self.heads.iter())
    }

    /// Fraction of decisions (with a bulk) that were local; 0 when none was taken.
    pub fn sparsity(&self) -> f64 {
        let t = self.total();
        ratio(t.local, t.decisions)
    }

    /// Sparsity of one layer.
    pub fn layer_sparsity(&self, layer: usize) -> f64 {
        let n = self.n_heads;
        let t = Self::sum(self.heads.iter().skip(layer * n).take(n));
        ratio(t.local, t.decisions)
    }

    /// Per (layer, head), the fraction of decisions (with a bulk) that were local, as a
    /// `layers x heads` array; 0 for a head with no decision, as [`Accounting::sparsity`].
    pub fn sparsity_per_head(&self) -> Array2<f64> {
        Array2::from_shape_fn((self.n_layers, self.n_heads), |(l, h)| {
            let c = self.head(l, h);
            ratio(c.local, c.decisions)
        })
    }

    /// Attention FLOPs relative to dense (1 when nothing was counted).
    pub fn flops_ratio(&self) -> f64 {
        if self.dense_flops == 0.0 {
            1.0
        } else {
            self.flops / self.dense_flops
        }
    }

    /// K/V bytes read relative to dense (1 when nothing was counted).
    pub fn kv_bytes_ratio(&self) -> f64 {
        if self.dense_kv_bytes == 0.0 {
            1.0
        } else {
            self.kv_bytes / self.dense_kv_bytes
        }
    }

    /// Add another run's counts (same model shape).
    pub fn merge(&mut self, other: &Accounting) {
        for (a, b) in self.heads.iter_mut().zip(&other.heads) {
            a.decisions += b.decisions;
            a.local += b.local;
            a.nonfinite += b.nonfinite;
        }
        self.flops += other.flops;
        self.dense_flops += other.dense_flops;
        self.kv_bytes += other.kv_bytes;
        self.dense_kv_bytes += other.dense_kv_bytes;
        self.sliding_kv_bytes += other.sliding_kv_bytes;
        self.sliding_layer_steps += other.sliding_layer_steps;
        self.times.add(&other.times);
        self.selected_groups += other.selected_groups;
        self.reused_groups += other.reused_groups;
    }

    /// Of the KV group-steps that read chosen pages, the share that read a choice made at an
    /// earlier step; `None` where none read chosen pages.
    pub fn reused_share(&self) -> Option<f64> {
        (self.selected_groups > 0).then(|| ratio(self.reused_groups, self.selected_groups))
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_layers_are_counted_apart_from_the_criterion_ratios() {
        let mut acc = Accounting::new(2, 2);
        acc.record_layer(
            1,
            &[Decision::LOCAL, Decision::LOCAL],
            100,
            10,
            8,
            1,
            2.0,
            DecisionCost::default(),
        );
        let (ratio, sparsity) = (acc.kv_bytes_ratio(), acc.sparsity());
        acc.record_sliding_layer(50, 8, 1, 2.0);
        assert_eq!(acc.sliding_kv_bytes, (50 * 2 * 8 * 2) as f64);
        assert_eq!(acc.sliding_layer_steps, 1);
        assert_eq!((acc.kv_bytes_ratio(), acc.sparsity()), (ratio, sparsity));
        let mut merged = Accounting::new(2, 2);
        merged.merge(&acc);
        assert_eq!(merged, acc);
    }

    #[test]
    fn layer_times_add_up_by_phase_and_merge() {
        let mut acc = Accounting::new(2, 2);
        let reads = |local, decide: f64, bulk, merge| LayerReads {
            times: PhaseTimes {
                local,
                decide,
                select: decide / 2.0,
                bulk,
                merge,
            },
            ..LayerReads::default()
        };
        let long = [Decision::LONG, Decision::LONG];
        let cost = DecisionCost::default();
        acc.record_layer_reads(
            0,
            &long,
            &reads(1.0, 2.0, 4.0, 8.0),
            100,
            10,
            8,
            1,
            2.0,
            cost,
        );
        acc.record_layer_reads(
            1,
            &long,
            &reads(0.5, 0.25, 0.0, 0.125),
            100,
            10,
            8,
            1,
            2.0,
            cost,
        );
        let want = PhaseTimes {
            local: 1.5,
            decide: 2.25,
            select: 1.125,
            bulk: 4.0,
            merge: 8.125,
        };
        assert_eq!(acc.times, want);
        assert_eq!(want.total(), 15.875);
        // sliding layers are not decided: their time is not counted
        acc.record_sliding_layer(50, 8, 1, 2.0);
        assert_eq!(acc.times, want);
        let mut merged = acc.clone();
        merged.merge(&acc);
        assert_eq!(merged.times.total(), 2.0 * want.total());
        assert_eq!(merged.times.decide, 4.5);
        assert_eq!(merged.times.select, 2.25);
    }

    #[test]
    fn sparsity_per_head_is_local_over_decisions_per_layer_and_head() {
        let mut acc = Accounting::new(2, 2);
        let (local, long) = (Decision::LOCAL, Decision::LONG);
        acc.record_layer(
            0,
            &[local, long],
            100,
            10,
            8,
            1,
            2.0,
            DecisionCost::default(),
        );
        acc.record_layer(
            0,
            &[local, local],
            100,
            10,
            8,
            1,
            2.0,
            DecisionCost::default(),
        );
        acc.record_layer(
            1,
            &[long, local],
            100,
            10,
            8,
            1,
            2.0,
            DecisionCost::default(),
        );
        // no bulk: not a decision
        acc.record_layer(
            1,
            &[local, local],
            10,
            10,
            8,
            1,
            2.0,
            DecisionCost::default(),
        );
        let s = acc.sparsity_per_head();
        assert_eq!(s.dim(), (2, 2));
        assert_eq!(
            s.iter().copied().collect::<Vec<_>>(),
            vec![1.0, 0.5, 0.0, 1.0]
        );
        assert_eq!(s[[0, 1]], acc.layer_sparsity(0) - 0.25);
    }
}
