//! What one statement may use: memory from a pool shared by the whole server, at most
//! `query_memory_bytes` of it per statement, and a time limit. A statement over its memory
//! limit spills where DataFusion's operators can (sorts, aggregates, joins write temporary
//! files), else fails with a `Resources exhausted` error; others keep running. A statement
//! past its time limit fails with a clear error (its stream is dropped, which cancels it).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use std::future::Future;

/// Limits on statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory all running statements of the server may hold together.
    pub server_memory_bytes: usize,
    /// Memory one statement may hold.
    pub query_memory_bytes: usize,
    /// How long a statement may run (`None`: as long as it takes).
    pub statement_timeout: Option<Duration>,
    /// Requests that may run statements at once; more wait up to [`SLOT_WAIT`] for a slot.
    pub max_statements: usize,
    /// How large and deep the SQL of one request may be.
    pub sql: crate::sql::bounds::SqlBounds,
}

/// How long a request waits for a slot among the running ones before it is refused.
pub const SLOT_WAIT: Duration = Duration::from_secs(30);

/// A request's slot among the running ones: released when every output of the request has
/// ended or been dropped, or by [`Slot::release_after`] (a client that stops reading its
/// results must not keep the slot past its statements' time).
#[derive(Debug)]
pub struct Slot {
    permit: parking_lot::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    /// Statements started with the slot: a release planned for one is void once the next starts.
    started: AtomicU64,
}

/// How long past its statements' time limit a request keeps its slot unread.
pub const SLOT_GRACE: Duration = Duration::from_secs(10);

impl Slot {
    /// A slot holding `permit`.
    pub fn new(permit: tokio::sync::OwnedSemaphorePermit) -> Arc<Slot> {
        Arc::new(Slot { permit: parking_lot::Mutex::new(Some(permit)), started: AtomicU64::new(0) })
    }

    /// Gives the slot back now.
    pub fn release(&self) {
        self.permit.lock().take();
    }

    /// Notes that a statement started with the slot and runs within `limit` (`None`: without
    /// a time limit): the slot is given back [`SLOT_GRACE`] past that limit if the request
    /// still holds it and has started no other statement since.
    pub fn release_after(self: &Arc<Self>, limit: Option<Duration>) {
        let started = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(limit) = limit else { return };
        let slot = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(limit + SLOT_GRACE).await;
            if let Some(s) = slot.upgrade() {
                if s.started.load(Ordering::Relaxed) == started {
                    s.release();
                }
            }
        });
    }
}

/// The error of a request that found no slot.
pub fn too_busy(max: usize) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!(
        "the server is running its {max} statements at once (max_statements) and none \
         finished within {} s; try again",
        SLOT_WAIT.as_secs()
    ))
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            server_memory_bytes: 2 << 30,
            query_memory_bytes: 512 << 20,
            statement_timeout: Some(Duration::from_secs(300)),
            max_statements: 64,
            sql: crate::sql::bounds::SqlBounds::default(),
        }
    }
}

/// One statement's share of the server's pool.
#[derive(Debug)]
struct StatementPool {
    server: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl std::fmt::Display for StatementPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "statement pool: {} of {} bytes", self.used.load(Ordering::Relaxed), self.limit)
    }
}

impl MemoryPool for StatementPool {
    fn name(&self) -> &str {
        "statement"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.server.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.server.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.server.grow(reservation, additional)
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink.min(self.used.load(Ordering::Relaxed)), Ordering::Relaxed);
        self.server.shrink(reservation, shrink)
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        let before = self.used.fetch_add(additional, Ordering::Relaxed);
        if before + additional > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the statement needs more than its {} MiB of memory (query_memory); narrow it \
                 (a time range, fewer columns, LIMIT) or raise the limit",
                self.limit >> 20
            )));
        }
        if let Err(e) = self.server.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

/// The server's runtime: its memory pool, temporary files and caches.
pub fn server_runtime(limits: &Limits) -> DfResult<Arc<RuntimeEnv>> {
    RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.server_memory_bytes)))
        .build_arc()
}

/// A runtime for one statement: the server's, with a pool of the statement's own.
pub fn statement_runtime(server: &Arc<RuntimeEnv>, limits: &Limits) -> Arc<RuntimeEnv> {
    let pool = StatementPool {
        server: server.memory_pool.clone(),
        limit: limits.query_memory_bytes,
        used: AtomicUsize::new(0),
    };
    Arc::new(RuntimeEnv { memory_pool: Arc::new(pool), ..(**server).clone() })
}

/// The error of a statement canceled after `timeout`.
pub fn timed_out(timeout: Duration) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!(
        "canceled: the statement ran longer than its {} s (statement_timeout)",
        timeout.as_secs_f64()
    ))
}

/// `stream`, failing at `deadline` (an instant, and the timeout it ends, for the message), and
/// holding `slot` (a running statement's) until it ends or is dropped.
pub fn with_deadline(
    stream: SendableRecordBatchStream,
    deadline: Option<(tokio::time::Instant, Duration)>,
    slot: Option<Arc<Slot>>,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let Some((at, timeout)) = deadline else {
        let Some(slot) = slot else { return stream };
        let mut stream = stream;
        let out = futures::stream::poll_fn(move |cx| {
            let _held = &slot;
            stream.poll_next_unpin(cx)
        });
        return Box::pin(RecordBatchStreamAdapter::new(schema, out));
    };
    let mut timer = Box::pin(tokio::time::sleep_until(at));
    let mut stream = stream;
    let mut expired = false;
    let out = futures::stream::poll_fn(move |cx| {
        let _held = &slot;
        if expired {
            return std::task::Poll::Ready(None);
        }
        if timer.as_mut().poll(cx).is_ready() {
            expired = true;
            return std::task::Poll::Ready(Some(Err(timed_out(timeout))));
        }
        stream.poll_next_unpin(cx)
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, out))
}
