//! Properties of page selection: attention over the selected pages is dense attention
//! restricted to them (over f32, f16 and q8 rows); at tau 1 every page rule reads the whole
//! bulk; the certified and exact rules never leave out more than `1 - tau` of a
//! head's mass, and a later head of the group prefers the pages an earlier one chose;
//! the estimate rule and Quest keep what they say; computing over the group's union reads
//! the same pages, each long head all of them; the channel rule behind no gate reads a
//! needle QAdA's Gaussian misses; the accounting counts the pages read. (What
//! the probe `qada analyze` runs measures of a selection is tested in qada-eval,
//! `tests/probe_selection.rs`.)

mod common;

use common::{layer, layer_of, pages_of, scores_f64, seeded_masks, FixedPages, Head};
use proptest::prelude::*;
use qada_core::{
    attend_layer, Accounting, Approx, Decision, DecisionCost, Dense, DenseBelow, GroupRead,
    HeadInput, HeadPages, KvSegments, LayerReads, LayerScratch, LocalityCriterion, PageRule,
    PageSelection, Pages,
};
use qada_stats::{f16, PageBounds, Q8Block, Rows};

/// softmax(s) V in f64 over the local positions and the bulk rows `keep_bulk` says.
fn reference(h: &Head, q: &[f32], scale: f32, keep_bulk: impl Fn(usize) -> bool) -> Vec<f32> {
    let s = scores_f64(q, &h.keys, scale);
    let b0 = (0..h.t()).find(|&i| !h.is_local_pos(i)).unwrap_or(h.t());
    let keep: Vec<usize> = (0..h.t())
        .filter(|&i| h.is_local_pos(i) || keep_bulk(i - b0))
        .collect();
    let m = keep.iter().map(|&i| s[i]).fold(f64::NEG_INFINITY, f64::max);
    let mut out = vec![0.0f64; h.d];
    let mut z = 0.0;
    for &i in &keep {
        let w = (s[i] - m).exp();
        z += w;
        for (o, &v) in out.iter_mut().zip(&h.values[i * h.d..(i + 1) * h.d]) {
            *o += w * v as f64;
        }
    }
    out.iter().map(|o| (o / z) as f32).collect()
}

fn close(a: &[f32], b: &[f32], tol: f32) -> std::result::Result<(), TestCaseError> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        prop_assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "index {i}: {x} vs {y}"
        );
    }
    Ok(())
}

