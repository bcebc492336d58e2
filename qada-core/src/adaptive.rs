//! One adaptive decoding step for a whole layer.
//!
//! Per KV head (GQA group): the local scores `s_I` of every query head of the group are
//! computed in one pass over the sink and window keys; the criterion labels each head; the
//! bulk keys and values are read only if some head of the group is long-context, and then once
//! for all the group's long heads. The bulk is cut into chunks processed in parallel, each
//! producing a partial softmax state `(m, l, acc)` per head (`m` the largest score,
//! `l = sum exp(s - m)`, `acc = sum exp(s - m) v`), merged with the local state:
//! `o = (sum_c exp(m_c - M) acc_c) / (sum_c exp(m_c - M) l_c)`, `M = max_c m_c`.
//! Query head `h` reads KV head `h / (n_heads / n_kv_heads)`.

use std::time::Instant;

use rayon::prelude::*;

use qada_stats::{f16, BulkSummaries, Q8Block, Rows};

use crate::accounting::PhaseTimes;
use crate::attention::{exp_in_place, max_score, prefetch_rows, Elem, KvSegments, ScoreMap};

/// The KV heads of one layer as attention reads them: a slice of [`KvSegments`], or a view
/// that borrows them from a cache on demand (so a decoding step needs no list of its own).
pub trait LayerKv: Sync {
    /// KV heads in the layer.
    fn n_kv_heads(&self) -> usize;
    /// KV head `g < n_kv_heads()`.
    fn segments(&self, g: usize) -> KvSegments<'_>;
}

impl LayerKv for [KvSegments<'_>] {
    fn n_kv_heads(&self) -> usize {
        self.len()
    }
    fn segments(&self, g: usize) -> KvSegments<'_> {
        self[g]
    }
}

impl<const N: usize> LayerKv for [KvSegments<'_>; N] {
    fn n_kv_heads(&self) -> usize {
        N
    }
    fn segments(&self, g: usize) -> KvSegments<'_> {
        self[g]
    }
}

impl LayerKv for Vec<KvSegments<'_>> {
    fn n_kv_heads(&self) -> usize {
        self.len()
    }
    fn segments(&self, g: usize) -> KvSegments<'_> {
        self[g]
    }
}
use crate::reuse::{select_group_reusing, ChoiceMemory};
use crate::selection::{GroupRead, LayerReads, PageSelection};
use crate::{CoreError, Decision, HeadInput, LocalityCriterion, Result};

/// Bulk rows per parallel task.
const CHUNK: usize = 512;

/// Rows of the next run prefetched while a run is computed: the 32 the block kernels' own
/// lookahead (32 rows) leaves to the hardware at a run's start.
const PREFETCH_ROWS: usize = 32;

/// The smallest page [`LayerScratch::with_capacity`] makes room for: a criterion that
/// selects smaller pages may allocate when the bulk grows.
const MIN_RESERVED_PAGE: usize = 16;

/// Bulk rows from which the KV groups of a criterion that keeps page summaries decide in
/// parallel.
const PARALLEL_SELECTION: usize = 2048;

/// Whether a layer's KV groups decide one a thread, for a criterion that keeps `summaries`, at
/// a bulk of `bulk` keys in a context of `context`. A page choice grows with the bulk; the
/// clusters' quadratic forms (`k` matrices of `d (d + 1) / 2` values a group, read from memory
/// at every step) do not, and are worth a core each from the first bulk key. Neither is made
/// on a context shorter than the summaries' `from_context` (a criterion dense below a
/// threshold): there the threads' hand-over would be the whole cost.
fn decides_in_parallel(summaries: BulkSummaries, bulk: usize, context: usize) -> bool {
    if context < summaries.from_context {
        return false;
    }
    (bulk >= PARALLEL_SELECTION && summaries.page.is_some())
        || (bulk > 0 && summaries.clusters.is_some_and(|k| k > 1))
}

/// Partial softmax state of one head over some rows.
#[derive(Clone, Debug)]
struct Partial {
    m: f32,
    l: f32,
    acc: Vec<f32>,
}

impl Partial {
    fn reset(&mut self, d: usize) {
        self.m = f32::NEG_INFINITY;
        self.l = 0.0;
        self.acc.clear();
        self.acc.resize(d, 0.0);
    }
}

