//! The scan that aggregates as it reads (see the parent module).

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt64Builder,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use ebb_storage::{PageTaker, SummarizedPage};
use parking_lot::Mutex;

use super::{GroupCol, Role, Spec};
use crate::error::QueryError;
use crate::model::keys::{parse_row_key, time_to_u64};
use crate::model::row::{decode_fields, Value};
use crate::model::schema::FieldType;
use crate::model::series::TagValues;
use crate::model::summary::{FieldStats, RowsSummary, Stats};
use crate::sql::pushdown::{ScanFilter, TimeBounds};
use crate::sql::scan::{blocking_stream, key_ranges, TableScan, BATCH_ROWS};

/// Partial aggregates of one table scan: partition `i` aggregates the series of `parts[i]`.
#[derive(Debug)]
pub(crate) struct PartialAggregateExec {
    spec: Arc<Spec>,
    /// Only the groups of each partition's this many newest buckets (the plan above keeps
    /// the rows of the newest buckets only).
    latest: Option<usize>,
    parts: Vec<Arc<TableScan>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl PartialAggregateExec {
    pub(crate) fn new(schema: SchemaRef, spec: Arc<Spec>, parts: Vec<Arc<TableScan>>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(parts.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        PartialAggregateExec { spec, latest: None, parts, schema, properties: Arc::new(properties) }
    }

    /// The spec.
    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The same scan, producing only the groups of each partition's `k` newest buckets.
    pub(crate) fn with_latest(&self, k: usize) -> Self {
        PartialAggregateExec {
            spec: self.spec.clone(),
            latest: Some(k),
            parts: self.parts.clone(),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }
    }
}

impl DisplayAs for PartialAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let table = self.parts.first().map_or("?", |p| p.def.name.as_str());
        let cols: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "EbbPartialAggregate: table={table}, partitions={}, columns=[{}]",
            self.parts.len(),
            cols.join(", ")
        )?;
        match self.latest {
            Some(k) => write!(f, ", newest_buckets={k}"),
            None => Ok(()),
        }
    }
}

impl ExecutionPlan for PartialAggregateExec {
    fn name(&self) -> &str {
        "EbbPartialAggregate"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal("a partial aggregate scan has no inputs".into()))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let part = self.parts.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("partition {partition} out of range"))
        })?;
        let (spec, schema, latest) = (self.spec.clone(), self.schema.clone(), self.latest);
        Ok(blocking_stream(self.schema.clone(), move |emit| {
            aggregate(&part, &spec, latest, &schema, emit)
        }))
    }
}

/// The partial state of one (series, bucket).
#[derive(Debug, Clone)]
struct Group {
    sid: u64,
    bucket: i64,
    rows: u64,
    /// The earliest and latest time of its rows (`None` while it has none).
    times: Option<(i64, i64)>,
    /// Per field of [`Spec::fields`].
    fields: Vec<FieldStats>,
}

impl Group {
    fn new(sid: u64, bucket: i64, n: usize) -> Group {
        let empty = FieldStats { count: 0, stats: Stats::Other };
        Group { sid, bucket, rows: 0, times: None, fields: vec![empty; n] }
    }

