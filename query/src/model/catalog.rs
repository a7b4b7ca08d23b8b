//! The catalog: databases, table definitions and series indexes, stored in the engine under
//! table id 0 and held in memory.
//!
//! ```text
//! 00000000 'D' name                    -> ""                      a database
//! 00000000 'T' table_id u32            -> TableDef (JSON)         a table
//! 00000000 'S' table_id u32 series u64 -> canonical series key    a series
//! 00000000 'P'                         -> HashFilter (JSON)       the series hashes a
//!                                                                 cluster shard holds
//! ```
//!
//! Changes are planned as a [`CatalogDelta`] whose records go into the same write batch as the
//! rows that need them, and are installed in memory only after that batch is written, so a
//! rejected request leaves no trace.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_storage::{Engine, WriteBatch};
use parking_lot::RwLock;

use super::keys::{table_prefix, time_to_u64, u64_to_time, CATALOG_TABLE};
use super::rollup::Mark;
use super::schema::TableDef;
use super::series::{decode_series_key, SeriesIndex, TagValues};
use crate::error::QueryError;
use crate::model::hashspace::{hash_of_series, HashFilter};

const DB: u8 = b'D';
const TABLE: u8 = b'T';
const SERIES: u8 = b'S';
/// Outcome records of requests a coordinator issued on every shard (see
/// `crate::db::RequestOutcome`).
const OUTCOME: u8 = b'R';
/// Records of the line-protocol writes a coordinator sent a shard under a write id (see
/// `crate::db::Database::write_once`).
const WRITTEN: u8 = b'W';
/// The series hashes a cluster shard holds, once it has split (see
/// [`crate::model::hashspace`]): writes of other series are refused.
const HASHES: u8 = b'P';

fn cat_key(kind: u8, rest: &[u8]) -> Vec<u8> {
    let mut k = table_prefix(CATALOG_TABLE).to_vec();
    k.push(kind);
    k.extend_from_slice(rest);
    k
}

/// The key of the record of write `id`.
pub(crate) fn written_key(id: u64) -> Vec<u8> {
    cat_key(WRITTEN, &id.to_be_bytes())
}

/// The key of the outcome record of request `id`.
pub(crate) fn outcome_key(id: u64) -> Vec<u8> {
    cat_key(OUTCOME, &id.to_be_bytes())
}

/// Dirty marks of rollup buckets (see [`crate::model::rollup`]): `'Q' rollup bucket nonce` for
/// the series its value lists, `'q' rollup bucket nonce` for every series.
const MARK: u8 = b'Q';
const WINDOW_MARK: u8 = b'q';

/// The key of dirty mark `mark` left by the change with `nonce` (each change leaves its own, so
/// the maintainer removes exactly the marks it read).
pub(crate) fn mark_key(mark: &Mark, nonce: u64) -> Vec<u8> {
    let (kind, rollup, bucket) = match *mark {
        Mark::Series { rollup, bucket } => (MARK, rollup, bucket),
        Mark::Window { rollup, bucket } => (WINDOW_MARK, rollup, bucket),
    };
    let mut rest = Vec::with_capacity(20);
    rest.extend_from_slice(&rollup.to_be_bytes());
    rest.extend_from_slice(&time_to_u64(bucket).to_be_bytes());
    rest.extend_from_slice(&nonce.to_be_bytes());
    cat_key(kind, &rest)
}

/// `[lo, hi)` of every dirty mark's key.
pub(crate) fn mark_ranges() -> [(Vec<u8>, Vec<u8>); 2] {
    [
        (cat_key(MARK, &[]), cat_key(MARK + 1, &[])),
        (cat_key(WINDOW_MARK, &[]), cat_key(WINDOW_MARK + 1, &[])),
    ]
}

/// The mark a dirty mark's key holds; `None` if it is not one.
pub(crate) fn parse_mark(key: &[u8]) -> Option<Mark> {
    if key.len() != 25 {
        return None;
    }
    let rollup = u32::from_be_bytes(key.get(5..9)?.try_into().ok()?);
    let bucket = u64_to_time(u64::from_be_bytes(key.get(9..17)?.try_into().ok()?));
    match *key.get(4)? {
        MARK => Some(Mark::Series { rollup, bucket }),
        WINDOW_MARK => Some(Mark::Window { rollup, bucket }),
        _ => None,
    }
}

fn series_cat_key(table: u32, series: u64) -> Vec<u8> {
    let mut rest = table.to_be_bytes().to_vec();
    rest.extend_from_slice(&series.to_be_bytes());
    cat_key(SERIES, &rest)
}