/// A task: runs of one KV head's bulk rows (at most [`CHUNK`] in all), each for some of that
/// group's long heads; one partial softmax state per head over the runs it attends to.
#[derive(Clone, Debug, Default)]
struct Task {
    group: usize,
    /// Rows `[r0, r1)` of the bulk, each with the mask of the group's heads (bit `j`: the
    /// group's head `j`) that attend to it.
    runs: Vec<(usize, usize, u64)>,
    /// Rows in the runs.
    rows: usize,
    /// The union of the runs' masks.
    mask: u64,
    /// Query heads (global indices) of the group in `mask`, ascending.
    heads: Vec<usize>,
    /// Queries of one run's heads, contiguous (`heads x d`).
    queries: Vec<f32>,
    /// Per head of `heads`: largest score `m`, `l = sum exp(s - m)`.
    m: Vec<f32>,
    l: Vec<f32>,
    /// Per head of `heads`: `acc = sum exp(s - m) v` (`heads.len() x d`).
    acc: Vec<f32>,
    /// One run's heads' `acc` rows, gathered for the block kernel.
    run_acc: Vec<f32>,
    scores: Vec<f32>,
}

/// Buffers reused across steps so that the decode loop does not allocate once warm.
#[derive(Clone, Debug, Default)]
pub struct LayerScratch {
    /// Per head: the scores of its sink then its window (`n_heads x |I|`).
    local_scores: Vec<f32>,
    /// One group's sink block then window block, head-major within each: its scores, then
    /// its weights `exp(s - m)` (`group x |I|`).
    block: Vec<f32>,
    /// One group's local partial states: `m`, `l` and `acc` (`group x d`) per head.
    local_m: Vec<f32>,
    local_l: Vec<f32>,
    local_acc: Vec<f32>,
    /// Bulk tasks; the first `n_tasks` are the last step's.
    tasks: Vec<Task>,
    n_tasks: usize,
    state: Option<Partial>,
    /// One per query head: the last step's decisions.
    decisions: Vec<Decision>,
    /// Per KV group: what the criterion chose to read, and its pages.
    reads_of: Vec<GroupRead>,
    selections: Vec<PageSelection>,
    /// Per layer and KV group (`layer * n_kv + g`): the last page choice, for a criterion
    /// that reuses choices ([`LocalityCriterion::reuse`]); and the room each is made with
    /// (heads of a group, head dimension, pages).
    memories: Vec<ChoiceMemory>,
    memory_room: (usize, usize, usize),
    /// What the last step read and computed.
    reads: LayerReads,
}

impl LayerScratch {
    /// Empty buffers; they grow to the largest layer seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Buffers for layers of up to `n_kv_heads` KV heads of `group` query heads each, head
    /// dimension `d`, and bulks of up to `max_bulk` rows: every bulk task a step can need is
    /// made here, so decoding allocates nothing when the bulk grows by a chunk or more groups
    /// than ever before are long-context; and room to select pages of 16 rows or more. `n_kv_heads * ceil(max_bulk / 512)` tasks of about
    /// `group (512 + 2 d)` f32 each.
    pub fn with_capacity(n_kv_heads: usize, group: usize, d: usize, max_bulk: usize) -> Self {
        let task = || Task {
            group: 0,
            runs: Vec::with_capacity(CHUNK),
            rows: 0,
            mask: 0,
            heads: Vec::with_capacity(group),
            queries: Vec::with_capacity(group * d),
            m: Vec::with_capacity(group),
            l: Vec::with_capacity(group),
            acc: Vec::with_capacity(group * d),
            run_acc: Vec::with_capacity(group * d),
            scores: vec![0.0; group * CHUNK],
        };
        LayerScratch {
            local_scores: Vec::new(),
            block: Vec::new(),
            local_m: vec![0.0; group],
            local_l: vec![0.0; group],
            local_acc: vec![0.0; group * d],
            tasks: (0..n_kv_heads * max_bulk.div_ceil(CHUNK))
                .map(|_| task())
                .collect(),
            n_tasks: 0,
            state: None,
            decisions: Vec::with_capacity(n_kv_heads * group),
            reads_of: Vec::with_capacity(n_kv_heads),
            selections: (0..n_kv_heads)
                .map(|_| {
                    let mut s = PageSelection::new();
                    s.reserve(group, d, max_bulk.div_ceil(MIN_RESERVED_PAGE));
                    s.reserve_scores(max_bulk);
                    s
                })
                .collect(),
            memories: Vec::new(),
            memory_room: (group, d, max_bulk.div_ceil(MIN_RESERVED_PAGE)),
            reads: LayerReads::default(),
        }
    }