/// Attend one layer over `kv` reading the pages `masks` gives each head (`FixedPages`), and
/// check each head's output against [`reference`] over `heads` (the f32 values `kv` holds)
/// within `tol`, and its bulk rows counted; the layer's reads, for more checks.
fn attend_fixed_pages(
    heads: &[Head],
    kv: &[KvSegments<'_>],
    q: &[f32],
    group: usize,
    page: usize,
    masks: &[u64],
    tol: f32,
) -> std::result::Result<LayerReads, TestCaseError> {
    let d = heads[0].d;
    let n_heads = heads.len() * group;
    let bulk = kv[0].bulk_len();
    let c = FixedPages {
        page,
        masks: masks.to_vec(),
    };
    let mut scratch = LayerScratch::new();
    let mut out = vec![0.0; n_heads * d];
    let scale = 1.0 / (d as f32).sqrt();
    attend_layer(&c, 0, q, kv, scale, &mut scratch, &mut out).unwrap();
    let reads = scratch.reads().clone();
    for h in 0..n_heads {
        let j = h % group;
        let kept = |i: usize| masks[i / page] & (1 << j) != 0;
        let expect = reference(&heads[h / group], &q[h * d..(h + 1) * d], scale, kept);
        close(&out[h * d..(h + 1) * d], &expect, tol)?;
        prop_assert_eq!(reads.head_rows[h], (0..bulk).filter(|&i| kept(i)).count());
    }
    Ok(reads)
}

proptest! {
    #[test]
    fn dense_below_a_context_length_is_dense_there_and_the_inner_criterion_from_it(
        (heads, q, group, page) in layer(),
        seed in any::<u64>(),
        offset in -3i64..3,
    ) {
        let d = heads[0].d;
        let n_heads = heads.len() * group;
        let n_pages = heads[0].segments().bulk_len().div_ceil(page);
        let inner = FixedPages { page, masks: seeded_masks(seed, n_pages, group) };
        // the threshold near the context's length: both sides of it are drawn
        let context = heads[0].t();
        let min_context = (context as i64 + offset).max(1) as usize;
        let c = DenseBelow::new(&inner, min_context).unwrap();
        let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
        let scale = 1.0 / (d as f32).sqrt();
        let run = |c: &dyn LocalityCriterion| {
            let mut scratch = LayerScratch::new();
            let mut out = vec![0.0; n_heads * d];
            attend_layer(c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
            let reads = scratch.reads();
            (out, reads.head_rows.clone(), reads.group_rows.clone(), scratch.decisions().to_vec())
        };
        let got = run(&c);
        let want = if context < min_context { run(&Dense) } else { run(&inner) };
        prop_assert_eq!(got, want);
    }

    #[test]
    fn attention_over_selected_pages_is_dense_attention_restricted_to_them(
        (heads, q, group, page) in layer(),
        seed in any::<u64>(),
    ) {
        let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
        let bulk = kv[0].bulk_len();
        let masks = seeded_masks(seed, bulk.div_ceil(page), group);
        let reads = attend_fixed_pages(&heads, &kv, &q, group, page, &masks, 2e-5)?;
        let union = (0..bulk).filter(|&i| masks[i / page] != 0).count();
        prop_assert!(reads.group_rows.iter().all(|&r| r == union));
    }

    /// The same over the caches' stored rows: f16 keys and values, or q8 blocks (32 values a
    /// block, `d` a multiple of 32), against the f64 attention of the rounded or dequantized
    /// rows. The paged kernels read a page's rows where they lie in the stored buffer.
    #[test]
    fn attention_over_selected_pages_of_f16_and_q8_rows_is_that_of_their_stored_values(
        (heads, q, group, page) in layer_of(&[32, 64], 400),
        q8 in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let d = heads[0].d;
        // per head, its keys and values as stored, and the f32 values they hold
        let (mut k16, mut v16, mut k8, mut v8, mut held) = (vec![], vec![], vec![], vec![], vec![]);
        for h in &heads {
            let (k, v) = if q8 {
                let ((kb, k), (vb, v)) = (q8_of(&h.keys), q8_of(&h.values));
                k8.push(kb);
                v8.push(vb);
                (k, v)
            } else {
                let ((kb, k), (vb, v)) = (f16_of(&h.keys), f16_of(&h.values));
                k16.push(kb);
                v16.push(vb);
                (k, v)
            };
            held.push(Head::new(d, h.sink, h.local, k, v));
        }
        let kv: Vec<_> = held
            .iter()
            .enumerate()
            .map(|(g, h)| {
                let f = h.segments();
                let (b0, b1) = (f.sink_keys.n_rows(d), f.sink_keys.n_rows(d) + f.bulk_len());
                let rows = |r0: usize, r1: usize, keys: bool| match q8 {
                    true => {
                        let b = if keys { &k8[g] } else { &v8[g] };
                        Rows::Q8(&b[r0 * d / 32..r1 * d / 32])
                    }
                    false => {
                        let b = if keys { &k16[g] } else { &v16[g] };
                        Rows::F16(&b[r0 * d..r1 * d])
                    }
                };
                qada_core::KvSegments {
                    dim: d,
                    sink_keys: rows(0, b0, true),
                    sink_values: rows(0, b0, false),
                    bulk_keys: rows(b0, b1, true),
                    bulk_values: rows(b0, b1, false),
                    window_keys: rows(b1, h.t(), true),
                    window_values: rows(b1, h.t(), false),
                    bulk_moments: f.bulk_moments,
                    bulk_pages: None,
                    bulk_clusters: None,
                }
            })
            .collect();
        let masks = seeded_masks(seed, kv[0].bulk_len().div_ceil(page), group);
        attend_fixed_pages(&held, &kv, &q, group, page, &masks, 1e-4)?;
    }

    /// tau = 1 leaves no mass out: behind QAdA's gate (which calls no head local while the
    /// bulk holds mass) every page rule but Quest's reads the whole bulk for every head, and
    /// the layer's output is dense attention's.
    #[test]
    fn at_tau_one_the_page_rules_read_the_whole_bulk_and_attend_as_dense(
        (heads, q, group, page) in layer(),
        rule in prop_oneof![
            Just(PageRule::Estimate),
            Just(PageRule::Certified),
            Just(PageRule::Exact),
            (1usize..5).prop_map(PageRule::Channels),
        ],
    ) {
        let d = heads[0].d;
        let n_heads = heads.len() * group;
        let all_pages: Vec<PageBounds> = heads
            .iter()
            .map(|h| {
                let mut b = PageBounds::new(d, page).unwrap();
                b.keep_channel_keys().unwrap();
                b.push_rows_of(h.segments().bulk_keys).unwrap();
                b
            })
            .collect();
        let kv: Vec<_> = heads
            .iter()
            .zip(&all_pages)
            .map(|(h, p)| {
                let mut s = h.segments();
                s.bulk_pages = Some(p);
                s
            })
            .collect();
        let c = Pages::new(Approx::new(1.0).unwrap(), 1.0, page, rule).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let run = |c: &dyn LocalityCriterion| {
            let mut scratch = LayerScratch::new();
            let mut out = vec![0.0; n_heads * d];
            attend_layer(c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
            (out, scratch.reads().head_rows.clone(), scratch.decisions().to_vec())
        };
        let (got, rows, decisions) = run(&c);
        let (want, dense_rows, _) = run(&Dense);
        close(&got, &want, 2e-5)?;
        prop_assert_eq!(&rows, &dense_rows);
        let bulk = heads[0].segments().bulk_len();
        prop_assert!(rows.iter().all(|&r| r == bulk), "{rows:?} of {bulk}");
        prop_assert!(decisions.iter().all(|o| !o.local));
    }

    #[test]
    fn certified_and_exact_selections_leave_out_at_most_one_minus_tau_of_each_heads_mass(
        (heads, q, group, page) in layer(),
        tau in prop_oneof![0.3f64..0.99, Just(1.0)],
        spread in 0.5f32..8.0,
        exact in any::<bool>(),
    ) {
        let h = &heads[0];
        let d = h.d;
        // sharper scores than the layer's: a few pages hold most of the mass
        let q: Vec<f32> = q[..group * d].iter().map(|x| x * spread).collect();
        let pages = pages_of(h, page);
        // the certified rule proves its bound; the exact one counts f32 masses (a margin)
        let (rule, slack) = if exact {
            (PageRule::Exact, 1e-4)
        } else {
            (PageRule::Certified, 1e-9)
        };
        let c = Pages::new(Dense, tau, page, rule).unwrap();
        let seg = h.segments();
        let scale = 1.0 / (d as f32).sqrt();
        let local_scores = local_scores_of(h, &q, group, scale);
        let inputs = group_inputs(h, &q, &local_scores, scale, &pages);
        let mut out = vec![Decision::LONG; group];
        let mut sel = PageSelection::new();
        // Local too is a selection: no page, when the bounds prove the whole bulk below
        // 1 - tau of the mass
        let read = c.select_group(&inputs, &mut out, &mut sel).unwrap();
        let bulk = seg.bulk_len();
        for j in 0..group {
            let all = scores_f64(&q[j * d..(j + 1) * d], &h.keys, scale);
            let kept = |i: usize| match read {
                GroupRead::Full => true,
                GroupRead::Local => false,
                GroupRead::Selected => sel.pages().any(|(p, m)| p == i / page && m & (1 << j) != 0),
            };
            let b0 = (0..h.t()).find(|&i| !h.is_local_pos(i)).unwrap();
            let m = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = all.iter().map(|s| (s - m).exp()).sum();
            let dropped: f64 = (0..bulk).filter(|&i| !kept(i)).map(|i| (all[b0 + i] - m).exp()).sum();
            prop_assert!(
                dropped <= (1.0 - tau) * total * (1.0 + slack),
                "head {j}: dropped {} of the mass, tau {tau}", dropped / total
            );
        }
    }

    #[test]
    fn quest_keeps_the_pages_of_largest_bound_and_counts_them(
        (heads, q, group, page) in layer(),
        k in 1usize..6,
    ) {
        let h = &heads[0];
        let d = h.d;
        let pages = pages_of(h, page);
        let n_pages = pages.n_pages();
        let c = Pages::new(Dense, 0.5, page, PageRule::TopK(k)).unwrap();
        let seg = h.segments();
        let scale = 1.0 / (d as f32).sqrt();
        let local = vec![0.0f32; seg.local_len()];
        let inputs: Vec<HeadInput<'_>> = (0..group)
            .map(|j| HeadInput {
                layer: 0,
                head: j,
                query: &q[j * d..(j + 1) * d],
                scale,
                local_scores: &local,
                bulk_len: seg.bulk_len(),
                bulk_moments: &h.moments,
                bulk_keys: seg.bulk_keys,
                bulk_pages: Some(&pages),
                bulk_clusters: None,
            })
            .collect();
        let mut out = vec![Decision::LONG; group];
        let mut sel = PageSelection::new();
        let read = c.select_group(&inputs, &mut out, &mut sel).unwrap();
        if k >= n_pages {
            prop_assert_eq!(read, GroupRead::Full);
            return Ok(());
        }
        for j in 0..group {
            let qj = &q[j * d..(j + 1) * d];
            let bound = |p: usize| pages.score_upper_bound(p, qj, scale as f64);
            let mine: Vec<usize> = sel.pages().filter(|&(_, m)| m & (1 << j) != 0).map(|(p, _)| p).collect();
            prop_assert_eq!(mine.len(), k);
            // every kept page's bound is at least every left-out page's, up to the f16
            // rounding of the summaries the selection reads (2^-11 of |c_j| and r_j, each at
            // most the page's largest |k_j|, times |q_j|, for both pages compared)
            let l1: f64 = qj.iter().map(|x| x.abs() as f64).sum();
            let amax = pages.abs_maxima().iter().fold(0.0f64, |m, &a| m.max(a as f64));
            let tol = 4.0 * scale as f64 * l1 * amax / 2048.0 + 1e-5;
            let low = mine.iter().map(|&p| bound(p)).fold(f64::INFINITY, f64::min);
            for p in (0..n_pages).filter(|p| !mine.contains(p)) {
                prop_assert!(bound(p) <= low + tol, "page {p}: {} above {low}", bound(p));
            }
        }
    }

    #[test]
    fn computing_over_the_union_reads_the_same_pages_each_for_every_long_head(
        (heads, q, group, page) in layer(),
        tau in 0.3f64..0.99,
        spread in 0.5f32..8.0,
        channels in prop::option::of(1usize..6),
        gated in any::<bool>(),
    ) {
        let h = &heads[0];
        let d = h.d;
        let q: Vec<f32> = q[..group * d].iter().map(|x| x * spread).collect();
        // the channel rule reads the copy by channel, kept from the first key
        let (pages, rule) = match channels {
            Some(r) => {
                let mut p = PageBounds::new(d, page).unwrap();
                p.keep_channel_keys().unwrap();
                p.push_rows_of(h.segments().bulk_keys).unwrap();
                (p, PageRule::Channels(r))
            }
            None => (pages_of(h, page), PageRule::Estimate),
        };
        let scale = 1.0 / (d as f32).sqrt();
        let local_scores = local_scores_of(h, &q, group, scale);
        let inputs = group_inputs(h, &q, &local_scores, scale, &pages);
        // the gate's decisions first (QAdA's, or every head long), then each way of computing
        let select = |heads: HeadPages| {
            let (mut out, mut sel) = (vec![Decision::LONG; group], PageSelection::new());
            let read = if gated {
                let c = Pages::new(Approx::new(tau).unwrap(), tau, page, rule).unwrap();
                let c = c.computing_over(heads);
                c.decide_group(&inputs, &mut out).unwrap();
                c.select_group(&inputs, &mut out, &mut sel).unwrap()
            } else {
                let c = Pages::new(Dense, tau, page, rule).unwrap().computing_over(heads);
                c.select_group(&inputs, &mut out, &mut sel).unwrap()
            };
            let masks: Vec<(usize, u64)> = sel.pages().collect();
            (read, masks, out)
        };
        let (own_read, own, own_out) = select(HeadPages::Own);
        let (union_read, union, union_out) = select(HeadPages::Union);
        let n_pages = pages.n_pages();
        // the pages the group reads: every one when it reads in full
        let read_pages = |read: GroupRead, masks: &[(usize, u64)]| -> Vec<usize> {
            match read {
                GroupRead::Full => (0..n_pages).collect(),
                GroupRead::Local => vec![],
                GroupRead::Selected => masks.iter().map(|&(p, _)| p).collect(),
            }
        };
        prop_assert_eq!(read_pages(own_read, &own), read_pages(union_read, &union));
        // the heads that read some page on their own, and those the gate left long
        let own_heads = own.iter().fold(0u64, |m, &(_, x)| m | x);
        let long = own_out.iter().enumerate().filter(|(_, o)| !o.local).fold(0u64, |m, (j, _)| m | 1 << j);
        if own_read == GroupRead::Selected {
            prop_assert_eq!(own_heads, long);
        }
        if union_read == GroupRead::Selected {
            // every page for the same heads, a superset of each page's own heads
            let all = union[0].1;
            for (&(p, m), &(q, o)) in union.iter().zip(&own) {
                prop_assert_eq!(p, q);
                prop_assert_eq!(m, all);
                prop_assert_eq!(o & !m, 0, "page {}: {:b} not within {:b}", p, o, m);
            }
            // ... the heads the gate left long, none reported local
            prop_assert!(all & own_heads == own_heads);
            for (j, o) in union_out.iter().enumerate() {
                prop_assert_eq!(o.local, all & (1 << j) == 0, "head {}", j);
            }
        }
    }

    #[test]
    fn the_accounting_counts_the_selected_rows_and_the_summaries(
        (heads, q, group, page) in layer(),
        tau in 0.5f64..0.99,
    ) {
        let d = heads[0].d;
        let n_heads = heads.len() * group;
        let all_pages: Vec<PageBounds> = heads.iter().map(|h| pages_of(h, page)).collect();
        let kv: Vec<_> = heads
            .iter()
            .zip(&all_pages)
            .map(|(h, p)| {
                let mut s = h.segments();
                s.bulk_pages = Some(p);
                s
            })
            .collect();
        let c = Pages::new(Approx::new(tau).unwrap(), tau, page, PageRule::Estimate).unwrap();
        let mut scratch = LayerScratch::new();
        let mut out = vec![0.0; n_heads * d];
        let scale = 1.0 / (d as f32).sqrt();
        attend_layer(&c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
        let reads = scratch.reads().clone();
        let decisions = scratch.decisions();
        let (t, local) = (heads[0].t(), heads[0].segments().local_len());
        let mut acc = Accounting::new(1, n_heads);
        acc.record_layer_reads(0, decisions, &reads, t, local, d, heads.len(), 4.0, DecisionCost::default());
        let rows: usize = reads.group_rows.iter().sum();
        let summaries: u64 = reads.summary_bytes.iter().sum();
        let expect = ((heads.len() * local + rows) * 2 * d * 4) as f64 + summaries as f64;
        prop_assert!((acc.kv_bytes - expect).abs() < 1e-6 * expect);
        // the step's phases were timed (the local scores and the merge always run), and the
        // accounting took those times
        prop_assert!(reads.times.local > 0.0 && reads.times.merge > 0.0, "{:?}", reads.times);
        // the criterion's part of phase 2 is within it
        prop_assert!(
            reads.times.select > 0.0 && reads.times.select <= reads.times.decide,
            "{:?}",
            reads.times
        );
        prop_assert_eq!(acc.times, reads.times);
        for (g, &r) in reads.group_rows.iter().enumerate() {
            // a group reads the union of its heads' rows, which is at least each head's
            let most = reads.head_rows[g * group..(g + 1) * group].iter().copied().max().unwrap();
            prop_assert!(r >= most && r <= heads[g].segments().bulk_len());
            // a head computing over no row of the bulk is reported local
            for j in 0..group {
                if reads.head_rows[g * group + j] == 0 {
                    prop_assert!(decisions[g * group + j].local);
                }
            }
        }
    }
}

/// The exact local scores of the group's `group` query heads (`q`, head-major) over `h`.
fn local_scores_of(h: &Head, q: &[f32], group: usize, scale: f32) -> Vec<Vec<f32>> {
    let d = h.d;
    (0..group)
        .map(|j| {
            let s = scores_f64(&q[j * d..(j + 1) * d], &h.keys, scale);
            (0..h.t())
                .filter(|&i| h.is_local_pos(i))
                .map(|i| s[i] as f32)
                .collect()
        })
        .collect()
}

/// The inputs of one group's query heads over `h`'s bulk with its summaries `pages`.
fn group_inputs<'a>(
    h: &'a Head,
    q: &'a [f32],
    local_scores: &'a [Vec<f32>],
    scale: f32,
    pages: &'a PageBounds,
) -> Vec<HeadInput<'a>> {
    let (d, seg) = (h.d, h.segments());
    (0..local_scores.len())
        .map(|j| HeadInput {
            layer: 0,
            head: j,
            query: &q[j * d..(j + 1) * d],
            scale,
            local_scores: &local_scores[j],
            bulk_len: seg.bulk_len(),
            bulk_moments: &h.moments,
            bulk_keys: seg.bulk_keys,
            bulk_pages: Some(pages),
            bulk_clusters: None,
        })
        .collect()
}

/// One head (d = 8, sink 2, window of 6) whose query reads channel 0 only: local keys score
/// `local_score` there, the bulk keys 0 but one, the needle at `needle`, which scores
/// `needle_score`; and the query and local scores.
fn needle_head(
    bulk: usize,
    needle: usize,
    local_score: f32,
    needle_score: f32,
) -> (Head, Vec<f32>, Vec<f32>) {
    let (d, sink, local) = (8, 2, 6);
    let scale = 1.0 / (d as f32).sqrt();
    let t = bulk + local;
    let mut keys = vec![0.0f32; t * d];
    for (i, k) in keys.chunks_mut(d).enumerate() {
        // channels 1..8 vary, the query does not read them
        for (j, x) in k.iter_mut().enumerate().skip(1) {
            *x = ((i * 7 + j * 3) % 11) as f32 * 0.1 - 0.5;
        }
        let in_bulk = i >= sink && i < sink + bulk;
        k[0] = if !in_bulk {
            local_score / scale
        } else if i - sink == needle {
            needle_score / scale
        } else {
            0.0
        };
    }
    let values = (0..t * d).map(|i| (i % 5) as f32).collect();
    let h = Head::new(d, sink, local, keys, values);
    let mut q = vec![0.0f32; d];
    q[0] = 1.0;
    let s = scores_f64(&q, &h.keys, scale);
    let local_scores = (0..t)
        .filter(|&i| h.is_local_pos(i))
        .map(|i| s[i] as f32)
        .collect();
    (h, q, local_scores)
}

/// Head 0 of layer 0 with query `q` over `h`'s bulk and `pages`, at scale `1 / sqrt(d)`.
fn head_input<'a>(
    h: &'a Head,
    q: &'a [f32],
    local_scores: &'a [f32],
    pages: &'a PageBounds,
) -> HeadInput<'a> {
    let seg = h.segments();
    HeadInput {
        layer: 0,
        head: 0,
        query: q,
        scale: 1.0 / (h.d as f32).sqrt(),
        local_scores,
        bulk_len: seg.bulk_len(),
        bulk_moments: &h.moments,
        bulk_keys: seg.bulk_keys,
        bulk_pages: Some(pages),
        bulk_clusters: None,
    }
}

