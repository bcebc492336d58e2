//! A layer whose KV groups decide in parallel, each thread reading its groups' bulk once it
//! has decided them (nested parallel tasks), allocates nothing once its scratch is made with
//! room for the bulk. A counting allocator counts the allocations of the pool's threads while
//! the warm steps run; the test harness's own threads are not counted.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{heads_of, seeded_masks, FixedPages};
use qada_core::{
    attend_layer, Decision, GroupRead, HeadInput, LayerScratch, LocalityCriterion, PageSelection,
};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set by the pool's start handler: this thread is one of the pool's.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counter is atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) && IN_POOL.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// [`FixedPages`] asking for page summaries: what makes a layer's groups decide in parallel
/// on long bulks.
struct WithPages(FixedPages);

impl LocalityCriterion for WithPages {
    fn decide(&self, input: &HeadInput<'_>) -> qada_core::Result<Decision> {
        self.0.decide(input)
    }
    fn choose_pages(
        &self,
        inputs: &[HeadInput<'_>],
        out: &mut [Decision],
        selection: &mut PageSelection,
    ) -> qada_core::Result<GroupRead> {
        self.0.choose_pages(inputs, out, selection)
    }
    fn bulk_summaries(&self) -> qada_stats::BulkSummaries {
        qada_stats::BulkSummaries {
            page: Some(self.0.page),
            ..Default::default()
        }
    }
}

#[test]
fn groups_reading_their_bulk_once_decided_allocate_nothing_once_warm() {
    // SmolLM2's shape: 3 KV groups of 3 heads, d 64; a bulk past the parallel threshold
    let (n_kv, group, d, sink, local, page) = (3usize, 3usize, 64usize, 16usize, 128usize, 32);
    let t = 4096 + local;
    let kvs: Vec<Vec<f32>> = (0..n_kv)
        .map(|g| {
            (0..2 * t * d)
                .map(|i| ((i * 7 + g * 13) as f32 * 0.01).sin())
                .collect()
        })
        .collect();
    let heads = heads_of(kvs, d, sink, local);
    let q: Vec<f32> = (0..n_kv * group * d).map(|i| (i as f32 * 0.3).cos()).collect();
    let bulk = heads[0].segments().bulk_len();
    let c = WithPages(FixedPages {
        page,
        masks: seeded_masks(7, bulk.div_ceil(page), group),
    });
    let kv: Vec<_> = heads.iter().map(|h| h.segments()).collect();
    let mut scratch = LayerScratch::with_capacity(n_kv, group, d, bulk);
    let mut out = vec![0.0f32; n_kv * group * d];
    let scale = 1.0 / (d as f32).sqrt();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .start_handler(|_| IN_POOL.with(|p| p.set(true)))
        .build()
        .unwrap();
    pool.install(|| {
        // warm: the scratch grown, and the other worker through its first steal (a thread's
        // first steal allocates once: the work-stealing deques register the thread)
        for _ in 0..100 {
            attend_layer(&c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
        }
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..20 {
            attend_layer(&c, 0, &q, &kv, scale, &mut scratch, &mut out).unwrap();
        }
        COUNTING.store(false, Ordering::SeqCst);
    });
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    assert!(out.iter().all(|x| x.is_finite()));
    // the groups did read their bulk: some pages per head
    assert!(scratch.reads().head_rows.iter().all(|&r| r > 0));
}
