//! The runtime statements run on: threads of their own, apart from the ones that serve
//! connections, `/health`, writes and logins, so a statement that keeps its threads busy delays
//! only other statements. Its threads have a stack of a known size ([`STACK_BYTES`]) whatever
//! runtime the caller runs on.
//!
//! A statement is planned on it ([`QueryRuntime::run`]) and its rows are computed on it
//! ([`QueryRuntime::drive`]), handed to the caller's stream through a small channel. When the
//! caller stops waiting (a client gone, a deadline passed) the work is dropped at its next
//! yield; DataFusion yields at least once per batch of every leaf and, with
//! [`crate::sql::coop`], of every operator that can produce more rows than it reads.

use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use std::future::Future;

use crate::error::{QueryError, Result};

/// Stack of each statement thread.
pub const STACK_BYTES: usize = 16 << 20;

/// Batches computed ahead of the reader.
const AHEAD: usize = 2;

/// The statements' runtime (shut down in the background when dropped, which may happen on an
/// async thread).
pub struct QueryRuntime(Option<tokio::runtime::Runtime>);

impl std::fmt::Debug for QueryRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueryRuntime")
    }
}

impl QueryRuntime {
    /// A runtime with one thread per core.
    pub fn new() -> Result<QueryRuntime> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("ebb-query")
            .thread_stack_size(STACK_BYTES)
            .enable_all()
            .build()
            .map_err(|e| QueryError::Internal(format!("starting the statement threads: {e}")))?;
        Ok(QueryRuntime(Some(rt)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        match &self.0 {
            Some(rt) => rt.handle(),
            None => unreachable!("the runtime is taken only when dropped"),
        }
    }

    /// Runs `work` on the statement threads; dropping the returned future drops `work` at its
    /// next yield.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let mut task = Abort(self.handle().spawn(work));
        match (&mut task.0).await {
            Ok(r) => r,
            Err(e) => Err(QueryError::Internal(format!("a statement failed unexpectedly: {e}"))),
        }
    }

    /// `stream`, polled on the statement threads: the returned stream yields what it yields.
    /// Dropping the returned stream drops `stream` at its next yield.
    pub fn drive(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        let schema = stream.schema();
        let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
        let task = Abort(self.handle().spawn(async move {
            let mut stream = stream;
            loop {
                let next = tokio::select! {
                    // The reader is gone: stop computing.
                    () = tx.closed() => return,
                    next = stream.next() => next,
                };
                let Some(item) = next else { return };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        }));
        let rows = futures::stream::unfold(Some((rx, task)), |state| async move {
            let (mut rx, mut task) = state?;
            match rx.recv().await {
                Some(item) => Some((item, Some((rx, task)))),
                // The task ended: at the end of the rows, or by a panic or a shutdown, which is
                // reported (never a cut-off result ending as if complete).
                None => match (&mut task.0).await {
                    Err(e) => Some((
                        Err(DataFusionError::Execution(format!(
                            "the statement failed unexpectedly: {e}"
                        ))),
                        None,
                    )),
                    Ok(()) => None,
                },
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }
}

impl Drop for QueryRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A task aborted when dropped.
struct Abort<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Abort<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
