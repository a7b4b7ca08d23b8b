//! The state machine of a shard's Raft group: a [`Replica`] (the storage engine) that applies
//! committed entries at sequence numbers derived from their log index, keeps its applied state
//! in the engine, and snapshots itself as engine checkpoints.

mod account;
pub mod applied;
mod erasure;
mod replica;
mod restore;
pub mod snapshot;
mod split;

use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, StorageError, StorageIOError};

pub use applied::{entry_seq, Membership, MAX_BATCH_OPS};
pub use replica::{Admitted, Applier, Replica};
pub use restore::{restored_engine_dir, seed_restored};
pub use snapshot::{Descriptor, ShardSnapshot, SnapshotFile};
pub use split::group_dir_name;

use crate::error::ReplicaError;
use crate::types::{NodeId, Response, TypeConfig};

/// The Raft state machine over a [`Replica`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShardStateMachine {
    replica: Arc<Replica>,
}

impl ShardStateMachine {
    /// The state machine of `replica`.
    pub fn new(replica: Arc<Replica>) -> ShardStateMachine {
        ShardStateMachine { replica }
    }

    /// The replica.
    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }
}

fn storage_error(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: ReplicaError,
) -> StorageError<NodeId> {
    StorageError::IO { source: StorageIOError::new(subject, verb, openraft::AnyError::new(&e)) }
}

/// Runs blocking replica work off the async executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ReplicaError> + Send + 'static,
) -> Result<T, ReplicaError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(ReplicaError::Io {
            path: Default::default(),
            source: std::io::Error::other(format!("state machine task failed: {e}")),
        }),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for ShardStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let replica = self.replica.clone();
        let (d, snap) = blocking(move || replica.build_snapshot())
            .await
            .map_err(|e| storage_error(ErrorSubject::StateMachine, ErrorVerb::Write, e))?;
        Ok(Snapshot { meta: d.meta, snapshot: Box::new(snap) })
    }
}

impl RaftStateMachine<TypeConfig> for ShardStateMachine {
    type SnapshotBuilder = ShardStateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        self.replica
            .applied_state()
            .map_err(|e| storage_error(ErrorSubject::StateMachine, ErrorVerb::Read, e))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let replica = self.replica.clone();
        blocking(move || replica.apply(entries))
            .await
            .map_err(|e| storage_error(ErrorSubject::StateMachine, ErrorVerb::Write, e))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<ShardSnapshot>, StorageError<NodeId>> {
        let dir = self
            .replica
            .incoming_dir("receiving")
            .map_err(|e| storage_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        Ok(Box::new(ShardSnapshot::at(dir)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &snapshot::Meta,
        snapshot: Box<ShardSnapshot>,
    ) -> Result<(), StorageError<NodeId>> {
        let replica = self.replica.clone();
        let m = meta.clone();
        blocking(move || replica.install(&snapshot, &m)).await.map_err(|e| {
            storage_error(ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write, e)
        })
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .replica
            .current_snapshot()
            .map(|(d, snap)| Snapshot { meta: d.meta, snapshot: Box::new(snap) }))
    }
}
