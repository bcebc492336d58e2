//! The column page masses in halves allocate nothing once their scratch is grown: the
//! split (`rayon::join` on the stack) and the second half's column views (on the stack) add
//! no allocation to a decoding step. A counting allocator counts the allocations of the
//! pool's threads (both halves run there) while the warm calls run; the test harness's own
//! threads, which may allocate meanwhile, are not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use qada_core::attention::{column_page_masses_in_halves, HalvesScratch};
use qada_stats::ChannelColumn;

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

#[test]
fn split_masses_allocate_nothing_once_warm() {
    let (t, page, r, heads) = (8192usize, 32usize, 16usize, 7usize);
    let n_pages = t / page;
    let codes: Vec<Vec<i8>> = (0..r)
        .map(|c| {
            (0..t)
                .map(|i| ((i * 7 + c * 13) % 255) as u8 as i8)
                .collect()
        })
        .collect();
    let scales = vec![0.01f32; n_pages];
    let cols: Vec<ChannelColumn<'_>> = codes
        .iter()
        .map(|c| ChannelColumn {
            codes: c,
            scales: &scales,
            stride: 1,
        })
        .collect();
    let w: Vec<f32> = (0..heads * r).map(|i| (i as f32 * 0.3).sin()).collect();
    let mut out = vec![0.0f32; heads * n_pages];
    let mut scratch = HalvesScratch::default();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .start_handler(|_| IN_POOL.with(|p| p.set(true)))
        .build()
        .unwrap();
    pool.install(|| {
        // warm: the scratch grown, and the other worker through its first stolen half (a
        // thread's first steal allocates once, 2304 bytes here: the work-stealing deques
        // register the thread; a worker asleep through a few calls had not stolen yet)
        for _ in 0..100 {
            column_page_masses_in_halves(&cols, &w, t, page, &mut scratch, &mut out).unwrap();
        }
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..20 {
            column_page_masses_in_halves(&cols, &w, t, page, &mut scratch, &mut out).unwrap();
        }
        COUNTING.store(false, Ordering::SeqCst);
    });
    assert_eq!(ALLOCATIONS.load(Ordering::SeqCst), 0);
    assert!(out.iter().all(|m| m.is_finite()));
}
