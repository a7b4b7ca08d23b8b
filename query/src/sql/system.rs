//! System tables, built from the engine and catalog when queried:
//!
//! - `system.deletions`: every delete request (`DELETE`, `ERASE`, `DROP TABLE`, retention
//!   purge), its deadline, and when it was applied and persisted ([`crate::deletions`]).
//! - `system.engine_deletes`: the engine's deletion ledger itself, one row per engine delete,
//!   with what each covered in table terms.
//! - `system.tables`: tables, their columns, retention, series count, and for a rollup its
//!   definition.
//! - `system.compactions`: recent flushes, compactions and time-window executions.
//! - `system.layout`: the KiWi+ delete-tile size h new files get per level, and why.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use ebb_storage::{DeletionKind, DeletionStatus};

use crate::db::Database;
use crate::deletions::ms_to_ns;
use crate::model::keys::{parse_row_key, u64_to_time, CATALOG_TABLE};

/// Name of the system schema.
pub const SYSTEM_SCHEMA: &str = "system";

/// One system table.
#[derive(Debug)]
pub struct SystemTable {
    db: Arc<Database>,
    name: &'static str,
    schema: SchemaRef,
}

fn ts(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Nanosecond, None), nullable)
}

impl SystemTable {
    /// Names of the system tables.
    pub const NAMES: &'static [&'static str] =
        &["compactions", "deletions", "engine_deletes", "layout", "queries", "tables"];

    /// The system table `name`, if there is one.
    pub fn new(db: Arc<Database>, name: &str) -> Option<SystemTable> {
        let (name, fields): (&'static str, Vec<Field>) = match name {
            "deletions" => (
                "deletions",
                crate::deletions::schema().fields().iter().map(|f| f.as_ref().clone()).collect(),
            ),
            "engine_deletes" => (
                "engine_deletes",
                vec![
                    Field::new("id", DataType::UInt64, false),
                    Field::new("kind", DataType::Utf8, false),
                    Field::new("table_name", DataType::Utf8, true),
                    Field::new("target", DataType::Utf8, false),
                    ts("issued_at", false),
                    ts("deadline", true),
                    ts("applied_at", false),
                    ts("persisted_at", true),
                    Field::new("status", DataType::Utf8, false),
                ],
            ),
            "tables" => (
                "tables",
                vec![
                    Field::new("database", DataType::Utf8, false),
                    Field::new("name", DataType::Utf8, false),
                    Field::new("id", DataType::UInt64, false),
                    Field::new("tags", DataType::Utf8, false),
                    Field::new("fields", DataType::Utf8, false),
                    Field::new("retention", DataType::Utf8, true),
                    Field::new("series", DataType::UInt64, false),
                    Field::new("rollup", DataType::Utf8, true),
                ],
            ),
            "layout" => ("layout", layout_fields()),
            "compactions" => ("compactions", compaction_fields()),
            "queries" => (
                "queries",
                crate::statements::schema().fields().iter().map(|f| f.as_ref().clone()).collect(),
            ),
            _ => return None,
        };
        Some(SystemTable { db, name, schema: Arc::new(Schema::new(fields)) })
    }

    fn batch(&self) -> DfResult<RecordBatch> {
        let cols = match self.name {
            "deletions" => {
                let now_ms = crate::now_ms();
                let rows = crate::deletions::local_deletions(&self.db, 0, 0);
                return crate::deletions::batch(&rows, now_ms)
                    .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
            }
            "queries" => {
                let rows: Vec<_> =
                    self.db.statement_log().recent().into_iter().map(|r| (None, r)).collect();
                return crate::statements::batch(&rows)
                    .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
            }
            "engine_deletes" => self.deletions(),
            "tables" => self.tables(),
            "layout" => self.layout(),
            _ => self.compactions(),
        };
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }

    fn deletions(&self) -> Vec<ArrayRef> {
        let list = self.db.engine().deletions();
        let now_ms = crate::now_ms();
        let cat = self.db.catalog();
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
                    (
                        "time_window".into(),
                        table_of(lo),
                        format!("time [{}, {hi})", u64_to_time(*t_lo)),
                    )
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
            deadline.push((d.deadline_ms != u64::MAX).then(|| ms_to_ns(d.deadline_ms)));
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

    fn tables(&self) -> Vec<ArrayRef> {
        let cat = self.db.catalog();
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

    fn layout(&self) -> Vec<ArrayRef> {
        let engine = self.db.engine();
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

    fn compactions(&self) -> Vec<ArrayRef> {
        let h = self.db.engine().compaction_history();
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
}

/// The columns of `system.compactions`.
pub fn compaction_fields() -> Vec<Field> {
    vec![
        ts("finished_at", false),
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
        let batch = self.batch()?;
        MemorySourceConfig::try_new_exec(&[vec![batch]], self.schema.clone(), projection.cloned())
            .map(|e| e as Arc<dyn ExecutionPlan>)
    }
}
