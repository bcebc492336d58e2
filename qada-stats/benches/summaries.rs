//! Building the page summaries of one KV head's bulk: SmolLM2's 4872 bulk keys at its 5000-token
//! threshold (d 64, f16 rows, pages of 32), the bounds alone and with the 8-bit copy by channel,
//! all rows at once (a prefill chunk, or the catch-up when a layer reaches `from_context`) and
//! one key at a time (decoding); and a decoding step's keys as the model pushes them: one key
//! into each of SmolLM2's 90 KV heads (30 layers of 3), their summaries out of the caches
//! (a step reads some 100 MB of weights between two pushes into one head).

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use qada_stats::{f16, PageBounds, Rows};

const N: usize = 4872;
const D: usize = 64;
const PAGE: usize = 32;

fn empty(by_channel: bool) -> PageBounds {
    let mut p = PageBounds::new(D, PAGE).unwrap();
    if by_channel {
        p.keep_channel_keys().unwrap();
    }
    p.reserve(N);
    p
}

/// The bulk's keys: `N` rows of `D`, f16.
fn keys() -> Vec<f16> {
    (0..N * D)
        .map(|i| f16::from_f32((i as f32 * 0.37).sin() * 3.0))
        .collect()
}

fn page_summaries(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("page_summaries_d64_4872_keys");
    for (name, by_channel) in [("bounds", false), ("bounds_and_channel_copy", true)] {
        group.bench_function(format!("{name}/all_at_once"), |b| {
            b.iter(|| {
                let mut p = empty(by_channel);
                p.push_rows_of(Rows::F16(black_box(&keys))).unwrap();
                p
            })
        });
        group.bench_function(format!("{name}/key_by_key"), |b| {
            b.iter(|| {
                let mut p = empty(by_channel);
                for k in black_box(&keys).chunks_exact(D) {
                    p.push_rows_of(Rows::F16(k)).unwrap();
                }
                p
            })
        });
    }
    group.finish();
}

/// KV heads of SmolLM2 (30 layers of 3 KV heads): one key pushed into each per step.
const HEADS: usize = 90;
/// Steps decoded on the same summaries before they are built again.
const STEPS: usize = 256;

/// Seconds of `iters` steps, each one key pushed into each of [`HEADS`] summaries with the
/// bounds (and the copy by channel), every summary's data evicted from the caches between
/// steps by reading a buffer larger than the last-level cache (not timed).
fn cold_steps(iters: u64, by_channel: bool, keys: &[f16], evict: &mut [u64]) -> Duration {
    let build = || {
        (0..HEADS)
            .map(|_| {
                let mut p = empty(by_channel);
                p.reserve(N + STEPS);
                p.push_rows_of(Rows::F16(keys)).unwrap();
                p
            })
            .collect::<Vec<_>>()
    };
    let mut heads = build();
    let (mut took, mut step) = (Duration::ZERO, 0);
    for _ in 0..iters {
        if step == STEPS {
            heads = build();
            step = 0;
        }
        let mut sum = 0u64;
        for (i, x) in evict.iter_mut().enumerate().step_by(8) {
            *x = x.wrapping_add(i as u64);
            sum = sum.wrapping_add(*x);
        }
        black_box(sum);
        let key = &keys[(step % N) * D..(step % N + 1) * D];
        let t0 = Instant::now();
        for p in &mut heads {
            p.push_rows_of(Rows::F16(black_box(key))).unwrap();
        }
        took += t0.elapsed();
        step += 1;
    }
    took
}

fn decode_steps(c: &mut Criterion) {
    let keys = keys();
    // 64 MiB: past the last-level cache of the hosts we measure on (32 MiB and less)
    let mut evict = vec![1u64; 8 << 20];
    let mut group = c.benchmark_group("decode_step_90_heads_cold");
    // each step evicts 64 MiB untimed: few, short samples
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    for (name, by_channel) in [("bounds", false), ("bounds_and_channel_copy", true)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| cold_steps(iters, by_channel, &keys, &mut evict))
        });
    }
    group.finish();
}

criterion_group!(benches, page_summaries, decode_steps);
criterion_main!(benches);
