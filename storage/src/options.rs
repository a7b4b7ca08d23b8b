//! Engine configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::failpoint::FailPoints;

/// Page compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Pages are stored uncompressed.
    None,
    /// LZ4 block compression.
    Lz4,
    /// Zstandard at the given level.
    Zstd(i32),
}

/// Extracts the delete key `D` (for time-series keys: the timestamp) from a sort key.
///
/// `D` must be a function of the sort key, so every version of a key has the same delete key and a
/// delete on `D` can never resurrect an older version.
#[derive(Clone)]
pub struct DeleteKeyExtractor(Arc<DeleteKeyFn>);

/// The function type behind a [`DeleteKeyExtractor`].
pub type DeleteKeyFn = dyn Fn(&[u8]) -> u64 + Send + Sync;

impl DeleteKeyExtractor {
    /// Wraps a function.
    pub fn new(f: impl Fn(&[u8]) -> u64 + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// The time-series default: the trailing 8 bytes of the key as a big-endian `u64` (EbbDB keys end
    /// in the timestamp with its sign bit flipped, so this order is time order). Keys shorter than 8
    /// bytes have delete key 0.
    pub fn trailing_u64_be() -> Self {
        Self::new(|key: &[u8]| {
            if key.len() < 8 {
                return 0;
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&key[key.len() - 8..]);
            u64::from_be_bytes(b)
        })
    }

    /// Every key has delete key 0: pages inside a tile keep plain key order.
    pub fn constant() -> Self {
        Self::new(|_| 0)
    }

    /// Applies the extractor.
    #[inline]
    pub fn extract(&self, key: &[u8]) -> u64 {
        (self.0)(key)
    }
}

impl fmt::Debug for DeleteKeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DeleteKeyExtractor")
    }
}

/// Converts wall-clock time (ms since the Unix epoch) into delete-key units, so retention
/// horizons can be compared with delete keys.
#[derive(Clone)]
pub struct TimeToDeleteKey(Arc<dyn Fn(u64) -> u64 + Send + Sync>);

impl TimeToDeleteKey {
    /// EbbDB keys: nanoseconds as an `i64` with the sign bit flipped (so byte order is time
    /// order), read by [`DeleteKeyExtractor::trailing_u64_be`].
    pub fn nanos_sign_flipped() -> Self {
        TimeToDeleteKey(Arc::new(|ms| (ms.saturating_mul(1_000_000) as i64 as u64) ^ (1 << 63)))
    }

    /// Delete keys that are milliseconds since the Unix epoch.
    pub fn millis() -> Self {
        TimeToDeleteKey(Arc::new(|ms| ms))
    }

    /// Applies the conversion.
    pub fn convert(&self, ms: u64) -> u64 {
        (self.0)(ms)
    }
}

impl fmt::Debug for TimeToDeleteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TimeToDeleteKey")
    }
}

/// When the engine's WAL is fsynced. A process crash loses no write that returned under any
/// mode (each reaches the OS before returning); a power cut or kernel crash loses what was not
/// fsynced. A memtable's WAL is always fsynced when the memtable is sealed, and flushes and
/// manifest commits always fsync, so only the newest WAL can lose a tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncMode {
    /// A write returns, and becomes visible to reads, only once an fsync covers it. Writers
    /// that arrive while an fsync runs share the next one (group commit). A power cut loses no
    /// write that returned.
    Always,
    /// Writes return at once; a background thread fsyncs the WAL this often. A power cut loses
    /// at most the writes of the last interval and of the fsync under way.
    Interval(Duration),
    /// Writes return at once and are fsynced only when their memtable is sealed or flushed. A
    /// power cut loses what the operating system had not yet written back (typically up to
    /// 30 s of writes on Linux).
    None,
}

