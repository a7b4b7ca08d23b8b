//! The `system` schema, single node and cluster alike, over the session's [`Shards`]:
//!
//! - `system.backups`: the backups the server took or takes, and the sets at every destination
//!   it backed up to ([`crate::backups`]).
//! - `system.deletions`: every delete request (`DELETE`, `ERASE`, `DROP TABLE`, retention
//!   purge) on every replica, its deadline, and when it was applied and persisted
//!   ([`crate::deletions`]).
//! - Each shard's engine and catalog, one row set per shard with a leading `shard` column
//!   ([`EngineTable`]): `system.engine_deletes` (the engine's deletion ledger itself, one row
//!   per engine delete, with what each covered in table terms), `system.tables` (tables, their
//!   columns, retention, series count, and for a rollup its definition), `system.compactions`
//!   (recent flushes, compactions and time-window executions) and `system.layout` (the KiWi+
//!   delete-tile size h new files get per level, and why).
//! - `system.queries`: the statements run lately (on a cluster, on every node).
//! - `system.nodes` and `system.shards`: the members of a cluster (each node's binary release
//!   and the cluster versions it supports), and `system.cluster`: the cluster's active version
//!   and where an upgrade stands.
//! - The access tables (`system.users`, `system.grants`, `system.tokens`).
//!
//! Rows are gathered when a table is scanned, so listing the schema costs nothing.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use ebb_storage::{DeletionKind, DeletionStatus};

use super::shard::{ClusterRow, EngineTable, JoinTokenRow, NodeRow, ShardRow, Shards};
use crate::access::{access_table, AccessStore, ACCESS_TABLES};
use crate::db::Database;
use crate::deletions::{ms_to_ns, ts_field};
use crate::error::{QueryError, Result};
use crate::model::keys::{parse_row_key, u64_to_time, CATALOG_TABLE};

/// Name of the system schema.
pub const SYSTEM_SCHEMA: &str = "system";

/// A system table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Backups,
    Deletions,
    Engine(EngineTable),
    Queries,
    Nodes,
    Shards,
    Cluster,
    JoinTokens,
}