#[test]
fn ungated_channels_read_the_needle_page_qadas_gaussian_calls_local() {
    // The bulk's Gaussian (mean x/n, variance x^2/n along the query, n bulk keys) puts
    // n exp(x/n + x^2/2n) of mass there, under a tenth of the window's 6 e^9 at x = 20,
    // n = 64: QAdA calls the head local at tau 0.9, while the needle alone holds e^20.
    let (tau, page, bulk) = (0.9, 8, 64);
    for needle in [0, 13, 40, 63] {
        let (h, q, local_scores) = needle_head(bulk, needle, 9.0, 20.0);
        let pages = pages_of(&h, page);
        let input = head_input(&h, &q, &local_scores, &pages);
        let rule = PageRule::Channels(h.d);
        let gated = Pages::new(Approx::new(tau).unwrap(), tau, page, rule).unwrap();
        let ungated = Pages::new(Dense, tau, page, rule).unwrap();
        assert_eq!(ungated.name(), "channels-ungated");
        assert_eq!(gated.name(), "channels");
        let mut sel = PageSelection::new();
        let mut out = [Decision::LONG];
        let read = gated.select_group(&[input], &mut out, &mut sel).unwrap();
        assert_eq!(read, GroupRead::Local, "needle at {needle}: QAdA's gate");
        let mut out = [Decision::LONG];
        let read = ungated.select_group(&[input], &mut out, &mut sel).unwrap();
        assert_eq!(read, GroupRead::Selected, "needle at {needle}");
        let chosen: Vec<usize> = sel.pages().map(|(p, _)| p).collect();
        assert_eq!(chosen, [needle / page], "needle at {needle}");
        assert!(!out[0].local);
    }
    // without the needle the window holds the mass: no page is read, the head is local
    let (h, q, local_scores) = needle_head(bulk, 0, 9.0, 0.0);
    let pages = pages_of(&h, page);
    let input = head_input(&h, &q, &local_scores, &pages);
    let ungated = Pages::new(Dense, tau, page, PageRule::Channels(h.d)).unwrap();
    let mut out = [Decision::LONG];
    let mut sel = PageSelection::new();
    let read = ungated.select_group(&[input], &mut out, &mut sel).unwrap();
    assert_eq!(read, GroupRead::Local);
    assert!(out[0].local);
}

