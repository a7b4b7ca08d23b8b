//! Reading a table's rows into Arrow record batches.
//!
//! The engine is synchronous: a scan runs on a blocking thread and sends batches of up to
//! [`BATCH_ROWS`] rows through a bounded channel; dropping the stream stops it.
//!
//! A scan over many series is split into partitions by series id ([`SeriesSpan`]), read in
//! parallel through one shared engine snapshot, so every partition sees the same writes.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::error::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;

use super::pushdown::ScanFilter;
use crate::db::Database;
use crate::error::QueryError;
use crate::model::keys::{parse_row_key, row_key, series_range, table_range, time_to_u64};
use crate::model::row::{decode_fields, Value};
use crate::model::schema::{Column, FieldType, TableDef};
use crate::model::series::TagValues;
use ebb_storage::Snapshot;

/// Rows per record batch.
pub const BATCH_ROWS: usize = 8192;

/// Fewest series a partition of a split scan gets.
const MIN_SERIES_PER_PARTITION: usize = 4;

/// The series ids one partition of a scan reads: `[lo, hi)`, unbounded where `None`. The spans
/// of a scan cover every id, so series created after planning are read too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeriesSpan {
    lo: Option<u64>,
    hi: Option<u64>,
}

impl SeriesSpan {
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.lo.is_none_or(|l| id >= l) && self.hi.is_none_or(|h| id < h)
    }

    /// Splits the scan of `filter` on `table` into up to `n` spans holding about as many of the
    /// series it reads each (one span when there are too few series to be worth it).
    pub fn split(db: &Database, table: u32, filter: &ScanFilter, n: usize) -> Vec<SeriesSpan> {
        if n <= 1 || filter.time.is_empty() {
            return vec![SeriesSpan::default()];
        }
        let mut ids = db.catalog().with_series(table, |idx| {
            if idx.len() < 2 * MIN_SERIES_PER_PARTITION {
                return Vec::new();
            }
            filter.series(idx).unwrap_or_else(|| idx.iter().map(|(id, _)| id).collect())
        });
        let n = n.min(ids.len() / MIN_SERIES_PER_PARTITION);
        if n <= 1 {
            return vec![SeriesSpan::default()];
        }
        ids.sort_unstable();
        let mut spans = Vec::with_capacity(n);
        let mut lo = None;
        for i in 1..n {
            let b = ids[i * ids.len() / n];
            spans.push(SeriesSpan { lo, hi: Some(b) });
            lo = Some(b);
        }
        spans.push(SeriesSpan { lo, hi: None });
        spans
    }
}

/// One scan of one table: the projected columns, the pushed-down filter and limit.
#[derive(Debug)]
pub struct TableScan {
    pub(crate) db: Arc<Database>,
    pub(crate) def: Arc<TableDef>,
    /// Columns produced, in output order.
    pub(crate) columns: Vec<Column>,
    /// Output schema (the projected columns).
    pub(crate) schema: SchemaRef,
    pub(crate) filter: ScanFilter,
    /// Stop after this many rows (only when every filter was applied here).
    pub(crate) limit: Option<usize>,
    /// The series this partition reads.
    pub(crate) span: SeriesSpan,
    /// The engine snapshot every partition of the scan reads, taken by the first to start.
    pub(crate) snapshot: Arc<OnceLock<Snapshot>>,
    /// Produce each series' newest row only.
    pub(crate) newest_only: bool,
}

impl PartitionStream for TableScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let job = ScanJob {
            db: self.db.clone(),
            def: self.def.clone(),
            columns: self.columns.clone(),
            schema: self.schema.clone(),
            filter: self.filter.clone(),
            limit: self.limit,
            span: self.span,
            snapshot: self.snapshot.clone(),
            newest_only: self.newest_only,
        };
        blocking_stream(self.schema.clone(), move |emit| job.run(emit))
    }
}