impl Kind {
    const ALL: [(&'static str, Kind); 11] = [
        ("backups", Kind::Backups),
        ("cluster", Kind::Cluster),
        ("compactions", Kind::Engine(EngineTable::Compactions)),
        ("deletions", Kind::Deletions),
        ("engine_deletes", Kind::Engine(EngineTable::EngineDeletes)),
        ("join_tokens", Kind::JoinTokens),
        ("layout", Kind::Engine(EngineTable::Layout)),
        ("nodes", Kind::Nodes),
        ("queries", Kind::Queries),
        ("shards", Kind::Shards),
        ("tables", Kind::Engine(EngineTable::Tables)),
    ];

    fn named(name: &str) -> Option<Kind> {
        Kind::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// Only a cluster has members to describe.
    fn members(self) -> bool {
        matches!(self, Kind::Nodes | Kind::Shards | Kind::Cluster | Kind::JoinTokens)
    }

    fn schema(self) -> SchemaRef {
        match self {
            Kind::Backups => crate::backups::schema(),
            Kind::Deletions => crate::deletions::schema(),
            Kind::Queries => crate::statements::schema(),
            Kind::Engine(t) => {
                let mut fields = vec![Field::new("shard", DataType::UInt64, false)];
                fields.extend(engine_fields(t));
                Arc::new(Schema::new(fields))
            }
            Kind::Nodes => Arc::new(Schema::new(vec![
                Field::new("id", DataType::UInt64, false),
                Field::new("state", DataType::Utf8, false),
                Field::new("metadata_role", DataType::Utf8, false),
                Field::new("grpc_addr", DataType::Utf8, false),
                Field::new("http_addr", DataType::Utf8, false),
                Field::new("pg_addr", DataType::Utf8, false),
                Field::new("replicas", DataType::UInt64, false),
                Field::new("leaders", DataType::UInt64, false),
                Field::new("bytes", DataType::UInt64, true),
                Field::new("ready", DataType::Boolean, false),
                Field::new("not_ready", DataType::Utf8, true),
                Field::new("version", DataType::Utf8, true),
                Field::new("commit", DataType::Utf8, true),
                Field::new("cluster_versions", DataType::Utf8, true),
            ])),
            Kind::JoinTokens => join_tokens_schema(),
            Kind::Cluster => Arc::new(Schema::new(vec![
                Field::new("cluster_id", DataType::Utf8, true),
                Field::new("active_version", DataType::UInt64, false),
                ts_field("active_since", true),
                Field::new("activated_by", DataType::Utf8, true),
                Field::new("finalizable_to", DataType::UInt64, true),
                Field::new("upgrade", DataType::Utf8, false),
                Field::new("auto_finalize_after", DataType::Utf8, false),
            ])),
            Kind::Shards => Arc::new(Schema::new(vec![
                Field::new("shard", DataType::UInt64, false),
                Field::new("replicas", DataType::Utf8, false),
                Field::new("leader", DataType::UInt64, true),
                Field::new("moving", DataType::Boolean, false),
                Field::new("moving_to", DataType::Utf8, true),
                Field::new("root", DataType::UInt64, false),
                Field::new("hash_lo", DataType::UInt64, false),
                Field::new("hash_end", DataType::UInt64, true),
                Field::new("split", DataType::Utf8, true),
            ])),
        }
    }
}

/// The `system` schema of a session over `shards`, whose users `access` keeps.
#[derive(Debug)]
pub struct SystemSchema {
    shards: Arc<dyn Shards>,
    access: Arc<dyn AccessStore>,
}

impl SystemSchema {
    /// The system schema over `shards` and `access`.
    pub fn new(shards: Arc<dyn Shards>, access: Arc<dyn AccessStore>) -> SystemSchema {
        SystemSchema { shards, access }
    }

    fn kinds(&self) -> impl Iterator<Item = (&'static str, Kind)> + '_ {
        let members = self.shards.has_members();
        Kind::ALL.into_iter().filter(move |(_, k)| members || !k.members())
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.kinds().map(|(n, _)| n.to_string()).collect();
        names.extend(ACCESS_TABLES.iter().map(|s| s.to_string()));
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if ACCESS_TABLES.contains(&name) {
            return access_table(&self.access.access(), name);
        }
        let Some(kind) = Kind::named(name).filter(|k| self.kinds().any(|(_, j)| j == *k)) else {
            return Ok(None);
        };
        let table = SystemTable { shards: self.shards.clone(), kind, schema: kind.schema() };
        Ok(Some(Arc::new(table)))
    }

    fn table_exist(&self, name: &str) -> bool {
        ACCESS_TABLES.contains(&name) || self.kinds().any(|(n, _)| n == name)
    }
}

/// One system table, its rows gathered when it is scanned.
#[derive(Debug)]
struct SystemTable {
    shards: Arc<dyn Shards>,
    kind: Kind,
    schema: SchemaRef,
}

impl SystemTable {
    async fn batch(&self) -> Result<RecordBatch> {
        let shards = self.shards.as_ref();
        match self.kind {
            Kind::Backups => match shards.backups() {
                Some(b) => crate::backups::batch(&b.list().await?),
                None => crate::backups::batch(&[]),
            },
            Kind::Deletions => {
                let mut rows = shards.deletions().await;
                if let Some(b) = shards.backups() {
                    rows.extend(b.deletion_copies().await);
                    crate::deletions::fill_from_replicas(&mut rows);
                }
                crate::deletions::batch(&rows, crate::now_ms())
            }
            Kind::Queries => crate::statements::batch(&shards.statements().await),
            Kind::Engine(t) => per_shard(shards, t, &self.schema).await,
            Kind::Nodes => nodes_batch(&shards.nodes().await?.unwrap_or_default(), &self.schema),
            Kind::Shards => shards_batch(&shards.shards().await?.unwrap_or_default(), &self.schema),
            Kind::Cluster => cluster_batch(shards.cluster().await?.as_ref(), &self.schema),
            Kind::JoinTokens => {
                let mut rows = shards.join_tokens().await?.unwrap_or_default();
                // The secrets are never listed (only `CREATE JOIN TOKEN` shows one, once).
                rows.iter_mut().for_each(|r| r.token = None);
                join_tokens_batch(&rows)
            }
        }
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let batch = self.batch().await.map_err(|e| DataFusionError::External(Box::new(e)))?;
        MemorySourceConfig::try_new_exec(&[vec![batch]], self.schema.clone(), projection.cloned())
            .map(|e| e as Arc<dyn ExecutionPlan>)
    }
}

fn arrow(e: datafusion::arrow::error::ArrowError) -> QueryError {
    QueryError::Internal(e.to_string())
}

/// Engine table `table` of every shard queries read, with the shard's id first.
async fn per_shard(
    shards: &dyn Shards,
    table: EngineTable,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let ids: Vec<u64> = shards.routing().into_iter().map(|(s, _)| s).collect();
    let calls = ids.iter().map(|&shard| shards.engine_rows(shard, table));
    let mut out = Vec::new();
    for (shard, rows) in ids.iter().zip(futures::future::join_all(calls).await) {
        let b = rows?;
        let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(vec![*shard; b.num_rows()]))];
        cols.extend(b.columns().iter().cloned());
        out.push(RecordBatch::try_new(schema.clone(), cols).map_err(arrow)?);
    }
    datafusion::arrow::compute::concat_batches(schema, &out).map_err(arrow)
}

/// Engine table `table` of `db` (one shard's part, without the `shard` column).
pub fn engine_rows(db: &Database, table: EngineTable) -> Result<RecordBatch> {
    let cols = match table {
        EngineTable::Compactions => compactions(db),
        EngineTable::EngineDeletes => engine_deletes(db),
        EngineTable::Layout => layout(db),
        EngineTable::Tables => tables(db),
    };
    RecordBatch::try_new(Arc::new(Schema::new(engine_fields(table))), cols).map_err(arrow)
}

/// The columns of engine table `table` (without `shard`).
fn engine_fields(table: EngineTable) -> Vec<Field> {
    match table {
        EngineTable::Compactions => compaction_fields(),
        EngineTable::Layout => layout_fields(),
        EngineTable::EngineDeletes => vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("table_name", DataType::Utf8, true),
            Field::new("target", DataType::Utf8, false),
            ts_field("issued_at", false),
            ts_field("deadline", true),
            ts_field("applied_at", false),
            ts_field("persisted_at", true),
            Field::new("status", DataType::Utf8, false),
        ],
        EngineTable::Tables => vec![
            Field::new("database", DataType::Utf8, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("id", DataType::UInt64, false),
            Field::new("tags", DataType::Utf8, false),
            Field::new("fields", DataType::Utf8, false),
            Field::new("retention", DataType::Utf8, true),
            Field::new("series", DataType::UInt64, false),
            Field::new("rollup", DataType::Utf8, true),
        ],
    }
}

fn join(ids: &[u64]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

fn nodes_batch(nodes: &[NodeRow], schema: &SchemaRef) -> Result<RecordBatch> {
    let s = |f: &dyn Fn(&NodeRow) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(nodes.iter().map(f)))
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| n.id))),
        s(&|n| &n.state),
        s(&|n| &n.metadata_role),
        s(&|n| &n.grpc_addr),
        s(&|n| &n.http_addr),
        s(&|n| &n.pg_addr),
        Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| n.replicas))),
        Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| n.leaders))),
        Arc::new(UInt64Array::from_iter(nodes.iter().map(|n| n.bytes))),
        Arc::new(BooleanArray::from_iter(nodes.iter().map(|n| Some(n.not_ready.is_empty())))),
        Arc::new(StringArray::from_iter(
            nodes.iter().map(|n| (!n.not_ready.is_empty()).then(|| n.not_ready.join("; "))),
        )),
        Arc::new(StringArray::from_iter(nodes.iter().map(|n| n.version.as_deref()))),
        Arc::new(StringArray::from_iter(nodes.iter().map(|n| n.commit.as_deref()))),
        Arc::new(StringArray::from_iter(nodes.iter().map(|n| n.cluster_versions.as_deref()))),
    ];
    RecordBatch::try_new(schema.clone(), cols).map_err(arrow)
}

