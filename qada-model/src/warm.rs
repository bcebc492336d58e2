//! One decoding step on rayon's pool with the other workers kept awake.
//!
//! A step hands work to the pool about eight times a layer (the stacked products, attention
//! over KV heads), and between those loops the stepping thread works alone: norms, RoPE,
//! rounding the activations. Left to rayon, an idle worker yields a few times and then sleeps
//! on a futex, so the next loop pays a system call to wake it and the kernel's wake-up
//! latency before the second core helps (issue 35's profile: about a tenth of a SmolLM2
//! token in the scheduler). [`in_pool_warm`] runs the step on a worker and, beside it in a
//! `rayon::join`, a job that polls the pool for work ([`rayon::yield_now`]) until the step is
//! done, splitting itself so that every other worker polls: what the stepping thread splits
//! off is taken within a poll, and nothing sleeps inside a step. `join` keeps its jobs on the
//! stack, so a step still allocates nothing (`tests/decode_allocations.rs`). Between steps
//! (sampling, printing, the caller's own work) the workers sleep as rayon lets them. The
//! results are the same bits: only which thread runs a piece of work changes, and every
//! kernel's output is independent of that.

use std::sync::atomic::{AtomicBool, Ordering};

/// Run `f` on a worker of rayon's current pool while every other worker of that pool polls
/// for work instead of sleeping; they stop when `f` returns. With one thread, `f` alone.
pub(crate) fn in_pool_warm<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    let done = &done;
    // `scope` moves the call onto a worker (without allocating, as it spawns nothing): the
    // step's parallel loops then start from inside the pool, even with one thread, where a
    // call from outside would hand each loop to the pool's thread and wait for it; and the
    // stepping thread's index is known before anything can poll
    rayon::scope(move |_| {
        let others = rayon::current_num_threads().saturating_sub(1);
        if others == 0 {
            return f();
        }
        let me = rayon::current_thread_index();
        // if the stepping thread takes the second job back after the step, `keep_warm`
        // sees `me` and returns
        let (r, ()) = rayon::join(
            || {
                // set when `f` returns or unwinds: a panic in the step must reach the caller,
                // not leave the pollers polling and `join` waiting for them
                let _done = SetOnDrop(done);
                f()
            },
            || keep_warm(done, me, others),
        );
        r
    })
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Poll rayon's pool for work until `done`, on `others` workers: this one and, through a
/// nested `join` another worker may take, `others - 1` more. On the stepping thread `me`
/// return at once: it may steal such a job while it waits inside the step's own loops, and it
/// must not poll for the end of the step it is itself computing.
fn keep_warm(done: &AtomicBool, me: Option<usize>, others: usize) {
    if rayon::current_thread_index() == me {
        return;
    }
    let poll = || {
        while !done.load(Ordering::Acquire) {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
        }
    };
    if others > 1 {
        // taken back by this thread, the second job finds `done` set and returns
        rayon::join(poll, || keep_warm(done, me, others - 1));
    } else {
        poll();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// A pool of its own with `threads` workers.
    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    /// Parallel loops inside the warm step run and finish, their results those of a plain
    /// loop, and the call returns (the pollers stop) on pools of one to four threads.
    #[test]
    fn parallel_work_inside_a_warm_step_completes_and_the_pollers_stop() {
        for threads in 1..=4 {
            let pool = pool(threads);
            let sums = pool.install(|| {
                (0..50)
                    .map(|step| {
                        in_pool_warm(|| {
                            (0..200u64)
                                .map(|j| {
                                    (0..1000u64)
                                        .into_par_iter()
                                        .map(|i| i * j + step)
                                        .sum::<u64>()
                                })
                                .sum::<u64>()
                        })
                    })
                    .collect::<Vec<_>>()
            });
            for (step, s) in sums.iter().enumerate() {
                let want: u64 = (0..200u64)
                    .map(|j| (0..1000u64).map(|i| i * j + step as u64).sum::<u64>())
                    .sum();
                assert_eq!(*s, want, "{threads} threads, step {step}");
            }
        }
    }

    /// Called from outside any pool, the step runs on a worker of the global pool, so that
    /// its loops start inside it (a pool of one thread too: from outside, each loop would be
    /// handed to the pool's thread and waited for; 1.8x slower on SmolLM2).
    #[test]
    fn the_step_runs_on_a_worker() {
        assert!(rayon::current_thread_index().is_none());
        assert!(in_pool_warm(rayon::current_thread_index).is_some());
    }

    /// A panic inside the step reaches the caller; the pollers stop.
    #[test]
    fn a_panic_in_the_step_reaches_the_caller() {
        let pool = pool(2);
        let r = pool.install(|| {
            std::panic::catch_unwind(|| {
                in_pool_warm(|| {
                    let _: u64 = (0..1000u64).into_par_iter().sum();
                    panic!("in the step")
                })
            })
        });
        assert!(r.is_err());
    }

    /// The step's work is shared: with two threads the other worker runs part of it.
    #[test]
    fn the_other_worker_takes_part_of_the_step() {
        let pool = pool(2);
        let seen = pool.install(|| {
            in_pool_warm(|| {
                (0..64)
                    .into_par_iter()
                    .map(|_| {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        rayon::current_thread_index().unwrap()
                    })
                    .collect::<std::collections::BTreeSet<_>>()
            })
        });
        assert_eq!(seen.len(), 2, "threads that ran the loop: {seen:?}");
    }
}
