//! Intents left open: a statement run on every shard whose coordinator gave up waiting (a shard
//! without a leader for longer than its patience) or stopped. The metadata leader drives each to
//! completion and closes it; until then `system.deletions` shows its request pending on the
//! shards that have not applied it.

use std::sync::Arc;
use std::time::Duration;

use ebb_query::deletions::ReplicaDeletion;
use ebb_query::sql::shard::everywhere::drive;
use ebb_query::sql::shard::{Intent, ShardOp, Shards as _};
use tokio::sync::watch;

use super::router::Router;

/// How long after its coordinator's patience an open intent is taken over by the metadata
/// leader.
const GRACE: Duration = Duration::from_secs(10);

/// How often the metadata leader looks for open intents.
const EVERY: Duration = Duration::from_secs(5);

/// On the metadata leader: drives intents left open to completion.
pub async fn intent_loop(router: Arc<Router>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(EVERY) => {}
        }
        if *stop.borrow() {
            return;
        }
        if !router.meta().is_leader() {
            continue;
        }
        let patience = router.intent_patience();
        let take_over = (patience + GRACE).as_millis() as u64;
        let now = ebb_query::now_ms();
        let stale: Vec<_> = router
            .meta()
            .view()
            .intents
            .into_values()
            .filter(|i| now.saturating_sub(i.issued_at_ms) >= take_over)
            .collect();
        for intent in stale {
            let Some(op) = op_of(&router, &intent).await else { continue };
            match drive(router.as_ref(), &intent, &op, patience).await {
                Ok(_) => {
                    tracing::info!(
                        request = intent.id,
                        kind = intent.kind,
                        "open intent completed"
                    );
                    close(&router, intent.id).await;
                }
                Err(open) => {
                    let shards: Vec<u64> = open.iter().map(|(s, _)| *s).collect();
                    tracing::warn!(request = intent.id, ?shards, "an open intent still waits");
                }
            }
        }
    }
}

/// What `intent` applies on every shard. An intent recorded by an older build carries only its
/// SQL text, which is planned again here; one that can no longer be planned (its statement
/// would be refused everywhere) is closed. `None`: nothing to drive now.
async fn op_of(router: &Arc<Router>, intent: &Intent) -> Option<ShardOp> {
    if let Some(op) = &intent.op {
        return Some(op.clone());
    }
    let access = router.meta().clone();
    let session = ebb_query::SqlSession::on(router.clone(), access, &intent.database);
    match session.shard_op(&intent.sql).await {
        Ok(Some(op)) => Some(op),
        Ok(None) => {
            tracing::warn!(request = intent.id, sql = intent.sql, "an intent that changes nothing");
            close(router, intent.id).await;
            None
        }
        Err(e) if e.is_client_error() => {
            tracing::warn!(request = intent.id, sql = intent.sql, %e, "an intent refused");
            close(router, intent.id).await;
            None
        }
        Err(e) => {
            tracing::warn!(request = intent.id, %e, "an older intent waits to be planned");
            None
        }
    }
}

async fn close(router: &Router, id: u64) {
    if let Err(e) = router.close_intent(id).await {
        tracing::warn!(request = id, %e, "closing an intent");
    }
}

/// Rows for the open intents that delete data: one per shard where no replica has recorded
/// the request yet (`rows` are those gathered from the replicas).
pub fn awaiting(router: &Router, rows: &[ReplicaDeletion]) -> Vec<ReplicaDeletion> {
    let v = router.meta().view();
    let mut out = Vec::new();
    for intent in v.intents.values().filter(|i| i.deletes()) {
        for &shard in v.shards.keys() {
            if rows.iter().any(|r| r.id == intent.id && r.shard == shard) {
                continue;
            }
            out.push(ReplicaDeletion {
                id: intent.id,
                kind: intent.kind.to_ascii_lowercase().replace("drop table", "drop"),
                target: intent.sql.clone(),
                issued_by: intent.issued_by.clone(),
                rows: None,
                issued_at_ms: intent.issued_at_ms,
                deadline_ms: intent.deadline_ms,
                shard,
                node: 0,
                applied_at_ms: None,
                persisted_at_ms: None,
                deletes: 0,
                pending: 0,
                awaiting: true,
                backup: None,
            });
        }
    }
    out
}