fn join_tokens_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("token", DataType::Utf8, true),
        Field::new("created_by", DataType::Utf8, false),
        ts_field("created_at", false),
        ts_field("expires_at", true),
        Field::new("uses_left", DataType::UInt64, true),
        Field::new("used_by", DataType::Utf8, false),
    ]))
}

/// Join tokens as `system.join_tokens` lists them (`token` only in the answer to
/// `CREATE JOIN TOKEN`; `uses_left` null: any number; `expires_at` null: never).
pub fn join_tokens_batch(rows: &[JoinTokenRow]) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.id.as_str()))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.token.as_deref()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.created_by.as_str()))),
        Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|r| ms_to_ns(r.created_ms)),
        )),
        Arc::new(TimestampNanosecondArray::from_iter(
            rows.iter().map(|r| r.expires_ms.map(ms_to_ns)),
        )),
        Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.uses_left.map(u64::from)))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| join(&r.used_by)))),
    ];
    RecordBatch::try_new(join_tokens_schema(), cols).map_err(arrow)
}

fn cluster_batch(row: Option<&ClusterRow>, schema: &SchemaRef) -> Result<RecordBatch> {
    let rows: Vec<&ClusterRow> = row.into_iter().collect();
    let after = |r: &ClusterRow| match r.auto_finalize_after {
        Some(d) => crate::db::human_duration(d.as_secs()),
        None => "never".to_string(),
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.cluster_id.as_deref()))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| u64::from(r.active_version)))),
        Arc::new(TimestampNanosecondArray::from_iter(
            rows.iter().map(|r| r.active_since_ms.map(ms_to_ns)),
        )),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.activated_by.as_deref()))),
        Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.finalizable_to.map(u64::from)))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.upgrade.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| after(r)))),
    ];
    RecordBatch::try_new(schema.clone(), cols).map_err(arrow)
}

