//! Pages: a gate criterion first (QAdA by default), then, for a group the gate calls
//! long-context, only the pages of the bulk that hold its mass.
//!
//! The bulk in pages of `P` keys, each with its summaries ([`PageBounds`]). Per long head and
//! page, one of three rules ([`PageRule`]):
//!
//! - **`Estimate`** (top-p): the page's diagonal Gaussian
//!   `ln A_p_hat = min(ln n_p + scale q . mu_p + scale^2 (q * q) . v_p / 2, ln n_p + u_p)`
//!   (never above the bound `u_p` below), scaled so that they sum to the gate's estimate of
//!   the whole bulk (QAdA's, from the full covariance); pages are left out in the order of
//!   their bound, lowest first, while their summed estimate stays within `(1 - tau)` of the
//!   estimated total `A_local + A_bulk_hat`.
//! - **`Certified`**: the page bound `u_p = scale (q . c_p + |q| . r_p)` (Quest's, from the
//!   page's center `c` and radius `r`) and the lower bound `l_p = scale (q . c_p - |q| . r_p)`,
//!   both widened by the kernels' rounding; pages are left out in order of `u_p` while
//!   `U / (A_local + L + U) <= 1 - tau`, `U` the left-out pages' `sum n_p exp(u_p)` and `L` the
//!   kept pages' `sum n_p exp(l_p)`. Since `x / (c + x)` grows with `x` and falls with `c`,
//!   the share of the softmax mass left out is at most `1 - tau`, proven.
//! - **`TopK(k)`** (Quest): the `k` pages of largest `u_p`, no threshold.
//! - **`Exact`** (the oracle of selection): each page's exact mass `ln sum_{i in p} e^{s_i}`
//!   from all the bulk keys, left out from the smallest while their sum stays within
//!   `1 - tau` of the exact total. It reads every key, so it saves nothing: it is the
//!   ceiling of top-p selection at pages of `P`, what a perfect page estimate would choose,
//!   and counts (as the oracle's decision does) only the bytes of the pages it chooses.
//! - **`Channels(r)`**: each key's score from the `r` channels of largest
//!   `(sum_h |q_hj|) (max k_j - min k_j) / 2` (one set per group; Double Sparsity's label
//!   channels, chosen per query; the range, not `max |k_j|`, so that a channel whose large
//!   value every key shares is not chosen: it ranks no page above another), each page's other channels as its diagonal Gaussian:
//!   `ln A_p_hat = lse_{i in p}(scale q_R . k_iR) + scale q_R' . mu_p + scale^2 q_R'^2 . v_p / 2`;
//!   top-p by it against the total `A_local + sum_p A_p_hat`. It reads `r` columns of the
//!   cache's copy of the bulk keys by channel, 8-bit codes with a scale per page and channel
//!   ([`qada_stats::ChannelKeys`]: `r / 2d` of the f16 keys' bytes; whole key rows where no
//!   copy is kept).
//!
//! The pages are left out in bins of `exp(x - max x)`, eight per octave (no sort): the
//! bin where the budget runs out is kept whole, so a rule reads at most one bin more than a
//! sort would and never drops more than its budget.
//!
//! The group reads the union of its long heads' pages; each head computes over its own
//! ([`HeadPages::Own`]), or over the whole union ([`HeadPages::Union`]: the same bytes, more
//! of each head's mass, more multiply-adds).
//! The heads choose in turn, and a page an earlier head chose ranks [`SHARED_PAGE_WEIGHT`]
//! times its mass in a later head's order (its bytes are read anyway): the same budget per
//! head, from fewer pages for the group.
//! Behind no gate (dense's decisions, every head long) a rule is its own gate: a head whose
//! window already holds `tau` of the estimated total keeps no page and is local.

use qada_stats::{f16, BulkSummaries, ChannelColumn, PageBounds};

use crate::attention::{
    column_page_masses_in_halves, exp_in_place, max_score, scores, Elem, MAX_SPLIT_COLUMNS,
};
use crate::criteria::bound::{checked_pages, F32_ROUNDING};
use crate::lse::lse;
use crate::selection::{GroupRead, PageSelection, SelectScratch};
use crate::{CoreError, Decision, DecisionCost, HeadInput, LocalityCriterion, Result, Tau};

/// Keys per page of the selection: 32 f16 keys and values of `d = 64` are 8 KiB, whose two
/// summary rows (f32) are 512 bytes.
pub const DEFAULT_SELECT_PAGE: usize = 32;

/// How a long head's pages are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageRule {
    /// Top-p over each page's Gaussian estimate of its mass.
    Estimate,
    /// Left out only while the page bounds prove the left-out share below `1 - tau`.
    Certified,
    /// Quest: the `k` pages of largest bound.
    TopK(usize),
    /// Top-p over each page's exact mass, from every bulk key (a ceiling, not a saving).
    Exact,
    /// Top-p over each page's mass from the keys' scores in the group's `r` channels of
    /// largest `|q| max |k|`, the rest of the page as its diagonal Gaussian.
    Channels(usize),
}

/// What each long head of a selecting group computes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadPages {
    /// The pages it chose itself (the group reads their union).
    Own,
    /// The union of the pages its group's long heads chose: the bytes the group reads
    /// anyway, and each head's share of its own mass at least what it chose.
    Union,
}

/// A gate criterion, then page selection for the groups it calls long-context.
#[derive(Clone, Debug)]
pub struct Pages<C> {
    gate: C,
    tau: Tau,
    page: usize,
    rule: PageRule,
    heads: HeadPages,
}

impl PageRule {
    /// The criterion's name with this rule: `pages`, `certified`, `quest` or
    /// `pages-oracle`.
    pub fn name(self) -> &'static str {
        match self {
            PageRule::Estimate => "pages",
            PageRule::Certified => "certified",
            PageRule::TopK(_) => "quest",
            PageRule::Exact => "pages-oracle",
            PageRule::Channels(_) => "channels",
        }
    }
}

