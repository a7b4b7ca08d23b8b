//! A cluster's backup registry (see `crate::backup::registry`), kept in the metadata group.
//!
//! - The destinations the cluster's backups went to are metadata records, so every node lists
//!   their sets and a restored cluster knows them.
//! - A delete request needs no record of its own before the shards apply it: its intent, which
//!   the coordinator records in the metadata group before any shard applies it, is that
//!   record. Closing the intent keeps the request (`view::JournaledRequest`) in the same
//!   change, so it outlives its coordinator.
//! - Only the metadata leader carries requests to every destination's journal and purges the
//!   sets; it then removes the records every destination has. A new leader takes over from the
//!   records as they are.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use ebb_backup::journal::JournalEntry;
use ebb_backup::BackupError;
use ebb_query::backups::Journaled;
use ebb_query::sql::shard::Intent;

use super::router::Router;
use super::view;
use crate::backup::journal::Outbox;
use crate::backup::registry::Registry;

/// The registry in the metadata group `router` reaches.
#[derive(Debug)]
pub struct MetaRegistry {
    /// Weak: the router holds the backups that hold this.
    router: Weak<Router>,
}

impl MetaRegistry {
    /// The registry of the cluster `router` reaches.
    pub fn new(router: &Arc<Router>) -> MetaRegistry {
        MetaRegistry { router: Arc::downgrade(router) }
    }

    fn router(&self) -> Result<Arc<Router>, BackupError> {
        self.router.upgrade().ok_or_else(|| BackupError::Source("the node is stopping".into()))
    }
}

fn entry(intent: &Intent, completed_ms: Option<u64>) -> Option<JournalEntry> {
    match Outbox::entry(intent) {
        Ok(e) => Some(JournalEntry { completed_ms, ..e }),
        Err(e) => {
            tracing::warn!(request = intent.id, error = %e, "a request the journal cannot hold");
            None
        }
    }
}

#[async_trait]
impl Registry for MetaRegistry {
    fn destinations(&self) -> Vec<String> {
        let Ok(router) = self.router() else { return Vec::new() };
        let v = router.meta().view();
        v.backup_destinations.into_iter().collect()
    }

    async fn origin(&self) -> Result<String, BackupError> {
        // A restored cluster keeps its set's origin; any other is known by its cluster id.
        let router = self.router()?;
        if let Some(o) = router.meta().view().backup_origin {
            return Ok(o);
        }
        if let Some(id) = router.conns().cluster_id() {
            return Ok(id);
        }
        // A cluster created without an id: an origin of its own, recorded once.
        let (k, v) = view::backup_origin_record(&ebb_backup::crypto::new_origin()?);
        let mut b = ebb_storage::WriteBatch::new();
        b.put(k, v);
        router.meta().change(b).await.map_err(|e| BackupError::Source(Box::new(e)))?;
        router
            .meta()
            .view()
            .backup_origin
            .ok_or_else(|| BackupError::Source("the cluster's backup origin was not kept".into()))
    }

    async fn remember(&self, uri: &str) -> Result<(), BackupError> {
        let router = self.router()?;
        if router.meta().view().backup_destinations.contains(uri) {
            return Ok(());
        }
        let mut b = ebb_storage::WriteBatch::new();
        view::put_backup_destination(&mut b, uri);
        router.meta().change(b).await.map_err(|e| BackupError::Source(Box::new(e)))
    }

    async fn journal(&self, _intent: &Intent) -> Result<Journaled, BackupError> {
        // The intent the coordinator records next is the request's durable record.
        Ok(Journaled::default())
    }

    async fn journal_done(&self, _id: u64) {
        // Closing the intent kept the request (see the module docs).
    }

    fn entries(&self) -> Vec<JournalEntry> {
        let Ok(router) = self.router() else { return Vec::new() };
        let v = router.meta().view();
        let open = v.intents.values().filter(|i| i.deletes_data()).filter_map(|i| entry(i, None));
        let done = v.backup_journal.values().filter_map(|r| entry(&r.intent, Some(r.completed_ms)));
        let mut out: Vec<JournalEntry> = open.chain(done).collect();
        out.sort_by_key(|e| (e.issued_at_ms, e.id));
        out
    }

    async fn forget(&self, ids: &[u64]) {
        let Ok(router) = self.router() else { return };
        let mut b = ebb_storage::WriteBatch::new();
        for &id in ids {
            view::remove_journaled(&mut b, id);
        }
        if let Err(e) = router.meta().change(b).await {
            tracing::warn!(requests = ?ids, error = %e, "forgetting journaled requests");
        }
    }

    fn drives(&self) -> bool {
        self.router().is_ok_and(|r| r.meta().is_leader())
    }

    async fn changed(&self) {
        let Ok(router) = self.router() else { return std::future::pending().await };
        let mut applied = router.meta().subscribe();
        drop(router);
        // From now on (the receiver cloned may have seen nothing yet).
        applied.borrow_and_update();
        if applied.changed().await.is_err() {
            std::future::pending::<()>().await
        }
    }
}
