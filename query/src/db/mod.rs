//! [`Database`]: one storage engine with its catalog, and every operation that changes it
//! (writes, DDL, deletes, retention purges). All changes go through one writer lock, which
//! assigns the engine's sequence numbers.

mod access;
mod apply;
mod delete;
mod erase;
mod outcome;
mod replicate;
mod request;
mod rollup;
mod rollup_round;
mod split;
mod write;
mod write_group;
mod write_plan;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::{Engine, Options, WriteBatch};
use parking_lot::{Mutex, RwLock};

pub use delete::{DeleteOutcome, DeleteTarget};
pub use erase::EraseOutcome;
pub use outcome::{admit, RequestOutcome};
pub use replicate::{Admission, Applied, Done, Proposed, Replicator};
pub use request::{human_duration, new_request_id, request_id_ms, RequestSpec};
pub use rollup_round::RollupRound;
pub use split::TrimOutcome;
pub use write::{WriteLimits, WriteSummary};
pub use write_group::GroupCommits;
pub use write_plan::Source as WriteSource;

use apply::Change;

use crate::error::{QueryError, Result};
use crate::model::catalog::{Catalog, CatalogDelta};
use crate::model::keys::{table_prefix, table_range};
use crate::model::schema::{check_name, FieldType, TableDef};

/// Who retention purges are recorded as issued by.
pub const RETENTION_ISSUER: &str = "retention (server)";

/// The default database (SQL schema) for SQL sessions that name none.
pub const DEFAULT_DATABASE: &str = "public";

/// A committed change not yet waited for.
#[must_use = "a change is durable (or replicated) only once waited for"]
enum Pending {
    /// Nothing to wait for.
    Done(u64),
    /// Applied at `seq`, durable once `staged` is.
    Staged { seq: u64, staged: ebb_storage::Staged },
    /// Proposed to the shard's group.
    Proposed(replicate::Proposal),
}

impl Pending {
    /// Waits until the change is durable (replicated: applied here); returns the sequence
    /// number of its first operation.
    fn wait(self) -> Result<u64> {
        match self {
            Pending::Done(seq) => Ok(seq),
            Pending::Staged { seq, staged } => staged.durable().map(|()| seq).map_err(Into::into),
            Pending::Proposed(p) => p.wait(),
        }
    }
}

/// Sequence numbers for the engine: the next free one.
#[derive(Debug)]
struct Writer {
    next_seq: u64,
    /// When records of writes older than their keeping time were last removed (ms).
    written_forgotten_ms: u64,
    /// Groups of writes committed and not yet applied ([`write_group`]).
    groups_in_flight: usize,
}

/// An EbbDB database's data: the engine, the catalog and the writer. On a single node the
/// writer assigns the engine's sequence numbers; in a cluster each shard replica has one whose
/// changes go through the shard's Raft group (a [`Replicator`]).
#[derive(Debug)]
pub struct Database {
    engine: RwLock<Arc<Engine>>,
    catalog: Catalog,
    writer: Mutex<Writer>,
    /// Planned writes waiting to be committed together.
    queue: write_group::WriteQueue,
    /// The group changes go through (a shard replica), if any.
    replication: Option<replicate::Replication>,
    default_retention: RwLock<Option<Duration>>,
    /// What one write request may add.
    write_limits: RwLock<write::WriteLimits>,
    /// Users, grants and tokens (of a single node; a cluster keeps them in its metadata group).
    access: RwLock<Arc<crate::access::AccessState>>,
    /// Writes that add data are refused below this free space (none: no reserve).
    reserve: RwLock<Option<Arc<ebb_storage::disk::Reserve>>>,
    /// Rows this database's writes have written since it opened (on a shard: while it led).
    rows_written: std::sync::atomic::AtomicU64,
    /// Changes applied that remove rows (range and time-window deletes, dropped tables and
    /// series), whoever planned them, or that replaced the engine: rollup maintenance planned
    /// outside the writer lock is planned again if one was applied meanwhile.
    removals: std::sync::atomic::AtomicU64,
    /// The statements the front door of a single node ran lately (`system.queries`).
    statements: Arc<crate::statements::StatementLog>,
}

impl Database {
    /// Sets the retention that tables get when they are created without one (by a write, or by
    /// `CREATE TABLE` without a `retention` option); `None` keeps their rows until deleted.
    pub fn set_default_retention(&self, retention: Option<Duration>) {
        *self.default_retention.write() = retention;
    }

    /// Sets what one write request may add.
    pub fn set_write_limits(&self, limits: write::WriteLimits) {
        *self.write_limits.write() = limits;
    }

    /// What one write request may add.
    pub fn write_limits(&self) -> write::WriteLimits {
        *self.write_limits.read()
    }

    /// What group commit has done since the database opened (see [`write_group`]).
    pub fn group_commits(&self) -> GroupCommits {
        self.queue.counts()
    }

    /// The statements run lately on this database by a single node's front door.
    pub fn statement_log(&self) -> &Arc<crate::statements::StatementLog> {
        &self.statements
    }