impl<C: LocalityCriterion> Pages<C> {
    /// `gate` first, then pages of `page` keys chosen by `rule` at threshold `tau`.
    ///
    /// # Errors
    /// [`CoreError::InvalidParameter`] for a page of 0 keys or `TopK(0)`;
    /// [`CoreError::InvalidTau`] for `tau` outside (0, 1].
    pub fn new(gate: C, tau: f64, page: usize, rule: PageRule) -> Result<Self> {
        if page == 0 {
            return Err(CoreError::InvalidParameter {
                what: "the page size of page selection (keys per page)",
                expected: "at least 1",
                found: 0.0,
            });
        }
        if rule == PageRule::Channels(0) {
            return Err(CoreError::InvalidParameter {
                what: "the channels page selection scores keys with",
                expected: "at least 1",
                found: 0.0,
            });
        }
        if rule == PageRule::TopK(0) {
            return Err(CoreError::InvalidParameter {
                what: "the pages Quest keeps per head",
                expected: "at least 1",
                found: 0.0,
            });
        }
        Ok(Pages {
            gate,
            tau: Tau::new(tau)?,
            page,
            rule,
            heads: HeadPages::Own,
        })
    }
    /// The same selection, each long head computing over `heads`' pages (by default its
    /// own).
    pub fn computing_over(self, heads: HeadPages) -> Self {
        Pages { heads, ..self }
    }
    /// What each long head computes over.
    pub fn heads(&self) -> HeadPages {
        self.heads
    }
    /// The gate.
    pub fn gate(&self) -> &C {
        &self.gate
    }
    /// Keys per page.
    pub fn page(&self) -> usize {
        self.page
    }
    /// The rule.
    pub fn rule(&self) -> PageRule {
        self.rule
    }
}

impl<C: LocalityCriterion> LocalityCriterion for Pages<C> {
    /// Per head, the gate's decision (selection happens per group).
    fn decide(&self, input: &HeadInput<'_>) -> Result<Decision> {
        self.gate.decide(input)
    }
    /// The rule's name; `channels-ungated` for the channel rule behind no gate (dense's
    /// decisions: every head scored, the estimate its own gate); `-union` after it where
    /// each head computes over its group's union.
    fn name(&self) -> &str {
        let ungated = self.gate.name() == "dense";
        match (self.rule, self.heads) {
            (PageRule::Channels(_), HeadPages::Own) if ungated => "channels-ungated",
            (PageRule::Channels(_), HeadPages::Union) if ungated => "channels-ungated-union",
            (rule, HeadPages::Own) => rule.name(),
            (PageRule::Estimate, HeadPages::Union) => "pages-union",
            (PageRule::Certified, HeadPages::Union) => "certified-union",
            (PageRule::TopK(_), HeadPages::Union) => "quest-union",
            (PageRule::Exact, HeadPages::Union) => "pages-oracle-union",
            (PageRule::Channels(_), HeadPages::Union) => "channels-union",
        }
    }
    /// The gate's (the page choice's cost is added per group, as it reads: `add_cost`).
    fn decision_cost(&self, d: usize, bulk_len: usize, context: usize) -> DecisionCost {
        self.gate.decision_cost(d, bulk_len, context)
    }
    fn bulk_summaries(&self) -> BulkSummaries {
        BulkSummaries {
            page: Some(self.page),
            channel_keys: matches!(self.rule, PageRule::Channels(_)),
            ..self.gate.bulk_summaries()
        }
    }
    fn tau(&self) -> Option<Tau> {
        Some(self.tau)
    }
    fn decide_group(&self, inputs: &[HeadInput<'_>], out: &mut [Decision]) -> Result<bool> {
        self.gate.decide_group(inputs, out)
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> Result<GroupRead> {
        selection.clear(self.page);
        let Some(first) = inputs.first() else {
            return Ok(GroupRead::Local);
        };
        if first.bulk_len == 0 || out.iter().all(|o| o.local) {
            return Ok(GroupRead::Local);
        }
        if inputs.len() > 64 || out.len() != inputs.len() {
            return Err(CoreError::DimensionMismatch {
                what: "query heads of a group that selects pages (at most 64, one decision each)",
                expected: inputs.len().min(64),
                found: out.len(),
            });
        }
        let pages = self.pages_of(first)?;
        for input in &inputs[1..] {
            if !std::ptr::eq(self.pages_of(input)?, pages) {
                return Err(CoreError::DimensionMismatch {
                    what: "page summaries of one group (one KV head's)",
                    expected: 1,
                    found: 2,
                });
            }
        }
        if matches!(self.rule, PageRule::TopK(k) if k >= pages.n_pages()) {
            // Quest's budget covers the bulk: nothing to score
            return Ok(GroupRead::Full);
        }
        if self.tau.get() >= 1.0 && !matches!(self.rule, PageRule::TopK(_)) {
            // tau 1 leaves no mass out: every long head reads the whole bulk, nothing scored
            return Ok(GroupRead::Full);
        }
        let long = select_pages(self.rule, self.tau, inputs, out, pages, selection)?;
        push_chosen(selection, out, long, self.heads)
    }
}

impl<C> Pages<C> {
    /// The page summaries of `input`, checked as the bound checks them (key length, keys
    /// held), and for this criterion's page size.
    fn pages_of<'a>(&self, input: &HeadInput<'a>) -> Result<&'a PageBounds> {
        let pages = checked_pages(input, self.rule.name())?;
        if pages.page_size() != self.page {
            return Err(CoreError::DimensionMismatch {
                what: "page summaries: keys per page",
                expected: self.page,
                found: pages.page_size(),
            });
        }
        Ok(pages)
    }
}

