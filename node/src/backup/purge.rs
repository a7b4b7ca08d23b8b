//! Deletes reaching backup sets: every request in a destination's deletion journal is applied
//! to every set there that may lack it, with the engine's own machinery. A purge downloads the
//! set's part, opens it as a database, applies each request as a shard does (a request the
//! part already holds is answered from its ledger and changes nothing), purges what its own
//! retention rules expire, compacts so covered data is physically gone (GLORAN rectangles and
//! page drops rewrite every file holding it), checkpoints, uploads the files that changed and
//! writes the set's next generation, which records the requests (`purged`). Objects no
//! manifest names any more (the files that held the deleted data) are then removed. All of it
//! runs under the destination's exclusive lock, so no backup reuses an object being removed.
//!
//! A journal entry is removed once every set holds its request (it completed before the set
//! began, or a purge applied it); a backup taken after that started after the request
//! completed, so it holds it too.

use std::path::{Path, PathBuf};

use super::registry::Registry;
use ebb_backup::crypto::{KeyDir, ObjectKeys, SetEncryption};
use ebb_backup::journal::JournalEntry;
use ebb_backup::transfer::{download_part, upload_part, Encrypting, HashCache, PartSource};
use ebb_backup::{BackupError, BackupSet, BackupStore, Lock, LockKind, Progress, Purged, SetKind};
use ebb_query::db::Database;

use super::journal::intent_of;

/// What one pass over a destination did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PurgeReport {
    /// Sets rewritten, with the requests applied to each.
    pub sets: Vec<(String, Vec<u64>)>,
    /// Journal entries removed (every set holds them).
    pub entries_removed: u64,
    /// Objects removed.
    pub objects_removed: u64,
}

fn source(e: impl std::error::Error + Send + Sync + 'static) -> BackupError {
    BackupError::Source(Box::new(e))
}

/// Applies `entries` to the engine in `dir` (a part of a set of `kind`), then purges what its
/// retention rules expire and compacts the files that hold keys a delete not yet persisted
/// covers (every file, if those deletes span too many ranges), so nothing the requests cover
/// is left in any file while files of other keys keep their objects: the database, open.
/// Blocks.
///
/// A cluster's part is a shard replica's engine, whose writes its Raft log holds instead of a
/// write-ahead log: it is opened without one (the changes made here are flushed before the
/// part is taken again), and what it records of its group (the last entry applied) is left as
/// it is, so a restore seeds the group where the part was taken.
pub fn apply_journal(
    dir: &Path,
    entries: &[JournalEntry],
    kind: SetKind,
) -> Result<Database, BackupError> {
    let db = Database::open(dir, part_options(kind)).map_err(source)?;
    for e in entries {
        let intent = intent_of(e)?;
        let Some(op) = &intent.op else {
            return Err(BackupError::Manifest {
                set: "journal".into(),
                object: e.key().to_string(),
                why: "a request of an older build (no typed change)".into(),
            });
        };
        match ebb_query::sql::shard::op::apply(&db, op, &intent.request()) {
            Ok(_) => {}
            // Nothing of it here (its table is not in this part, say).
            Err(err) if err.is_client_error() => {}
            Err(err) => return Err(source(err)),
        }
    }
    db.purge_expired().map_err(source)?;
    db.flush().map_err(source)?;
    let engine = db.engine();
    match covered_ranges(&engine.deletions()) {
        Some(ranges) => {
            for (lo, hi) in ranges {
                engine.compact_range(Some(&lo), hi.as_deref()).map_err(source)?;
            }
        }
        None => engine.compact_range(None, None).map_err(source)?,
    }
    engine.wait_for_background().map_err(source)?;
    Ok(db)
}

/// A key range: its first key and its last (`None`: the end of the key space).
pub type KeyRange = (Vec<u8>, Option<Vec<u8>>);

/// Ranges compacted one by one at most; more are compacted as one (every file).
const MAX_RANGES: usize = 64;

/// The key ranges the deletes of `deletions` not yet persisted cover, merged, each from its
/// first key to its last (`None`: the end of the key space; a range's exclusive end taken as
/// inclusive, one key more). `None` if there are more than [`MAX_RANGES`].
pub fn covered_ranges(deletions: &[ebb_storage::Deletion]) -> Option<Vec<KeyRange>> {
    use ebb_storage::DeletionKind;
    let mut ranges: Vec<KeyRange> = deletions
        .iter()
        .filter(|d| !d.is_persisted())
        .map(|d| match &d.kind {
            DeletionKind::Point { key } => (key.clone(), Some(key.clone())),
            DeletionKind::Range { lo, hi } | DeletionKind::TimeWindow { lo, hi, .. } => {
                (lo.clone(), (!hi.is_empty()).then(|| hi.clone()))
            }
        })
        .collect();
    ranges.sort();
    let mut merged: Vec<KeyRange> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        if let Some(last) = merged.last_mut() {
            // Overlapping (or touching) the one before: one range to the further end.
            let joins = last.1.as_ref().is_none_or(|end| lo <= *end);
            if joins {
                last.1 = match (last.1.take(), hi) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
                continue;
            }
        }
        merged.push((lo, hi));
    }
    (merged.len() <= MAX_RANGES).then_some(merged)
}

