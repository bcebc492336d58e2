//! The probe `qada analyze` runs measures the mass a page selection leaves out; the exact
//! rule keeps its budget and choosing with every channel scored chooses as it does. (Moved
//! from qada-core's `tests/selection_props.rs` with the probe; the fixtures are qada-core's.)

mod common;

use common::{layer, pages_of, scores_f64, seeded_masks, FixedPages, Head};
use proptest::prelude::*;
use qada_core::{attend_layer, Dense, KvSegments, LayerScratch, PageRule, Pages};
use qada_eval::analysis::probe_layer_with;
use qada_stats::PageBounds;

/// The heads' segments, each with its page summaries.
fn segments_with<'a>(heads: &'a [Head], pages: &'a [PageBounds]) -> Vec<KvSegments<'a>> {
    heads
        .iter()
        .zip(pages)
        .map(|(h, p)| {
            let mut s = h.segments();
            s.bulk_pages = Some(p);
            s
        })
        .collect()
}

proptest! {
    #[test]
    fn the_probe_measures_the_mass_a_selection_leaves_out(
        (heads, q, group, page) in layer(),
        seed in any::<u64>(),
        tau in 0.3f64..0.99,
    ) {
        let d = heads[0].d;
        let bulk = heads[0].segments().bulk_len();
        let n_pages = bulk.div_ceil(page);
        let masks = seeded_masks(seed, n_pages, group);
        let scale = 1.0 / (d as f32).sqrt();
        let pages: Vec<PageBounds> = heads.iter().map(|h| pages_of(h, page)).collect();
        let kv = segments_with(&heads, &pages);
        // fixed pages: the missed mass is that of the rows of the pages not the head's
        let fixed = FixedPages { page, masks: masks.clone() };
        let probes = probe_layer_with(0, &q, &kv, scale, &fixed).unwrap();
        prop_assert_eq!(probes.len(), heads.len() * group);
        for p in &probes {
            let (g, j) = (p.head / group, p.head % group);
            let h = &heads[g];
            let all = scores_f64(&q[p.head * d..(p.head + 1) * d], &h.keys, scale);
            let b0 = (0..h.t()).find(|&i| !h.is_local_pos(i)).unwrap();
            let m = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let missed: f64 = (0..bulk)
                .filter(|&i| masks[i / page] & (1 << j) == 0)
                .map(|i| (all[b0 + i] - m).exp())
                .sum();
            let total: f64 = all.iter().map(|s| (s - m).exp()).sum();
            let share = p.missed_share(qada_core::Tau::new(tau).unwrap());
            prop_assert!((share - missed / total).abs() <= 1e-5 * (1.0 + missed / total),
                "head {}: probe {} vs exact {}", p.head, share, missed / total);
        }
        // certified: the exact missed share stays within its budget
        let certified = Pages::new(Dense, tau, page, PageRule::Certified).unwrap();
        let tau_ = qada_core::Tau::new(tau).unwrap();
        for p in probe_layer_with(0, &q, &kv, scale, &certified).unwrap() {
            prop_assert!(p.missed_share(tau_) <= (1.0 - tau) * (1.0 + 1e-5) + 1e-7,
                "head {}: missed {} > 1 - tau {}", p.head, p.missed_share(tau_), 1.0 - tau);
        }
    }

    #[test]
    fn the_exact_rule_keeps_its_budget_and_all_channels_choose_as_it_does(
        (heads, q, group, page) in layer(),
        tau in 0.3f64..0.99,
        spread in 0.5f32..8.0,
    ) {
        let d = heads[0].d;
        let q: Vec<f32> = q.iter().map(|x| x * spread).collect();
        let scale = 1.0 / (d as f32).sqrt();
        let pages: Vec<PageBounds> = heads.iter().map(|h| pages_of(h, page)).collect();
        let kv = segments_with(&heads, &pages);
        let t = qada_core::Tau::new(tau).unwrap();
        // the exact masses: what it leaves out is within 1 - tau (f32 scores, f32 weights)
        let exact = Pages::new(Dense, tau, page, PageRule::Exact).unwrap();
        let probes = probe_layer_with(0, &q, &kv, scale, &exact).unwrap();
        for p in &probes {
            prop_assert!(p.missed_share(t) <= (1.0 - tau) * (1.0 + 1e-4) + 1e-6,
                "head {}: missed {} > 1 - tau {}", p.head, p.missed_share(t), 1.0 - tau);
        }
        // every channel scored: no Gaussian rest, the same masses, the same pages
        let all = Pages::new(Dense, tau, page, PageRule::Channels(d)).unwrap();
        let n_heads = heads.len() * group;
        let mut chosen = Vec::new();
        for c in [&exact, &all] {
            let mut scratch = LayerScratch::new();
            let mut out = vec![0.0; n_heads * d];
            attend_layer(c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
            let pages: Vec<Vec<(usize, u64)>> = (0..heads.len())
                .map(|g| scratch.selection(g).map_or(Vec::new(), |s| s.pages().collect()))
                .collect();
            chosen.push((pages, scratch.reads().head_rows.clone()));
        }
        prop_assert_eq!(&chosen[0], &chosen[1]);
    }
}
