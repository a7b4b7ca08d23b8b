//! Key and value generation matching RocksDB's `db_bench`.

use rand::{Rng, RngCore, SeedableRng};

/// A `db_bench`-style key: the key number big-endian in the first 8 bytes, then `'0'` padding.
pub fn db_bench_key(n: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&n.to_be_bytes()[..key_size.min(8)]);
    out.resize(key_size, b'0');
}

/// Deterministic random source for a benchmark phase.
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// A uniformly random key number in `[0, n)`.
pub fn random_key(rng: &mut impl Rng, n: u64) -> u64 {
    rng.gen_range(0..n)
}

/// A pool of random value bytes; values are slices of it (as `db_bench` does).
pub fn value_pool(rng: &mut impl RngCore, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// When a benchmark's writes are made durable, applied to EbbDB and to its baseline alike and
/// printed with the settings (`sync=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WriteSync {
    /// No fsync per write: EbbDB [`ebb_storage::SyncMode::None`], RocksDB `sync=false` (both
    /// keep their write-ahead log, written back by the operating system).
    Off,
    /// An fsync before each write returns: EbbDB [`ebb_storage::SyncMode::Always`], RocksDB
    /// `WriteOptions::sync`.
    Always,
}

impl WriteSync {
    /// The engine's setting.
    pub fn engine(self) -> ebb_storage::SyncMode {
        match self {
            WriteSync::Off => ebb_storage::SyncMode::None,
            WriteSync::Always => ebb_storage::SyncMode::Always,
        }
    }

    /// RocksDB's `WriteOptions::sync` (and `db_bench --sync`).
    pub fn rocksdb(self) -> bool {
        self == WriteSync::Always
    }

    /// As printed: `off` or `always`.
    pub fn name(self) -> &'static str {
        match self {
            WriteSync::Off => "off",
            WriteSync::Always => "always",
        }
    }
}
