//! Administration over HTTP: what `ebb audit verify` and `ebb node decommission` call, and
//! flushing a node's memtables. Each needs `ADMIN` on all databases, checked by the front door
//! like any statement.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ebb_query::access::Privilege;
use ebb_query::front::Principal;

use super::auth::error;
use super::{query_error, AppState, Caller, Serving};

/// The caller, if it authenticates and holds `ADMIN` on all databases; else the answer that
/// refuses it.
async fn admin(state: &AppState, caller: &Caller) -> Result<Principal, Response> {
    let who = caller.principal(&state.door).await?;
    state.door.authorize(&who, None, Privilege::Admin).map_err(|e| query_error(&e))?;
    Ok(who)
}

/// Query of `/v1/audit/verify`.
#[derive(Debug)]
struct VerifyQuery {
    id: u64,
}

/// `GET /v1/audit/verify?id=N`: scans every replica for values delete request `N` covers
/// (a JSON [`crate::audit::VerifyReport`]; `pass` is the verdict). Needs `ADMIN` on all
/// databases.
pub(super) async fn audit_verify(State(state): State<AppState>, caller: Caller) -> Response {
    if let Err(r) = admin(&state, &caller).await {
        return r;
    }
    let q = match caller.query.get("id").map(|v| v.parse::<u64>()) {
        Some(Ok(id)) => VerifyQuery { id },
        _ => return error(StatusCode::BAD_REQUEST, "give ?id= a request id"),
    };
    let report = match &state.serving {
        Serving::Node(db) => {
            let db = db.clone();
            let scan =
                tokio::task::spawn_blocking(move || crate::audit::audit_database(&db, q.id, 0, 0));
            match scan.await {
                Ok(r) => crate::audit::VerifyReport::new(q.id, vec![r]),
                Err(e) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                }
            }
        }
        Serving::Cluster(router) => crate::cluster::deletions::verify(router, q.id).await,
    };
    let mut copies = report.replicas;
    copies.extend(state.backups.audit(q.id).await);
    let report = crate::audit::VerifyReport::new(q.id, copies);
    axum::Json(report).into_response()
}

/// `POST /v1/cluster/decommission?node=N`: starts draining node `N` (its replicas move to the
/// other nodes, then it leaves). Needs `ADMIN` on all databases.
pub(super) async fn decommission(State(state): State<AppState>, caller: Caller) -> Response {
    let who = match admin(&state, &caller).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let Some(router) = state.serving.cluster() else {
        return error(StatusCode::BAD_REQUEST, "this server is not a cluster node");
    };
    let node = match caller.query.get("node").map(|v| v.parse::<u64>()) {
        Some(Ok(id)) => id,
        _ => return error(StatusCode::BAD_REQUEST, "give ?node= a node id (see system.nodes)"),
    };
    match crate::cluster::decommission(router.meta(), node).await {
        Ok(()) => {
            tracing::info!(node, by = %who, "node decommission started");
            axum::Json(serde_json::json!({ "node": node, "state": "draining" })).into_response()
        }
        Err(s) if s.code() == tonic::Code::FailedPrecondition => {
            error(StatusCode::CONFLICT, s.message())
        }
        Err(s) => error(StatusCode::SERVICE_UNAVAILABLE, s.message()),
    }
}

/// `POST /v1/admin/flush[?wait=compactions]`: writes every memtable of this node's engines
/// (on a cluster node, of every shard replica it holds) to level-0 files and waits for them
/// (with `wait=compactions`, also until no compaction is pending): before snapshotting its
/// volume, or so a measurement starts from empty memtables (and settled files). Needs
/// `ADMIN` on all databases.
pub(super) async fn flush(State(state): State<AppState>, caller: Caller) -> Response {
    let who = match admin(&state, &caller).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let engines: Vec<_> = match &state.serving {
        Serving::Node(db) => vec![db.engine()],
        Serving::Cluster(router) => router.shards().all().iter().map(|s| s.db.engine()).collect(),
    };
    let settle = match caller.query.get("wait").map(String::as_str) {
        None => false,
        Some("compactions") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("wait={other:?}: the only thing a flush waits for is \"compactions\""),
            )
        }
    };
    let count = engines.len();
    let flushed = tokio::task::spawn_blocking(move || {
        engines
            .iter()
            .try_for_each(|e| {
                e.flush()?;
                if settle {
                    e.wait_for_background()?;
                }
                Ok::<_, ebb_storage::Error>(())
            })
            .map_err(|e| e.to_string())
    })
    .await;
    match flushed {
        Ok(Ok(())) => {
            tracing::info!(engines = count, by = %who, "memtables flushed");
            axum::Json(serde_json::json!({ "engines_flushed": count })).into_response()
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("flush: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("flush: {e}")),
    }
}