    /// The retention tables get when they are created without one.
    pub fn default_retention(&self) -> Option<Duration> {
        *self.default_retention.read()
    }

    /// Opens (or creates) the data directory `dir` with engine options `opts`. Pages get the
    /// row summaries aggregate scans read instead of rows (see [`crate::model::summary`])
    /// unless `opts` names another summarizer.
    pub fn open(dir: impl AsRef<Path>, mut opts: Options) -> Result<Database> {
        if opts.page_summary.is_none() {
            opts.page_summary = Some(Arc::new(crate::model::summary::RowSummarizer));
        }
        let engine = Engine::open(dir.as_ref(), opts)?;
        let catalog = Catalog::load(&engine)?;
        let access = access::load_access(&engine)?;
        let next_seq = engine.last_seq() + 1;
        Ok(Database {
            engine: RwLock::new(Arc::new(engine)),
            catalog,
            writer: Mutex::new(Writer { next_seq, written_forgotten_ms: 0, groups_in_flight: 0 }),
            queue: Default::default(),
            removals: Default::default(),
            statements: Default::default(),
            replication: None,
            default_retention: RwLock::new(None),
            write_limits: RwLock::new(write::WriteLimits::default()),
            access: RwLock::new(Arc::new(access)),
            reserve: RwLock::new(None),
            rows_written: Default::default(),
        })
    }

    /// Refuses writes that add data while the data directory's free space is below `reserve`.
    pub fn set_disk_reserve(&self, reserve: Arc<ebb_storage::disk::Reserve>) {
        *self.reserve.write() = Some(reserve);
    }

    /// `Err` if a write that adds data must be refused for lack of space.
    fn check_reserve(&self) -> Result<()> {
        match &*self.reserve.read() {
            Some(r) => Ok(r.check()?),
            None => Ok(()),
        }
    }