/// Score the pages for the group's long heads and mark each head's in `selection.scratch`'s
/// `chosen`: the long heads' queries as the rule reads them, the summaries' block products for
/// all of them at once, then each head's pages and the cost. Returns the long heads' bits.
fn select_pages(
    rule: PageRule,
    tau: Tau,
    inputs: &[HeadInput<'_>],
    out: &mut [Decision],
    pages: &PageBounds,
    selection: &mut PageSelection,
) -> Result<u64> {
    let n_pages = pages.n_pages();
    let long: u64 = out
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.local)
        .fold(0, |m, (j, _)| m | (1 << j));
    let n_long = long.count_ones() as usize;
    let s: &mut SelectScratch = &mut selection.scratch;
    group_queries(rule, inputs, long, pages, s);
    let scoring = Scoring {
        rule,
        tau,
        pages,
        by_channel: summary_products(rule, pages, inputs[0].scale, n_long, s)?,
    };
    s.chosen.clear();
    s.chosen.resize(n_pages, 0);
    for v in [&mut s.w_order, &mut s.w_mass, &mut s.w_lower] {
        v.resize(n_pages, 0.0);
    }
    let long_heads = inputs
        .iter()
        .enumerate()
        .filter(|(j, _)| long & (1 << j) != 0);
    for (k, (j, input)) in long_heads.enumerate() {
        scoring.choose_for_head(input, out[j], j, k, s);
    }
    scoring.add_cost(&inputs[0], n_long, selection);
    Ok(long)
}

/// The long heads' queries, contiguous, as the rule reads them: whole (and their magnitudes,
/// and squares for the estimate); for the channel rule, the channels' part apart from the
/// rest (and the rest's squares).
fn group_queries(
    rule: PageRule,
    inputs: &[HeadInput<'_>],
    long: u64,
    pages: &PageBounds,
    s: &mut SelectScratch,
) {
    let d = pages.dim();
    s.queries.clear();
    s.queries_abs.clear();
    s.queries2.clear();
    s.queries_sparse.clear();
    if let PageRule::Channels(r) = rule {
        group_channels(
            inputs,
            long,
            pages,
            r,
            &mut s.channel_weight,
            &mut s.channel,
        );
    }
    for (j, input) in inputs.iter().enumerate() {
        if long & (1 << j) == 0 {
            continue;
        }
        match rule {
            PageRule::Channels(_) => {
                // the channels' part of the query scores the keys, the rest the page means
                // and variances
                let at = s.queries.len();
                s.queries_sparse.resize(at + d, 0.0);
                s.queries.extend_from_slice(input.query);
                for &c in &s.channel {
                    let c = c as usize;
                    s.queries_sparse[at + c] = input.query[c];
                    s.queries[at + c] = 0.0;
                }
                let rest = &s.queries[at..];
                s.queries2.extend(rest.iter().map(|q| q * q));
            }
            _ => {
                s.queries.extend_from_slice(input.query);
                s.queries_abs.extend(input.query.iter().map(|q| q.abs()));
                if rule == PageRule::Estimate {
                    s.queries2.extend(input.query.iter().map(|q| q * q));
                }
            }
        }
    }
}

/// Block products of the long heads' queries with the page summaries, each summary row read
/// once for all heads: the bound from centers and radii (`a`, `b`: all rules but the exact one
/// and the channels'); the Gaussian estimate from means and variances (`c`, `e`: the estimate,
/// and the channels' rest); and the channel rule's page masses from the copy by channel when
/// the cache keeps one. Returns whether it did the last.
fn summary_products(
    rule: PageRule,
    pages: &PageBounds,
    scale: f32,
    n_long: usize,
    s: &mut SelectScratch,
) -> Result<bool> {
    let d = pages.dim();
    for v in [&mut s.a, &mut s.b, &mut s.c, &mut s.e] {
        v.resize(n_long * pages.n_pages(), 0.0);
    }
    if matches!(
        rule,
        PageRule::Estimate | PageRule::Certified | PageRule::TopK(_)
    ) {
        f16::block_scores(&s.queries, pages.centers(), d, scale, &mut s.a)?;
        f16::block_scores(&s.queries_abs, pages.radii(), d, scale.abs(), &mut s.b)?;
    }
    if matches!(rule, PageRule::Estimate | PageRule::Channels(_)) {
        f16::block_scores(&s.queries, pages.means(), d, scale, &mut s.c)?;
        let half_sq = 0.5 * scale * scale;
        f16::block_scores(&s.queries2, pages.variances(), d, half_sq, &mut s.e)?;
    }
    // each chosen column read once for the group, page by page
    let by_channel = matches!(rule, PageRule::Channels(_))
        && s.channel.len() <= MAX_COLUMNS
        && pages
            .channel_keys()
            .is_some_and(|k| s.channel.iter().all(|&c| (c as usize) < k.dim()));
    if by_channel {
        channel_masses(pages, d, scale, n_long, s)?;
    }
    Ok(by_channel)
}

/// What one group's page choice reads by: the rule, `tau`, the summaries, and whether the
/// channel rule's masses came from the copy by channel.
struct Scoring<'p> {
    rule: PageRule,
    tau: Tau,
    pages: &'p PageBounds,
    by_channel: bool,
}