#[test]
fn a_later_head_prefers_a_page_an_earlier_head_chose() {
    // d = 8, sink 2, window 6, pages of 4 bulk keys, 4 pages. Head 0 reads channel 0: a needle
    // in page 1 (score 20), everything else -30. Head 1 reads channel 1: page 1's keys score
    // x, page 2's x + ln 1.5, the other bulk keys -30, the local keys x - ln 2 (their mass 4 e^x,
    // page 1's). At tau 0.5 head 1 needs one of pages 1 and 2: alone it takes page 2, the
    // larger; after head 0 took page 1, that page weighs 4 times its mass and suffices.
    let (d, sink, local, page, bulk) = (8, 2, 6, 4, 16);
    let scale = 1.0 / (d as f32).sqrt();
    let x = 2.0f32;
    let t = bulk + local;
    let mut keys = vec![0.0f32; t * d];
    for (i, k) in keys.chunks_mut(d).enumerate() {
        let in_bulk = i >= sink && i < sink + bulk;
        let p = i.wrapping_sub(sink) / page;
        let (s0, s1) = if !in_bulk {
            (0.0, x - 2f32.ln())
        } else if p == 1 {
            (if i - sink == 5 { 20.0 } else { -30.0 }, x)
        } else if p == 2 {
            (-30.0, x + 1.5f32.ln())
        } else {
            (-30.0, -30.0)
        };
        k[0] = s0 / scale;
        k[1] = s1 / scale;
    }
    let values = (0..t * d).map(|i| (i % 5) as f32).collect();
    let h = Head::new(d, sink, local, keys, values);
    let pages = pages_of(&h, page);
    let mut q = vec![0.0f32; 2 * d];
    q[0] = 1.0;
    q[d + 1] = 1.0;
    let local_scores: Vec<Vec<f32>> = (0..2)
        .map(|j| {
            let s = scores_f64(&q[j * d..(j + 1) * d], &h.keys, scale);
            (0..t)
                .filter(|&i| h.is_local_pos(i))
                .map(|i| s[i] as f32)
                .collect()
        })
        .collect();
    let inputs: Vec<HeadInput<'_>> = (0..2)
        .map(|j| HeadInput {
            head: j,
            ..head_input(&h, &q[j * d..(j + 1) * d], &local_scores[j], &pages)
        })
        .collect();
    let c = Pages::new(Dense, 0.5, page, PageRule::Exact).unwrap();
    let mut sel = PageSelection::new();
    // alone, head 1 takes the larger page
    let mut out = [Decision::LONG];
    c.select_group(&inputs[1..], &mut out, &mut sel).unwrap();
    assert_eq!(sel.pages().collect::<Vec<_>>(), [(2, 1)]);
    // after head 0, the page it took
    let mut out = [Decision::LONG; 2];
    let read = c.select_group(&inputs, &mut out, &mut sel).unwrap();
    assert_eq!(read, GroupRead::Selected);
    assert_eq!(sel.pages().collect::<Vec<_>>(), [(1, 0b11)]);
}

/// `x` as q8 blocks of 32 values, and the f32 values they hold.
fn q8_of(x: &[f32]) -> (Vec<Q8Block>, Vec<f32>) {
    let mut blocks = Vec::new();
    Q8Block::quantize_into(x, &mut blocks);
    let mut held = vec![0.0f32; x.len()];
    Q8Block::dequantize_into(&blocks, &mut held);
    (blocks, held)
}

/// `x` in f16, and the f32 values it holds.
fn f16_of(x: &[f32]) -> (Vec<f16>, Vec<f32>) {
    let rounded: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let held = rounded.iter().map(|v| v.to_f32()).collect();
    (rounded, held)
}
