//! Reusing a KV group's page choice across decoding steps.
//!
//! Choosing pages scores every bulk key of a group (the channel rule: `r` channels of each
//! key, an exponential per key and long head) at every step. When a head's query moves
//! little from one token to the next, so do the pages it needs (TokenSelect's selection cache
//! rests on this). [`ReusePages`] wraps a selecting criterion: the gate still decides at
//! every step, and a group whose choice is at most `max_steps` steps old, and whose long
//! heads' queries each pass two guards against the query the pages were chosen for,
//!
//! - the cosine: `q_t . q_c / (|q_t| |q_c|) >= min_cosine`;
//! - the drift: `delta = |scale| sum_j |q_t,j - q_c,j| (max_i k_ij - min_i k_ij) <= max_drift`,
//!   the most the scores of two bulk keys can move against each other, so that every set of
//!   pages keeps its share of the bulk's mass within a factor `e^delta` (a certified guard);
//!
//! reads the chosen pages again, each for the heads it was chosen for, plus every page the
//! bulk gained since the choice (keys that left the window) for every long head. Otherwise it
//! chooses afresh and remembers the choice ([`ChoiceMemory`], one per layer and KV group,
//! kept in [`crate::LayerScratch`]).

use qada_stats::{BulkSummaries, PageBounds};

use crate::selection::{GroupRead, PageSelection};
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// When a page choice may be read again: at most `max_steps` steps after it was made, and
/// while every long head's query keeps a cosine of at least `min_cosine` with its query then
/// and drifted by at most `max_drift` nats (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reuse {
    max_steps: u32,
    min_cosine: f64,
    max_drift: f64,
}

impl Reuse {
    /// A choice read again for up to `max_steps` further steps (0: never), while each long
    /// head's query keeps a cosine of at least `min_cosine` (in [-1, 1]; -1: any) and drifts
    /// by at most `max_drift` nats (0 or more; infinity: any).
    ///
    /// # Errors
    /// [`CoreError::InvalidParameter`] for a cosine outside [-1, 1], or a negative drift, or
    /// NaN.
    pub fn new(max_steps: u32, min_cosine: f64, max_drift: f64) -> Result<Self> {
        if !(-1.0..=1.0).contains(&min_cosine) {
            return Err(CoreError::InvalidParameter {
                what: "the smallest query cosine at which a page choice is read again",
                expected: "a number in [-1, 1] (0.95: a query that turned by under 18 degrees)",
                found: min_cosine,
            });
        }
        if max_drift.is_nan() || max_drift < 0.0 {
            return Err(CoreError::InvalidParameter {
                what: "the largest query drift, in nats of score spread, at which a page \
                       choice is read again",
                expected: "0 or more (0.5: every page keeps its share of the bulk's mass \
                           within a factor e^0.5)",
                found: max_drift,
            });
        }
        Ok(Reuse {
            max_steps,
            min_cosine,
            max_drift,
        })
    }

    /// Steps after a choice at which it may still be read.
    pub fn max_steps(&self) -> u32 {
        self.max_steps
    }

    /// The smallest cosine between a head's query and the one its pages were chosen for.
    pub fn min_cosine(&self) -> f64 {
        self.min_cosine
    }

    /// The largest drift, in nats, at which a choice is read again.
    pub fn max_drift(&self) -> f64 {
        self.max_drift
    }

    /// Whether a head whose query went from `then` to `now` may read its pages again, with
    /// the bulk's channel spreads from `pages`.
    fn allows(&self, now: &[f32], then: &[f32], scale: f32, pages: &PageBounds) -> bool {
        (self.min_cosine <= -1.0 || cosine(now, then) >= self.min_cosine)
            && (self.max_drift == f64::INFINITY || drift(now, then, scale, pages) <= self.max_drift)
    }
}

/// A selecting criterion whose page choices are read again while they fit ([`Reuse`]). Every
/// method forwards to the inner criterion; [`LocalityCriterion::reuse`] says how, and
/// [`crate::attend_layer`] keeps the choices.
#[derive(Clone, Debug)]
pub struct ReusePages<C> {
    inner: C,
    reuse: Reuse,
    name: String,
}

impl<C: LocalityCriterion> ReusePages<C> {
    /// `inner`, its page choices reused as `reuse` says.
    pub fn new(inner: C, reuse: Reuse) -> Self {
        let name = format!("{}+reuse{}", inner.name(), reuse.max_steps);
        ReusePages { inner, reuse, name }
    }