fn shards_batch(shards: &[ShardRow], schema: &SchemaRef) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(shards.iter().map(|s| s.shard))),
        Arc::new(StringArray::from_iter_values(shards.iter().map(|s| join(&s.replicas)))),
        Arc::new(UInt64Array::from_iter(shards.iter().map(|s| s.leader))),
        Arc::new(BooleanArray::from_iter(shards.iter().map(|s| Some(s.moving_to.is_some())))),
        Arc::new(StringArray::from_iter(shards.iter().map(|s| s.moving_to.as_deref().map(join)))),
        Arc::new(UInt64Array::from_iter_values(shards.iter().map(|s| s.root))),
        Arc::new(UInt64Array::from_iter_values(shards.iter().map(|s| s.hash_lo))),
        Arc::new(UInt64Array::from_iter(shards.iter().map(|s| s.hash_end))),
        Arc::new(StringArray::from_iter(shards.iter().map(|s| s.split.clone()))),
    ];
    RecordBatch::try_new(schema.clone(), cols).map_err(arrow)
}

fn engine_deletes(db: &Database) -> Vec<ArrayRef> {
    let list = db.engine().deletions();
    let now_ms = crate::now_ms();
    let cat = db.catalog();
    let table_of = |key: &[u8]| -> Option<String> {
        let id = u32::from_be_bytes(key.get(..4)?.try_into().ok()?);
        if id == CATALOG_TABLE {
            return Some("(catalog)".into());
        }
        cat.table_by_id(id).map(|t| format!("{}.{}", t.database, t.name))
    };
    let describe = |kind: &DeletionKind| -> (String, Option<String>, String) {
        match kind {
            DeletionKind::Point { key } => {
                let target = match parse_row_key(key) {
                    Some((_, s, t)) => format!("series {s} time {t}"),
                    None => "catalog record".into(),
                };
                ("point".into(), table_of(key), target)
            }
            DeletionKind::Range { lo, hi } => {
                let target = match (parse_row_key(lo), parse_row_key(hi)) {
                    (Some((_, s, a)), Some((_, s2, b))) if s == s2 => {
                        format!("series {s} time [{a}, {b})")
                    }
                    (Some((_, s, a)), _) => format!("series {s} time >= {a}"),
                    _ if lo.len() == 4 => "every row".into(),
                    _ => "catalog records".into(),
                };
                ("range".into(), table_of(lo), target)
            }
            DeletionKind::TimeWindow { t_lo, t_hi, lo, .. } => {
                let hi = if *t_hi == u64::MAX {
                    "+inf".to_string()
                } else {
                    u64_to_time(*t_hi).to_string()
                };
                ("time_window".into(), table_of(lo), format!("time [{}, {hi})", u64_to_time(*t_lo)))
            }
        }
    };
    let mut id = Vec::new();
    let (mut kind, mut table, mut target) = (Vec::new(), Vec::new(), Vec::new());
    let (mut issued, mut deadline, mut applied, mut persisted, mut status) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for d in &list {
        id.push(d.id);
        let (k, t, tg) = describe(&d.kind);
        kind.push(k);
        table.push(t);
        target.push(tg);
        issued.push(ms_to_ns(d.issued_at_ms));
        deadline.push(d.deadline_ms.ms().map(ms_to_ns));
        applied.push(ms_to_ns(d.applied_at_ms));
        persisted.push(d.persisted_at_ms.map(ms_to_ns));
        status.push(match d.status(now_ms) {
            DeletionStatus::Pending => "pending",
            DeletionStatus::Persisted => "persisted",
            DeletionStatus::Late => "late",
        });
    }
    vec![
        Arc::new(UInt64Array::from(id)),
        Arc::new(StringArray::from(kind)),
        Arc::new(StringArray::from(table)),
        Arc::new(StringArray::from(target)),
        Arc::new(TimestampNanosecondArray::from(issued)),
        Arc::new(TimestampNanosecondArray::from(deadline)),
        Arc::new(TimestampNanosecondArray::from(applied)),
        Arc::new(TimestampNanosecondArray::from(persisted)),
        Arc::new(StringArray::from(status)),
    ]
}