/// The keys of `set`'s objects, if it is encrypted (its key from `keys`).
pub fn object_keys(
    set: &BackupSet,
    keys: Option<&KeyDir>,
) -> Result<Option<ObjectKeys>, BackupError> {
    let Some(enc) = &set.encryption else { return Ok(None) };
    let dir = keys.ok_or_else(|| BackupError::NoKey {
        set: set.id.clone(),
        key: enc.key.clone(),
        dir: PathBuf::from("(no key directory)"),
    })?;
    let key = dir.get(&enc.key, &set.id)?;
    enc.open(&key, &set.id).map(Some)
}

/// What an encrypted backup to `store` starts from: the objects of every encrypted set there
/// whose key `keys` holds, so files they hold are not sealed and copied again.
pub async fn learn_keys(store: &BackupStore, keys: &KeyDir) -> Result<Encrypting, BackupError> {
    let mut enc = Encrypting::default();
    for l in store.list().await? {
        let Ok(set) = l.set else { continue };
        match object_keys(&set, Some(keys)) {
            Ok(Some(k)) => enc.learn(&k),
            Ok(None) => {}
            // Another server's set, or one whose key is destroyed: its objects are not reused.
            Err(e) => {
                tracing::debug!(set = %set.id, error = %e, "a set whose objects are not reused")
            }
        }
    }
    Ok(enc)
}

/// A key sets at a destination name that this server lacks: its id, and a set it opens (to
/// check a key another server gives for it).
#[derive(Debug, Clone)]
pub struct Lacking {
    /// The key's id.
    pub id: String,
    /// A set sealed with it.
    pub set: String,
    /// That set's sealed object keys.
    pub sealed: SetEncryption,
}

/// Destroys the keys in `keys` no set at `stores` names (sets pruned, or generations a purge
/// replaced), except those `making` holds once the sets are listed (made for a set whose
/// manifest is not written yet) and those kept here less than `grace` ago (given by another
/// server for a set whose destination this server may not know yet). Nothing is destroyed
/// unless every set at every destination could be read. Returns the keys sets name that
/// `keys` lacks.
///
/// The keys held are listed before the sets: a key another node shares once its set's
/// manifest is written is either not seen here or named by a manifest listed after it.
pub async fn collect_keys(
    stores: &[BackupStore],
    keys: &KeyDir,
    making: &(dyn Fn() -> std::collections::HashSet<String> + Sync),
    grace: std::time::Duration,
) -> Result<Vec<Lacking>, BackupError> {
    let held = keys.ids();
    let mut named = std::collections::BTreeMap::new();
    for store in stores {
        for l in store.list().await? {
            let set = l.set?;
            if let Some(enc) = set.encryption {
                named.entry(enc.key.clone()).or_insert((set.id, enc));
            }
        }
    }
    let making = making();
    for id in held.iter().filter(|id| !named.contains_key(*id) && !making.contains(*id)) {
        if keys.age(id).is_some_and(|age| age < grace) {
            continue;
        }
        keys.destroy(id)?;
        tracing::info!(key = %id, "destroyed the key of a backup set that is gone");
    }
    keys.clear_partial(std::time::Duration::from_secs(60))?;
    Ok(named
        .into_iter()
        .filter(|(id, _)| keys.get(id, "").is_err())
        .map(|(id, (set, sealed))| Lacking { id, set, sealed })
        .collect())
}

/// The engine options a part of a set of `kind` is opened with (see [`apply_journal`]).
pub fn part_options(kind: SetKind) -> ebb_storage::Options {
    match kind {
        SetKind::Node => ebb_storage::Options::default(),
        _ => ebb_storage::Options { wal: false, ..Default::default() },
    }
}

/// The requests of `journal` set `set` may lack.
fn missing<'a>(journal: &'a [JournalEntry], set: &BackupSet) -> Vec<&'a JournalEntry> {
    journal.iter().filter(|e| e.missing_from(set)).collect()
}