impl Scoring<'_> {
    /// The `k`-th long head's pages (bit `j` of the group): its page masses as the rule
    /// estimates them, and the pages kept until what is left out is below `1 - tau`, marked
    /// in `s.chosen`.
    fn choose_for_head(
        &self,
        input: &HeadInput<'_>,
        decision: Decision,
        j: usize,
        k: usize,
        s: &mut SelectScratch,
    ) {
        let (pages, rule, tau) = (self.pages, self.rule, self.tau);
        let n_pages = pages.n_pages();
        // ln n_p: every page full but the last
        let ln_full = (pages.page_size() as f32).ln();
        let ln_last = (pages.page_len(n_pages - 1) as f32).ln();
        let ln_n = |p: usize| if p + 1 == n_pages { ln_last } else { ln_full };
        let at = k * n_pages..(k + 1) * n_pages;
        let (a, b) = (&s.a[at.clone()], &s.b[at.clone()]);
        let log_local = lse(input.local_scores);
        let bit = 1u64 << j;
        let (order, mass, lower) = (&mut s.w_order, &mut s.w_mass, &mut s.w_lower);
        match rule {
            PageRule::Estimate => {
                // ordered by the bound (a page with one outlier key ranks high), counted by
                // the estimate, never above the bound: the log-normal's `sigma^2 / 2` of a
                // page with a wide channel would otherwise inflate the total, and with it the
                // mass left out
                let (c, e) = (&s.c[at.clone()], &s.e[at]);
                for p in 0..n_pages {
                    order[p] = ln_n(p) + a[p] + b[p];
                    mass[p] = (ln_n(p) + c[p] + e[p]).min(order[p]);
                }
                // the pages' estimates share out the gate's estimate of the whole bulk (QAdA's
                // full covariance), so that the budget is that of the test the gate made
                if let Some(log_bulk) = gate_log_bulk(decision, log_local) {
                    let shift = (log_bulk - lse(mass)) as f32;
                    if shift.is_finite() {
                        mass.iter_mut().for_each(|m| *m += shift);
                    }
                }
                keep_shared_first(order, mass, None, log_local, tau, &mut s.chosen, bit);
            }
            PageRule::Certified => {
                let slack = rounding_slack(input.query, pages.dim(), input.scale);
                let abs_max = pages.abs_maxima();
                for p in 0..n_pages {
                    let widen = (slack * abs_max[p] as f64) as f32;
                    order[p] = ln_n(p) + a[p] + b[p] + widen;
                    lower[p] = ln_n(p) + a[p] - b[p] - widen;
                }
                mass.copy_from_slice(order);
                keep_shared_first(order, mass, Some(lower), log_local, tau, &mut s.chosen, bit);
            }
            PageRule::Exact | PageRule::Channels(_) => {
                if self.by_channel {
                    // every long head's masses, from the copy by channel
                    mass.copy_from_slice(&s.masses[at.clone()]);
                } else {
                    let d = pages.dim();
                    let q = if rule == PageRule::Exact {
                        input.query
                    } else {
                        &s.queries_sparse[k * d..(k + 1) * d]
                    };
                    scored_page_masses(q, input, pages.page_size(), &mut s.scores, mass);
                }
                if rule != PageRule::Exact {
                    // the rest of each page as its diagonal Gaussian
                    let (c, e) = (&s.c[at.clone()], &s.e[at]);
                    for (p, m) in mass.iter_mut().enumerate() {
                        *m += c[p] + e[p];
                    }
                }
                order.copy_from_slice(mass);
                keep_shared_first(order, mass, None, log_local, tau, &mut s.chosen, bit);
            }
            PageRule::TopK(top) => {
                if top >= n_pages {
                    s.chosen.iter_mut().for_each(|c| *c |= bit);
                    return;
                }
                for p in 0..n_pages {
                    // NaN first: never left out
                    let u = a[p] + b[p];
                    order[p] = if u.is_nan() { f32::INFINITY } else { u };
                }
                s.order.clear();
                s.order.extend(0..n_pages as u32);
                let key = |p: &u32| order[*p as usize];
                s.order
                    .select_nth_unstable_by(top - 1, |x, y| key(y).total_cmp(&key(x)));
                for &p in &s.order[..top] {
                    s.chosen[p as usize] |= bit;
                }
            }
        }
    }

    /// Bytes and FLOPs of the summary rows each page gives (f16, all long heads at once), and
    /// of the bulk keys the exact and channel rules score (row-major: whole rows are read).
    fn add_cost(&self, input: &HeadInput<'_>, n_long: usize, selection: &mut PageSelection) {
        let (d, n_pages, t) = (self.pages.dim(), self.pages.n_pages(), input.bulk_len);
        let (rows, keys) = match self.rule {
            PageRule::Estimate => (4, false),
            PageRule::Certified | PageRule::TopK(_) => (2, false),
            PageRule::Channels(_) => (2, true),
            PageRule::Exact => (0, true),
        };
        let mut bytes = (rows * 2 * d * n_pages) as u64;
        let mut flops = (rows * 2 * d * n_pages * n_long) as u64;
        if self.by_channel {
            // the chosen columns: a byte a key and an f32 scale a page
            let r = selection.scratch.channel.len();
            bytes += (r * t + 4 * r * n_pages) as u64;
            flops += (2 * r * t * n_long) as u64;
        } else if keys {
            flops += (2 * d * t * n_long) as u64;
            // as for the oracle's decision, the exact rule's keys are not counted: its bytes
            // are those of the pages it chooses, what a free and perfect estimate would read
            if self.rule != PageRule::Exact {
                bytes += input.bulk_keys.bytes() as u64;
            }
        }
        selection.add_cost(bytes, flops);
    }
}

/// `mass[p] = ln sum_{i in p} e^{s_i}` from every bulk key's score `s_i = scale q . k_i` (the
/// whole query, or the channels' part), summed per page in the log domain:
/// `m + ln sum e^{s_i - m}`, the exponentials in place (vectorized; a NaN score makes the
/// page's mass NaN, and every page kept).
fn scored_page_masses(
    q: &[f32],
    input: &HeadInput<'_>,
    page_size: usize,
    buf: &mut Vec<f32>,
    mass: &mut [f32],
) {
    let t = input.bulk_len;
    buf.resize(t, 0.0);
    scores(q, input.bulk_keys, input.scale, buf);
    for (m, page) in mass.iter_mut().zip(buf[..t].chunks_mut(page_size)) {
        let top = max_score(page, f32::NEG_INFINITY);
        *m = if top == f32::NEG_INFINITY {
            // max_score skips NaN: a page of NaN alone stays NaN
            page.iter().copied().find(|x| x.is_nan()).unwrap_or(top)
        } else {
            top + exp_in_place(page, top).ln()
        };
    }
}