fn tables(db: &Database) -> Vec<ArrayRef> {
    let cat = db.catalog();
    let mut rows = cat.tables();
    rows.sort_by(|a, b| (&a.database, &a.name).cmp(&(&b.database, &b.name)));
    let retention = |ns: Option<u64>| ns.map(|n| crate::db::human_duration(n / 1_000_000_000));
    vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|t| t.database.clone()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|t| t.name.clone()))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|t| u64::from(t.id)))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|t| t.tags.join(",")))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|t| {
            t.fields
                .iter()
                .map(|(f, ty)| format!("{f}:{}", ty.name()))
                .collect::<Vec<_>>()
                .join(",")
        }))),
        Arc::new(StringArray::from(
            rows.iter().map(|t| retention(t.retention_ns)).collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|t| cat.with_series(t.id, |idx| idx.len() as u64)),
        )),
        Arc::new(StringArray::from(
            rows.iter()
                .map(|t| t.rollup.as_ref().map(|r| r.definition.clone()))
                .collect::<Vec<_>>(),
        )),
    ]
}

fn layout(db: &Database) -> Vec<ArrayRef> {
    let engine = db.engine();
    let l = engine.layout();
    let files = engine.files();
    let levels = engine.options().num_levels;
    let h = |lvl: usize| l.tile_pages.get(lvl).or(l.tile_pages.last()).copied().unwrap_or(1);
    let at = |lvl: usize| files.iter().filter(move |(fl, _)| *fl == lvl);
    let reason = l.reason.to_string();
    let detail = match &l.mix {
        Some(m) => Some(format!(
            "per epoch {:.0} lookups, {:.0} empty lookups, {:.0} short scans, {:.1} time \
             deletes ({} epochs counted)",
            m.lookups, m.empty_lookups, m.short_scans, m.window_deletes, l.epochs
        )),
        None => None,
    };
    let u = |f: &dyn Fn(usize) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values((0..levels).map(f)))
    };
    vec![
        u(&|lvl| lvl as u64),
        u(&|lvl| h(lvl) as u64),
        u(&|lvl| at(lvl).count() as u64),
        u(&|lvl| at(lvl).filter(|(_, f)| f.props.tile_pages as usize == h(lvl)).count() as u64),
        Arc::new(StringArray::from_iter_values((0..levels).map(|_| reason.clone()))),
        Arc::new(StringArray::from((0..levels).map(|_| detail.clone()).collect::<Vec<_>>())),
    ]
}

fn compactions(db: &Database) -> Vec<ArrayRef> {
    let h = db.engine().compaction_history();
    let u = |f: &dyn Fn(&ebb_storage::CompactionRecord) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(h.iter().map(f)))
    };
    vec![
        Arc::new(TimestampNanosecondArray::from_iter_values(
            h.iter().map(|r| ms_to_ns(r.finished_at_ms)),
        )),
        Arc::new(StringArray::from_iter_values(h.iter().map(|r| r.kind.to_string()))),
        Arc::new(StringArray::from_iter_values(h.iter().map(|r| r.reason.to_string()))),
        u(&|r| r.level as u64),
        u(&|r| r.output_level as u64),
        u(&|r| r.input_files as u64),
        u(&|r| r.output_files as u64),
        u(&|r| r.bytes_written),
        u(&|r| r.entries_in),
        u(&|r| r.entries_out),
        u(&|r| r.duration_ms),
    ]
}

/// The columns of `system.compactions`.
pub fn compaction_fields() -> Vec<Field> {
    vec![
        ts_field("finished_at", false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("level", DataType::UInt64, false),
        Field::new("output_level", DataType::UInt64, false),
        Field::new("input_files", DataType::UInt64, false),
        Field::new("output_files", DataType::UInt64, false),
        Field::new("bytes_written", DataType::UInt64, false),
        Field::new("entries_in", DataType::UInt64, false),
        Field::new("entries_out", DataType::UInt64, false),
        Field::new("duration_ms", DataType::UInt64, false),
    ]
}

/// Columns of `system.layout`.
pub fn layout_fields() -> Vec<Field> {
    vec![
        Field::new("level", DataType::UInt64, false),
        Field::new("tile_pages", DataType::UInt64, false),
        Field::new("files", DataType::UInt64, false),
        Field::new("files_at_tile_pages", DataType::UInt64, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, true),
    ]
}