/// Catalog changes one request makes.
#[derive(Debug, Default)]
pub struct CatalogDelta {
    /// New databases.
    pub databases: BTreeSet<String>,
    /// New or changed tables (the whole new definition).
    pub tables: BTreeMap<u32, TableDef>,
    /// New series: `(table, canonical key, id, tag values)`.
    pub series: Vec<(u32, Vec<u8>, u64, TagValues)>,
    /// Tables dropped.
    pub dropped: Vec<u32>,
    /// Series removed from their table's index (an erasure): `(table, series id)`.
    pub removed_series: Vec<(u32, u64)>,
    /// The series hashes the shard holds from now on.
    pub hashes: Option<HashFilter>,
}

impl CatalogDelta {
    /// True if it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.databases.is_empty()
            && self.tables.is_empty()
            && self.series.is_empty()
            && self.dropped.is_empty()
            && self.removed_series.is_empty()
            && self.hashes.is_none()
    }

    /// Adds the delta's records to `batch`.
    pub fn write_to(&self, batch: &mut WriteBatch) -> Result<(), QueryError> {
        for db in &self.databases {
            batch.put(cat_key(DB, db.as_bytes()), Vec::new());
        }
        for (id, def) in &self.tables {
            let json = serde_json::to_vec(def)
                .map_err(|e| QueryError::Internal(format!("table definition encoding: {e}")))?;
            batch.put(cat_key(TABLE, &id.to_be_bytes()), json);
        }
        for (table, key, id, _) in &self.series {
            batch.put(series_cat_key(*table, *id), key.clone());
        }
        for (table, id) in &self.removed_series {
            batch.delete(series_cat_key(*table, *id));
        }
        if let Some(h) = &self.hashes {
            let json = serde_json::to_vec(h)
                .map_err(|e| QueryError::Internal(format!("shard hashes encoding: {e}")))?;
            batch.put(cat_key(HASHES, &[]), json);
        }
        for id in &self.dropped {
            batch.delete(cat_key(TABLE, &id.to_be_bytes()));
            // Every series record of the table, whatever its id.
            let lo = cat_key(SERIES, &id.to_be_bytes());
            let hi = cat_key(SERIES, &(id + 1).to_be_bytes());
            batch.delete_range(lo, hi);
        }
        Ok(())
    }
}

impl CatalogDelta {
    /// The delta whose records `batch` holds (the inverse of [`CatalogDelta::write_to`]), for
    /// replicas that apply batches another node planned. Series records are decoded with their
    /// table's definition from the delta or else from `catalog`.
    pub fn read_from(batch: &WriteBatch, catalog: &Catalog) -> Result<CatalogDelta, QueryError> {
        use ebb_storage::BatchOp;
        let prefix = table_prefix(CATALOG_TABLE);
        let mut delta = CatalogDelta::default();
        let mut series = Vec::new();
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } if key.len() > 4 && key[..4] == prefix => {
                    match key[4] {
                        DB => {
                            let name = std::str::from_utf8(&key[5..]).map_err(|_| {
                                QueryError::Corrupt("database name not UTF-8".into())
                            })?;
                            delta.databases.insert(name.to_string());
                        }
                        TABLE => {
                            let def: TableDef = serde_json::from_slice(value).map_err(|e| {
                                QueryError::Corrupt(format!("table definition: {e}"))
                            })?;
                            delta.tables.insert(def.id, def);
                        }
                        SERIES => series.push((key.clone(), value.clone())),
                        HASHES => {
                            delta.hashes =
                                Some(serde_json::from_slice(value).map_err(|e| {
                                    QueryError::Corrupt(format!("shard hashes: {e}"))
                                })?)
                        }
                        _ => {}
                    }
                }
                BatchOp::Delete { key }
                    if key.len() == 9 && key[..4] == prefix && key[4] == TABLE =>
                {
                    let id = u32::from_be_bytes(key[5..9].try_into().unwrap_or_default());
                    delta.dropped.push(id);
                }
                BatchOp::Delete { key }
                    if key.len() == 17 && key[..4] == prefix && key[4] == SERIES =>
                {
                    let table = u32::from_be_bytes(key[5..9].try_into().unwrap_or_default());
                    let id = u64::from_be_bytes(key[9..17].try_into().unwrap_or_default());
                    delta.removed_series.push((table, id));
                }
                _ => {}
            }
        }
        for (k, v) in series {
            let bad = || QueryError::Corrupt("series record key".into());
            let table =
                u32::from_be_bytes(k.get(5..9).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            let id =
                u64::from_be_bytes(k.get(9..17).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            let tags = match delta.tables.get(&table) {
                Some(def) => def.tags.len(),
                None => match catalog.table_by_id(table) {
                    Some(def) => def.tags.len(),
                    None => continue,
                },
            };
            let values = decode_series_key(&v, tags)?;
            delta.series.push((table, v.to_vec(), id, values));
        }
        Ok(delta)
    }
}