/// What a purge of a destination has to do, as its journal and sets stand.
struct Plan {
    journal: Vec<JournalEntry>,
    /// The sets that may lack requests, with those requests.
    todo: Vec<(BackupSet, Vec<JournalEntry>)>,
    /// Every set whose manifest could be read.
    readable: Vec<BackupSet>,
    /// False if a manifest could not be read (then no journal entry is removed).
    all_read: bool,
}

impl Plan {
    async fn read(store: &BackupStore) -> Result<Plan, BackupError> {
        let journal = store.journal().await?;
        let mut plan = Plan { journal, todo: Vec::new(), readable: Vec::new(), all_read: true };
        if plan.journal.is_empty() {
            return Ok(plan);
        }
        for l in store.list().await? {
            match l.set {
                Ok(set) => {
                    let need: Vec<JournalEntry> =
                        missing(&plan.journal, &set).into_iter().cloned().collect();
                    if !need.is_empty() {
                        plan.todo.push((set.clone(), need));
                    }
                    plan.readable.push(set);
                }
                Err(e) => {
                    plan.all_read = false;
                    tracing::warn!(set = %l.id, error = %e, "a set the deletion journal cannot reach");
                }
            }
        }
        Ok(plan)
    }

    /// The complete requests every one of `sets` holds (their journal entries may go).
    fn done_everywhere(&self, sets: &[BackupSet]) -> Vec<u64> {
        if !self.all_read {
            return Vec::new();
        }
        self.journal
            .iter()
            .filter(|e| {
                e.completed_ms.is_some()
                    && sets.iter().all(|s| missing(&self.journal, s).iter().all(|m| m.id != e.id))
            })
            .map(|e| e.id)
            .collect()
    }

    fn idle(&self) -> bool {
        self.todo.is_empty() && self.done_everywhere(&self.readable).is_empty()
    }
}

/// Applies every journal entry at `store` to every set that may lack it, working in `work`
/// (a local directory); an encrypted set's key comes from `keys`, and its next generation is
/// sealed with a new key (the old one destroyed). Answers [`BackupError::Busy`] while a backup
/// holds the destination.
pub async fn purge(
    store: &BackupStore,
    work: &Path,
    registry: &dyn Registry,
) -> Result<PurgeReport, BackupError> {
    // A first look, without the lock, to know whether to take it.
    if Plan::read(store).await?.idle() {
        return Ok(PurgeReport::default());
    }
    let lock = store.lock(LockKind::Exclusive, &ebb_backup::lock::unique_holder("purge")).await?;
    let _ = tokio::fs::remove_dir_all(work).await;
    // What to do is read again under the lock: a backup that finished meanwhile wrote a set
    // that may lack requests the first look took as held everywhere.
    let plan = match Plan::read(store).await {
        Ok(p) => p,
        Err(e) => {
            store.unlock(&lock).await;
            return Err(e);
        }
    };
    let readable = plan.readable.clone();
    let todo = plan.todo.clone();
    let result = async {
        let mut report = PurgeReport::default();
        let mut purged = readable.clone();
        for (set, entries) in todo {
            let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
            let next = purge_set(store, &lock, &set, entries, work, registry).await?;
            tracing::info!(set = %set.id, generation = next.generation, requests = ?ids, "purged a backup set");
            if let Some(s) = purged.iter_mut().find(|s| s.id == set.id) {
                *s = next;
            }
            report.sets.push((set.id.clone(), ids));
        }
        report.objects_removed = ebb_backup::prune::sweep(store, &lock).await?.0;
        for id in plan.done_everywhere(&purged) {
            store.remove_journal(id).await?;
            report.entries_removed += 1;
        }
        Ok(report)
    }
    .await;
    store.unlock(&lock).await;
    let _ = tokio::fs::remove_dir_all(work).await;
    result
}

