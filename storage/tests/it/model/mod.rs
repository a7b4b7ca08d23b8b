//! Model-based test: random operation sequences run against the engine and an in-memory oracle,
//! with puts, point deletes, range deletes (overlapping, nested, empty, unbounded, the whole key
//! space), time-window deletes (with and without a key range), retention rules with a moving
//! logical clock and purges, flushes, compactions, snapshots, clean reopens and crashes (drop
//! without close, fail points inside flush and compaction, torn manifest writes, power cuts that
//! lose or tear everything not fsynced, see `ebb_storage::durable`). Any divergence
//! fails the test, and so does a time-window delete the ledger calls persisted while a covered
//! entry is still stored.
//! (Retention runs with the engine WAL only: without it the caller's replay would
//! meet rules committed after the replayed writes, which a replicated log orders instead.)
//!
//! Every combination of recovery mode (engine WAL, or none with Raft-style replay by the caller)
//! and range-delete mode (GLORAN, RocksDB-style tombstones) runs. `EBB_MODEL_OPS` sets the
//! minimum number of operations per recovery mode, split between the two range-delete modes
//! (default 5,000, so CI executes at least 10,000, typically about 25,000). Set it to 1000000 for
//! the long mode. Each combination asserts it ran its share.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_storage::filter::RangeFilterOptions;
use ebb_storage::{
    Compression, Options, RangeDeleteMode, RangeIndexOptions, TileLayout, TimeToDeleteKey,
};
use proptest::prelude::*;

mod harness;
mod replay;
use harness::Harness;

const KEYS: u16 = 240;
/// Shortest and longest operation sequence of one case.
const MIN_OPS_PER_CASE: usize = 100;
const MAX_OPS_PER_CASE: usize = 400;

/// Time-series shaped key: 8-byte series id, 8-byte timestamp (the delete key).
fn key(k: u16) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&(k as u64 / 8).to_be_bytes());
    v.extend_from_slice(&((k as u64 % 8) * 1_000 + (k as u64 * 7919) % 997).to_be_bytes());
    v
}

/// The delete key (timestamp) of a key.
fn dkey(key: &[u8]) -> u64 {
    u64::from_be_bytes(key[8..16].try_into().unwrap())
}

/// Key of series `s` at time `t`.
fn series_time_key(s: u16, t: u64) -> Vec<u8> {
    let mut v = (s as u64).to_be_bytes().to_vec();
    v.extend_from_slice(&t.to_be_bytes());
    v
}

/// First key of series `s`.
fn series_key(s: u16) -> Vec<u8> {
    let mut v = (s as u64).to_be_bytes().to_vec();
    v.extend_from_slice(&[0; 8]);
    v
}

/// The logical clock starts here (ms); timestamps of keys are below 8,000.
const CLOCK_START: u64 = 8_000;

fn value(k: u16, seq: u64) -> Vec<u8> {
    let mut v = format!("{k}:{seq}:").into_bytes();
    v.resize(v.len() + (k as usize * 31 + seq as usize) % 120, b'x');
    v
}

#[derive(Debug, Clone)]
enum Crash {
    Drop,
    Flush,
    CompactionMid,
    CompactionBeforeCommit,
    CompactionAfterCommit,
    TornManifest,
    /// The power goes: unsynced writes are lost or torn (seed), and so are unsynced directory
    /// entries.
    PowerCut(u64),
}