    /// The criterion whose choices are reused.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: LocalityCriterion> LocalityCriterion for ReusePages<C> {
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        self.inner.decide(input)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        self.inner.decision_cost(d, bulk_len, context)
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        self.inner.bulk_summaries()
    }
    fn tau(&self) -> Option<Tau> {
        self.inner.tau()
    }
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        self.inner.decide_group(inputs, out)
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.inner.choose_pages(inputs, out, selection)
    }
    fn select_group(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        self.inner.select_group(inputs, out, selection)
    }
    fn reuse(&self) -> Option<Reuse> {
        Some(self.reuse)
    }
}

/// One layer's and KV group's last page choice: the pages and their heads, the queries they
/// were chosen for, and the bulk's length then (a decoding step adds one key to the bulk, so
/// its growth counts the steps since).
#[derive(Clone, Debug, Default)]
pub struct ChoiceMemory {
    valid: bool,
    page: usize,
    bulk_len: usize,
    /// Heads the gate called long at the choice, and those of them that kept pages.
    gate_long: u64,
    long: u64,
    /// The group's queries at the choice (`group x d`; rows of heads not in `gate_long` unused).
    queries: Vec<f32>,
    pages: Vec<u32>,
    masks: Vec<u64>,
}

impl ChoiceMemory {
    /// Room for `group` heads of dimension `d` and `max_pages` pages, so that remembering a
    /// choice allocates nothing.
    pub(crate) fn with_capacity(group: usize, d: usize, max_pages: usize) -> Self {
        ChoiceMemory {
            queries: Vec::with_capacity(group * d),
            pages: Vec::with_capacity(max_pages),
            masks: Vec::with_capacity(max_pages),
            ..Default::default()
        }
    }

    /// Forget the choice: the next step chooses afresh.
    pub(crate) fn forget(&mut self) {
        self.valid = false;
    }

