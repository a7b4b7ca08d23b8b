//! Criterion micro-benchmarks: memtable insert, page encode/decode, Bloom probe, engine get and
//! scan.

#![allow(clippy::unwrap_used, missing_docs)] // harness code: a failed setup should abort the run

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ebb_storage::sst::internals::{
    bloom_build, bloom_may_contain, decode_block, key_hash, Memtable, Page, PageBuilder,
};
use ebb_storage::{Compression, Engine, EntryKind, Options};

fn key(i: u64) -> [u8; 16] {
    let mut k = [b'0'; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k
}

fn memtable_insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("memtable");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("insert_10k", |b| {
        b.iter_batched(
            || Memtable::new(0, 4 << 20),
            |m| {
                for i in 0..10_000u64 {
                    m.insert(&key(i), i + 1, EntryKind::Put, Bytes::from_static(&[7; 100]));
                }
                m
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn page_codec(c: &mut Criterion) {
    let mut keys: Vec<[u8; 16]> = (0..32).map(key).collect();
    keys.sort();
    let mut g = c.benchmark_group("page");
    for (name, comp) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        g.bench_function(format!("encode_{name}"), |b| {
            let mut out = Vec::new();
            b.iter(|| {
                let mut pb = PageBuilder::default();
                for (i, k) in keys.iter().enumerate() {
                    pb.add(k, i as u64, EntryKind::Put, &[b'v'; 100]);
                }
                out.clear();
                pb.finish(comp, &mut out);
                black_box(out.len())
            })
        });
        let mut pb = PageBuilder::default();
        for (i, k) in keys.iter().enumerate() {
            pb.add(k, i as u64, EntryKind::Put, &[b'v'; 100]);
        }
        let mut disk = Vec::new();
        pb.finish(comp, &mut disk);
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| {
                let page = Page::new(decode_block(black_box(disk.clone())).unwrap()).unwrap();
                black_box(page.lower_bound(&keys[17], u64::MAX))
            })
        });
    }
    g.finish();
}

fn bloom_probe(c: &mut Criterion) {
    let hashes: Vec<u64> = (0..32).map(|i| key_hash(&key(i))).collect();
    let mut filter = Vec::new();
    bloom_build(&hashes, 10, &mut filter);
    let probe = key_hash(&key(1_000_000));
    c.bench_function("bloom/probe_absent", |b| {
        b.iter(|| bloom_may_contain(black_box(&filter), black_box(probe)))
    });
    c.bench_function("bloom/hash_16b", |b| b.iter(|| key_hash(black_box(&key(5)))));
}

fn engine_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compression: Compression::None,
        write_buffer_size: 4 << 20,
        ..Options::default()
    };
    let e = Engine::open(dir.path(), opts).unwrap();
    const N: u64 = 200_000;
    for i in 0..N {
        e.put(key(i).to_vec(), vec![b'v'; 100], i + 1).unwrap();
    }
    e.compact_range(None, None).unwrap();
    let mut i = 0u64;
    c.bench_function("engine/get_hit", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(e.get(&key(i), None).unwrap())
        })
    });
    c.bench_function("engine/get_miss", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(e.get(&key(i + N), None).unwrap())
        })
    });
    c.bench_function("engine/scan_100", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            let k = key(i);
            black_box(e.scan(k.as_slice().., None).unwrap().take(100).count())
        })
    });
}

criterion_group!(benches, memtable_insert, page_codec, bloom_probe, engine_reads);
criterion_main!(benches);
