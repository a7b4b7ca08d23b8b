//! The statements a server ran lately: the rows of `system.queries`, on a single node and
//! (gathered from every node) in a cluster.
//!
//! The front door records every SQL statement it runs, whichever protocol sent it, once its
//! answer ends: when the client has read the last row, the statement failed, or the answer was
//! dropped unread. A node keeps its last [`KEPT`] statements in memory and counts all of them;
//! nothing is written to disk. The text of a statement is not kept: it may name a person (a
//! `WHERE user = ...`), and an erasure could not reach it. Line-protocol and remote writes are
//! not statements; the ingest counters and `system.tables` account for them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray,
    UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

use crate::error::{QueryError, Result};
use crate::sql::StatementKind;

/// How many statements a node keeps.
pub const KEPT: usize = 1024;

/// One statement a front door ran.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementRecord {
    /// When it started (ns since the epoch).
    pub started_ns: i64,
    /// The protocol it came by (`http`, `postgres`, `flight`, `internal`).
    pub protocol: String,
    /// Who ran it (`None` on a server without users).
    pub user: Option<String>,
    /// The session's database.
    pub database: String,
    /// `select`, `insert`, `delete`, `erase`, a command's tag in lower case (`create table`),
    /// or `error` for one that failed before it had an answer (bad syntax, no privilege, an
    /// unknown table, over a limit).
    pub kind: String,
    /// From its start to the end of its answer (µs).
    pub duration_us: u64,
    /// Rows in its answer (a `DELETE` answers one row, with the count).
    pub rows: u64,
    /// Whether it ended without an error.
    pub ok: bool,
}

/// The kind of a statement that ran, as `system.queries` names it.
pub fn kind_name(kind: &StatementKind) -> String {
    match kind {
        StatementKind::Query => "select".into(),
        StatementKind::Insert => "insert".into(),
        StatementKind::Delete => "delete".into(),
        StatementKind::Erase => "erase".into(),
        StatementKind::Command(tag) => tag.to_lowercase(),
    }
}

/// A node's recent statements and how many it ran.
#[derive(Debug, Default)]
pub struct StatementLog {
    recent: Mutex<VecDeque<StatementRecord>>,
    ran: AtomicU64,
    failed: AtomicU64,
}

impl StatementLog {
    /// Records `r`, forgetting the oldest statement past [`KEPT`].
    pub fn record(&self, r: StatementRecord) {
        self.ran.fetch_add(1, Ordering::Relaxed);
        if !r.ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut recent = self.recent.lock();
        if recent.len() >= KEPT {
            recent.pop_front();
        }
        recent.push_back(r);
    }

    /// The statements kept, oldest first.
    pub fn recent(&self) -> Vec<StatementRecord> {
        self.recent.lock().iter().cloned().collect()
    }

    /// Statements run since the node started, and how many of them failed.
    pub fn counts(&self) -> (u64, u64) {
        (self.ran.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }
}

/// A statement being run: recorded in its log once its answer ends (a clone records nothing
/// unless it is the one finished).
#[derive(Debug, Clone)]
pub struct Running {
    log: Arc<StatementLog>,
    record: StatementRecord,
    started: Instant,
}

impl Running {
    /// A statement of `who` on `database` starting now.
    pub fn start(
        log: Arc<StatementLog>,
        protocol: &str,
        user: Option<&str>,
        database: &str,
    ) -> Self {
        let record = StatementRecord {
            started_ns: crate::now_ns(),
            protocol: protocol.to_string(),
            user: user.map(str::to_string),
            database: database.to_string(),
            kind: "error".into(),
            duration_us: 0,
            rows: 0,
            ok: false,
        };
        Running { log, record, started: Instant::now() }
    }

    /// Records a statement that failed before it had an answer.
    pub fn failed(self) {
        self.finish(false);
    }

    /// `stream`, the answer of a statement of `kind`, recording the statement when it ends.
    pub fn answer(
        mut self,
        kind: &StatementKind,
        stream: SendableRecordBatchStream,
    ) -> SendableRecordBatchStream {
        self.record.kind = kind_name(kind);
        Box::pin(Logged { inner: stream, running: Some(self) })
    }