/// The pages some long head chose (`selection.scratch`'s `chosen`, of the long heads whose
/// bits are `long`), into `selection`, each for the heads that chose it ([`HeadPages::Own`]) or for
/// every long head ([`HeadPages::Union`]); a long head that reads no page attends to its local
/// window only. The group reads everything when every page is every long head's.
fn push_chosen(
    selection: &mut PageSelection,
    out: &mut [Decision],
    long: u64,
    heads: HeadPages,
) -> Result<GroupRead> {
    let mut all = true;
    let mut reading = 0u64;
    for p in 0..selection.scratch.chosen.len() {
        let m = match (heads, selection.scratch.chosen[p]) {
            (HeadPages::Union, m) if m != 0 => long,
            (_, m) => m,
        };
        all &= m == long;
        reading |= m;
        selection.push(p, m)?;
    }
    for (j, o) in out.iter_mut().enumerate() {
        if long & (1 << j) != 0 && reading & (1 << j) == 0 {
            o.local = true;
        }
    }
    Ok(if all {
        GroupRead::Full
    } else if selection.is_empty() {
        GroupRead::Local
    } else {
        GroupRead::Selected
    })
}

/// Most channels the channel rule scores from the copy by channel (a larger `r` scores each
/// head's keys row by row): the column views live on the stack.
const MAX_COLUMNS: usize = MAX_SPLIT_COLUMNS;

/// `masses[h P + p] = ln sum_{i in p} exp(scale sum_{c in channels} q_hc k_ic)` for the long
/// heads `h` (rows of `s.queries_sparse`, `d` wide) and the pages `p` of the bulk, from the
/// page bounds' copy by channel ([`column_page_masses_in_halves`]: every column read once, page by
/// page, the scores never written out).
fn channel_masses(
    pages: &PageBounds,
    d: usize,
    scale: f32,
    n_long: usize,
    s: &mut SelectScratch,
) -> Result<()> {
    let empty = ChannelColumn {
        codes: &[],
        scales: &[],
        stride: 1,
    };
    let mut columns = [empty; MAX_COLUMNS];
    let r = s.channel.len();
    if let Some(keys) = pages.channel_keys() {
        for (col, &c) in columns.iter_mut().zip(&s.channel) {
            *col = keys.column(c as usize).unwrap_or(empty);
        }
    }
    s.weights.clear();
    for h in 0..n_long {
        let q = &s.queries_sparse[h * d..(h + 1) * d];
        s.weights
            .extend(s.channel.iter().map(|&c| scale * q[c as usize]));
    }
    s.masses.resize(n_long * pages.n_pages(), 0.0);
    column_page_masses_in_halves(
        &columns[..r],
        &s.weights,
        pages.n_rows(),
        pages.page_size(),
        &mut s.halves,
        &mut s.masses,
    )
}

/// The `r` channels (at most `d`) a group's long heads score the bulk keys with: those of
/// largest `(sum_h |q_hj|) (max_i k_ij - min_i k_ij) / 2`, how far channel `j` can move one
/// key's score away from another's for the group's queries
/// ([`PageBounds::channel_spread`]). One set for the group, so that the copy by channel is
/// read once per channel. `weight` is scratch for the `d` channels' values.
fn group_channels(
    inputs: &[HeadInput<'_>],
    long: u64,
    pages: &PageBounds,
    r: usize,
    weight: &mut Vec<f32>,
    out: &mut Vec<u32>,
) {
    let d = pages.dim();
    weight.clear();
    weight.extend((0..d).map(|c| {
        let q: f32 = inputs
            .iter()
            .enumerate()
            .filter(|(j, _)| long & (1 << j) != 0)
            .map(|(_, i)| i.query[c].abs())
            .sum();
        // NaN first: a NaN channel is always scored exactly (c < d: the spread is Some)
        let w = q * pages.channel_spread(c).unwrap_or(f32::NAN);
        if w.is_nan() {
            f32::INFINITY
        } else {
            w
        }
    }));
    out.clear();
    out.extend(0..d as u32);
    let r = r.min(d);
    if r < d {
        out.select_nth_unstable_by(r - 1, |&x, &y| {
            weight[y as usize].total_cmp(&weight[x as usize])
        });
        out.truncate(r);
    }
}

/// `ln A_bulk` as the gate estimated it, from its log local share `r` and `ln A_local`:
/// `ln A_bulk = ln A_local + ln(e^-r - 1)`; `None` where it reported no finite share, or a
/// share of 1 (no bulk mass to share out).
fn gate_log_bulk(d: Decision, log_local: f64) -> Option<f64> {
    let r = d.log_local_share.filter(|r| r.is_finite() && *r < 0.0)?;
    let log_bulk = log_local + (-r).exp_m1().ln();
    log_bulk.is_finite().then_some(log_bulk)
}

/// `((d + 4) 2^-23 + 2 2^-11) |scale| |q|_1`: times a page's largest `|k_j|`, it covers the
/// rounding of a kernel's score `fl(scale q . k)` (within `(d + 2) 2^-24 |scale| sum_j
/// |q_j k_j|`) and of the page's center and radius in f32, with a factor 2 to spare, and
/// their rounding to f16 (`2^-11` of `|c_j|` and of `r_j`, each at most the largest `|k_j|`). The f32 sums of the bound's two
/// products round as a kernel's score does, and are covered the same way.
fn rounding_slack(q: &[f32], d: usize, scale: f32) -> f64 {
    let l1: f64 = q.iter().map(|x| x.abs() as f64).sum();
    let per_term = (d as f64 + 4.0) * F32_ROUNDING + 2.0 * PageBounds::F16_ROUNDING;
    per_term * (scale as f64).abs() * l1
}

/// How much more a page some earlier long head of the group chose weighs in a later head's
/// order: its bytes are read for the group already, so only its multiply-adds cost. The
/// order only; what a head leaves out is still counted at the pages' masses, so its budget
/// is unchanged. On Qwen2.5-0.5B at 8192 tokens (`tail_compensation` example, 12 answer
/// steps, 16 channels, tau 0.98) a weight of 4 reads 0.600 of the bulk's pages for the group
/// against 0.648 (16: 0.593; every shared page first: 0.592), at 0.268 of them a head against
/// 0.259, with the heads' outputs as close to dense's.
const SHARED_PAGE_WEIGHT: f32 = 4.0;

/// One head's pages, the last step of every top-p rule: raise the order of every page an
/// earlier head chose by `ln SHARED_PAGE_WEIGHT`, keep pages by [`budget_threshold`] and set
/// `bit` in `chosen` for those kept.
fn keep_shared_first(
    order: &mut [f32],
    mass: &mut [f32],
    lower: Option<&mut [f32]>,
    log_local: f64,
    tau: Tau,
    chosen: &mut [u64],
    bit: u64,
) {
    let bonus = SHARED_PAGE_WEIGHT.ln();
    for (o, &c) in order.iter_mut().zip(chosen.iter()) {
        if c != 0 {
            *o += bonus;
        }
    }
    let keep = budget_threshold(order, mass, lower, log_local, tau);
    mark(chosen, order, keep, bit);
}

/// Set `bit` in `chosen[p]` for every page whose weight in `order` (after
/// [`budget_threshold`]: `exp(order_p - max)`) reaches the kept bin.
fn mark(chosen: &mut [u64], order: &[f32], keep: Keep, bit: u64) {
    let Some(least) = keep.least() else {
        return;
    };
    for (c, &w) in chosen.iter_mut().zip(order) {
        // no branch, so that the loop vectorizes
        *c |= bit & 0u64.wrapping_sub(u64::from(w.to_bits() >= least));
    }
}

/// Which pages a head keeps: those whose weight's bin is at least `bin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    All,
    None,
    From(usize),
}

