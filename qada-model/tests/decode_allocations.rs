//! The decode loop allocates nothing once warm: every buffer a step needs is scratch owned by
//! the session, made with it (a bulk task for every chunk its capacity can hold) or sized at the
//! first steps.
//!
//! A counting global allocator sees every allocation made on rayon's workers, where every step
//! runs (the test decodes inside `rayon::scope`). Not the other threads: the test harness's own
//! thread formats "has been running for over 60 seconds" (82 bytes, then 164 and 512 as it
//! grows and prints) when the test passes a minute, which once landed inside a counted stretch
//! and failed the suite on a loaded machine.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use qada_core::{
    Approx, Dense, DenseBelow, GroupMode, Grouped, HeadPages, LocalityCriterion, Oracle, PageRule,
    Pages, Reuse, ReusePages,
};
use qada_kv::{KvDtype, MomentsMode, WindowConfig};
use qada_model::{LoadOptions, Model, Session, SessionOptions};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Sizes of the first allocations counted (0: none), for the failure message.
static SIZES: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

fn count(layout: Layout) {
    let i = ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if let Some(s) = SIZES.get(i) {
        s.store(layout.size(), Ordering::Relaxed);
    }
}

/// Whether an allocation now is one the test counts: counting is on and this thread is one of
/// rayon's workers (`current_thread_index` reads a thread-local pointer; it never allocates).
fn counted() -> bool {
    COUNTING.load(Ordering::Relaxed) && rayon::current_thread_index().is_some()
}

// SAFETY: every method forwards to `System` with the caller's own pointer, layout and size
// unchanged, so `System`'s guarantees (and the caller's obligations) carry over; counting only
// touches atomics, a fixed array and rayon's thread-local worker pointer, and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            count(layout);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted() {
            count(Layout::from_size_align(new_size, layout.align()).unwrap_or(layout));
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A session of `criterion` with a `kv_dtype` cache, sized for `prompt` and `steps` more.
fn session_for<'m>(
    model: &'m Model,
    criterion: Box<dyn LocalityCriterion>,
    kv_dtype: KvDtype,
    prompt: &[u32],
    steps: usize,
) -> Session<'m> {
    let mut opts = SessionOptions::new(criterion, WindowConfig::new(4, 32).unwrap());
    opts.moments = MomentsMode::Update;
    opts.kv_dtype = kv_dtype;
    opts.capacity = Some(prompt.len() + steps + 1);
    Session::new(model, opts).unwrap()
}