    fn finish(mut self, ok: bool) {
        self.record.ok = ok;
        self.record.duration_us = self.started.elapsed().as_micros().min(u64::MAX as u128) as u64;
        self.log.record(self.record);
    }
}

/// An answer that records its statement when it ends or is dropped.
struct Logged {
    inner: SendableRecordBatchStream,
    running: Option<Running>,
}

impl Logged {
    fn end(&mut self, ok: bool) {
        if let Some(r) = self.running.take() {
            r.finish(ok);
        }
    }
}

impl Stream for Logged {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        let next = self.inner.poll_next_unpin(cx);
        match &next {
            Poll::Ready(Some(Ok(b))) => {
                if let Some(r) = &mut self.running {
                    r.record.rows += b.num_rows() as u64;
                }
            }
            Poll::Ready(Some(Err(_))) => self.end(false),
            Poll::Ready(None) => self.end(true),
            Poll::Pending => {}
        }
        next
    }
}

impl RecordBatchStream for Logged {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        // Dropped before its end: the client stopped reading (or a limit cut it off); what it
        // read was answered without an error.
        self.end(true);
    }
}

/// The schema of `system.queries`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("node", DataType::UInt64, true),
        Field::new("started", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("protocol", DataType::Utf8, false),
        Field::new("user", DataType::Utf8, true),
        Field::new("database", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("duration_ms", DataType::Float64, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("ok", DataType::Boolean, false),
    ]))
}

/// The rows of `system.queries`: each statement with the node that ran it (`None` on a single
/// node).
pub fn batch(rows: &[(Option<u64>, StatementRecord)]) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter(rows.iter().map(|(n, _)| *n))),
        Arc::new(TimestampNanosecondArray::from_iter_values(
            rows.iter().map(|(_, r)| r.started_ns),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, r)| r.protocol.as_str()))),
        Arc::new(StringArray::from_iter(rows.iter().map(|(_, r)| r.user.as_deref()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, r)| r.database.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, r)| r.kind.as_str()))),
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|(_, r)| r.duration_us as f64 / 1000.0),
        )),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|(_, r)| r.rows))),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|(_, r)| Some(r.ok)))),
    ];
    RecordBatch::try_new(schema(), cols).map_err(|e| QueryError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    fn answer(rows: &[usize]) -> SendableRecordBatchStream {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::UInt64, false)]));
        let batches: Vec<_> = rows
            .iter()
            .map(|n| {
                let col = Arc::new(UInt64Array::from_iter_values(0..*n as u64)) as ArrayRef;
                Ok(RecordBatch::try_new(schema.clone(), vec![col]).expect("batch"))
            })
            .collect();
        Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::iter(batches)))
    }

    #[tokio::test]
    async fn a_statement_is_recorded_when_its_answer_ends_with_its_rows() {
        let log = Arc::new(StatementLog::default());
        let run = Running::start(log.clone(), "http", Some("alice"), "public");
        let mut s = run.answer(&StatementKind::Query, answer(&[3, 4]));
        assert!(log.recent().is_empty(), "not recorded before its answer is read");
        while s.next().await.is_some() {}
        let recent = log.recent();
        assert_eq!(recent.len(), 1);
        assert_eq!((recent[0].kind.as_str(), recent[0].rows, recent[0].ok), ("select", 7, true));
        assert_eq!(recent[0].user.as_deref(), Some("alice"));
        drop(s);
        assert_eq!(log.counts(), (1, 0), "recorded once, not again when dropped");
    }

    #[tokio::test]
    async fn dropped_answers_and_failures_are_recorded() {
        let log = Arc::new(StatementLog::default());
        let run = Running::start(log.clone(), "postgres", None, "db");
        let mut s = run.answer(&StatementKind::Command("CREATE TABLE".into()), answer(&[2, 2]));
        assert!(s.next().await.is_some());
        drop(s);
        Running::start(log.clone(), "flight", None, "db").failed();
        let recent = log.recent();
        assert_eq!(recent.len(), 2);
        assert_eq!((recent[0].kind.as_str(), recent[0].rows), ("create table", 2));
        assert_eq!((recent[1].kind.as_str(), recent[1].ok), ("error", false));
        assert_eq!(log.counts(), (2, 1));
        let b = batch(&recent.into_iter().map(|r| (Some(3), r)).collect::<Vec<_>>()).expect("rows");
        assert_eq!(b.num_rows(), 2);
    }

    #[test]
    fn the_log_keeps_the_newest_statements() {
        let log = Arc::new(StatementLog::default());
        for i in 0..KEPT + 10 {
            let mut r = Running::start(log.clone(), "http", None, "db");
            r.record.rows = i as u64;
            r.finish(true);
        }
        let recent = log.recent();
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent[0].rows, 10);
        assert_eq!(log.counts().0, (KEPT + 10) as u64);
    }
}