/// Runs `job` on a blocking thread, streaming the batches it emits through a bounded channel
/// (its `emit` returns `false` once the stream is dropped) and then its error, if any.
pub(crate) fn blocking_stream(
    schema: SchemaRef,
    job: impl FnOnce(&mut dyn FnMut(RecordBatch) -> bool) -> Result<(), QueryError> + Send + 'static,
) -> SendableRecordBatchStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch, DataFusionError>>(2);
    tokio::task::spawn_blocking(move || {
        let tx2 = tx.clone();
        if let Err(e) = job(&mut |b| tx2.blocking_send(Ok(b)).is_ok()) {
            let _ = tx.blocking_send(Err(DataFusionError::External(Box::new(e))));
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

struct ScanJob {
    db: Arc<Database>,
    def: Arc<TableDef>,
    columns: Vec<Column>,
    schema: SchemaRef,
    filter: ScanFilter,
    limit: Option<usize>,
    span: SeriesSpan,
    snapshot: Arc<OnceLock<Snapshot>>,
    newest_only: bool,
}

enum Builder {
    Time(TimestampNanosecondBuilder),
    Str(StringBuilder),
    F64(Float64Builder),
    I64(Int64Builder),
    U64(UInt64Builder),
    Bool(BooleanBuilder),
}

impl Builder {
    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Time(b) => Arc::new(b.finish()),
            Builder::Str(b) => Arc::new(b.finish()),
            Builder::F64(b) => Arc::new(b.finish()),
            Builder::I64(b) => Arc::new(b.finish()),
            Builder::U64(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
        }
    }
}

impl ScanJob {
    fn builders(&self) -> Vec<Builder> {
        self.columns
            .iter()
            .map(|c| match c {
                Column::Time => {
                    Builder::Time(TimestampNanosecondBuilder::with_capacity(BATCH_ROWS))
                }
                Column::Tag(_) => Builder::Str(StringBuilder::new()),
                Column::Field(i) => match self.def.fields[*i].1 {
                    FieldType::Float => Builder::F64(Float64Builder::with_capacity(BATCH_ROWS)),
                    FieldType::Integer => Builder::I64(Int64Builder::with_capacity(BATCH_ROWS)),
                    FieldType::UInteger => Builder::U64(UInt64Builder::with_capacity(BATCH_ROWS)),
                    FieldType::Boolean => Builder::Bool(BooleanBuilder::with_capacity(BATCH_ROWS)),
                    FieldType::String => Builder::Str(StringBuilder::new()),
                },
            })
            .collect()
    }

    /// Reads the rows, calling `emit` per batch; stops when it returns `false`.
    fn run(self, mut emit: impl FnMut(RecordBatch) -> bool) -> Result<(), QueryError> {
        let engine = self.db.engine().clone();
        let snap = self.snapshot.get_or_init(|| engine.snapshot());
        let table = self.def.id;
        let t = self.filter.time;
        if t.is_empty() {
            return Ok(());
        }
        let span = self.span;
        let series = self.db.catalog().with_series(table, |idx| self.filter.series(idx));
        let need_tags = self.columns.iter().any(|c| matches!(c, Column::Tag(_)));
        let need_values = self.columns.iter().any(|c| matches!(c, Column::Field(_)));
        let mut builders = self.builders();
        let mut rows = 0usize;
        let mut total = 0usize;
        let mut tag_cache: Option<(u64, Option<TagValues>)> = None;
        let mut fields: Vec<Option<Value>> = vec![None; self.def.fields.len()];
        let mut wanted = vec![false; self.def.fields.len()];
        for c in &self.columns {
            if let Column::Field(i) = c {
                if let Some(w) = wanted.get_mut(*i) {
                    *w = true;
                }
            }
        }
        let mut flush =
            |builders: &mut Vec<Builder>, rows: &mut usize| -> Result<bool, QueryError> {
                let arrays: Vec<ArrayRef> = builders.iter_mut().map(Builder::finish).collect();
                let opts = RecordBatchOptions::new().with_row_count(Some(*rows));
                let batch = RecordBatch::try_new_with_options(self.schema.clone(), arrays, &opts)
                    .map_err(|e| QueryError::Internal(format!("batch: {e}")))?;
                *rows = 0;
                Ok(emit(batch))
            };
        if self.newest_only {
            let ids = match series {
                Some(ids) => ids,
                None => {
                    let mut ids = self
                        .db
                        .catalog()
                        .with_series(table, |idx| idx.iter().map(|(id, _)| id).collect::<Vec<_>>());
                    ids.sort_unstable();
                    ids
                }
            };
            // Where a single node knows the newest time written to a series, nothing stored
            // is newer (a replica learns times from applied batches only).
            let replicated = self.db.is_replicated();
            let bounds = match replicated {
                true => vec![None; ids.len()],
                false => {
                    let keys: Vec<(u32, u64)> = ids.iter().map(|&s| (table, s)).collect();
                    self.db.catalog().max_times(&keys)
                }
            };
            // Newest times found by reading a whole series: noted, so the next read of it is
            // one look-up (nothing stored is newer; writes meanwhile note their own).
            let mut learned = Vec::new();
            for (&sid, bound) in ids.iter().zip(bounds) {
                if !span.contains(sid) {
                    continue;
                }
                let Some((time, v)) = newest_row(&engine, snap, table, sid, bound)? else {
                    continue;
                };
                if bound.is_none() && !replicated {
                    learned.push((table, sid, time));
                }
                if need_tags {
                    tag_cache = Some((
                        sid,
                        self.db.catalog().with_series(table, |idx| idx.tags(sid).cloned()),
                    ));
                }
                if need_values {
                    decode_fields(&v, &wanted, &mut fields)?;
                }
                let tags = tag_cache.as_ref().and_then(|(_, t)| t.as_ref());
                for (b, c) in builders.iter_mut().zip(&self.columns) {
                    append(b, c, time, tags, &fields);
                }
                rows += 1;
                if rows == BATCH_ROWS && !flush(&mut builders, &mut rows)? {
                    return Ok(());
                }
            }
            self.db.catalog().note_times(&learned);
            if rows > 0 {
                flush(&mut builders, &mut rows)?;
            }
            return Ok(());
        }
        let ranges = key_ranges(&self.db, table, &self.filter, span, series.as_deref());
        'ranges: for (lo, hi, by_time) in ranges {
            if !hi.is_empty() && lo >= hi {
                continue;
            }
            let range = (
                std::ops::Bound::Included(lo),
                if hi.is_empty() {
                    std::ops::Bound::Unbounded
                } else {
                    std::ops::Bound::Excluded(hi)
                },
            );
            let mut iter = if by_time {
                let d_lo = time_to_u64(t.lo.unwrap_or(i64::MIN));
                let d_hi = t.hi.map_or(u64::MAX, time_to_u64);
                engine.scan_time(range, d_lo, d_hi, Some(snap))?
            } else {
                engine.scan(range, Some(snap))?
            };
            while let Some(item) = iter.next_ref() {
                let (k, v) = item?;
                let Some((_, sid, time)) = parse_row_key(k) else { continue };
                if need_tags && tag_cache.as_ref().is_none_or(|(id, _)| *id != sid) {
                    let tags = self.db.catalog().with_series(table, |idx| idx.tags(sid).cloned());
                    tag_cache = Some((sid, tags));
                }
                if need_values {
                    decode_fields(v, &wanted, &mut fields)?;
                }
                let tags = tag_cache.as_ref().and_then(|(_, t)| t.as_ref());
                for (b, c) in builders.iter_mut().zip(&self.columns) {
                    append(b, c, time, tags, &fields);
                }
                rows += 1;
                total += 1;
                let done = self.limit.is_some_and(|l| total >= l);
                if rows == BATCH_ROWS || done {
                    if !flush(&mut builders, &mut rows)? {
                        return Ok(());
                    }
                    if done {
                        break 'ranges;
                    }
                }
            }
        }
        if rows > 0 {
            flush(&mut builders, &mut rows)?;
        }
        Ok(())
    }
}

/// The key ranges a scan of `filter` over the series of `span` reads, with whether each must
/// also be pruned by time (a range of one series is bounded by time already). `series`: the
/// series the filter names, if it names some.
pub(crate) fn key_ranges(
    db: &Database,
    table: u32,
    filter: &ScanFilter,
    span: SeriesSpan,
    series: Option<&[u64]>,
) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
    let t = filter.time;
    match series {
        Some(ids) => ids
            .iter()
            .filter(|&&s| span.contains(s))
            .map(|&s| {
                let (lo, hi) = series_range(table, s, t.lo.unwrap_or(i64::MIN), t.hi);
                // The window also prunes the pages of a delete tile (ordered by time)
                // that lie outside it: the key range alone cannot.
                (lo, hi, !t.is_unbounded())
            })
            .collect(),
        None => match db.window_series(table, t.is_unbounded()) {
            Some(ids) => ids
                .iter()
                .filter(|&&s| span.contains(s))
                .map(|&s| {
                    let (lo, hi) = series_range(table, s, t.lo.unwrap_or(i64::MIN), t.hi);
                    (lo, hi, false)
                })
                .collect(),
            None => {
                let (mut lo, mut hi) = table_range(table);
                if let Some(l) = span.lo {
                    lo = row_key(table, l, i64::MIN).to_vec();
                }
                if let Some(h) = span.hi {
                    hi = row_key(table, h, i64::MIN).to_vec();
                }
                vec![(lo, hi, !t.is_unbounded())]
            }
        },
    }
}

