//! Append one token's keys and values to one KV head and fold the key that leaves the window
//! into the bulk moments: the per-token, per-KV-head cost of keeping option-1 moments current.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qada_kv::{CacheShape, KvCache, KvDtype, MomentsMode, WindowConfig};

fn append_with_moment_update(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_token_per_kv_head");
    for d in [64usize, 128] {
        let shape = CacheShape {
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: d,
            capacity: 1 << 20,
            dtype: KvDtype::F32,
        };
        let key: Vec<f32> = (0..d).map(|i| (i as f32 * 0.1).sin()).collect();
        group.throughput(Throughput::Elements(1));
        for mode in ["update", "frozen"] {
            let m = if mode == "update" {
                MomentsMode::Update
            } else {
                MomentsMode::Frozen
            };
            let mut cache = KvCache::new(shape, WindowConfig::PAPER, m).unwrap();
            cache
                .append(0, &vec![0.5; 200 * d], &vec![0.5; 200 * d])
                .unwrap();
            cache.finish_prefill().unwrap();
            group.bench_function(BenchmarkId::new(mode, d), |b| {
                b.iter(|| {
                    if cache.len(0) + 1 >= shape.capacity {
                        cache.clear();
                    }
                    cache.append(0, black_box(&key), black_box(&key)).unwrap();
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, append_with_moment_update);
criterion_main!(benches);