/// Applies `entries` to every part of `set` and writes its next generation.
async fn purge_set(
    store: &BackupStore,
    lock: &Lock,
    set: &BackupSet,
    entries: Vec<JournalEntry>,
    work: &Path,
    registry: &dyn Registry,
) -> Result<BackupSet, BackupError> {
    let keys = Some(registry.keys());
    ebb_backup::transfer::private_dir(work)?;
    let object_keys = object_keys(set, keys)?;
    // Files the purge leaves as they were keep their objects (and keys).
    let mut encrypting = object_keys.as_ref().map(|k| {
        let mut e = Encrypting::default();
        e.learn(k);
        e
    });
    let mut stored = store.object_sizes().await?;
    let mut parts = Vec::with_capacity(set.parts.len());
    for part in &set.parts {
        let dir = work.join(format!("{}-{}", set.id, part.shard));
        let purged = work.join(format!("{}-{}.purged", set.id, part.shard));
        for d in [&dir, &purged] {
            let _ = tokio::fs::remove_dir_all(d).await;
        }
        download_part(store, &set.id, part, &dir, &Progress::default(), object_keys.as_ref())
            .await?;
        store.keep(lock).await?;
        let (d, p, e, kind) = (dir.clone(), purged.clone(), entries.clone(), set.kind);
        let seq = tokio::task::spawn_blocking(move || {
            let db = apply_journal(&d, &e, kind)?;
            db.engine().checkpoint(&p).map_err(source)
        })
        .await
        .map_err(source)??;
        let src = PartSource { shard: part.shard, dir: &purged, seq, applied: part.applied };
        let mut cache = HashCache::default();
        let progress = Progress::default();
        let new =
            upload_part(store, lock, src, &mut stored, &mut cache, &progress, encrypting.as_mut())
                .await;
        for d in [&dir, &purged] {
            let _ = tokio::fs::remove_dir_all(d).await;
        }
        parts.push(new?);
    }
    // The metadata part is kept as it is, and so are its objects' keys.
    if let (Some(enc), Some(keys), Some(meta)) = (&mut encrypting, &object_keys, &set.meta) {
        for f in &meta.files {
            if let Some(k) = keys.objects.get(&f.object.hash) {
                enc.used.objects.insert(f.object.hash.clone(), k.clone());
            }
        }
    }
    let mut next = set.clone();
    next.generation += 1;
    next.parts = parts;
    let at_ms = ebb_query::now_ms();
    for e in &entries {
        if !next.purged(e.id) {
            next.purged.push(Purged { id: e.id, at_ms, deadline_ms: e.deadline_ms });
        }
    }
    // A new key for the new generation: the old one, which opens the keys of the objects
    // that held the deleted data, is destroyed once no manifest names it.
    let old_key = set.encryption.as_ref().map(|e| e.key.clone());
    let mut new_key = None;
    if let (Some(dir), Some(enc)) = (keys, &encrypting) {
        let (id, key) = dir.create()?;
        next.encryption = Some(SetEncryption::seal(&next, &id, &key, &enc.used)?);
        new_key = Some((id, key));
    }
    store.keep(lock).await?;
    store.put_set(&next).await?;
    // Shared as soon as the manifest names it, before anything else may fail: the old key is
    // about to go everywhere.
    if let Some((id, key)) = &new_key {
        registry.share_key(id, key).await;
    }
    store.remove_older_generations(&next).await?;
    if let (Some(dir), Some(old)) = (keys, old_key) {
        dir.destroy(&old)?;
    }
    Ok(next)
}

/// The directory purges work in, under `<data dir>/backup`.
pub fn work_dir(backup_dir: &Path) -> PathBuf {
    backup_dir.join("purge")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_storage::ledger::Deadline;
    use ebb_storage::{Deletion, DeletionKind};

    fn d(id: u64, kind: DeletionKind, persisted: bool) -> Deletion {
        Deletion {
            id,
            kind,
            issued_at_ms: 1,
            deadline_ms: Deadline::Never,
            applied_at_ms: 1,
            persisted_at_ms: persisted.then_some(2),
        }
    }

    fn range(lo: &[u8], hi: &[u8]) -> DeletionKind {
        DeletionKind::Range { lo: lo.to_vec(), hi: hi.to_vec() }
    }

    #[test]
    fn only_the_keys_of_deletes_not_persisted_are_compacted() {
        let ds = [
            d(1, range(b"a", b"c"), true),
            d(2, range(b"m", b"p"), false),
            d(3, range(b"o", b"r"), false),
            d(4, DeletionKind::Point { key: b"e".to_vec() }, false),
            d(5, range(b"r", b"t"), false),
        ];
        let r = covered_ranges(&ds).unwrap();
        let v = |s: &[u8]| s.to_vec();
        assert_eq!(
            r,
            vec![(v(b"e"), Some(v(b"e"))), (v(b"m"), Some(v(b"t")))],
            "persisted ones left out; overlapping and touching ones merged"
        );
        let open = [d(6, range(b"k", b""), false), d(7, range(b"x", b"z"), false)];
        assert_eq!(covered_ranges(&open).unwrap(), vec![(v(b"k"), None)], "to the end");
        let window = DeletionKind::TimeWindow { t_lo: 0, t_hi: 9, lo: vec![], hi: vec![] };
        assert_eq!(covered_ranges(&[d(8, window, false)]).unwrap(), vec![(vec![], None)]);
        let many: Vec<Deletion> = (0..=MAX_RANGES as u64)
            .map(|i| d(i, DeletionKind::Point { key: i.to_be_bytes().to_vec() }, false))
            .collect();
        assert_eq!(covered_ranges(&many), None, "too many: every file at once");
        assert_eq!(covered_ranges(&[]), Some(vec![]));
    }
}
