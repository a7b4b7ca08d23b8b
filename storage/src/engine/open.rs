//! Opening an engine: directory lock, manifest replay, orphan removal, WAL replay.
//!
//! Crash safety of the sequence: replayed WAL data is first written to a level-0 SST (fsynced),
//! then a fresh manifest naming it is made current (the commit point), and only then are the old
//! WALs and manifest deleted. A crash anywhere before the commit point leaves the old state intact
//! plus an orphan SST, which the next open deletes.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::background::Background;
use super::deletes::{Deletes, RangeDeletes};
use super::health::Health;
use super::{Counters, Files, Inner, MetaState, SuperVersion, Tuning, WriterState};
use crate::batch::{BatchOp, EntryKind};
use crate::cache::PageCache;
use crate::compaction::executor::{write_tables, OutputSpec};
use crate::compaction::retention::Retention;
use crate::error::IoContext;
use crate::fade::{Deadlines, DeleteStamp};
use crate::filter::global::GlobalSpec;
use crate::fs::{parse_name, sync_dir, wal_name, FileKind};
use crate::gloran::drtree::{self, DrTree, DrWriter};
use crate::gloran::eve::Eve;
use crate::gloran::piece::combine;
use crate::iter::EntryCursor;
use crate::ledger::Ledger;
use crate::memtable::{MemCursor, Memtable};
use crate::snapshot::SnapshotList;
use crate::sst::Table;
use crate::version::{Manifest, Opened, RecoveredManifest, Version, VersionEdit};
use crate::wal::{self, Wal};
use crate::{Error, Options, RangeDeleteMode, Result};

fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(&path).at(&path)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

struct DirListing {
    tables: BTreeSet<u64>,
    trees: BTreeSet<u64>,
    wals: BTreeSet<u64>,
    manifests: BTreeSet<u64>,
    ledgers: Vec<u64>,
    temps: Vec<std::path::PathBuf>,
    max_id: u64,
}

fn list_dir(dir: &Path) -> Result<DirListing> {
    let mut l = DirListing {
        tables: BTreeSet::new(),
        trees: BTreeSet::new(),
        wals: BTreeSet::new(),
        manifests: BTreeSet::new(),
        ledgers: Vec::new(),
        temps: Vec::new(),
        max_id: 0,
    };
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let Some(kind) = entry.file_name().to_str().and_then(parse_name) else { continue };
        match kind {
            FileKind::Table(n) => {
                l.tables.insert(n);
                l.max_id = l.max_id.max(n);
            }
            FileKind::Wal(n) => {
                l.wals.insert(n);
                l.max_id = l.max_id.max(n);
            }
            FileKind::RangeIndex(n) => {
                l.trees.insert(n);
                l.max_id = l.max_id.max(n);
            }
            FileKind::Manifest(n) => {
                l.manifests.insert(n);
                l.max_id = l.max_id.max(n);
            }
            FileKind::Ledger(n) => {
                l.ledgers.push(n);
                l.max_id = l.max_id.max(n);
            }
            FileKind::Temp => l.temps.push(entry.path()),
        }
    }
    Ok(l)
}