    /// Whether the choice may be read for a step whose gate called `gate_long` long: made 1 to
    /// `max_steps` steps (keys) ago on this bulk, every head long now was long then, and
    /// each one's query within both guards of its query then (no page summaries to bound
    /// the drift: never).
    fn fits(&self, reuse: Reuse, inputs: &[HeadInput<'_>], gate_long: u64) -> bool {
        let bulk = inputs[0].bulk_len;
        let later = self.bulk_len + 1..=self.bulk_len + reuse.max_steps as usize;
        if !self.valid || !later.contains(&bulk) || gate_long & !self.gate_long != 0 {
            return false;
        }
        let Some(pages) = inputs[0].bulk_pages else {
            return false;
        };
        let d = inputs[0].query.len();
        self.queries.len() == inputs.len() * d
            && pages.dim() == d
            && inputs.iter().enumerate().all(|(j, input)| {
                let then = &self.queries[j * d..(j + 1) * d];
                gate_long & (1 << j) == 0 || reuse.allows(input.query, then, input.scale, pages)
            })
    }

    /// Write the remembered pages into `selection` for the heads long now that kept pages at
    /// the choice, and every page from the one that was partial at the choice to the bulk's
    /// end for all of them; a head long now that kept no page then stays local.
    fn replay(
        &mut self,
        bulk_len: usize,
        gate_long: u64,
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        let long = gate_long & self.long;
        for (j, o) in out.iter_mut().enumerate() {
            if gate_long & (1 << j) != 0 && long & (1 << j) == 0 {
                o.local = true;
            }
        }
        selection.clear(self.page);
        if long == 0 {
            return Ok(GroupRead::Local);
        }
        selection.mark_reused();
        let first_new = self.bulk_len / self.page;
        let n_pages = bulk_len.div_ceil(self.page);
        let mut all = true;
        let mut next = 0;
        for (&p, &m) in self.pages.iter().zip(&self.masks) {
            let p = p as usize;
            if p >= first_new {
                break;
            }
            all &= p == next && m & long == long;
            next = p + 1;
            selection.push(p, m & long)?;
        }
        all &= next == first_new;
        for p in first_new..n_pages {
            selection.push(p, long)?;
        }
        // the guards: a cosine (three products) and a drift (a difference, a product and a
        // sum) per channel and long head
        let d = self.queries.len() / out.len().max(1);
        selection.add_cost(0, 9 * (long.count_ones() as u64) * d as u64);
        Ok(if all {
            GroupRead::Full
        } else if selection.is_empty() {
            GroupRead::Local
        } else {
            GroupRead::Selected
        })
    }

    /// Keep a fresh choice: `read` of the criterion, the pages in `selection`, the decisions
    /// `out` after it, for the heads the gate called `gate_long`. Only a selection of pages
    /// is kept; any other read forgets.
    fn remember(
        &mut self,
        read: GroupRead,
        inputs: &[HeadInput<'_>],
        gate_long: u64,
        out: &[Decision],
        selection: &PageSelection,
    ) {
        if read != GroupRead::Selected || selection.page_size() == 0 {
            self.valid = false;
            return;
        }
        self.valid = true;
        self.page = selection.page_size();
        self.bulk_len = inputs[0].bulk_len;
        self.gate_long = gate_long;
        self.long = out
            .iter()
            .enumerate()
            .filter(|(j, o)| gate_long & (1 << j) != 0 && !o.local)
            .fold(0, |m, (j, _)| m | (1 << j));
        self.queries.clear();
        for input in inputs {
            self.queries.extend_from_slice(input.query);
        }
        self.pages.clear();
        self.masks.clear();
        for (p, m) in selection.pages() {
            self.pages.push(p as u32);
            self.masks.push(m);
        }
    }
}

/// `a . b / (|a| |b|)` in f64; 0 when either is zero.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// `delta = |scale| sum_c |q_c - p_c| spread_c`, in f64: the most the score of one bulk key
/// can move against another's when the query goes from `p` to `q` (`spread_c`: channel
/// `c`'s largest minus smallest value over the bulk). Infinite where a spread is unknown or
/// NaN.
fn drift(q: &[f32], p: &[f32], scale: f32, pages: &PageBounds) -> f64 {
    let mut delta = 0.0f64;
    for (c, (&x, &y)) in q.iter().zip(p).enumerate() {
        // the half range, doubled
        let spread = pages
            .channel_spread(c)
            .map_or(f64::NAN, |h| 2.0 * f64::from(h));
        delta += (f64::from(x) - f64::from(y)).abs() * spread;
    }
    let delta = delta * f64::from(scale).abs();
    if delta.is_nan() {
        f64::INFINITY
    } else {
        delta
    }
}

/// One group's step under `reuse`: the gate decides; where every head is local nothing is
/// read; where the remembered choice fits, it is read again; otherwise the criterion
/// chooses and the choice is remembered.
pub(crate) fn select_group_reusing<C: LocalityCriterion + ?Sized>(
    criterion: &C,
    reuse: Reuse,
    inputs: &[HeadInput<'_>],
    out: &mut [Decision],
    selection: &mut PageSelection,
    memory: &mut ChoiceMemory,
) -> Result<GroupRead> {
    selection.clear(0);
    if !criterion.decide_group(inputs, out)? {
        return Ok(GroupRead::Local);
    }
    let gate_long = out
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.local)
        .fold(0u64, |m, (j, _)| m | (1 << j));
    if inputs.len() <= 64 && memory.fits(reuse, inputs, gate_long) {
        return memory.replay(inputs[0].bulk_len, gate_long, out, selection);
    }
    let read = criterion.choose_pages(inputs, out, selection)?;
    memory.remember(read, inputs, gate_long, out, selection);
    Ok(read)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;
    use qada_stats::{KeyMoments, Rows};

    use super::*;

    const PAGE: usize = 4;
    const D: usize = 3;

    /// A selecting criterion for tests: head `j` is long when its query's first coordinate
    /// is positive and reads the pages `p` with `(p + j + salt) % 3 == 0`, `salt` the query's
    /// second coordinate rounded: every page choice depends on the query. Counts its choices.
    #[derive(Default)]
    struct Thirds {
        choices: AtomicUsize,
    }

    impl LocalityCriterion for Thirds {
        fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
            Ok(if input.query[0] > 0.0 {
                Decision::LONG
            } else {
                Decision::LOCAL
            })
        }
        fn choose_pages(
            &self,
            inputs: &[HeadInput<'_>],
            out: &mut [Decision],
            selection: &mut PageSelection,
        ) -> Result<GroupRead> {
            self.choices.fetch_add(1, Ordering::Relaxed);
            selection.clear(PAGE);
            for p in 0..inputs[0].bulk_len.div_ceil(PAGE) {
                let mut mask = 0u64;
                for (j, (input, o)) in inputs.iter().zip(out.iter()).enumerate() {
                    let salt = input.query[1].round().rem_euclid(3.0) as usize;
                    if !o.local && (p + j + salt).is_multiple_of(3) {
                        mask |= 1 << j;
                    }
                }
                selection.push(p, mask)?;
            }
            Ok(GroupRead::Selected)
        }
    }

    /// Page summaries whose channels spread over 4, 2 and 6 (the drift's weights).
    fn bounds() -> PageBounds {
        let mut b = PageBounds::new(D, PAGE).unwrap();
        for i in 0..12 {
            let x = i as f32;
            b.push(&[(x % 5.0) - 2.0, -(x % 3.0), 3.0 * (x % 3.0) - 3.0])
                .unwrap();
        }
        b
    }

    fn inputs<'a>(
        queries: &'a [[f32; D]],
        bulk_len: usize,
        m: &'a KeyMoments,
        pages: &'a PageBounds,
    ) -> Vec<HeadInput<'a>> {
        queries
            .iter()
            .enumerate()
            .map(|(h, q)| HeadInput {
                layer: 0,
                head: h,
                query: q,
                scale: 1.0,
                local_scores: &[0.0],
                bulk_len,
                bulk_moments: m,
                bulk_keys: Rows::F32(&[]),
                bulk_pages: Some(pages),
                bulk_clusters: None,
            })
            .collect()
    }