impl Keep {
    /// The least bit pattern of a kept weight (every `f32`'s for `All`); `None` keeps nothing.
    fn least(self) -> Option<u32> {
        match self {
            Keep::All => Some(0),
            Keep::None => None,
            Keep::From(bin) => Some(least_bits(bin)),
        }
    }
    #[cfg(test)]
    fn keeps(self, w: f32) -> bool {
        self.least().is_some_and(|least| w.to_bits() >= least)
    }
}

/// The least bit pattern of bin `bin`'s weights: `bin_of(w) >= bin` exactly when
/// `w.to_bits() >= least_bits(bin)`, for every `f32` (a weight's bits grow with it, and the
/// bins clip at both ends).
fn least_bits(bin: usize) -> u32 {
    match bin {
        0 => 0,
        b => ((b.min(N_BINS - 1) + 63 * 8) as u32) << 20,
    }
}

/// Bins: eight per octave (the f32 exponent and the mantissa's top three bits, so the bin
/// grows with the weight), from `2^-64` (bin 0, which also holds everything below)
/// to 1 (bin `N_BINS - 1`).
const N_BINS: usize = 64 * 8 + 1;

/// The bin of a weight `w` in `[0, 1]`.
fn bin_of(w: f32) -> usize {
    // 1.0 is 0x3f80_0000: exponent 127, so bits >> 20 is 127 * 8 = 1016; 2^-64 is 63 * 8
    let b = (w.to_bits() >> 20) as i64 - (63 * 8);
    b.clamp(0, (N_BINS - 1) as i64) as usize
}

/// The lowest bin a head keeps. Pages are ordered by `order` (ln values; binned as weights
/// `exp(order_p - max order)`) and left out bin by bin from the lowest while the left-out
/// mass `U` (the sum of `exp(mass)` over them) stays within `1 - tau` of a total: with
/// `lower` (certified), `U <= (1 - tau) (A_local + L_kept + U)`, `L_kept` the sum of
/// `exp(lower)` over the kept pages; without (`mass` an estimate),
/// `U <= (1 - tau) (A_local + sum_p exp(mass_p))`. A NaN or infinite value keeps every page.
///
/// On return `order` holds the weights, `mass` and `lower` their exponentials relative to
/// the largest mass (f32 [`exp_in_place`], relative error below 3e-7, for which the
/// comparison leaves a margin of 1e-6).
fn budget_threshold(
    order: &mut [f32],
    mass: &mut [f32],
    lower: Option<&mut [f32]>,
    log_local: f64,
    tau: Tau,
) -> Keep {
    // no early exit, so that the scan vectorizes
    let finite = |v: &[f32]| {
        !v.iter()
            .fold(false, |bad, x| bad | (x.is_nan() | (*x == f32::INFINITY)))
    };
    if !finite(order) || !finite(mass) || lower.as_deref().is_some_and(|l| !finite(l)) {
        return Keep::All;
    }
    let (top, reference) = (
        max_score(order, f32::NEG_INFINITY),
        max_score(mass, f32::NEG_INFINITY),
    );
    if top == f32::NEG_INFINITY || reference == f32::NEG_INFINITY {
        return Keep::None;
    }
    exp_in_place(order, top);
    exp_in_place(mass, reference);
    let eps = 1.0 - tau.get();
    let local = (log_local - reference as f64).exp();
    let u_bins = binned(order, mass);
    let first = match lower {
        Some(lower) => {
            exp_in_place(lower, reference);
            let l_bins = binned(order, lower);
            let l_all = octave_sums(&l_bins).sum::<f64>();
            // the left-out bound against the local mass, the kept lower bounds and it
            first_bin_over(&u_bins, Some(&l_bins), |u, l| {
                over_budget(u, eps, local + (l_all - l).max(0.0) + u)
            })
        }
        None => {
            // the left-out estimate against the whole estimated total
            let total = local + octave_sums(&u_bins).sum::<f64>();
            first_bin_over(&u_bins, None, |u, _| over_budget(u, eps, total))
        }
    };
    first.map_or(Keep::None, Keep::From)
}

/// The bins, eight at a time: an octave of the weights.
fn octave_sums(bins: &Bins) -> impl Iterator<Item = f64> + '_ {
    bins.chunks(8).map(|c| c.iter().sum::<f64>())
}