    /// Adds rows from `lo` to `hi` to the time span.
    fn span(&mut self, lo: i64, hi: i64) {
        self.times = Some(match self.times {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }

    fn merge(&mut self, other: &Group) -> bool {
        self.rows += other.rows;
        if let Some((lo, hi)) = other.times {
            self.span(lo, hi);
        }
        self.fields.iter_mut().zip(&other.fields).all(|(a, b)| a.merge(b))
    }
}

/// Takes the pages of one (series, bucket) whose summaries have every field the aggregate
/// reads; folds runs of pages of the same group.
struct PageFolder {
    spec: Arc<Spec>,
    table: u32,
    taken: Mutex<(Option<Group>, Vec<Group>)>,
}

impl PageFolder {
    fn group_of(&self, page: &SummarizedPage<'_>) -> Option<Group> {
        let (t1, s1, lo) = parse_row_key(page.min_key)?;
        let (t2, s2, hi) = parse_row_key(page.max_key)?;
        if (t1, s1) != (t2, s2) || t1 != self.table {
            return None;
        }
        let bucket = self.spec.bucket(lo).ok()?;
        if self.spec.bucket(hi).ok()? != bucket {
            return None;
        }
        let summary = RowsSummary::decode(page.summary)?;
        let mut g = Group::new(s1, bucket, self.spec.fields.len());
        g.rows = u64::from(page.entries);
        // Keys of one series sort by time: the page's first and last keys bound its times.
        g.span(lo, hi);
        for ((f, ty), slot) in self.spec.fields.iter().zip(&mut g.fields) {
            let s = summary.field(*f);
            let fits = s.count == 0
                || matches!(
                    (ty, s.stats),
                    (FieldType::Float, Stats::Float { .. })
                        | (FieldType::Integer, Stats::Integer { .. })
                        | (FieldType::UInteger, Stats::UInteger { .. })
                        | (FieldType::Boolean | FieldType::String, Stats::Other)
                );
            if !fits {
                return None;
            }
            *slot = s;
        }
        Some(g)
    }

    fn drain(&self, out: &mut Vec<Group>, all: bool) {
        let mut t = self.taken.lock();
        out.append(&mut t.1);
        if all {
            out.extend(t.0.take());
        }
    }
}

impl PageTaker for PageFolder {
    fn take(&self, page: &SummarizedPage<'_>) -> bool {
        let Some(g) = self.group_of(page) else { return false };
        let mut t = self.taken.lock();
        match &mut t.0 {
            Some(cur) if (cur.sid, cur.bucket) == (g.sid, g.bucket) => {
                if !cur.merge(&g) {
                    return false; // (cannot happen: types were checked)
                }
            }
            cur => {
                if let Some(done) = cur.replace(g) {
                    t.1.push(done);
                }
            }
        }
        true
    }
}

/// Builds the output batches.
struct Output<'a> {
    spec: &'a Spec,
    part: &'a TableScan,
    schema: &'a SchemaRef,
    cols: Vec<Col>,
    rows: usize,
    tags: Option<(u64, Option<TagValues>)>,
}

enum Col {
    Time(TimestampNanosecondBuilder),
    Str(StringBuilder),
    F64(Float64Builder),
    I64(Int64Builder),
    U64(UInt64Builder),
}

impl<'a> Output<'a> {
    fn new(spec: &'a Spec, part: &'a TableScan, schema: &'a SchemaRef) -> Self {
        let cols = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Timestamp(_, tz) => {
                    Col::Time(TimestampNanosecondBuilder::new().with_timezone_opt(tz.clone()))
                }
                DataType::Float64 => Col::F64(Float64Builder::new()),
                DataType::Int64 => Col::I64(Int64Builder::new()),
                DataType::UInt64 => Col::U64(UInt64Builder::new()),
                _ => Col::Str(StringBuilder::new()),
            })
            .collect();
        Output { spec, part, schema, cols, rows: 0, tags: None }
    }

    fn push(&mut self, g: &Group) {
        let ngroups = self.spec.groups.len();
        for (col, gc) in self.cols.iter_mut().zip(&self.spec.groups) {
            match (col, gc) {
                (Col::Time(b), GroupCol::Bucket { .. }) => b.append_value(g.bucket),
                (Col::Str(b), GroupCol::Tag(i)) => {
                    if self.tags.as_ref().is_none_or(|(sid, _)| *sid != g.sid) {
                        let (db, table) = (&self.part.db, self.part.def.id);
                        let tags = db.catalog().with_series(table, |idx| idx.tags(g.sid).cloned());
                        self.tags = Some((g.sid, tags));
                    }
                    let tags = self.tags.as_ref().and_then(|(_, t)| t.as_ref());
                    b.append_option(tags.and_then(|t| t.get(*i)));
                }
                _ => {} // (the rule checked the group column types)
            }
        }
        for (col, st) in self.cols[ngroups..].iter_mut().zip(&self.spec.states) {
            let fs = st.field.and_then(|f| g.fields.get(f));
            match st.role {
                Role::MinTime | Role::MaxTime => {
                    let t = g.times.map(|(lo, hi)| if st.role == Role::MinTime { lo } else { hi });
                    if let Col::Time(b) = col {
                        b.append_option(t);
                    }
                }
                Role::Count => {
                    let n = fs.map_or(g.rows, |f| f.count);
                    match col {
                        Col::I64(b) => b.append_value(n as i64),
                        Col::U64(b) => b.append_value(n),
                        _ => {}
                    }
                }
                role => match (col, fs.filter(|f| f.count > 0).map(|f| f.stats)) {
                    (Col::F64(b), Some(Stats::Float { min, max, sum })) => {
                        b.append_value(pick(role, min, max, sum))
                    }
                    (Col::I64(b), Some(Stats::Integer { min, max, sum })) => {
                        b.append_value(pick(role, min, max, sum))
                    }
                    (Col::U64(b), Some(Stats::UInteger { min, max, sum })) => {
                        b.append_value(pick(role, min, max, sum))
                    }
                    (Col::F64(b), _) => b.append_null(),
                    (Col::I64(b), _) => b.append_null(),
                    (Col::U64(b), _) => b.append_null(),
                    (Col::Time(b), _) => b.append_null(),
                    (Col::Str(b), _) => b.append_null(),
                },
            }
        }
        self.rows += 1;
    }

    fn batch(&mut self) -> Result<RecordBatch, QueryError> {
        let arrays: Vec<ArrayRef> = self
            .cols
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    Col::Time(b) => Arc::new(b.finish()),
                    Col::Str(b) => Arc::new(b.finish()),
                    Col::F64(b) => Arc::new(b.finish()),
                    Col::I64(b) => Arc::new(b.finish()),
                    Col::U64(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        let opts = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &opts)
            .map_err(|e| QueryError::Internal(format!("partial aggregate batch: {e}")))
    }
}