/// The newest row of series `sid` of `table` in `snap`: `(time, value)`. `bound`, if known, is
/// a time no stored row of the series is newer than (the row at it is looked up first).
fn newest_row(
    engine: &ebb_storage::Engine,
    snap: &Snapshot,
    table: u32,
    sid: u64,
    bound: Option<i64>,
) -> Result<Option<(i64, Vec<u8>)>, QueryError> {
    if let Some(t) = bound {
        if let Some(v) = engine.get(&row_key(table, sid, t), Some(snap))? {
            return Ok(Some((t, v.to_vec())));
        }
    }
    let (lo, hi) = series_range(table, sid, i64::MIN, None);
    let range = (std::ops::Bound::Included(lo), std::ops::Bound::Excluded(hi));
    let mut iter = engine.scan(range, Some(snap))?;
    let mut last: Option<(i64, Vec<u8>)> = None;
    while let Some(item) = iter.next_ref() {
        let (k, v) = item?;
        if let Some((_, _, time)) = parse_row_key(k) {
            match &mut last {
                Some((t, buf)) => {
                    *t = time;
                    buf.clear();
                    buf.extend_from_slice(v);
                }
                None => last = Some((time, v.to_vec())),
            }
        }
    }
    Ok(last)
}

fn append(
    b: &mut Builder,
    c: &Column,
    time: i64,
    tags: Option<&TagValues>,
    fields: &[Option<Value>],
) {
    match (b, c) {
        (Builder::Time(b), _) => b.append_value(time),
        (Builder::Str(b), Column::Tag(i)) => b.append_option(tags.and_then(|t| t.get(*i))),
        (b, Column::Field(i)) => match (b, fields.get(*i).and_then(|f| f.as_ref())) {
            (Builder::F64(b), Some(Value::Float(v))) => b.append_value(*v),
            (Builder::I64(b), Some(Value::Integer(v))) => b.append_value(*v),
            (Builder::U64(b), Some(Value::UInteger(v))) => b.append_value(*v),
            (Builder::Bool(b), Some(Value::Boolean(v))) => b.append_value(*v),
            (Builder::Str(b), Some(Value::String(v))) => b.append_value(v),
            (Builder::F64(b), _) => b.append_null(),
            (Builder::I64(b), _) => b.append_null(),
            (Builder::U64(b), _) => b.append_null(),
            (Builder::Bool(b), _) => b.append_null(),
            (Builder::Str(b), _) => b.append_null(),
            (Builder::Time(b), _) => b.append_value(time),
        },
        (Builder::Str(b), _) => b.append_null(),
        (Builder::F64(b), _) => b.append_null(),
        (Builder::I64(b), _) => b.append_null(),
        (Builder::U64(b), _) => b.append_null(),
        (Builder::Bool(b), _) => b.append_null(),
    }
}