/// The first bin at which `over(U, L)` holds, `U` and `L` the sums of `u` and `l` over it and
/// every bin below (`L` 0 without `l`: the estimate rules have no lower bounds); `over` must
/// hold from there on (it grows with `U` and `L`). An octave at a time, then a bin: the sums
/// of 513 bins in one chain of additions would wait on each other.
fn first_bin_over(u: &Bins, l: Option<&Bins>, over: impl Fn(f64, f64) -> bool) -> Option<usize> {
    const NONE: Bins = [0.0; N_BINS];
    let l = l.unwrap_or(&NONE);
    let (mut u_out, mut l_out) = (0.0f64, 0.0f64);
    for (o, (u8s, l8s)) in u.chunks(8).zip(l.chunks(8)).enumerate() {
        let (su, sl) = (u8s.iter().sum::<f64>(), l8s.iter().sum::<f64>());
        if !over(u_out + su, l_out + sl) {
            (u_out, l_out) = (u_out + su, l_out + sl);
            continue;
        }
        for (k, (&ub, &lb)) in u8s.iter().zip(l8s).enumerate() {
            (u_out, l_out) = (u_out + ub, l_out + lb);
            if over(u_out, l_out) {
                return Some(o * 8 + k);
            }
        }
        // the octave's sum rounded over, its bins one by one did not: the last one
        return Some(o * 8 + u8s.len() - 1);
    }
    None
}

/// Sums of f64 values, one a bin.
type Bins = [f64; N_BINS];

/// Whether a left-out mass `u` exceeds `eps` of `total` (with a margin of 1e-6 each way for
/// the f32 exponentials; NaN exceeds).
fn over_budget(u: f64, eps: f64, total: f64) -> bool {
    u * (1.0 + 1e-6) > eps * total * (1.0 - 1e-6) || u.is_nan()
}