/// The value of a state column in `role` (not `Count`).
fn pick<T>(role: Role, min: T, max: T, sum: T) -> T {
    match role {
        Role::Min => min,
        Role::Max => max,
        _ => sum,
    }
}

/// Aggregates the rows of `part` into partial rows, calling `emit` per batch; stops when it
/// returns `false`. With `latest`, only the groups of the partition's `latest` newest buckets.
fn aggregate(
    part: &TableScan,
    spec: &Arc<Spec>,
    latest: Option<usize>,
    schema: &SchemaRef,
    mut emit: impl FnMut(RecordBatch) -> bool,
) -> Result<(), QueryError> {
    let t = part.filter.time;
    if t.is_empty() {
        return Ok(());
    }
    let mut out = Output::new(spec, part, schema);
    let mut push = |out: &mut Output<'_>, g: &Group| -> Result<bool, QueryError> {
        out.push(g);
        Ok(out.rows < BATCH_ROWS || emit(out.batch()?))
    };
    match latest {
        None => {
            if !scan_window(part, spec, t, &mut |g| push(&mut out, &g))? {
                return Ok(());
            }
        }
        Some(k) => {
            if !latest_buckets(part, spec, t, k, &mut |g| push(&mut out, &g))? {
                return Ok(());
            }
        }
    }
    if out.rows > 0 {
        emit(out.batch()?);
    }
    Ok(())
}

/// Calls `sink` with the groups of the `k` newest buckets of `part` within `t`: windows of
/// whole buckets read from the newest time back, each twice as wide as the last, until `k`
/// buckets have rows or the windows reach the start of `t`. A later window holds only older
/// buckets, so the newest buckets of a window that still fit among the `k` are final and go to
/// `sink` at once; one window's groups are held at most, and fewer once more than `k` buckets
/// turn up in it. Returns `false` if `sink` stopped it.
fn latest_buckets(
    part: &TableScan,
    spec: &Arc<Spec>,
    t: TimeBounds,
    k: usize,
    sink: &mut dyn FnMut(Group) -> Result<bool, QueryError>,
) -> Result<bool, QueryError> {
    let Some(stride) = spec.stride() else {
        return Err(QueryError::Internal("newest buckets without a date_bin group".into()));
    };
    let floor = t.lo.unwrap_or(i64::MIN);
    let newest = newest_time(part).map(|m| m.saturating_add(1));
    let mut upper = match (t.hi, newest) {
        (Some(h), Some(n)) => h.min(n),
        (h, n) => h.or(n).unwrap_or(i64::MAX),
    };
    let mut width = stride.saturating_mul(i64::try_from(k).unwrap_or(i64::MAX));
    let mut room = k;
    while upper > floor && room > 0 {
        let start = upper.saturating_sub(width);
        let lower = if start <= floor { floor } else { spec.bucket(start)?.max(floor) };
        let window = TimeBounds { lo: Some(lower), hi: Some(upper) };
        let (mut groups, mut buckets) = (Vec::new(), BTreeSet::new());
        scan_window(part, spec, window, &mut |g| {
            buckets.insert(g.bucket);
            groups.push(g);
            if groups.len() >= BATCH_ROWS && buckets.len() > room {
                // Only the window's `room` newest buckets can count.
                let cut = buckets.iter().rev().nth(room - 1).copied().unwrap_or(i64::MIN);
                buckets.retain(|b| *b >= cut);
                groups.retain(|g| g.bucket >= cut);
            }
            Ok(true)
        })?;
        let keep: BTreeSet<i64> = buckets.iter().rev().take(room).copied().collect();
        for g in groups {
            if keep.contains(&g.bucket) && !sink(g)? {
                return Ok(false);
            }
        }
        room -= keep.len();
        upper = lower;
        width = width.saturating_mul(2);
    }
    Ok(true)
}

