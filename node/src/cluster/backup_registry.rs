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
use ebb_backup::crypto::{Key, KeyDir};
use ebb_backup::journal::JournalEntry;
use ebb_backup::BackupError;
use ebb_query::backups::Journaled;
use ebb_query::sql::shard::Intent;

use super::proto;
use super::proto::cluster_client::ClusterClient;
use super::router::Router;
use super::view;
use crate::backup::journal::Outbox;
use crate::backup::registry::Registry;

/// The registry in the metadata group `router` reaches.
#[derive(Debug)]
pub struct MetaRegistry {
    /// Weak: the router holds the backups that hold this.
    router: Weak<Router>,
    /// This node's copies of the keys of encrypted sets.
    keys: KeyDir,
}

impl MetaRegistry {
    /// The registry of the cluster `router` reaches.
    pub fn new(router: &Arc<Router>) -> MetaRegistry {
        let keys = super::backup::key_dir_of(&router.meta().group().replica);
        MetaRegistry { router: Arc::downgrade(router), keys }
    }

    /// One `BackupKeys` call to every other node of the cluster: the replies of those that
    /// answered.
    async fn ask_every_node(&self, req: proto::BackupKeysRequest) -> Vec<proto::BackupKeysReply> {
        let Ok(router) = self.router() else { return Vec::new() };
        let v = router.meta().view();
        let me = router.meta().node();
        let router = &router;
        let calls = v.nodes.values().filter(|n| n.id != me).map(|n| {
            let req = req.clone();
            async move {
                let asked = async {
                    let ch = router.conns().channel(&n.grpc_addr).map_err(|e| e.to_string())?;
                    let mut c = ClusterClient::new(ch);
                    let r = tokio::time::timeout(KEYS_TIMEOUT, c.backup_keys(req)).await;
                    match r {
                        Ok(Ok(reply)) => Ok(reply.into_inner()),
                        Ok(Err(s)) => Err(s.message().to_string()),
                        Err(_) => Err(format!("no answer in {KEYS_TIMEOUT:?}")),
                    }
                };
                asked
                    .await
                    .inspect_err(|e| {
                        tracing::warn!(node = n.id, error = %e, "backup keys: a node did not answer")
                    })
                    .ok()
            }
        });
        futures::future::join_all(calls).await.into_iter().flatten().collect()
    }

    fn router(&self) -> Result<Arc<Router>, BackupError> {
        self.router.upgrade().ok_or_else(|| BackupError::Source("the node is stopping".into()))
    }
}

/// How long a node is waited for when keys are shared or asked for.
const KEYS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl MetaRegistry {
    /// How many other nodes the cluster has.
    fn nodes_asked(&self) -> usize {
        let Ok(router) = self.router() else { return 0 };
        let me = router.meta().node();
        router.meta().view().nodes.values().filter(|n| n.id != me).count()
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
    fn keys(&self) -> &KeyDir {
        &self.keys
    }

    async fn share_key(&self, id: &str, key: &Key) {
        let keep = vec![proto::BackupKey { id: id.to_string(), key: key.to_hex() }];
        let asked = self.nodes_asked();
        if self.router.upgrade().is_none() {
            tracing::warn!(key = %id, "a backup set's key not shared: the node is stopping; the other nodes ask for it later");
            return;
        }
        let answered =
            self.ask_every_node(proto::BackupKeysRequest { keep, get: Vec::new() }).await;
        if answered.len() < asked {
            tracing::warn!(key = %id, nodes = asked, answered = answered.len(), "a backup set's key reached only some nodes; the others ask for it later");
        }
    }

    fn key_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(60)
    }

    async fn fetch_keys(&self, ids: &[String]) -> Vec<(String, Key)> {
        let req = proto::BackupKeysRequest { keep: Vec::new(), get: ids.to_vec() };
        let mut found = std::collections::BTreeMap::new();
        for reply in self.ask_every_node(req).await {
            for k in reply.keys {
                if !ids.contains(&k.id) {
                    continue;
                }
                if let Some(key) = Key::from_hex(&k.key) {
                    found.entry(k.id).or_insert(key);
                }
            }
        }
        found.into_iter().collect()
    }

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