    type Chosen = (usize, Vec<[f32; D]>, Vec<(usize, u64)>, u64);

    fn pages(sel: &PageSelection) -> Vec<(usize, u64)> {
        sel.pages().collect()
    }

    /// One step: the group's queries (heads long where the first coordinate is positive).
    fn step() -> impl Strategy<Value = Vec<[f32; D]>> {
        prop::collection::vec(
            prop::array::uniform3(prop_oneof![Just(0.0f32), -4.0f32..4.0]),
            3,
        )
    }

    proptest! {
        /// Reused for 0 steps, the wrapper is the criterion: the same reads, pages and
        /// decisions at every step, and a choice at every step with a long head.
        #[test]
        fn reused_for_no_step_every_step_chooses_as_the_criterion(
            steps in prop::collection::vec(step(), 1..12),
        ) {
            let (m, pb) = (KeyMoments::new(D), bounds());
            let (plain, reused) = (Thirds::default(), Thirds::default());
            let reuse = Reuse::new(0, -1.0, f64::INFINITY).unwrap();
            let mut memory = ChoiceMemory::default();
            let (mut a, mut b) = (PageSelection::new(), PageSelection::new());
            for (t, queries) in steps.iter().enumerate() {
                let inputs = inputs(queries, 20 + t, &m, &pb);
                let (mut out_a, mut out_b) = ([Decision::LONG; 3], [Decision::LONG; 3]);
                let read_a = plain.select_group(&inputs, &mut out_a, &mut a).unwrap();
                let read_b = select_group_reusing(
                    &reused, reuse, &inputs, &mut out_b, &mut b, &mut memory,
                ).unwrap();
                prop_assert_eq!(read_a, read_b);
                prop_assert_eq!(out_a, out_b);
                prop_assert_eq!(pages(&a), pages(&b));
            }
            prop_assert_eq!(
                plain.choices.load(Ordering::Relaxed),
                reused.choices.load(Ordering::Relaxed)
            );
        }

        /// A step that reads a remembered choice reads, for each head long now, the pages
        /// chosen for it then and every page from the one partial at the choice to the end;
        /// no other page, no head the gate calls local, and never where a long head's query
        /// turned past `min_cosine` or drifted past `max_drift`, or more than `max_steps`
        /// steps after the choice.
        #[test]
        fn a_reused_choice_reads_its_pages_and_every_page_gained_since(
            steps in prop::collection::vec(step(), 1..16),
            max_steps in 1u32..5,
            min_cosine in -1.0f64..1.0,
            max_drift in prop_oneof![Just(f64::INFINITY), 0.0f64..12.0],
        ) {
            let (m, pb) = (KeyMoments::new(D), bounds());
            let c = Thirds::default();
            let reuse = Reuse::new(max_steps, min_cosine, max_drift).unwrap();
            let mut memory = ChoiceMemory::default();
            let mut sel = PageSelection::new();
            let mut fresh = PageSelection::new();
            // the last fresh choice: bulk, queries, pages, heads that kept pages
            let mut chosen: Option<Chosen> = None;
            let mut since = 0u32;
            for (t, queries) in steps.iter().enumerate() {
                let bulk = 9 + t;
                let inputs = inputs(queries, bulk, &m, &pb);
                let before = c.choices.load(Ordering::Relaxed);
                let mut out = [Decision::LONG; 3];
                let read = select_group_reusing(&c, reuse, &inputs, &mut out, &mut sel, &mut memory)
                    .unwrap();
                let gate_long = (0..3).filter(|&j| queries[j][0] > 0.0).fold(0u64, |m, j| m | 1 << j);
                if gate_long == 0 {
                    prop_assert_eq!(read, GroupRead::Local);
                    continue;
                }
                if c.choices.load(Ordering::Relaxed) > before {
                    // chosen afresh: as the criterion chooses
                    let mut o = [Decision::LONG; 3];
                    c.select_group(&inputs, &mut o, &mut fresh).unwrap();
                    prop_assert_eq!(pages(&sel), pages(&fresh));
                    let long = (0..3).filter(|&j| !out[j].local).fold(0u64, |m, j| m | 1 << j);
                    chosen = Some((bulk, queries.clone(), pages(&sel), long));
                    since = 0;
                    continue;
                }
                // read again: the choice fits
                let (bulk0, q0, pages0, long0) = chosen.clone().expect("a choice to reuse");
                since += 1;
                prop_assert!(since <= max_steps);
                prop_assert_eq!(gate_long & !0b111, 0);
                for j in 0..3 {
                    if gate_long & (1 << j) != 0 {
                        prop_assert!(cosine(&queries[j], &q0[j]) >= min_cosine);
                        prop_assert!(drift(&queries[j], &q0[j], 1.0, &pb) <= max_drift);
                    }
                }
                let long = gate_long & long0;
                let first_new = bulk0 / PAGE;
                let mut expected: Vec<(usize, u64)> = pages0
                    .iter()
                    .filter(|&&(p, m)| p < first_new && m & long != 0)
                    .map(|&(p, m)| (p, m & long))
                    .collect();
                if long != 0 {
                    expected.extend((first_new..bulk.div_ceil(PAGE)).map(|p| (p, long)));
                }
                if read == GroupRead::Selected {
                    prop_assert_eq!(pages(&sel), expected);
                } else {
                    prop_assert!(read == GroupRead::Full || long == 0);
                }
                for (j, o) in out.iter().enumerate() {
                    prop_assert_eq!(o.local, long & (1 << j) == 0);
                }
            }
        }
    }