/// One operation of a write batch.
#[derive(Debug, Clone, Copy, PartialEq)]
enum W {
    Put(u16),
    Delete(u16),
    /// `[key(lo), key(lo + len))`; `None` length = to the end of the key space, and `lo == KEYS`
    /// with no length is the whole key space (empty lower bound).
    Range(u16, Option<u16>),
    /// Time window `[t_lo, t_lo + len)` over series `[a, b)` (`None`: every key).
    Window(u16, u16, Option<(u16, u16)>),
}

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<W>),
    Get(u16),
    Scan(u16, u16),
    /// A scan by time: keys `[a, b)`, times `[t, t + len)`.
    ScanTime(u16, u16, u16, u16),
    Snapshot,
    GetAt(usize, u16),
    ScanAt(usize, u16, u16),
    /// A one-series time range `[series_key(s) + t, + len)` (the range filters answer it), at
    /// a snapshot or the latest.
    SeriesScan(u16, u16, u16, Option<usize>),
    Release(usize),
    Flush,
    Compact(Option<u16>, Option<u16>),
    WaitBackground,
    Reopen,
    Crash(Crash),
    /// Sets a retention (ms) on one series, if it has none (WAL mode only).
    Retention(u16, u16),
    /// Advances the logical clock (ms).
    Tick(u16),
    /// Purges expired rows (WAL mode only).
    Purge,
}

fn w_strategy() -> impl Strategy<Value = W> {
    prop_oneof![
        70 => (0..KEYS).prop_map(W::Put),
        16 => (0..KEYS).prop_map(W::Delete),
        10 => (0..KEYS, 0u16..40).prop_map(|(a, l)| W::Range(a, Some(l))),
        1 => (0..KEYS).prop_map(|a| W::Range(a, None)),
        1 => Just(W::Range(KEYS, None)),
        4 => (0u16..8000, 0u16..3000, prop::option::of((0u16..32, 0u16..12)))
            .prop_map(|(t, l, r)| W::Window(t, l, r.map(|(a, n)| (a, a + n)))),
    ]
}

fn window_bounds(t: u16, len: u16, r: Option<(u16, u16)>) -> (u64, u64, Vec<u8>, Vec<u8>) {
    let (lo, hi) = r.map_or((Vec::new(), Vec::new()), |(a, b)| (series_key(a), series_key(b)));
    (t as u64, t as u64 + len as u64, lo, hi)
}

