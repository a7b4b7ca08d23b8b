//! Table DDL on a cluster: CREATE TABLE with a retention, ALTER TABLE SET retention, CREATE
//! DATABASE, CREATE and DROP MATERIALIZED VIEW and DROP TABLE [IF EXISTS] reach every shard
//! (the table reads the same through every node), as typed changes every shard applies.

#![allow(clippy::unwrap_used)]

use ebb_node::cluster::view::Settings;
use ebb_query::lp::Precision;
use ebb_query::model::schema::TableDef;

use crate::cluster::{sql, wait_settled};
use crate::cluster_harness::Harness;

const DAY_NS: u64 = 86_400_000_000_000;

/// Waits until every replica of every shard on every node holds table `db.name` as `check`
/// wants it (`None`: the replica does not hold it).
async fn on_every_replica(
    h: &Harness,
    what: &str,
    db: &str,
    name: &str,
    check: impl Fn(Option<&TableDef>) -> bool,
) {
    h.wait(what, |n| {
        let all = n.shards.all();
        !all.is_empty() && all.iter().all(|s| check(s.db.catalog().table(db, name).as_deref()))
    })
    .await;
}

async fn sql_err(h: &Harness, i: usize, q: &str) -> String {
    let s = ebb_query::SqlSession::on(h.nodes[&i].router.clone(), h.nodes[&i].meta.clone(), "db");
    match s.query(q).await {
        Ok(b) => panic!("{q} was not refused: {b:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn table_ddl_reaches_every_shard_and_reads_the_same_through_every_node() {
    let mut h = Harness::new();
    h.settings = Settings { shards: 3, replication: 3 };
    for (i, join) in [(0, &[][..]), (1, &[0][..]), (2, &[0][..])] {
        h.start(i, join).await;
    }
    wait_settled(&h, 3).await;

    sql(&h, 0, "CREATE TABLE cpu (host TAG, usage DOUBLE) WITH (retention = '30d')").await;
    // Every shard has the table, so it reads the same through any node before any row is
    // written.
    on_every_replica(&h, "cpu on every replica", "db", "cpu", |t| {
        t.is_some_and(|t| t.tags == ["host"] && t.retention_ns == Some(30 * DAY_NS))
    })
    .await;
    for i in 0..3 {
        let d = sql(&h, i, "SELECT count(host) AS hosts, count(usage) AS n FROM cpu").await;
        assert!(d.contains("| 0     | 0 |"), "node {i}: {d}");
    }
    let err = sql_err(&h, 1, "CREATE TABLE cpu (host TAG, usage DOUBLE)").await;
    assert!(err.contains("exists"), "{err}");
    sql(&h, 1, "CREATE TABLE IF NOT EXISTS cpu (host TAG, usage DOUBLE)").await;

    // Rows on every shard, then a retention change and a rollup, each seen through every node.
    let now_s = ebb_query::now_ms() / 1000;
    let body: String =
        (0..30).map(|s| format!("cpu,host=h{s} usage=1.5 {}\n", now_s - 3600 + s)).collect();
    h.nodes[&2].router.write_lines("db", &body, Precision::Seconds, 0).await.unwrap();
    sql(&h, 2, "ALTER TABLE cpu SET (retention = '7d')").await;
    on_every_replica(&h, "7 days on every replica", "db", "cpu", |t| {
        t.is_some_and(|t| t.retention_ns == Some(7 * DAY_NS))
    })
    .await;
    for i in 0..3 {
        let n = sql(&h, i, "SELECT count(*) AS n FROM cpu").await;
        assert!(n.contains("| 30 |"), "node {i}: {n}");
    }
    sql(
        &h,
        0,
        "CREATE MATERIALIZED VIEW cpu_1h AS SELECT date_bin(INTERVAL '1 hour', time) AS time, \
         host, avg(usage) AS usage FROM cpu GROUP BY 1, host",
    )
    .await;
    on_every_replica(&h, "the rollup on every replica", "db", "cpu_1h", |t| {
        t.is_some_and(|t| t.rollup.is_some())
    })
    .await;
    let err = sql_err(&h, 1, "DROP TABLE cpu").await;
    assert!(err.contains("rollups"), "a table with rollups is not dropped: {err}");
    let err = sql_err(&h, 1, "DROP MATERIALIZED VIEW cpu").await;
    assert!(err.contains("not a rollup"), "{err}");
    sql(&h, 1, "DROP MATERIALIZED VIEW cpu_1h").await;

    // A database of its own, and DROP TABLE [IF EXISTS].
    sql(&h, 0, "CREATE DATABASE other").await;
    sql(&h, 1, "CREATE TABLE other.mem (host TAG, used BIGINT)").await;
    on_every_replica(&h, "other.mem on every replica", "other", "mem", |t| t.is_some()).await;
    on_every_replica(&h, "the rollup dropped", "db", "cpu_1h", |t| t.is_none()).await;
    sql(&h, 2, "DROP TABLE cpu").await;
    sql(&h, 0, "DROP TABLE IF EXISTS cpu").await;
    let err = sql_err(&h, 1, "DROP TABLE cpu").await;
    assert!(err.contains("cpu"), "{err}");
    on_every_replica(&h, "cpu dropped everywhere", "db", "cpu", |t| t.is_none()).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