/// A time no row of the partition's series is newer than, where the catalog knows one for
/// every series (a single node does; a replica learns times from applied batches only).
fn newest_time(part: &TableScan) -> Option<i64> {
    if part.db.is_replicated() {
        return None;
    }
    let table = part.def.id;
    let catalog = part.db.catalog();
    let ids = catalog.with_series(table, |idx| {
        part.filter.series(idx).unwrap_or_else(|| idx.iter().map(|(id, _)| id).collect())
    });
    let keys: Vec<(u32, u64)> =
        ids.into_iter().filter(|s| part.span.contains(*s)).map(|s| (table, s)).collect();
    let times = catalog.max_times(&keys);
    times.into_iter().try_fold(i64::MIN, |m, t| t.map(|t| m.max(t)))
}

/// Aggregates the rows of `part` in the time window `t`, calling `sink` with each group (of
/// rows, or of pages answered from their summaries); returns `false` if `sink` stopped it.
fn scan_window(
    part: &TableScan,
    spec: &Arc<Spec>,
    t: TimeBounds,
    sink: &mut dyn FnMut(Group) -> Result<bool, QueryError>,
) -> Result<bool, QueryError> {
    if t.is_empty() {
        return Ok(true);
    }
    let engine = part.db.engine().clone();
    let snap = part.snapshot.get_or_init(|| engine.snapshot());
    let table = part.def.id;
    let filter = ScanFilter { time: t, ..part.filter.clone() };
    let series = part.db.catalog().with_series(table, |idx| filter.series(idx));
    let ranges = key_ranges(&part.db, table, &filter, part.span, series.as_deref());
    let folder =
        Arc::new(PageFolder { spec: spec.clone(), table, taken: Mutex::new((None, Vec::new())) });
    let mut fields: Vec<Option<Value>> = vec![None; spec.wanted.len()];
    let mut cur: Option<Group> = None;
    let mut taken = Vec::new();
    let mut finish = |g: Group, all: bool| -> Result<bool, QueryError> {
        if !sink(g)? {
            return Ok(false);
        }
        folder.drain(&mut taken, all);
        for g in taken.drain(..) {
            if !sink(g)? {
                return Ok(false);
            }
        }
        Ok(true)
    };
    for (lo, hi, by_time) in ranges {
        if !hi.is_empty() && lo >= hi {
            continue;
        }
        let end = if hi.is_empty() { Bound::Unbounded } else { Bound::Excluded(hi) };
        let window = by_time
            .then(|| (time_to_u64(t.lo.unwrap_or(i64::MIN)), t.hi.map_or(u64::MAX, time_to_u64)));
        let range = (Bound::Included(lo), end);
        let mut iter = engine.scan_summarized(range, window, Some(snap), folder.clone())?;
        while let Some(item) = iter.next_ref() {
            let (k, v) = item?;
            let Some((_, sid, time)) = parse_row_key(k) else { continue };
            let bucket = spec.bucket(time)?;
            if cur.as_ref().is_none_or(|g| (g.sid, g.bucket) != (sid, bucket)) {
                let next = Group::new(sid, bucket, spec.fields.len());
                if let Some(done) = cur.replace(next) {
                    if !finish(done, false)? {
                        return Ok(false);
                    }
                }
            }
            let Some(g) = cur.as_mut() else { continue };
            g.rows += 1;
            g.span(time, time);
            if !spec.fields.is_empty() {
                decode_fields(v, &spec.wanted, &mut fields)?;
                for ((f, _), acc) in spec.fields.iter().zip(&mut g.fields) {
                    if let Some(v) = &fields[*f] {
                        if !acc.merge(&FieldStats::of(v)) {
                            return Err(QueryError::Corrupt(format!(
                                "field {f} of series {sid} has values of two types"
                            )));
                        }
                    }
                }
            }
        }
    }
    if let Some(last) = cur.take() {
        if !sink(last)? {
            return Ok(false);
        }
    }
    folder.drain(&mut taken, true);
    for g in taken {
        if !sink(g)? {
            return Ok(false);
        }
    }
    Ok(true)
}