fn range_bounds(lo: u16, len: Option<u16>) -> (Vec<u8>, Vec<u8>) {
    match len {
        None if lo >= KEYS => (Vec::new(), Vec::new()),
        None => (key(lo), Vec::new()),
        Some(l) => (key(lo), key(lo.saturating_add(l))),
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let k = || 0..KEYS;
    prop_oneof![
        40 => prop::collection::vec(w_strategy(), 1..6).prop_map(Op::Write),
        12 => k().prop_map(Op::Get),
        5 => (k(), k()).prop_map(|(a, b)| Op::Scan(a.min(b), a.max(b))),
        2 => (k(), k(), 0u16..8000, 0u16..4000)
            .prop_map(|(a, b, t, l)| Op::ScanTime(a.min(b), a.max(b), t, l)),
        3 => Just(Op::Snapshot),
        6 => (0..8usize, k()).prop_map(|(s, k)| Op::GetAt(s, k)),
        2 => (0..8usize, k(), k()).prop_map(|(s, a, b)| Op::ScanAt(s, a.min(b), a.max(b))),
        6 => (0..KEYS / 8 + 1, 0u16..8200, 0u16..200, prop::option::of(0..8usize))
            .prop_map(|(s, t, l, at)| Op::SeriesScan(s, t, l, at)),
        2 => (0..8usize).prop_map(Op::Release),
        4 => Just(Op::Flush),
        2 => (prop::option::of(k()), prop::option::of(k())).prop_map(|(a, b)| Op::Compact(a, b)),
        1 => Just(Op::WaitBackground),
        1 => Just(Op::Reopen),
        1 => (0u16..32, 500u16..9000).prop_map(|(s, r)| Op::Retention(s, r)),
        3 => (0u16..400).prop_map(Op::Tick),
        1 => Just(Op::Purge),
        2 => prop_oneof![
            Just(Crash::Drop),
            Just(Crash::Flush),
            Just(Crash::CompactionMid),
            Just(Crash::CompactionBeforeCommit),
            Just(Crash::CompactionAfterCommit),
            Just(Crash::TornManifest),
            any::<u64>().prop_map(Crash::PowerCut),
            any::<u64>().prop_map(Crash::PowerCut),
        ]
        .prop_map(Op::Crash),
    ]
}

/// Versions of one key: (seq, value or `None` for a delete), oldest first.
type History = Vec<(u64, Option<Vec<u8>>)>;

/// A time-window delete: `[t_lo, t_hi)`, keys `[lo, hi)`, sequence number.
type Window = (u64, u64, Vec<u8>, Vec<u8>, u64);

/// Every version of every key ever written, and every range delete.
#[derive(Default)]
struct Oracle {
    versions: BTreeMap<Vec<u8>, History>,
    ranges: Vec<(Vec<u8>, Vec<u8>, u64)>,
    windows: Vec<Window>,
    /// Retention per series (ms), and the clock.
    retention: BTreeMap<u16, u64>,
    now: u64,
    last_seq: u64,
}

impl Oracle {
    fn apply(&mut self, seq: u64, ops: &[W]) {
        for (i, op) in ops.iter().enumerate() {
            let s = seq + i as u64;
            match *op {
                W::Put(k) => self.versions.entry(key(k)).or_default().push((s, Some(value(k, s)))),
                W::Delete(k) => self.versions.entry(key(k)).or_default().push((s, None)),
                W::Range(lo, len) => {
                    let (lo, hi) = range_bounds(lo, len);
                    self.ranges.push((lo, hi, s));
                }
                W::Window(t, len, r) => {
                    let (t_lo, t_hi, lo, hi) = window_bounds(t, len, r);
                    self.windows.push((t_lo, t_hi, lo, hi, s));
                }
            }
            self.last_seq = s;
        }
    }

    /// True if `key` is past its series' retention now.
    fn expired(&self, key: &[u8]) -> bool {
        let series = u64::from_be_bytes(key[..8].try_into().unwrap()) as u16;
        self.retention.get(&series).is_some_and(|r| dkey(key) < self.now.saturating_sub(*r))
    }

    /// The newest version at or below `at`, unless a range delete newer than it (and visible at
    /// `at`) covers the key.
    fn get(&self, key: &[u8], at: u64) -> Option<Vec<u8>> {
        let vs = self.versions.get(key)?;
        let (e, v) = vs.iter().rev().find(|(s, _)| *s <= at)?;
        let deleted = self.ranges.iter().any(|(lo, hi, s)| {
            lo.as_slice() <= key && (hi.is_empty() || key < hi.as_slice()) && e < s && *s <= at
        });
        let d = dkey(key);
        let windowed = self.windows.iter().any(|(t_lo, t_hi, lo, hi, s)| {
            (*t_lo..*t_hi).contains(&d)
                && lo.as_slice() <= key
                && (hi.is_empty() || key < hi.as_slice())
                && e < s
                && *s <= at
        });
        if deleted || windowed || self.expired(key) {
            None
        } else {
            v.clone()
        }
    }

    fn scan(&self, lo: &[u8], hi: &[u8], at: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.versions
            .range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
            .filter_map(|(k, _)| self.get(k, at).map(|v| (k.clone(), v)))
            .collect()
    }
}

fn small_options(
    wal: bool,
    mode: RangeDeleteMode,
    h: usize,
    compression: Compression,
    cache: usize,
    range_filter: Option<RangeFilterOptions>,
) -> Options {
    Options {
        wal,
        range_delete_mode: mode,
        write_buffer_size: 4 << 10,
        max_immutable_memtables: 2,
        memtable_max_age: None,
        level0_compaction_trigger: 2,
        level0_stop_writes_trigger: 12,
        base_level_size: 16 << 10,
        num_levels: 4,
        target_file_size: 8 << 10,
        page_size: 256,
        tiles: TileLayout::Fixed(vec![1, h, h * 2]),
        range_filter,
        compression,
        page_cache_bytes: cache,
        time_to_delete_key: TimeToDeleteKey::millis(),
        range_index: RangeIndexOptions {
            page_size: 256,
            fanout: 2 + h,
            level0_trigger: 2,
            size_ratio: 2,
            base_level_pieces: 4,
            num_levels: 4,
            eve_initial_capacity: 2,
            eve_bits_per_record: 8,
            // 0 (no sketch), 1 or 3 slots: tiny sketches collide often.
            eve_seq_slots_per_record: h as u32 - 1,
        },
        ..Options::default()
    }
}

fn options_strategy(wal: bool, mode: RangeDeleteMode) -> impl Strategy<Value = Options> {
    (
        prop_oneof![Just(1usize), Just(2), Just(4)],
        prop_oneof![Just(Compression::None), Just(Compression::Lz4), Just(Compression::Zstd(1))],
        prop_oneof![Just(0usize), Just(64 << 10)],
        any::<bool>(),
        // Range filters over the 16-byte keys: tiny to generous, ranges of 1 to 4096 ms.
        prop::option::of((
            1.0f64..16.0,
            prop_oneof![Just(1u64), Just(64), Just(4096)],
            prop_oneof![Just(1u64), Just(16), Just(64)],
        )),
        any::<bool>(),
    )
        .prop_map(move |(h, c, cache, background, rf, global)| Options {
            background_threads: background && std::env::var("EBB_MODEL_INLINE").is_err(),
            // One filter per version instead of per file (GRF): it must never hide a key.
            global_range_filter: global && rf.is_some(),
            level_renaming: h == 2,
            // Scans then trigger query-driven compactions (RangeReduce), crashes included.
            range_reduce: (h == 4).then_some(0.25),
            ..small_options(
                wal,
                mode,
                h,
                c,
                cache,
                rf.map(|(bits_per_key, default_range, range_buckets)| RangeFilterOptions {
                    key_len: 16,
                    bits_per_key,
                    default_range,
                    range_buckets,
                }),
            )
        })
}

fn min_ops() -> u64 {
    std::env::var("EBB_MODEL_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000)
}

/// Runs random cases of one recovery and range-delete mode and asserts at least half of
/// `min_ops()` operations ran.
fn run_mode(wal: bool, mode: RangeDeleteMode) {
    let min = min_ops() / 2;
    let cases = min.div_ceil(MIN_OPS_PER_CASE as u64).max(1) as u32;
    let config = ProptestConfig {
        cases,
        max_shrink_iters: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let executed = Arc::new(AtomicU64::new(0));
    let strategy = (
        options_strategy(wal, mode),
        prop::collection::vec(op_strategy(), MIN_OPS_PER_CASE..=MAX_OPS_PER_CASE),
    );
    let counter = executed.clone();
    let result = proptest::test_runner::TestRunner::new(config).run(&strategy, |(opts, ops)| {
        let mut h = Harness::new(opts, counter.clone());
        for op in &ops {
            h.run(op);
        }
        h.reopen(false);
        Ok(())
    });
    if let Err(e) = result {
        panic!("model divergence (wal = {wal}, {mode:?}): {e}");
    }
    let n = executed.load(Ordering::Relaxed);
    println!("model (wal = {wal}, {mode:?}): {cases} cases, {n} operations, 0 divergences");
    assert!(n >= min, "ran {n} operations, fewer than the {min} required");
}

#[test]
fn model_with_wal() {
    run_mode(true, RangeDeleteMode::Gloran);
}

#[test]
fn model_without_wal_caller_replays() {
    run_mode(false, RangeDeleteMode::Gloran);
}

#[test]
fn model_tombstones_with_wal() {
    run_mode(true, RangeDeleteMode::Tombstones);
}

#[test]
fn model_tombstones_without_wal_caller_replays() {
    run_mode(false, RangeDeleteMode::Tombstones);
}