/// Opens a live SST, finishing an interrupted time-window delete first: bytes appended past the
/// recorded size were never committed (cut off), and regions the committed layout does not read
/// are punched out (again), so a crash cannot leave deleted data behind.
fn open_table(dir: &Path, meta: &crate::sst::FileMeta, cache: &Arc<PageCache>) -> Result<Table> {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(crate::sst::file_name(meta.id));
    let md = std::fs::metadata(&path).at(&path)?;
    if md.nlink() > 1 {
        // Shared with a checkpoint: never edited in place (see `kiwi::drop`).
        return Table::open(dir, meta.clone(), cache.clone());
    }
    let len = md.len();
    if len > meta.size {
        tracing::warn!(path = %path.display(), len, size = meta.size, "cutting uncommitted tail");
        let f = OpenOptions::new().write(true).open(&path).at(&path)?;
        f.set_len(meta.size).at(&path)?;
        crate::fs::sync_file(&f, &path)?;
    }
    let table = Table::open(dir, meta.clone(), cache.clone())?;
    let unread = crate::kiwi::punch::gaps(&table.referenced_regions(), meta.size);
    crate::kiwi::punch::punch(&path, &unread)?;
    Ok(table)
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Rebuilds EVE from every piece of the range index, oldest delete first (so each estimator's
/// largest sequence number bounds everything in older estimators).
fn rebuild_eve(version: &Version, opts: &Options) -> Result<Eve> {
    let ri = &opts.range_index;
    let mut eve =
        Eve::new(ri.eve_initial_capacity, ri.eve_bits_per_record, ri.eve_seq_slots_per_record);
    let mut pieces = Vec::new();
    for t in version.all_trees() {
        pieces.extend(t.pieces()?);
    }
    pieces.sort_by_key(|p| p.max_seq());
    for p in &pieces {
        eve.insert(&p.lo, &p.hi, p.max_seq());
    }
    Ok(eve)
}

pub(super) fn open(dir: &Path, opts: Options) -> Result<Inner> {
    opts.validate()?;
    crate::durable::create_dir_all(dir).at(dir)?;
    // The directory's own entry is durable before anything in it is relied on.
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    let lock_file = lock_dir(dir)?;
    let listing = list_dir(dir)?;
    let recovered = match Manifest::recover(dir)? {
        Some(r) => r,
        None if !listing.tables.is_empty() => {
            return Err(Error::corruption(
                dir.join("CURRENT"),
                0,
                "CURRENT is missing but table files exist; refusing to treat the directory as new",
            ));
        }
        None => RecoveredManifest { next_file_id: 1, ..Default::default() },
    };
    let next_file_id = AtomicU64::new(recovered.next_file_id.max(listing.max_id + 1).max(1));
    let alloc = || next_file_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);

    for t in &listing.temps {
        remove(t)?;
    }
    for id in &listing.tables {
        if !recovered.files.contains_key(id) {
            tracing::info!(file = id, "removing orphan SST");
            remove(&dir.join(crate::sst::file_name(*id)))?;
        }
    }

    for id in &listing.trees {
        if !recovered.rd_files.contains_key(id) {
            tracing::info!(file = id, "removing orphan range-index file");
            remove(&dir.join(drtree::file_name(*id)))?;
        }
    }

    // The mode is recorded in the manifest; older directories are judged by their files.
    if let Some(created) = recovered.range_delete_mode.filter(|m| *m != opts.range_delete_mode) {
        return Err(Error::InvalidArgument(format!(
            "the engine was created in {created} range-delete mode"
        )));
    }
    let tombstone_files = recovered.files.values().any(|(_, m)| m.props.range_tombstones > 0);
    match opts.range_delete_mode {
        RangeDeleteMode::Tombstones if !recovered.rd_files.is_empty() => {
            return Err(Error::InvalidArgument(
                "the engine was created in GLORAN range-delete mode".into(),
            ));
        }
        RangeDeleteMode::Gloran if tombstone_files => {
            return Err(Error::InvalidArgument(
                "the engine was created in tombstone range-delete mode".into(),
            ));
        }
        _ => {}
    }
    let cache = Arc::new(PageCache::new(opts.page_cache_bytes));
    let mut opened = Opened::default();
    let mut edit = recovered.snapshot_edit();
    edit.range_delete_mode = Some(opts.range_delete_mode);
    let level_err = |id: &u64, level: &u32, max: usize| {
        Error::InvalidArgument(format!(
            "file {id} is at level {level} but only {max} are configured"
        ))
    };
    for (id, (level, meta)) in &recovered.files {
        if *level as usize >= opts.num_levels {
            return Err(level_err(id, level, opts.num_levels));
        }
        let table = Arc::new(open_table(dir, meta, &cache)?);
        opened.tables.insert(*id, table);
    }
    let rd_levels = opts.range_index.num_levels;
    for (id, (level, meta)) in &recovered.rd_files {
        if *level as usize >= rd_levels {
            return Err(level_err(id, level, rd_levels));
        }
        opened.trees.insert(*id, Arc::new(DrTree::open(dir, meta.clone())?));
    }
    let mut version =
        Version::new(opts.num_levels, rd_levels, GlobalSpec::of(&opts)).apply(&edit, &opened);
    version.check_invariants().map_err(|why| {
        Error::corruption(dir.join(crate::fs::manifest_name(recovered.number)), 0, why.to_string())
    })?;

    let mut ledger = Ledger::open(dir, &listing.ledgers, alloc())?;
    // The file holds records forgotten since it was last rewritten.
    ledger.prune(opts.clock.now_ms(), opts.ledger_keep(), alloc)?;
    let deadlines = opts.delete_deadline.map(Deadlines::new);

    // Replay WALs not yet covered by flushed SSTs.
    let mem = Arc::new(Memtable::new(0, 0)); // only iterated, never probed
    let mut last_seq = recovered.persisted_seq;
    last_seq =
        last_seq.max(version.all_tables().map(|t| t.meta().props.max_seq).max().unwrap_or(0));
    last_seq = last_seq.max(version.all_trees().map(|t| t.meta().props.max_seq).max().unwrap_or(0));
    let newest_wal = listing.wals.last().copied();
    for &n in listing.wals.iter().filter(|&&n| n >= recovered.log_number) {
        for (seq, batch) in wal::replay(&dir.join(wal_name(n)), Some(n) == newest_wal)? {
            if seq <= recovered.persisted_seq {
                continue;
            }
            if seq <= last_seq {
                return Err(Error::corruption(
                    dir.join(wal_name(n)),
                    0,
                    format!("batch sequence {seq} is not above {last_seq}"),
                ));
            }
            let issued = batch.issued_at().unwrap_or_else(|| opts.clock.now_ms());
            let deadline = super::deletes::batch_deadline(deadlines, &batch, issued);
            if ledger.issue_batch(&batch, seq, issued, deadline, opts.clock.now_ms()) {
                mem.note_delete_due(super::deletes::due_base(deadlines, issued, deadline));
            }
            for (i, op) in batch.ops().iter().enumerate() {
                let s = seq + i as u64;
                match op {
                    BatchOp::Put { key, value } => {
                        mem.insert(key, s, EntryKind::Put, value.clone())
                    }
                    BatchOp::Delete { key } => {
                        mem.insert(key, s, EntryKind::Delete, bytes::Bytes::new())
                    }
                    BatchOp::DeleteRange { lo, hi } => mem.insert_range(lo.clone(), hi.clone(), s),
                    BatchOp::DeleteTimeRange { .. } => mem.record_delete(s),
                }
                last_seq = s;
            }
        }
    }
    let mut persisted_seq = recovered.persisted_seq;
    if !mem.is_empty() {
        let mut cursor = MemCursor::new(mem.clone());
        cursor.seek(&[])?;
        let spec = OutputSpec {
            dir,
            opts: &opts,
            cache: &cache,
            tile_pages: 1,
            range_filter: opts
                .range_filter
                .as_ref()
                .map(|f| crate::filter::RangeFilterSpec::for_range(f, f.default_range)),
            target_file_size: u64::MAX,
            retention: Retention::new(Vec::new(), false),
            ranges: None,
            rd_applied: 0,
            tombstones: if opts.range_delete_mode == RangeDeleteMode::Tombstones {
                combine(&[&mem.ranges.pieces()], Some(&[]), 0)
            } else {
                Vec::new()
            },
            stamp: &|seq| DeleteStamp {
                seq,
                ms: ledger.get(seq).map_or_else(
                    || opts.clock.now_ms(),
                    |d| super::deletes::due_base(deadlines, d.issued_at_ms, d.deadline_ms),
                ),
            },
            inherited: Vec::new(),
            expired: None,
            bottommost: false,
            next_id: &alloc,
            fail: None,
        };
        let (tables, _) = write_tables(&mut cursor, &spec)?;
        let mut new_opened = Opened::tables(tables.iter().cloned());
        let mut add_edit = VersionEdit {
            added: tables.iter().map(|t| (0u32, t.meta().clone())).collect(),
            ..Default::default()
        };
        let pieces = combine(&[&mem.ranges.pieces()], Some(&[]), 0);
        if !pieces.is_empty() && opts.range_delete_mode == RangeDeleteMode::Gloran {
            let id = alloc();
            let mut w = DrWriter::create(
                id,
                &dir.join(drtree::file_name(id)),
                opts.range_index.page_size,
                opts.range_index.fanout,
            )?;
            for p in &pieces {
                w.add(p)?;
            }
            let tree = Arc::new(DrTree::open(dir, w.finish()?)?);
            add_edit.rd_added.push((0, tree.meta().clone()));
            new_opened.trees.insert(tree.id(), tree);
        }
        version = version.apply(&add_edit, &new_opened);
        edit.added.extend(add_edit.added);
        edit.rd_added.extend(add_edit.rd_added);
        persisted_seq = mem.max_seq();
    }
    let eve = rebuild_eve(&version, &opts)?;

    // The replayed deletes are recorded before the WALs holding them go.
    ledger.sync()?;

    // Commit the recovered state into a fresh manifest, then drop what it supersedes.
    let wal_number = if opts.wal { alloc() } else { 0 };
    let log_number = if opts.wal { wal_number } else { recovered.log_number };
    let manifest_number = alloc();
    edit.persisted_seq = Some(persisted_seq);
    edit.log_number = Some(log_number);
    edit.next_file_id = Some(next_file_id.load(std::sync::atomic::Ordering::Relaxed));
    let manifest = Manifest::create(dir, manifest_number, &edit, opts.fail_points.clone())?;
    for n in &listing.manifests {
        remove(&dir.join(crate::fs::manifest_name(*n)))?;
    }
    for n in &listing.wals {
        if !opts.wal || *n < log_number {
            remove(&dir.join(wal_name(*n)))?;
        }
    }
    sync_dir(dir)?;
    let wal =
        if opts.wal { Some(Wal::create(dir, wal_number, opts.fail_points.clone())?) } else { None };

    let sv = SuperVersion {
        mem: Arc::new(
            Memtable::new(wal_number, opts.write_buffer_size)
                .summarized(opts.page_summary.as_ref(), &opts.delete_key),
        ),
        imms: Vec::new(),
        version: Arc::new(version),
    };
    tracing::info!(dir = %dir.display(), last_seq, persisted_seq, "engine opened");
    if let Some(b) = &opts.write_budget {
        b.opened(true); // until the `Inner` is dropped
    }
    Ok(Inner {
        dir: dir.to_path_buf(),
        cache,
        sv: RwLock::new(Arc::new(sv)),
        writer: Mutex::new(WriterState { wal, last_seq }),
        wal_synced: Mutex::new(Default::default()),
        meta: Mutex::new(MetaState {
            manifest,
            persisted_seq,
            log_number,
            retention: recovered.retention.clone(),
        }),
        visible_seq: AtomicU64::new(last_seq),
        snapshots: Arc::new(SnapshotList::default()),
        counters: Counters::default(),
        files: Files { next_id: next_file_id, retired: Mutex::new(Vec::new()) },
        deletes: Deletes::new(
            ledger,
            match opts.range_delete_mode {
                RangeDeleteMode::Gloran => RangeDeletes::Gloran { eve: RwLock::new(eve) },
                RangeDeleteMode::Tombstones => RangeDeletes::Tombstones,
            },
            super::retention::rules_of(&recovered.retention),
            opts.external_log,
        ),
        background: Background::new(),
        health: Health::default(),
        tuning: Tuning {
            layout: super::layout::LayoutState::new(opts.clock.now_ms()),
            reduce_hints: Default::default(),
            budget_held: Default::default(),
        },
        opts,
        _lock_file: lock_file,
    })
}