/// Engine options. [`Options::default`] gives sane values for a time-series shard.
#[derive(Debug, Clone)]
pub struct Options {
    /// Keep an engine-owned write-ahead log. Off when the caller (Raft) is the log: then writes not
    /// yet flushed are lost on a crash and the caller replays them after [`crate::Engine::persisted_seq`].
    pub wal: bool,
    /// When the WAL is fsynced, and so what a power cut can lose (see [`SyncMode`]).
    pub sync: SyncMode,
    /// Size of one memtable in bytes; a full memtable is sealed and flushed in the background.
    pub write_buffer_size: usize,
    /// Sealed memtables waiting for flush before writes stall.
    pub max_immutable_memtables: usize,
    /// A non-empty memtable older than this is sealed and flushed even if it is not full.
    pub memtable_max_age: Option<Duration>,
    /// Number of level-0 files that triggers a level-0 compaction.
    pub level0_compaction_trigger: usize,
    /// Number of level-0 files at which writes stall until compaction catches up.
    pub level0_stop_writes_trigger: usize,
    /// Size ratio T between adjacent levels.
    pub size_ratio: u32,
    /// Target size of level 1 in bytes; level i targets `base_level_size * T^(i-1)`.
    pub base_level_size: u64,
    /// Number of levels including level 0.
    pub num_levels: usize,
    /// Level-Renaming (RangeReduce): when the deepest non-empty level reaches its target size
    /// and the level below it is empty, every level from 1 down moves one level deeper in one
    /// manifest edit (no data is rewritten), instead of compacting file by file into the empty
    /// level; each renamed level is then about `1 / T` full. Off by default.
    pub level_renaming: bool,
    /// RangeReduce's Bounded-Merge (see `engine::reduce`): `Some(ratio)` lets a range scan
    /// that merged the levels trigger a compaction of the level-`i` files in its range into
    /// level `i + 1` when level `i` holds at least half a file of the range and at least
    /// `ratio` times what level `i + 1` holds of it (the paper's best ratio is about `1 / T`).
    /// Off (`None`) by default.
    pub range_reduce: Option<f64>,
    /// Target size of one SST file produced by compaction.
    pub target_file_size: u64,
    /// Target size of one page before compression.
    pub page_size: usize,
    /// KiWi+ delete-tile sizes h (pages per tile): tuned from the measured workload (the
    /// default), or fixed per level.
    pub tiles: TileLayout,
    /// Bloom filter bits per key (0 disables filters).
    pub bloom_bits_per_key: u32,
    /// Range filters (Rosetta) in new files, probed before a one-series range scan opens a
    /// file; `None` builds none.
    pub range_filter: Option<crate::filter::RangeFilterOptions>,
    /// GRF, adapted (see `filter::global`): one range filter per engine version naming the
    /// runs (level-0 files, deeper levels) that may hold a one-series range, probed once per
    /// scan instead of once per file. Cells use `range_filter`'s key length and its default
    /// bucket width, so it needs `range_filter`. Costs one merge of the filter per flush and
    /// compaction, and a read of every file's keys at open. Off by default.
    pub global_range_filter: bool,
    /// Page compression.
    pub compression: Compression,
    /// Summarizes the values of every page written (per-column aggregates, say), so
    /// [`crate::Engine::scan_summarized`] can answer from a page's summary without reading the
    /// page. `None` (the default) stores none.
    pub page_summary: Option<std::sync::Arc<dyn crate::sst::PageSummarizer>>,
    /// Memtable memory shared with other engines (see [`crate::WriteBudget`]); `None`: this
    /// engine's memtables are bounded by `write_buffer_size` alone.
    pub write_budget: Option<std::sync::Arc<crate::WriteBudget>>,
    /// Capacity of the decoded page cache in bytes.
    ///
    /// Memory use is bounded by this, plus memtables (`write_buffer_size` times
    /// `1 + max_immutable_memtables`), plus the per-table filters and indexes, which grow with
    /// the data and are reported by [`crate::EngineStats::table_memory_bytes`].
    pub page_cache_bytes: usize,
    /// Delete-key extractor used by the KiWi layout.
    pub delete_key: DeleteKeyExtractor,
    /// Converts clock time into delete-key units (retention horizons).
    pub time_to_delete_key: TimeToDeleteKey,
    /// How range deletes are stored.
    pub range_delete_mode: RangeDeleteMode,
    /// The range-delete index (GLORAN mode).
    pub range_index: RangeIndexOptions,
    /// The delete deadline `D_th`: every delete is physically gone from the engine's files,
    /// memtables and WAL this long after it was issued (FADE). `None` turns deadline-driven
    /// compaction off (saturation-only compaction, the baseline); the ledger still records
    /// when each delete became persistent.
    pub delete_deadline: Option<Duration>,
    /// How long the deletion ledger keeps a delete after it became persistent.
    pub ledger_retention: Duration,
    /// The most persisted deletes the ledger keeps (it holds its records in memory, about a
    /// kilobyte each): past it the oldest are forgotten before `ledger_retention` ends.
    pub ledger_max_persisted: usize,
    /// The caller keeps the writes in a log of its own as well (a Raft log, usually with
    /// `wal` off): a delete is persisted only once that log no longer holds data it covers,
    /// which the caller reports with [`crate::Engine::set_log_clearance`].
    pub external_log: bool,
    /// Wall clock for deadlines and the ledger (a manual clock in tests).
    pub clock: Clock,
    /// Run flushes and compactions on background threads (the default). Off, they run inline:
    /// in the writer when memtables or level 0 are full, and in `wait_for_background`, so a
    /// sequence of calls always does the same work (deterministic tests and simulations).
    pub background_threads: bool,
    /// Fail points for crash testing; empty (and free) in production.
    pub fail_points: FailPoints,
}