/// Allocations made by `steps` decoding steps after `warm` warm-up steps.
fn allocations_while_decoding(session: &mut Session, warm: usize, steps: usize) -> usize {
    // Decoding from the calling thread: rayon queues the step's job in its injector, which
    // allocates a block per 63 jobs; a caller that decodes on a rayon worker (as here) does
    // not pay even that.
    rayon::scope(|_| {
        let mut next = 0u32;
        for i in 0..warm + steps {
            if i == warm {
                ALLOCATIONS.store(0, Ordering::SeqCst);
                SIZES.iter().for_each(|s| s.store(0, Ordering::SeqCst));
                COUNTING.store(true, Ordering::SeqCst);
            }
            let logits = session.step(next).unwrap();
            next = argmax(logits);
        }
        COUNTING.store(false, Ordering::SeqCst);
    });
    ALLOCATIONS.load(Ordering::SeqCst)
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

type MakeCriterion = fn() -> Box<dyn LocalityCriterion>;

/// The counted steps take the bulk across a multiple of the 512-row chunks the bulk is split
/// into (a new parallel task) and past page boundaries (pages of 16 and 32 keys), with every
/// kind of criterion (page selection too, and pages built ahead of a dense-below threshold)
/// and cache type; on Gemma 3 too (sliding and global layers, 4 query heads a group,
/// d = 256).
///
/// One prefill per model and cache type (a 1044-token prefill is most of the test's time):
/// under one of the page criteria, taken in turn, whose summaries are then built as the prompt
/// runs; that criterion decodes straight on, and every other one decodes from the prefill's
/// checkpoint, restored with its summaries rebuilt from the bulk, as eval, bench and serve do.
#[test]
fn decoding_steps_allocate_nothing_once_warm() {
    // Gemma's f32 cache takes the f16 cache's paths: two cache types keep the test short
    let models = [
        (
            "smollm2-135m",
            common::model_path(),
            &[KvDtype::F32, KvDtype::F16, KvDtype::Q8][..],
        ),
        (
            "gemma3-270m",
            common::fetched_model("gemma3-270m"),
            &[KvDtype::F16, KvDtype::Q8][..],
        ),
    ];
    let criteria: [(&str, MakeCriterion); 13] = [
        ("dense", || Box::new(Dense)),
        ("approx", || Box::new(Approx::new(0.6).unwrap())),
        ("oracle", || Box::new(Oracle::new(0.6).unwrap())),
        // dense below 1400 tokens: the cache builds the pages ahead from 1050 on, a page of
        // 32 keys at the counted steps that reach 1059 and 1067
        ("channels, dense below 1400", || {
            let gate = Approx::new(0.9).unwrap();
            let pages = Pages::new(gate, 0.9, 32, PageRule::Channels(8)).unwrap();
            Box::new(DenseBelow::new(pages, 1400).unwrap())
        }),
        // the shape of SmolLM2's and Qwen's shipped settings: one choice for the whole group,
        // 16 channels, dense below a threshold
        ("channels@all, 16 channels, dense below 1400", || {
            let gate = Approx::new(0.98).unwrap();
            let pages = Pages::new(gate, 0.98, 32, PageRule::Channels(16)).unwrap();
            let grouped = Grouped::new(pages, GroupMode::All);
            Box::new(DenseBelow::new(grouped, 1400).unwrap())
        }),
        // each long head over its group's union of pages
        ("channels-union@all, 16 channels, dense below 1400", || {
            let gate = Approx::new(0.95).unwrap();
            let pages = Pages::new(gate, 0.95, 32, PageRule::Channels(16))
                .unwrap()
                .computing_over(HeadPages::Union);
            let grouped = Grouped::new(pages, GroupMode::All);
            Box::new(DenseBelow::new(grouped, 1400).unwrap())
        }),
        // Gemma 3's shipped rule: pages by 32 channels behind no gate
        ("channels-ungated", || {
            Box::new(Pages::new(Dense, 0.95, 32, PageRule::Channels(32)).unwrap())
        }),
        ("certified", || {
            let gate = Approx::new(0.9).unwrap();
            Box::new(Pages::new(gate, 0.9, 32, PageRule::Certified).unwrap())
        }),
        ("pages-oracle", || {
            let gate = Oracle::new(0.9).unwrap();
            Box::new(Pages::new(gate, 0.9, 32, PageRule::Exact).unwrap())
        }),
        // remembered choices, one per layer and group, read again where the queries allow
        ("channels, choices reused", || {
            let gate = Approx::new(0.9).unwrap();
            let pages = Pages::new(gate, 0.9, 32, PageRule::Channels(8)).unwrap();
            Box::new(ReusePages::new(
                pages,
                Reuse::new(4, 0.5, f64::INFINITY).unwrap(),
            ))
        }),
        ("pages", || {
            let gate = Approx::new(0.9).unwrap();
            Box::new(Pages::new(gate, 0.9, 32, PageRule::Estimate).unwrap())
        }),
        ("quest", || {
            Box::new(Pages::new(Dense, 0.5, 16, PageRule::TopK(8)).unwrap())
        }),
        ("channels", || {
            let gate = Approx::new(0.9).unwrap();
            Box::new(Pages::new(gate, 0.9, 32, PageRule::Channels(8)).unwrap())
        }),
    ];
    let (warm, steps) = (4, 24);
    let mut turn = 0;
    for (model_name, path, dtypes) in models {
        let model = Model::load(&path, &LoadOptions::default()).unwrap();
        let text =
            "The quick brown fox jumps over the lazy dog while the band plays on. ".repeat(90);
        let mut prompt = model.tokenizer().encode(&text).unwrap();
        // 4 + 32 window positions: after 4 warm steps the bulk is 1012 or 1016 rows, and the
        // 24 counted steps take it past 1024, the second chunk boundary
        assert!(prompt.len() > 1100, "prompt of {} tokens", prompt.len());
        prompt.truncate(1044);
        for &dtype in dtypes {
            // the page criteria are the last three
            let first = criteria.len() - 3 + turn % 3;
            turn += 1;
            let (first_name, make_first) = criteria[first];
            let mut session = session_for(&model, make_first(), dtype, &prompt, warm + steps);
            session.prefill(&prompt, &mut |_, _| {}).unwrap();
            let checkpoint = session.checkpoint();
            let order = std::iter::once(first).chain((0..criteria.len()).filter(|&i| i != first));
            for (k, i) in order.enumerate() {
                let (name, make) = criteria[i];
                if k > 0 {
                    session.restore(&checkpoint).unwrap();
                    session.set_criterion(make()).unwrap();
                }
                let n = allocations_while_decoding(&mut session, warm, steps);
                let sizes: Vec<usize> = SIZES.iter().map(|s| s.load(Ordering::SeqCst)).collect();
                let how = if k == 0 {
                    "after its prefill"
                } else {
                    "restored"
                };
                assert_eq!(
                    n, 0,
                    "{model_name}, {name} with {dtype:?} K/V ({how}): {n} allocations in \
                     {steps} steps (bytes of the first: {sizes:?}); prefill under {first_name}"
                );
            }
        }
    }
}
