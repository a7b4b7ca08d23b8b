//! `DELETE`, `ERASE` and DDL on a cluster run as intents: recorded in the metadata group, run on
//! every shard in parallel, and driven to completion on a shard that was down once it returns.
//! A shard runs a request once however often it is sent (retries, concurrent attempts), and
//! `system.deletions` shows a request pending until every shard has applied it.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::record_batch::RecordBatch;
use ebb_node::cluster::view::Settings;
use ebb_query::lp::Precision;
use ebb_query::sql::shard::{ShardRequest, Shards};
use ebb_query::QueryError;
use ebb_query::SqlSession;
use futures::TryStreamExt;

use crate::cluster::{placement, sql, wait_settled};
use crate::cluster_harness::Harness;

/// `series` series of `points` points each, one a second from 0.
fn lines(series: u32, points: u32) -> String {
    let mut s = String::new();
    for h in 0..series {
        for t in 0..points {
            s.push_str(&format!("cpu,host=h{h} v={t} {t}\n"));
        }
    }
    s
}

/// Applies the change `sql` makes as `request` on `shard`: the shard's answer.
async fn on_shard(h: &Harness, shard: u64, sql: &str, request: &ShardRequest) -> Vec<RecordBatch> {
    let router = h.nodes[&0].router.clone();
    let session = SqlSession::on(router.clone(), h.nodes[&0].meta.clone(), "db");
    let op = session.shard_op(sql).await.unwrap().expect("a change");
    let done = Shards::apply(router.as_ref(), shard, &op, request).await.unwrap();
    let out = ebb_query::sql::shard::op::answer(&op, request.id, &done).unwrap();
    out.stream.try_collect().await.unwrap()
}

/// A request as a coordinator issues it, with a new id.
fn fresh_request() -> ShardRequest {
    ShardRequest { id: ebb_query::db::new_request_id(), deadline_ms: None, issued_by: "t".into() }
}

fn column(batches: &[RecordBatch], name: &str) -> Vec<Option<u64>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column(b.schema().index_of(name).unwrap()).clone();
            let c = c.as_any().downcast_ref::<UInt64Array>().unwrap().clone();
            c.iter().collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_runs_once_per_shard_and_completes_on_a_shard_that_was_down() {
    let mut h = Harness::new();
    // One replica per shard: stopping a node takes its shards down while the metadata group
    // (three voters) keeps its quorum.
    h.settings = Settings { shards: 4, replication: 1 };
    h.intent_patience = Duration::from_secs(1);
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 1).await;
    let p = Precision::Seconds;
    h.nodes[&0].router.write_lines("db", &lines(40, 10), p, 0).await.unwrap();

    // The same request sent to a shard again, after more writes, is answered from its record
    // and deletes nothing more.
    let req = fresh_request();
    let early = "DELETE FROM cpu WHERE time < '1970-01-01T00:00:05Z'";
    let first = on_shard(&h, 1, early, &req).await;
    assert!(column(&first, "rows_deleted")[0].unwrap() > 0);
    let rewrite: String = (0..40).map(|s| format!("cpu,host=h{s} v=99 1\n")).collect();
    h.nodes[&1].router.write_lines("db", &rewrite, p, 0).await.unwrap();
    let again = on_shard(&h, 1, early, &req).await;
    assert_eq!(again, first, "a request a shard completed is answered from its record");
    let back =
        sql(&h, 2, "SELECT count(*) AS n FROM cpu WHERE time = '1970-01-01T00:00:01Z'").await;
    assert!(back.contains("| 40 |"), "rows written after the request survive its retry: {back}");

    // A request that matched nothing is recorded too: sent again after matching rows were
    // written, it still deletes nothing.
    let req = fresh_request();
    let none = "DELETE FROM cpu WHERE time = '1970-01-01T00:00:30Z'";
    let first = on_shard(&h, 3, none, &req).await;
    assert_eq!(column(&first, "rows_deleted"), vec![Some(0)]);
    let later: String = (0..40).map(|s| format!("cpu,host=h{s} v=1 30\n")).collect();
    h.nodes[&0].router.write_lines("db", &later, p, 0).await.unwrap();
    assert_eq!(on_shard(&h, 3, none, &req).await, first);
    let kept =
        sql(&h, 1, "SELECT count(*) AS n FROM cpu WHERE time = '1970-01-01T00:00:30Z'").await;
    assert!(kept.contains("| 40 |"), "a repeat of a request that matched nothing deleted: {kept}");

    // Attempts at one request racing each other: one applies, the others get its answer.
    let req = fresh_request();
    let mid = "DELETE FROM cpu WHERE time = '1970-01-01T00:00:05Z'";
    let (a, b, c) = tokio::join!(
        on_shard(&h, 2, mid, &req),
        on_shard(&h, 2, mid, &req),
        on_shard(&h, 2, mid, &req)
    );
    assert_eq!(a, b);
    assert_eq!(a, c);
    let ids = column(&a, "delete_id");
    assert_eq!(ids, vec![Some(req.id)]);

    // A node down: a cluster DELETE cannot finish on its shards. The client hears that the
    // request is recorded and still running; the rest of the shards have applied it.
    let down = 2;
    let down_id = h.nodes[&down].id;
    let its_shards: Vec<u64> =
        placement(&h).into_iter().filter(|(_, r)| r.contains(&down_id)).map(|(s, _)| s).collect();
    assert!(!its_shards.is_empty());
    h.stop(down).await;
    let s = SqlSession::on(h.nodes[&0].router.clone(), h.nodes[&0].meta.clone(), "db");
    let late = "DELETE FROM cpu WHERE time >= '1970-01-01T00:00:07Z'";
    let err = s.query(late).await.unwrap_err();
    assert!(
        matches!(err, QueryError::Unavailable(_)) && err.to_string().contains("recorded"),
        "{err}"
    );
    let intents = h.nodes[&1].meta.view().intents;
    assert_eq!(intents.len(), 1, "{intents:?}");
    let id = *intents.keys().next().unwrap();
    let shown = sql(
        &h,
        1,
        &format!(
            "SELECT shard, node, replica_status, status FROM system.deletions WHERE id = {id} \
             ORDER BY shard"
        ),
    )
    .await;
    for shard in &its_shards {
        assert!(
            shown.contains(&format!("| {shard}     | 0    | pending        | pending |")),
            "{shown}"
        );
    }
    assert_eq!(shown.matches("| pending |").count(), 4, "pending on every shard: {shown}");

    // The node returns: the metadata leader drives the request to completion there.
    h.start(down, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while !h.nodes[&0].meta.view().intents.is_empty() {
        assert!(Instant::now() < deadline, "the open intent was not completed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left =
        sql(&h, 0, "SELECT count(*) AS n FROM cpu WHERE time >= '1970-01-01T00:00:07Z'").await;
    assert!(left.contains("| 0 |"), "{left}");
    let kept =
        sql(&h, 0, "SELECT count(*) AS n FROM cpu WHERE time = '1970-01-01T00:00:06Z'").await;
    assert!(kept.contains("| 40 |"), "no request deleted more than it said: {kept}");
    let awaiting = sql(
        &h,
        1,
        &format!("SELECT count(*) AS n FROM system.deletions WHERE id = {id} AND node = 0"),
    )
    .await;
    assert!(awaiting.contains("| 0 |"), "every shard applied it: {awaiting}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