    /// The storage engine (replaced whole when a replica installs a snapshot: hold it for one
    /// operation).
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.read().clone()
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Flushes memtables and stops background work (the engine closes when the last reference
    /// to it goes).
    pub fn flush(&self) -> Result<()> {
        self.engine().flush()?;
        Ok(())
    }

    /// Writes `batch` at the next sequence numbers, then installs `delta`. Returns the first
    /// sequence number used once the write is durable (replicated: applied here).
    fn commit(&self, w: &mut Writer, batch: &WriteBatch, delta: CatalogDelta) -> Result<u64> {
        self.commit_staged(w, Change { batch, delta, newest: Default::default() })?.wait()
    }

    /// [`Database::commit`] without waiting: on a single node the change is applied and the
    /// caller waits for its fsync after releasing the writer lock, so that concurrent requests
    /// share one (group commit); a replicated database proposes it, and the caller waits for
    /// the proposal (see [`replicate`] for what must be waited for under the lock).
    fn commit_staged(&self, w: &mut Writer, change: Change<'_>) -> Result<Pending> {
        if let Some(rep) = &self.replication {
            // Every replica applies it as the group commits it (`Database::apply`).
            if change.batch.is_empty() {
                return Ok(Pending::Done(0));
            }
            return Ok(Pending::Proposed(rep.propose(change.batch, crate::now_ms())?));
        }
        let seq = w.next_seq;
        let n = change.batch.len() as u64;
        let staged = self.apply(&self.engine(), change, seq).map_err(|e| match e {
            ebb_storage::Error::BeyondRetention { delete_key, horizon } => {
                let time = |k| crate::rfc3339(crate::model::keys::u64_to_time(k));
                QueryError::BeyondRetention {
                    message: format!(
                        "a row at {} is older than its table's retention horizon, {}",
                        time(delete_key),
                        time(horizon)
                    ),
                    line: None,
                }
            }
            e => QueryError::Storage(e),
        })?;
        w.next_seq += n;
        Ok(match staged {
            Some(staged) => Pending::Staged { seq, staged },
            None => Pending::Done(seq),
        })
    }

    /// Creates database `db` if it does not exist.
    pub fn create_database(&self, db: &str) -> Result<()> {
        crate::model::schema::check_writable_database(db)?;
        let mut w = self.writer.lock();
        if self.catalog.has_database(db) {
            return Ok(());
        }
        let mut delta = CatalogDelta::default();
        delta.databases.insert(db.to_string());
        let mut batch = WriteBatch::new();
        delta.write_to(&mut batch)?;
        self.commit(&mut w, &batch, delta).map(|_| ())
    }

    /// Creates table `name` in `db` (and `db` if needed). Fails if it exists.
    pub fn create_table(
        &self,
        db: &str,
        name: &str,
        tags: Vec<String>,
        fields: Vec<(String, FieldType)>,
        retention: Option<Duration>,
    ) -> Result<Arc<TableDef>> {
        crate::model::schema::check_writable_database(db)?;
        check_name("table", name)?;
        let mut w = self.writer.lock();
        if self.catalog.table(db, name).is_some() {
            return Err(QueryError::invalid(format!("table {db}.{name} already exists")));
        }
        let (id, _) = self.catalog.next_ids();
        let mut def = TableDef {
            id,
            database: db.to_string(),
            name: name.to_string(),
            tags: Vec::new(),
            fields: Vec::new(),
            retention_ns: retention.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            rollup: None,
        };
        for t in tags {
            def.check_new_column(&t)?;
            def.tags.push(t);
        }
        for (f, ty) in fields {
            def.check_new_column(&f)?;
            def.fields.push((f, ty));
        }
        let mut delta = CatalogDelta::default();
        if !self.catalog.has_database(db) {
            delta.databases.insert(db.to_string());
        }
        delta.tables.insert(id, def.clone());
        let mut batch = WriteBatch::new();
        delta.write_to(&mut batch)?;
        self.commit(&mut w, &batch, delta)?;
        if let Some(d) = retention {
            self.set_rule(table_prefix(id).to_vec(), Some(d))?;
        }
        self.catalog.table_by_id(id).ok_or_else(|| QueryError::Internal("table vanished".into()))
    }

    /// Sets (or with `None` removes) the retention of a table. Rows older than `now - retention`
    /// become invisible at once and are purged by [`Database::purge_expired`].
    pub fn set_retention(&self, db: &str, name: &str, retention: Option<Duration>) -> Result<()> {
        let mut w = self.writer.lock();
        let def = self.existing(db, name)?;
        let mut new = (*def).clone();
        new.retention_ns = retention.map(|d| d.as_nanos().min(u64::MAX as u128) as u64);
        let mut delta = CatalogDelta::default();
        delta.tables.insert(new.id, new);
        let mut batch = WriteBatch::new();
        delta.write_to(&mut batch)?;
        self.commit(&mut w, &batch, delta)?;
        self.set_rule(table_prefix(def.id).to_vec(), retention)?;
        Ok(())
    }

    /// Drops a table: its definition and series go from the catalog and its rows are deleted
    /// (one range delete over the table's keys). Returns that delete's id.
    pub fn drop_table(&self, db: &str, name: &str) -> Result<u64> {
        let spec = RequestSpec::new("drop", format!("DROP TABLE {db}.{name}"));
        self.drop_table_as(db, name, &spec)
    }

    /// [`Database::drop_table`] as request `spec` (its kind and text are the drop's own).
    pub fn drop_table_as(&self, db: &str, name: &str, spec: &RequestSpec) -> Result<u64> {
        let mut w = self.writer.lock();
        let def = self.existing(db, name)?;
        let rollups: Vec<String> =
            self.catalog.rollups_of(&def).iter().map(|r| r.name.clone()).collect();
        if !rollups.is_empty() {
            return Err(QueryError::invalid(format!(
                "{name} has rollups ({}); drop them first (DROP MATERIALIZED VIEW)",
                rollups.join(", ")
            )));
        }
        let mut delta = CatalogDelta::default();
        delta.dropped.push(def.id);
        let mut batch = WriteBatch::new();
        let (lo, hi) = table_range(def.id);
        batch.delete_range(lo, hi);
        delta.write_to(&mut batch)?;
        // Rows are not counted: that would read the whole table under the writer lock.
        let spec = RequestSpec {
            kind: "drop".into(),
            text: format!("DROP TABLE {db}.{name}"),
            ..spec.clone()
        };
        batch.set_request(spec.request(None));
        let seq = self.commit(&mut w, &batch, delta)?;
        if def.retention_ns.is_some() {
            self.set_rule(table_prefix(def.id).to_vec(), None)?;
        }
        Ok(seq)
    }

    /// Writes one time-window delete per retention rule (rows past their table's horizon).
    /// Returns how many were written.
    pub fn purge_expired(&self) -> Result<u64> {
        let mut w = self.writer.lock();
        let now = self.engine().options().clock.now_ms();
        let mut batch = self.engine().expired_batch(now);
        if batch.is_empty() {
            return Ok(0);
        }
        let tables: Vec<String> = batch
            .ops()
            .iter()
            .filter_map(|op| match op {
                ebb_storage::BatchOp::DeleteTimeRange { lo, .. } => {
                    let id = u32::from_be_bytes(lo.get(..4)?.try_into().ok()?);
                    let t = self.catalog.table_by_id(id)?;
                    let keep = request::human_duration(t.retention_ns.unwrap_or(0) / 1_000_000_000);
                    Some(format!("{}.{} ({keep})", t.database, t.name))
                }
                _ => None,
            })
            .collect();
        let text = format!("rows past the retention of {}", tables.join(", "));
        // Not counted: the rows are whatever lies past the horizon, read by no one.
        let spec = RequestSpec::new("retention", text).with_issuer(RETENTION_ISSUER);
        batch.set_request(spec.request(None));
        self.commit(&mut w, &batch, CatalogDelta::default())?;
        Ok(batch.len() as u64)
    }

    /// The table, or [`QueryError::UnknownTable`].
    pub fn existing(&self, db: &str, name: &str) -> Result<Arc<TableDef>> {
        self.catalog.table(db, name).ok_or_else(|| QueryError::UnknownTable(format!("{db}.{name}")))
    }
}