/// How range deletes are stored. Fixed when the engine is created, and recorded in its
/// manifest (encoded by variant index: the order of the variants is part of the format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum RangeDeleteMode {
    /// GLORAN: one global index of key x sequence rectangles (the default).
    #[default]
    Gloran,
    /// The RocksDB way, kept as the baseline benchmarks compare against: fragmented range
    /// tombstones in memtables and in a block of every SST, checked on every lookup and carried
    /// down by compaction until the bottommost level.
    Tombstones,
}

impl std::fmt::Display for RangeDeleteMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RangeDeleteMode::Gloran => "GLORAN",
            RangeDeleteMode::Tombstones => "tombstone",
        })
    }
}

/// How the KiWi+ delete-tile size h of each level is chosen.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TileLayout {
    /// Fixed sizes per level, level 0 first; the last value repeats for deeper levels. `1`
    /// everywhere is the classic layout.
    Fixed(Vec<usize>),
    /// Files written from now on follow the KiWi+ cost model on the operations the engine
    /// counted in recent epochs (see [`crate::Engine::layout`]).
    Tuned(LayoutTuning),
}

/// Settings of the tuned layout.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutTuning {
    /// Length of one counting epoch; the layout is recomputed when one ends.
    pub epoch: Duration,
    /// The mix assumed per epoch before a whole epoch was counted, once retention or a
    /// time-window delete is present (without them every level keeps h = 1).
    pub default_mix: crate::kiwi::WorkloadMix,
}

impl Default for LayoutTuning {
    fn default() -> Self {
        LayoutTuning {
            epoch: Duration::from_secs(300),
            // A time-series mix: a hundred short one-series scans and lookups per retention
            // purge or time delete (h > 1 from level 1 at the default file size).
            default_mix: crate::kiwi::WorkloadMix {
                empty_lookups: 100.0,
                lookups: 100.0,
                short_scans: 100.0,
                window_deletes: 1.0,
            },
        }
    }
}

/// Settings of the global range-delete index (the LSM-DRtree and EVE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeIndexOptions {
    /// Target size of a DR-tree leaf page.
    pub page_size: usize,
    /// DR-tree fanout D (children per internal node).
    pub fanout: usize,
    /// Index level-0 DR-trees (one per memtable flush with range deletes) that trigger a merge.
    pub level0_trigger: usize,
    /// Size ratio between index levels.
    pub size_ratio: u32,
    /// Capacity of index level 1 in pieces; level i holds `base_level_pieces * T^(i-1)`.
    pub base_level_pieces: u64,
    /// Index levels including level 0.
    pub num_levels: usize,
    /// Range deletes the first EVE estimator holds (each next one doubles).
    pub eve_initial_capacity: usize,
    /// EVE filter bits per range delete.
    pub eve_bits_per_record: u32,
    /// EVE sequence-sketch slots (4 bytes each) per range delete; they let EVE answer "live" for
    /// keys written again after a range delete covered them. 0 disables the sketch.
    pub eve_seq_slots_per_record: u32,
}