    #[test]
    fn a_forgotten_choice_is_made_again_and_guards_out_of_range_are_refused() {
        let (m, pb) = (KeyMoments::new(D), bounds());
        let c = Thirds::default();
        let reuse = Reuse::new(4, 0.5, f64::INFINITY).unwrap();
        assert_eq!(
            drift(&[1.0, 1.0, 0.0], &[0.0, 0.0, 0.5], 0.5, &pb),
            0.5 * (4.0 + 2.0 + 3.0)
        );
        let mut memory = ChoiceMemory::default();
        let mut sel = PageSelection::new();
        let q = [[1.0, 0.0, 0.0]; 3];
        // one step at a bulk of `bulk` keys; the criterion's choices so far
        let mut step = |bulk: usize, memory: &mut ChoiceMemory| {
            let mut out = [Decision::LONG; 3];
            let inputs = inputs(&q, bulk, &m, &pb);
            select_group_reusing(&c, reuse, &inputs, &mut out, &mut sel, memory).unwrap();
            c.choices.load(Ordering::Relaxed)
        };
        assert_eq!((step(20, &mut memory), step(21, &mut memory)), (1, 1));
        memory.forget();
        assert_eq!(step(22, &mut memory), 2);
        // a bulk that shrank (another sequence) is chosen for afresh
        assert_eq!(step(10, &mut memory), 3);
        for bad in [-0.1, f64::NAN] {
            assert!(Reuse::new(4, 0.5, bad).is_err(), "{bad}");
        }
        for bad in [1.5, -1.01, f64::NAN] {
            assert!(Reuse::new(4, bad, 1.0).is_err(), "{bad}");
        }
        let named = ReusePages::new(Thirds::default(), reuse);
        assert_eq!(named.name(), "custom+reuse4");
        assert_eq!((&named as &dyn LocalityCriterion).reuse(), Some(reuse));
    }
}