    /// Forget every remembered page choice (a criterion that reuses them chooses afresh at
    /// the next step): for a sequence that was reset, restored or given another criterion.
    pub fn forget_choices(&mut self) {
        self.memories.iter_mut().for_each(ChoiceMemory::forget);
    }

    /// What the last [`attend_layer`] read of each KV group's bulk and computed per head.
    pub fn reads(&self) -> &LayerReads {
        &self.reads
    }

    /// The pages KV group `g` read at the last [`attend_layer`] (empty unless its criterion
    /// selected pages).
    pub fn selection(&self, g: usize) -> Option<&PageSelection> {
        match self.reads_of.get(g) {
            Some(GroupRead::Selected) => self.selections.get(g),
            _ => None,
        }
    }
}

/// [`Elem::block_scores`] over rows of any element type: `out[j * n + i] = scale * q_j . k_i`.
fn block_scores(
    queries: &[f32],
    keys: Rows<'_>,
    d: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<()> {
    match keys {
        Rows::F32(k) => f32::block_scores(queries, k, d, scale, out),
        Rows::F16(k) => f16::block_scores(queries, k, d, scale, out),
        Rows::Q8(k) => Q8Block::block_scores(queries, k, d, scale, out),
    }
}

/// [`Elem::block_accumulate`] over rows of any element type: `acc_j += sum_i w[j * n + i] v_i`.
fn block_accumulate(acc: &mut [f32], weights: &[f32], values: Rows<'_>, d: usize) -> Result<()> {
    match values {
        Rows::F32(v) => f32::block_accumulate(acc, weights, v, d),
        Rows::F16(v) => f16::block_accumulate(acc, weights, v, d),
        Rows::Q8(v) => Q8Block::block_accumulate(acc, weights, v, d),
    }
}

/// Merge `b` into `a`.
fn merge(a: &mut Partial, b_m: f32, b_l: f32, b_acc: &[f32]) {
    if b_m == f32::NEG_INFINITY {
        return;
    }
    let m = a.m.max(b_m);
    let (ca, cb) = ((a.m - m).exp(), (b_m - m).exp());
    a.l = a.l * ca + b_l * cb;
    for (x, &y) in a.acc.iter_mut().zip(b_acc) {
        *x = *x * ca + y * cb;
    }
    a.m = m;
}

/// The runs of one task: per head, the partial state `(m, l, acc)` over the runs it attends
/// to. Each run's key and value rows are read once for its heads (block kernels); a head's
/// state is rescaled by `exp(m_old - m_new)` when a run raises its maximum.
fn run_task<K: LayerKv + ?Sized>(
    t: &mut Task,
    queries: &[f32],
    kv: &K,
    map: ScoreMap,
    d: usize,
    group: usize,
) -> Result<()> {
    let k = kv.segments(t.group);
    let g0 = t.group * group;
    t.heads.clear();
    t.heads.extend(
        (0..group)
            .filter(|&j| t.mask & (1 << j) != 0)
            .map(|j| g0 + j),
    );
    let nh = t.heads.len();
    t.m.clear();
    t.m.resize(nh, f32::NEG_INFINITY);
    t.l.clear();
    t.l.resize(nh, 0.0);
    t.acc.clear();
    t.acc.resize(nh * d, 0.0);
    // positions in `heads` of one run's heads, and their queries: gathered again only when
    // a run's heads differ from the last run's (runs of pages are short)
    let mut sub = [0usize; 64];
    let mut nr = 0;
    let mut gathered = 0u64;
    for (x, &(r0, r1, mask)) in t.runs.iter().enumerate() {
        let n = r1 - r0;
        // the next run's first page is on its way from memory while this run is computed
        // (the kernels prefetch only within a run)
        if let Some(&(n0, n1, _)) = t.runs.get(x + 1) {
            let n1 = n1.min(n0 + PREFETCH_ROWS);
            prefetch_rows(k.bulk_keys.slice(n0, n1, d));
            prefetch_rows(k.bulk_values.slice(n0, n1, d));
        }
        if mask != gathered {
            nr = 0;
            t.queries.clear();
            for (i, &h) in t.heads.iter().enumerate() {
                if mask & (1 << (h - g0)) != 0 {
                    t.queries.extend_from_slice(&queries[h * d..(h + 1) * d]);
                    sub[nr] = i;
                    nr += 1;
                }
            }
            gathered = mask;
        }
        if nr == 0 {
            continue;
        }
        let scores = &mut t.scores[..nr * n];
        // scores of the run's heads, each key row read once
        block_scores(
            &t.queries,
            k.bulk_keys.slice(r0, r1, d),
            d,
            map.scale,
            scores,
        )?;
        map.cap_in_place(scores);
        // per head: the new maximum, the old state rescaled to it, the weights exp(s - m)
        for (s, &i) in scores.chunks_exact_mut(n).zip(&sub[..nr]) {
            let m = max_score(s, t.m[i]);
            if m == f32::NEG_INFINITY {
                s.iter_mut().for_each(|x| *x = 0.0);
                continue;
            }
            if t.m[i] != f32::NEG_INFINITY && m > t.m[i] {
                let c = (t.m[i] - m).exp();
                t.l[i] *= c;
                t.acc[i * d..(i + 1) * d].iter_mut().for_each(|a| *a *= c);
            }
            t.m[i] = m;
            t.l[i] += exp_in_place(s, m);
        }
        // weighted values of the run's heads, each value row read once: into the heads'
        // `acc` rows in place when the run has every head of the task, else gathered
        let values = k.bulk_values.slice(r0, r1, d);
        if nr == nh {
            block_accumulate(&mut t.acc, scores, values, d)?;
            continue;
        }
        t.run_acc.clear();
        for &i in &sub[..nr] {
            t.run_acc.extend_from_slice(&t.acc[i * d..(i + 1) * d]);
        }
        block_accumulate(&mut t.run_acc, scores, values, d)?;
        for (a, &i) in t.run_acc.chunks_exact(d).zip(&sub[..nr]) {
            t.acc[i * d..(i + 1) * d].copy_from_slice(a);
        }
    }
    Ok(())
}

/// Add rows `[r0, r1)` of group `g`'s bulk (at most [`CHUNK`]) for the heads of `mask` to
/// the group's open task, or to a new one (reusing its buffers) when the open one would pass
/// [`CHUNK`] rows. `open` is the group's open task, if any; nothing for an empty mask.
#[allow(clippy::too_many_arguments)]
fn push_run(
    tasks: &mut Vec<Task>,
    n_tasks: &mut usize,
    open: &mut Option<usize>,
    g: usize,
    (r0, r1): (usize, usize),
    mask: u64,
    group: usize,
    d: usize,
) {
    if mask == 0 || r1 <= r0 {
        return;
    }
    let n = r1 - r0;
    let i = match *open {
        Some(i) if tasks[i].rows + n <= CHUNK => i,
        _ => {
            if tasks.len() <= *n_tasks {
                tasks.push(Task::default());
            }
            let t = &mut tasks[*n_tasks];
            t.group = g;
            t.rows = 0;
            t.mask = 0;
            // emptied before reserving: `reserve` counts from the length the last step left
            t.runs.clear();
            t.heads.clear();
            t.heads.reserve(group);
            for v in [&mut t.m, &mut t.l] {
                v.clear();
                v.reserve(group);
            }
            for v in [&mut t.queries, &mut t.acc, &mut t.run_acc] {
                v.clear();
                v.reserve(group * d);
            }
            if t.scores.len() < group * CHUNK {
                t.scores.resize(group * CHUNK, 0.0);
            }
            *open = Some(*n_tasks);
            *n_tasks += 1;
            *n_tasks - 1
        }
    };
    let t = &mut tasks[i];
    // a run that continues the last one with the same heads extends it
    match t.runs.last_mut() {
        Some(last) if last.1 == r0 && last.2 == mask => last.1 = r1,
        _ => t.runs.push((r0, r1, mask)),
    }
    t.rows += n;
    t.mask |= mask;
}

/// The shape of one layer's step, checked once by [`Shape::check`].
#[derive(Clone, Copy, Debug)]
struct Shape {
    n_heads: usize,
    n_kv: usize,
    /// Query heads per KV head.
    group: usize,
    d: usize,
    /// Keys of the sink plus the window (the same for every KV head of the layer).
    local_len: usize,
}

impl Shape {
    /// `queries` and `out` are `n_heads x d`, `n_heads` a multiple of the KV heads (at most 64
    /// query heads each), and every KV head has the same dimension and local length.
    fn check<K: LayerKv + ?Sized>(queries: &[f32], kv: &K, out: &[f32]) -> Result<Shape> {
        let n_kv = kv.n_kv_heads();
        let d = if n_kv == 0 { 0 } else { kv.segments(0).dim };
        let n_heads = queries.len().checked_div(d).unwrap_or(0);
        if n_kv == 0 || d == 0 || !n_heads.is_multiple_of(n_kv) || n_heads / n_kv > 64 {
            return Err(CoreError::DimensionMismatch {
                what: "query heads per KV head (at most 64)",
                expected: n_kv,
                found: n_heads,
            });
        }
        for (what, len) in [("queries", queries.len()), ("outputs", out.len())] {
            if len != n_heads * d {
                return Err(CoreError::DimensionMismatch {
                    what,
                    expected: n_heads * d,
                    found: len,
                });
            }
        }
        let local_len = kv.segments(0).local_len();
        for g in 0..n_kv {
            let k = kv.segments(g);
            k.validate()?;
            if k.dim != d || k.local_len() != local_len {
                return Err(CoreError::DimensionMismatch {
                    what: "KV heads of one layer (dimension and length)",
                    expected: d,
                    found: k.dim,
                });
            }
        }
        Ok(Shape {
            n_heads,
            n_kv,
            group: n_heads / n_kv,
            d,
            local_len,
        })
    }
}

/// Attention of one layer at one step.
///
/// - `queries`: `n_heads x d` rotated queries (`d` the KV heads' dimension).
/// - `kv`: the layer's KV heads (a slice of [`KvSegments`], or a view of a cache).
/// - `scores`: the scale of `q . k` (an `f32`), or a [`ScoreMap`] with a soft cap.
/// - `out`: `n_heads x d` attention outputs.
///
/// The step's decisions, one per query head, are left in [`LayerScratch::decisions`]. Four
/// phases: the local scores, the decisions, the bulk rows read, and local and bulk merged;
/// what they read and how long each took are left in [`LayerScratch::reads`].
pub fn attend_layer<C: LocalityCriterion + ?Sized, K: LayerKv + ?Sized>(
    criterion: &C,
    layer: usize,
    queries: &[f32],
    kv: &K,
    scores: impl Into<ScoreMap>,
    scratch: &mut LayerScratch,
    out: &mut [f32],
) -> Result<()> {
    let map: ScoreMap = scores.into();
    let shape = Shape::check(queries, kv, out)?;
    let t0 = Instant::now();
    scratch.score_local(shape, queries, kv, map)?;
    let t1 = Instant::now();
    let select = scratch.decide(shape, criterion, layer, queries, kv, map.scale)?;
    let t2 = Instant::now();
    scratch.attend_bulk(shape, queries, kv, map)?;
    let t3 = Instant::now();
    scratch.merge_local_and_bulk(shape, kv, out)?;
    let t4 = Instant::now();
    scratch.reads.times = PhaseTimes {
        local: (t1 - t0).as_secs_f64(),
        decide: (t2 - t1).as_secs_f64(),
        select,
        bulk: (t3 - t2).as_secs_f64(),
        merge: (t4 - t3).as_secs_f64(),
    };
    Ok(())
}

impl LayerScratch {
    /// The decisions of the last [`attend_layer`], one per query head.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Phase 1: the local scores `s_I` of every head; the group's sink and window keys read
    /// once for all its heads (block kernels), then laid out per head as sink then window.
    fn score_local<K: LayerKv + ?Sized>(
        &mut self,
        Shape {
            n_heads,
            n_kv,
            group,
            d,
            local_len,
        }: Shape,
        queries: &[f32],
        kv: &K,
        map: ScoreMap,
    ) -> Result<()> {
        self.local_scores.resize(n_heads * local_len, 0.0);
        self.block.resize(group * local_len, 0.0);
        for g in 0..n_kv {
            let k = kv.segments(g);
            let ns = k.sink_keys.n_rows(d);
            let nw = local_len - ns;
            let q = &queries[g * group * d..(g + 1) * group * d];
            let (s_sink, s_win) = self.block.split_at_mut(group * ns);
            block_scores(q, k.sink_keys, d, map.scale, s_sink)?;
            block_scores(q, k.window_keys, d, map.scale, s_win)?;
            map.cap_in_place(s_sink);
            map.cap_in_place(s_win);
            for j in 0..group {
                let h = g * group + j;
                let s = &mut self.local_scores[h * local_len..(h + 1) * local_len];
                s[..ns].copy_from_slice(&s_sink[j * ns..(j + 1) * ns]);
                s[ns..].copy_from_slice(&s_win[j * nw..(j + 1) * nw]);
            }
        }
        Ok(())
    }

    /// Phase 2: decide, group by group (the criterion may decide a group as one: see
    /// `Grouped`), and say what each group reads of its bulk. Selecting pages scans a
    /// summary per page: worth a core per group on long bulks. Returns the seconds spent in
    /// the criterion: the slowest thread's (its groups' sum) where the groups run in
    /// parallel, else the groups' sum.
    fn decide<C: LocalityCriterion + ?Sized, K: LayerKv + ?Sized>(
        &mut self,
        Shape {
            n_heads,
            n_kv,
            group,
            d,
            local_len,
        }: Shape,
        criterion: &C,
        layer: usize,
        queries: &[f32],
        kv: &K,
        scale: f32,
    ) -> Result<f64> {
        if self.selections.len() < n_kv {
            self.selections.resize(n_kv, PageSelection::new());
        }
        self.reads_of.clear();
        self.reads_of.resize(n_kv, GroupRead::Local);
        self.decisions.clear();
        self.decisions.resize(n_heads, Decision::LONG);
        let reuse = criterion.reuse();
        // this layer's remembered choices (unused without reuse)
        let at = if reuse.is_some() { layer * n_kv } else { 0 };
        if self.memories.len() < at + n_kv {
            let (heads, dim, pages) = self.memory_room;
            self.memories
                .resize_with(at + n_kv, || ChoiceMemory::with_capacity(heads, dim, pages));
        }
        let local_scores = &self.local_scores;
        let decide = |g: usize,
                      out: &mut [Decision],
                      sel: &mut PageSelection,
                      memory: &mut ChoiceMemory|
         -> Result<GroupRead> {
            let k = kv.segments(g);
            let input = |h: usize| HeadInput {
                layer,
                head: h,
                query: &queries[h * d..(h + 1) * d],
                scale,
                local_scores: &local_scores[h * local_len..(h + 1) * local_len],
                bulk_len: k.bulk_len(),
                bulk_moments: k.bulk_moments,
                bulk_keys: k.bulk_keys,
                bulk_pages: k.bulk_pages,
                bulk_clusters: k.bulk_clusters,
            };
            // on the stack: at most 64 heads per group (checked by `Shape::check`); slots
            // past the group repeat its last head and are not passed on
            let inputs: [HeadInput<'_>; 64] =
                std::array::from_fn(|i| input(g * group + i.min(group - 1)));
            let inputs = &inputs[..group];
            let mut read = match reuse {
                Some(r) => select_group_reusing(criterion, r, inputs, out, sel, memory)?,
                None => criterion.select_group(inputs, out, sel)?,
            };
            if k.bulk_len() == 0 {
                out.iter_mut().for_each(|o| o.local = true);
                read = GroupRead::Local;
            }
            if read == GroupRead::Local && out.iter().any(|o| !o.local) {
                // a criterion that reads nothing of the bulk leaves its heads local
                out.iter_mut().for_each(|o| o.local = true);
            }
            Ok(read)
        };
        let bulk = kv.segments(0).bulk_len();
        let (sels, reads_of) = (&mut self.selections[..n_kv], &mut self.reads_of[..]);
        let mems = &mut self.memories[at..at + n_kv];
        let decisions = &mut self.decisions[..];
        // each group's read, and the seconds it took in the criterion
        let timed = |g: usize, out: &mut [Decision], (sel, mem): (&mut _, &mut _), read: &mut _| {
            let t0 = Instant::now();
            *read = decide(g, out, sel, mem)?;
            Ok::<f64, CoreError>(t0.elapsed().as_secs_f64())
        };
        let parallel = decides_in_parallel(criterion.bulk_summaries(), bulk, local_len + bulk);
        if n_kv > 1 && parallel {
            // one task a thread, of consecutive groups: with more groups than threads (SmolLM2's
            // three on two cores) the stepping thread decides two in a row while the other
            // thread decides the third, instead of a third task that one of them must wait
            // to take (rayon's stealing left 20-100 us idle before it, per layer)
            let per = n_kv.div_ceil(rayon::current_num_threads().max(1));
            decisions
                .par_chunks_mut(group * per)
                .zip(sels.par_chunks_mut(per))
                .zip(mems.par_chunks_mut(per))
                .zip(reads_of.par_chunks_mut(per))
                .enumerate()
                .map(|(t, (((outs, sels), mems), reads))| {
                    let groups = outs
                        .chunks_mut(group)
                        .zip(sels.iter_mut().zip(mems))
                        .zip(reads);
                    let mut total = 0.0;
                    for (i, ((out, sel), read)) in groups.enumerate() {
                        total += timed(t * per + i, out, sel, read)?;
                    }
                    Ok(total)
                })
                .try_reduce(|| 0.0, |a, b| Ok(a.max(b)))
        } else {
            let groups = decisions
                .chunks_mut(group)
                .zip(sels.iter_mut().zip(mems.iter_mut()))
                .zip(reads_of.iter_mut());
            let mut total = 0.0;
            for (g, ((out, sel), read)) in groups.enumerate() {
                total += timed(g, out, sel, read)?;
            }
            Ok(total)
        }
    }

    /// Phase 3: the bulk rows of groups with a long head, in tasks of up to [`CHUNK`] rows run
    /// in parallel: the whole bulk for the long heads, or the selected pages, each for its
    /// heads. Counts what each group and head read.
    fn attend_bulk<K: LayerKv + ?Sized>(
        &mut self,
        shape: Shape,
        queries: &[f32],
        kv: &K,
        map: ScoreMap,
    ) -> Result<()> {
        let Shape { n_kv, group, d, .. } = shape;
        self.n_tasks = 0;
        self.reads.reset(n_kv, group);
        for g in 0..n_kv {
            self.plan_group(shape, g, kv.segments(g).bulk_len());
        }
        let tasks = &mut self.tasks[..self.n_tasks];
        if tasks.len() > 1 {
            tasks
                .par_iter_mut()
                .try_for_each(|t| run_task(t, queries, kv, map, d, group))
        } else {
            tasks
                .iter_mut()
                .try_for_each(|t| run_task(t, queries, kv, map, d, group))
        }
    }

    /// Group `g`'s part of phase 3: the runs of its bulk (of `bulk` rows) its long heads read,
    /// pushed as tasks, and counted in [`LayerReads`].
    fn plan_group(&mut self, Shape { group, d, .. }: Shape, g: usize, bulk: usize) {
        let sel = &self.selections[g];
        self.reads.summary_bytes[g] = sel.summary_bytes();
        self.reads.summary_flops[g] = sel.summary_flops();
        if self.reads_of[g] == GroupRead::Selected {
            self.reads.selected_groups += 1;
            self.reads.reused_groups += sel.reused() as usize;
        }
        let long_mask = (0..group)
            .filter(|&j| !self.decisions[g * group + j].local)
            .fold(0u64, |m, j| m | (1 << j));
        let mut open = None;
        let (reads, tasks, n_tasks) = (&mut self.reads, &mut self.tasks, &mut self.n_tasks);
        let mut push = |(r0, r1): (usize, usize), mask: u64| {
            if mask != 0 {
                reads.group_rows[g] += r1 - r0;
            }
            for j in 0..group {
                if mask & (1 << j) != 0 {
                    reads.head_rows[g * group + j] += r1 - r0;
                }
            }
            push_run(tasks, n_tasks, &mut open, g, (r0, r1), mask, group, d);
        };
        match self.reads_of[g] {
            GroupRead::Local => {}
            GroupRead::Full => {
                for r in (0..bulk).step_by(CHUNK) {
                    push((r, (r + CHUNK).min(bulk)), long_mask);
                }
            }
            GroupRead::Selected => {
                // pages longer than a chunk are cut into chunks
                let pieces = sel.pages().flat_map(|(p, mask)| {
                    let (r0, r1) = sel.rows(p, bulk);
                    (r0..r1)
                        .step_by(CHUNK)
                        .map(move |a| ((a, (a + CHUNK).min(r1)), mask))
                });
                for (rows, mask) in pieces {
                    push(rows, mask & long_mask);
                }
            }
        }
    }

    /// Phase 4: the local state per head, weights `exp(s - m)` from the local scores and the
    /// group's sink and window values read once for all its heads (block kernel), merged with
    /// the head's bulk partials; `o = acc / l`.
    fn merge_local_and_bulk<K: LayerKv + ?Sized>(
        &mut self,
        Shape {
            n_kv,
            group,
            d,
            local_len,
            ..
        }: Shape,
        kv: &K,
        out: &mut [f32],
    ) -> Result<()> {
        let mut state = self.state.take().unwrap_or_else(|| Partial {
            m: f32::NEG_INFINITY,
            l: 0.0,
            acc: Vec::with_capacity(d),
        });
        self.local_acc.resize(group * d, 0.0);
        self.local_m.resize(group, 0.0);
        self.local_l.resize(group, 0.0);
        for g in 0..n_kv {
            let k = kv.segments(g);
            let ns = k.sink_keys.n_rows(d);
            let nw = local_len - ns;
            let (w_sink, w_win) = self.block.split_at_mut(group * ns);
            for j in 0..group {
                let h = g * group + j;
                let s = &self.local_scores[h * local_len..(h + 1) * local_len];
                let m = max_score(s, f32::NEG_INFINITY);
                let (ws, ww) = (
                    &mut w_sink[j * ns..(j + 1) * ns],
                    &mut w_win[j * nw..(j + 1) * nw],
                );
                ws.copy_from_slice(&s[..ns]);
                ww.copy_from_slice(&s[ns..]);
                self.local_m[j] = m;
                self.local_l[j] = if m == f32::NEG_INFINITY {
                    0.0
                } else {
                    exp_in_place(ws, m) + exp_in_place(ww, m)
                };
            }
            let acc = &mut self.local_acc[..group * d];
            acc.iter_mut().for_each(|a| *a = 0.0);
            block_accumulate(acc, w_sink, k.sink_values, d)?;
            block_accumulate(acc, w_win, k.window_values, d)?;
            for j in 0..group {
                let h = g * group + j;
                state.reset(d);
                let m = self.local_m[j];
                if m != f32::NEG_INFINITY {
                    state.m = m;
                    state.l = self.local_l[j];
                    state.acc.copy_from_slice(&acc[j * d..(j + 1) * d]);
                }
                if !self.decisions[h].local {
                    for t in self.tasks[..self.n_tasks].iter().filter(|t| t.group == g) {
                        if let Some(i) = t.heads.iter().position(|&x| x == h) {
                            merge(&mut state, t.m[i], t.l[i], &t.acc[i * d..(i + 1) * d]);
                        }
                    }
                }
                let o = &mut out[h * d..(h + 1) * d];
                if state.l > 0.0 {
                    let inv = 1.0 / state.l;
                    for (x, &a) in o.iter_mut().zip(&state.acc) {
                        *x = a * inv;
                    }
                } else {
                    o.iter_mut().for_each(|x| *x = 0.0);
                }
            }
        }
        self.state = Some(state);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_decide_in_parallel_only_where_the_summaries_are_read() {
        let pages = BulkSummaries {
            page: Some(32),
            ..BulkSummaries::default()
        };
        let clusters = BulkSummaries {
            clusters: Some(4),
            ..BulkSummaries::default()
        };
        let deep = PARALLEL_SELECTION + 128;
        assert!(decides_in_parallel(pages, PARALLEL_SELECTION, deep));
        assert!(!decides_in_parallel(pages, PARALLEL_SELECTION - 1, deep));
        assert!(decides_in_parallel(clusters, 1, 129));
        assert!(!decides_in_parallel(clusters, 0, 128));
        assert!(!decides_in_parallel(BulkSummaries::default(), deep, deep));
        // dense below 8000: the choice is made (and worth the threads) from there on
        for s in [pages, clusters] {
            let from = BulkSummaries {
                from_context: 8000,
                ..s
            };
            assert!(!decides_in_parallel(from, 7999 - 128, 7999));
            assert!(decides_in_parallel(from, 8000 - 128, 8000));
        }
    }
}