impl Default for RangeIndexOptions {
    fn default() -> Self {
        RangeIndexOptions {
            page_size: 4096,
            fanout: 64,
            level0_trigger: 4,
            size_ratio: 10,
            base_level_pieces: 16 << 10,
            num_levels: 6,
            eve_initial_capacity: 64 << 10,
            eve_bits_per_record: 24,
            eve_seq_slots_per_record: 4,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            wal: true,
            sync: SyncMode::Always,
            write_buffer_size: 64 << 20,
            max_immutable_memtables: 2,
            memtable_max_age: Some(Duration::from_secs(600)),
            level0_compaction_trigger: 4,
            level0_stop_writes_trigger: 20,
            size_ratio: 10,
            base_level_size: 256 << 20,
            num_levels: 7,
            level_renaming: false,
            range_reduce: None,
            target_file_size: 64 << 20,
            page_size: 4096,
            tiles: TileLayout::Tuned(LayoutTuning::default()),
            bloom_bits_per_key: 10,
            range_filter: Some(crate::filter::RangeFilterOptions::default()),
            global_range_filter: false,
            compression: Compression::Lz4,
            page_summary: None,
            page_cache_bytes: 64 << 20,
            write_budget: None,
            delete_key: DeleteKeyExtractor::trailing_u64_be(),
            time_to_delete_key: TimeToDeleteKey::nanos_sign_flipped(),
            range_delete_mode: RangeDeleteMode::Gloran,
            range_index: RangeIndexOptions::default(),
            delete_deadline: Some(Duration::from_secs(24 * 3600)),
            ledger_retention: Duration::from_secs(30 * 24 * 3600),
            ledger_max_persisted: 100_000,
            external_log: false,
            clock: Clock::system(),
            background_threads: true,
            fail_points: FailPoints::default(),
        }
    }
}

impl Options {
    /// What the deletion ledger keeps ([`Options::ledger_retention`],
    /// [`Options::ledger_max_persisted`]).
    pub(crate) fn ledger_keep(&self) -> crate::ledger::Keep {
        crate::ledger::Keep {
            retention_ms: self.ledger_retention.as_millis().min(u64::MAX as u128) as u64,
            max_persisted: self.ledger_max_persisted,
        }
    }

    /// Fixes the tile sizes from the KiWi+ cost model ([`crate::kiwi::tile_pages`]) for `mix`,
    /// with this configuration's levels, size ratio, pages per file and Bloom filter
    /// false-positive rate (what [`TileLayout::Tuned`] computes from measured counts).
    pub fn with_tuned_tiles(mut self, mix: &crate::kiwi::WorkloadMix) -> Self {
        self.tiles = TileLayout::Fixed(crate::kiwi::layout_for(&self, mix));
        self
    }

    /// Pages per file at the target file size (the cost model's P), at most 4096.
    pub fn pages_per_file(&self) -> usize {
        (self.target_file_size / self.page_size.max(1) as u64).clamp(1, 4096) as usize
    }

    /// The Bloom filter false-positive rate with the optimal number of probes (`0.6185^bits`).
    pub fn bloom_fpr(&self) -> f64 {
        0.6185f64.powf(f64::from(self.bloom_bits_per_key)).min(1.0)
    }

    /// Target byte size of `level` (level >= 1).
    pub fn level_target_size(&self, level: usize) -> u64 {
        let t = self.size_ratio.max(2) as u64;
        let mut size = self.base_level_size.max(1);
        for _ in 1..level {
            size = size.saturating_mul(t);
        }
        size
    }