#[derive(Debug, Default)]
struct State {
    databases: BTreeSet<String>,
    tables: BTreeMap<u32, Arc<TableDef>>,
    names: HashMap<(String, String), u32>,
    series: HashMap<u32, SeriesIndex>,
    next_table: u32,
    next_series: u64,
    hashes: Option<HashFilter>,
    /// Ids of the tables that are rollups (every write asks whether there are any).
    rollups: BTreeSet<u32>,
}

/// Databases, tables and series, loaded from the engine.
#[derive(Debug, Default)]
pub struct Catalog {
    state: RwLock<State>,
    /// Bumped, under the state's write lock, by every change of databases, tables or series: a
    /// write planned against generation `g` is still valid while the generation is `g`.
    generation: AtomicU64,
}

impl Catalog {
    /// Loads the catalog stored in `engine`.
    pub fn load(engine: &Engine) -> Result<Catalog, QueryError> {
        let mut st = State { next_table: 1, next_series: 1, ..State::default() };
        let (lo, hi) = (cat_key(DB, &[]), cat_key(DB + 1, &[]));
        for item in engine.scan(lo..hi, None)? {
            let (k, _) = item?;
            let name = std::str::from_utf8(&k[5..])
                .map_err(|_| QueryError::Corrupt("database name not UTF-8".into()))?;
            st.databases.insert(name.to_string());
        }
        let (lo, hi) = (cat_key(TABLE, &[]), cat_key(TABLE + 1, &[]));
        for item in engine.scan(lo..hi, None)? {
            let (_, v) = item?;
            let def: TableDef = serde_json::from_slice(&v)
                .map_err(|e| QueryError::Corrupt(format!("table definition: {e}")))?;
            st.next_table = st.next_table.max(def.id + 1);
            st.names.insert((def.database.clone(), def.name.clone()), def.id);
            st.series.insert(def.id, SeriesIndex::default());
            if def.rollup.is_some() {
                st.rollups.insert(def.id);
            }
            st.tables.insert(def.id, Arc::new(def));
        }
        if let Some(v) = engine.get(&cat_key(HASHES, &[]), None)? {
            st.hashes = Some(
                serde_json::from_slice(&v)
                    .map_err(|e| QueryError::Corrupt(format!("shard hashes: {e}")))?,
            );
        }
        let (lo, hi) = (cat_key(SERIES, &[]), cat_key(SERIES + 1, &[]));
        for item in engine.scan(lo..hi, None)? {
            let (k, v) = item?;
            let bad = || QueryError::Corrupt("series record key".into());
            let table =
                u32::from_be_bytes(k.get(5..9).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            let id =
                u64::from_be_bytes(k.get(9..17).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            st.next_series = st.next_series.max(id + 1);
            let Some(def) = st.tables.get(&table) else { continue };
            let tags = decode_series_key(&v, def.tags.len())?;
            let hash = hash_of_series(def, &tags);
            let idx = st.series.entry(table).or_default();
            idx.insert(v.to_vec(), id, tags);
            idx.set_hash(id, hash);
        }
        Ok(Catalog { state: RwLock::new(st), generation: AtomicU64::new(0) })
    }

    /// Replaces everything with the catalog stored in `engine`.
    pub fn reload(&self, engine: &Engine) -> Result<(), QueryError> {
        let fresh = Catalog::load(engine)?;
        let mut st = self.state.write();
        *st = fresh.state.into_inner();
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Installs a delta whose records were written.
    pub fn apply(&self, delta: CatalogDelta) {
        if delta.is_empty() {
            return;
        }
        let mut st = self.state.write();
        self.generation.fetch_add(1, Ordering::Release);
        st.databases.extend(delta.databases);
        if let Some(h) = delta.hashes {
            st.hashes = Some(h);
        }
        for (id, def) in delta.tables {
            st.next_table = st.next_table.max(id + 1);
            st.names.insert((def.database.clone(), def.name.clone()), id);
            // A table's series keep the tag values they were created with: tags added later
            // read as absent from them (widening every series per new tag costs the square).
            st.series.entry(id).or_default();
            if def.rollup.is_some() {
                st.rollups.insert(id);
            }
            st.tables.insert(id, Arc::new(def));
        }
        for (table, key, id, tags) in delta.series {
            st.next_series = st.next_series.max(id + 1);
            let hash = st.tables.get(&table).map(|def| hash_of_series(def, &tags));
            let idx = st.series.entry(table).or_default();
            idx.insert(key, id, tags);
            if let Some(h) = hash {
                idx.set_hash(id, h);
            }
        }
        for (table, id) in delta.removed_series {
            if let Some(idx) = st.series.get_mut(&table) {
                idx.remove_id(id);
            }
        }
        for id in delta.dropped {
            if let Some(def) = st.tables.remove(&id) {
                st.names.remove(&(def.database.clone(), def.name.clone()));
            }
            st.rollups.remove(&id);
            st.series.remove(&id);
        }
    }

    /// The table `name` of database `db`.
    pub fn table(&self, db: &str, name: &str) -> Option<Arc<TableDef>> {
        let st = self.state.read();
        let id = st.names.get(&(db.to_string(), name.to_string()))?;
        st.tables.get(id).cloned()
    }

    /// The rollups whose source is table `source` (see [`crate::model::rollup`]).
    pub fn rollups_of(&self, source: &TableDef) -> Vec<Arc<TableDef>> {
        let st = self.state.read();
        st.rollups
            .iter()
            .filter_map(|id| st.tables.get(id))
            .filter(|t| {
                t.database == source.database
                    && t.rollup.as_ref().is_some_and(|r| r.source == source.name)
            })
            .cloned()
            .collect()
    }

    /// True if any table is a rollup.
    pub fn has_rollups(&self) -> bool {
        !self.state.read().rollups.is_empty()
    }

    /// The table with id `id`.
    pub fn table_by_id(&self, id: u32) -> Option<Arc<TableDef>> {
        self.state.read().tables.get(&id).cloned()
    }

    /// Every table, by id.
    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        self.state.read().tables.values().cloned().collect()
    }

    /// Databases (including those with no table yet).
    pub fn databases(&self) -> Vec<String> {
        let st = self.state.read();
        let mut dbs = st.databases.clone();
        dbs.extend(st.tables.values().map(|t| t.database.clone()));
        dbs.into_iter().collect()
    }

    /// True if database `db` exists.
    pub fn has_database(&self, db: &str) -> bool {
        let st = self.state.read();
        st.databases.contains(db) || st.tables.values().any(|t| t.database == db)
    }

    /// Runs `f` on the series index of table `id` (empty if it has none).
    pub fn with_series<R>(&self, id: u32, f: impl FnOnce(&SeriesIndex) -> R) -> R {
        let st = self.state.read();
        match st.series.get(&id) {
            Some(idx) => f(idx),
            None => f(&SeriesIndex::default()),
        }
    }

    /// Runs `f` on the mutable series index of table `id` (for write bookkeeping).
    pub fn with_series_mut<R>(&self, id: u32, f: impl FnOnce(&mut SeriesIndex) -> R) -> R {
        let mut st = self.state.write();
        f(st.series.entry(id).or_default())
    }

    /// The generation: changes whenever databases, tables or series change. Read it before
    /// reading what a plan depends on.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Newest row time noted per series, one read of the index for all of `series`.
    pub fn max_times(&self, series: &[(u32, u64)]) -> Vec<Option<i64>> {
        let st = self.state.read();
        series
            .iter()
            .map(|(table, id)| st.series.get(table).and_then(|idx| idx.max_time(*id)))
            .collect()
    }

    /// Notes the newest row time written per `(table, series, time)`, under one write lock.
    pub fn note_times(&self, times: &[(u32, u64, i64)]) {
        if times.is_empty() {
            return;
        }
        let mut st = self.state.write();
        for &(table, id, t) in times {
            st.series.entry(table).or_default().note_time(id, t);
        }
    }

    /// The series hashes this shard holds, once it has split (`None`: every series written
    /// to it).
    pub fn hashes(&self) -> Option<HashFilter> {
        self.state.read().hashes
    }

    /// Ids the next new table and series would get (under the caller's write lock).
    pub fn next_ids(&self) -> (u32, u64) {
        let st = self.state.read();
        (st.next_table, st.next_series)
    }
}