/// `sum v_p` in f64 per bin of the weight `w_p`, for the weights `w` and values `v` of the
/// pages. Four pages at a time into four sets of bins, added at the end: neighbouring pages
/// often share a bin, and one set would make each wait for the last one's sum to be stored.
fn binned(weights: &[f32], values: &[f32]) -> Bins {
    let mut sets = [[0.0f64; N_BINS]; 4];
    let (w4, v4) = (weights.chunks_exact(4), values.chunks_exact(4));
    let (w_tail, v_tail) = (w4.remainder(), v4.remainder());
    for (w, v) in w4.zip(v4) {
        for k in 0..4 {
            sets[k][bin_of(w[k])] += v[k] as f64;
        }
    }
    for (&w, &v) in w_tail.iter().zip(v_tail) {
        sets[0][bin_of(w)] += v as f64;
    }
    std::array::from_fn(|b| (sets[0][b] + sets[1][b]) + (sets[2][b] + sets[3][b]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The kept bin as its definition reads: the first bin `b` at which the pages of bins up
    /// to `b`, summed one by one in f64, exceed the budget (`w` the weights, `m` and `l` the
    /// masses and lower bounds as [`budget_threshold`] leaves them).
    fn threshold_by_definition(
        w: &[f32],
        m: &[f32],
        l: Option<&[f32]>,
        local: f64,
        eps: f64,
    ) -> Keep {
        let certified = l.is_some();
        let l = l.unwrap_or(m);
        let l_all: f64 = l.iter().map(|&x| x as f64).sum();
        for b in 0..N_BINS {
            let out = |v: &[f32]| -> f64 {
                w.iter()
                    .zip(v)
                    .filter(|(w, _)| bin_of(**w) <= b)
                    .map(|(_, &x)| x as f64)
                    .sum()
            };
            let (u, lo) = (out(m), out(l));
            let total = if certified {
                local + (l_all - lo).max(0.0) + u
            } else {
                local + l_all
            };
            if over_budget(u, eps, total) {
                return Keep::From(b);
            }
        }
        Keep::None
    }

    proptest! {
        #[test]
        fn a_weight_reaches_a_bin_exactly_when_its_bits_reach_the_bins_least(
            bin in 0..N_BINS,
            // any pattern, or one beside the bin's edge or the next one's (the exponent and
            // three mantissa bits step every 2^20)
            near in prop::option::of((-1i32..2, -2i32..2)),
            any_bits in any::<u32>(),
        ) {
            let bits = match near {
                Some((k, d)) => (((bin as i32 + 63 * 8 + k) as u32) << 20).wrapping_add_signed(d),
                None => any_bits,
            };
            prop_assert_eq!(bin_of(f32::from_bits(bits)) >= bin, bits >= least_bits(bin));
        }

        #[test]
        fn the_kept_bin_is_the_first_whose_left_out_pages_exceed_the_budget(
            // per page: ln mass, how it is rounded (0: as is, 1: to whole nats, so that
            // pages share bins, 2: no mass), whether an earlier head chose it, the gap to
            // its lower bound
            pages in prop::collection::vec(
                (-50.0f32..5.0, 0u8..3, any::<bool>(), 0.0f32..4.0),
                1..300,
            ),
            log_local in -12.0f64..8.0,
            tau in 0.3f64..0.9999,
            certified in any::<bool>(),
        ) {
            let mass: Vec<f32> = pages
                .iter()
                .map(|&(m, how, _, _)| match how {
                    0 => m,
                    1 => m.round(),
                    _ => f32::NEG_INFINITY,
                })
                .collect();
            let order: Vec<f32> = mass
                .iter()
                .zip(&pages)
                .map(|(&m, &(_, _, shared, _))| if shared { m + SHARED_PAGE_WEIGHT.ln() } else { m })
                .collect();
            let lower: Vec<f32> = mass.iter().zip(&pages).map(|(&m, p)| m - p.3).collect();
            let (mut o, mut m, mut l) = (order.clone(), mass.clone(), lower.clone());
            let tau = Tau::new(tau).unwrap();
            let keep = budget_threshold(
                &mut o,
                &mut m,
                certified.then_some(&mut l[..]),
                log_local,
                tau,
            );
            let reference = max_score(&mass, f32::NEG_INFINITY);
            if reference == f32::NEG_INFINITY {
                prop_assert_eq!(keep, Keep::None);
                return Ok(());
            }
            let local = (log_local - reference as f64).exp();
            let expected = threshold_by_definition(
                &o,
                &m,
                certified.then_some(&l[..]),
                local,
                1.0 - tau.get(),
            );
            prop_assert_eq!(keep, expected);
        }
    }

    #[test]
    fn masses_by_channel_equal_those_of_the_rows_scores_on_those_channels() {
        let (d, t) = (8usize, 600usize);
        let mut x = 0x9e37_79b9_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) * 4.0 - 2.0
        };
        // keys of 64ths with 127/64 first in every page: each page's scale is 1/64 and the
        // 8-bit copy holds the keys exactly
        let keys: Vec<f32> = (0..t * d)
            .map(|i| {
                let x = next();
                if (i / d).is_multiple_of(32) {
                    127.0 / 64.0
                } else {
                    (x * 63.0).round() / 64.0
                }
            })
            .collect();
        let q: Vec<f32> = (0..2 * d).map(|_| next()).collect();
        let mut pages = PageBounds::new(d, 32).unwrap();
        pages.keep_channel_keys().unwrap();
        pages.push_rows_of(qada_stats::Rows::F32(&keys)).unwrap();
        let mut s = SelectScratch {
            channel: vec![5u32, 0, 3],
            queries_sparse: vec![0.0; 2 * d],
            ..SelectScratch::default()
        };
        for h in 0..2 {
            for &c in &s.channel {
                s.queries_sparse[h * d + c as usize] = q[h * d + c as usize];
            }
        }
        channel_masses(&pages, d, 0.5, 2, &mut s).unwrap();
        let n_pages = pages.n_pages();
        assert_eq!((n_pages, s.masses.len()), (19, 2 * 19));
        for h in 0..2 {
            for p in 0..n_pages {
                let scores: Vec<f64> = (p * 32..t.min(p * 32 + 32))
                    .map(|i| {
                        [5usize, 0, 3]
                            .iter()
                            .map(|&c| 0.5 * q[h * d + c] as f64 * keys[i * d + c] as f64)
                            .sum()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let want = m + scores.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                let got = s.masses[h * n_pages + p] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{h} {p}: {got} vs {want}"
                );
            }
        }
    }

    /// A channel whose large value every key shares ranks no page above another: the rule
    /// picks the channel that varies, though its `|k|` is ten times smaller, and weighs only
    /// the long heads' queries.
    #[test]
    fn channels_are_chosen_by_their_spread_not_their_size() {
        let d = 4;
        // channel 0: 10 to 10.01 in every key; channel 2: -1 to 1; channels 1 and 3: 0
        let keys: Vec<f32> = (0..64)
            .flat_map(|i| {
                let t = i as f32 / 63.0;
                [10.0 + 0.01 * t, 0.0, 2.0 * t - 1.0, 0.0]
            })
            .collect();
        let mut pages = PageBounds::new(d, 32).unwrap();
        pages.push_rows_of(qada_stats::Rows::F32(&keys)).unwrap();
        let moments = qada_stats::KeyMoments::new(d);
        let input = |query: &'static [f32]| HeadInput {
            layer: 0,
            head: 0,
            query,
            scale: 1.0,
            local_scores: &[],
            bulk_len: 64,
            bulk_moments: &moments,
            bulk_keys: qada_stats::Rows::F32(&keys),
            bulk_pages: Some(&pages),
            bulk_clusters: None,
        };
        let inputs = [input(&[1.0, 0.0, 1.0, 0.0]), input(&[0.0, 0.0, 0.0, 500.0])];
        let (mut weight, mut out) = (Vec::new(), Vec::new());
        group_channels(&inputs, 0b01, &pages, 1, &mut weight, &mut out);
        assert_eq!(out, [2]);
        // the second head, long, moves channel 3 by nothing: every key's is 0
        group_channels(&inputs, 0b11, &pages, 1, &mut weight, &mut out);
        assert_eq!(out, [2]);
        group_channels(&inputs, 0b11, &pages, 4, &mut weight, &mut out);
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn bins_grow_with_the_weight_and_clip() {
        assert_eq!(bin_of(1.0), N_BINS - 1);
        assert_eq!(bin_of(0.0), 0);
        assert_eq!(bin_of(2f32.powi(-70)), 0);
        assert!(bin_of(0.3) < bin_of(0.5));
        // an eighth of the octave's width apart: adjacent bins
        assert_eq!(bin_of(0.5) + 1, bin_of(0.5 * 1.125 * 1.0001));
    }

    #[test]
    fn the_budget_leaves_out_the_small_pages_only() {
        let tau = Tau::new(0.9).unwrap();
        // pages of mass e^0, e^-10, e^-10, e^-10 and a local mass e^0: at tau 0.9 the three
        // small pages (3 e^-10 of about 2) go, the big one stays
        let vals = [0.0f32, -10.0, -10.0, -10.0];
        let (mut o, mut m) = (vals, vals);
        let keep = budget_threshold(&mut o, &mut m, None, 0.0, tau);
        let kept: Vec<bool> = o.iter().map(|&w| keep.keeps(w)).collect();
        assert_eq!(kept, [true, false, false, false]);
        // a local mass that dwarfs the bulk: nothing kept
        let (mut o, mut m) = (vals, vals);
        let keep = budget_threshold(&mut o, &mut m, None, 10.0, tau);
        assert!(o.iter().all(|&w| !keep.keeps(w)));
        // a NaN page: everything kept
        let (mut o, mut m) = ([0.0f32, f32::NAN], [0.0f32, 0.0]);
        assert_eq!(budget_threshold(&mut o, &mut m, None, 0.0, tau), Keep::All);
    }
}