    /// Checks the options for values the engine cannot work with.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::InvalidArgument(m.to_string()));
        if self.write_buffer_size < 1024 {
            return bad("write_buffer_size must be at least 1 KiB");
        }
        if self.num_levels < 2 || self.num_levels > 16 {
            return bad("num_levels must be between 2 and 16");
        }
        if self.size_ratio < 2 {
            return bad("size_ratio must be at least 2");
        }
        if self.page_size < 64 || self.page_size > (16 << 20) {
            return bad("page_size must be between 64 bytes and 16 MiB");
        }
        match &self.tiles {
            TileLayout::Fixed(h) if h.iter().any(|&h| h == 0 || h > 4096) => {
                return bad("tile sizes must be between 1 and 4096 pages");
            }
            TileLayout::Tuned(t) if t.epoch < Duration::from_secs(1) => {
                return bad("the layout tuning epoch must be at least 1 s");
            }
            _ => {}
        }
        if self.level0_stop_writes_trigger <= self.level0_compaction_trigger {
            return bad("level0_stop_writes_trigger must exceed level0_compaction_trigger");
        }
        if self.max_immutable_memtables == 0 {
            return bad("max_immutable_memtables must be at least 1");
        }
        if matches!(self.sync, SyncMode::Interval(i) if i.is_zero() || i > Duration::from_secs(60))
        {
            return bad("the WAL sync interval must be between 1 ms and 60 s");
        }
        if self.delete_deadline.is_some_and(|d| d.as_millis() < 10) {
            return bad("delete_deadline must be at least 10 ms");
        }
        let ri = &self.range_index;
        if ri.fanout < 2 || ri.num_levels < 2 || ri.size_ratio < 2 || ri.level0_trigger == 0 {
            return bad("range_index: fanout, num_levels and size_ratio must be at least 2");
        }
        if ri.page_size < 256 || ri.base_level_pieces == 0 || ri.eve_initial_capacity == 0 {
            return bad("range_index: page_size >= 256, base_level_pieces and capacity > 0");
        }
        if let Some(f) = &self.range_filter {
            if f.key_len < 8 || f.key_len > 1024 || !(0.0..=64.0).contains(&f.bits_per_key) {
                return bad("range_filter: key_len 8..=1024 bytes, bits_per_key 0..=64");
            }
            if f.range_buckets == 0 || f.default_range == 0 {
                return bad("range_filter: range_buckets and default_range must be positive");
            }
        }
        if self.global_range_filter && self.range_filter.is_none() {
            return bad("global_range_filter needs range_filter (its key length and bucket width)");
        }
        if self.range_reduce.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return bad("range_reduce: the ratio must be a positive number");
        }
        if let Compression::Zstd(l) = self.compression {
            if !(1..=22).contains(&l) {
                return bad("zstd level must be between 1 and 22");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kiwi::WorkloadMix;

    #[test]
    fn tuned_tiles_follow_the_cost_model_and_validate() {
        let mix = WorkloadMix {
            empty_lookups: 50_000.0,
            lookups: 50_000.0,
            short_scans: 1_000.0,
            window_deletes: 1.0,
        };
        let opts = Options::default().with_tuned_tiles(&mix);
        let TileLayout::Fixed(h) = &opts.tiles else { panic!("not fixed") };
        assert_eq!(h.len(), opts.num_levels);
        assert_eq!(h[0], 1, "level 0 keeps the classic layout: {h:?}");
        assert!(h[1] > 1, "h > 1 from level 1: {h:?}");
        assert!(h.windows(2).all(|w| w[0] <= w[1]), "{h:?}");
        assert!(h.last() > h.get(1), "{h:?}");
        assert!(h.iter().all(|&x| (1..=opts.pages_per_file()).contains(&x)));
        opts.validate().unwrap();
        // No time-window deletes expected: the classic layout.
        let none = Options::default().with_tuned_tiles(&WorkloadMix { window_deletes: 0.0, ..mix });
        assert_eq!(none.tiles, TileLayout::Fixed(vec![1; none.num_levels]));
    }
}
