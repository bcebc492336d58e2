//! Building the page summaries of one KV head's bulk: SmolLM2's 4872 bulk keys at its 5000-token
//! threshold (d 64, f16 rows, pages of 32), the bounds alone and with the 8-bit copy by channel,
//! all rows at once (a prefill chunk, or the catch-up when a layer reaches `from_context`) and
//! one key at a time (decoding).

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

fn page_summaries(c: &mut Criterion) {
    let keys: Vec<f16> = (0..N * D)
        .map(|i| f16::from_f32((i as f32 * 0.37).sin() * 3.0))
        .collect();
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

criterion_group!(benches, page_summaries);
criterion_main!(benches);
