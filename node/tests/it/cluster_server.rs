//! Three `ebb server`s in cluster mode in one process, on loopback: the PostgreSQL wire protocol
//! (the `psql` binary and a driver) over the cluster, `INSERT` routed by series, `system.shards`
//! naming the leader of shards a node does not hold, and cluster metrics.

use std::time::{Duration, Instant};

use crate::common::{self, loopback, start_cluster, Http, BASE};
use ebb_node::config::Config;
use ebb_node::server::Server;

fn config(dir: &std::path::Path) -> Config {
    Config { shards: 4, replication: 2, ..loopback(dir) }
}

fn http_sql(s: &Server, sql: &str) -> (u16, String) {
    Http::new(s.http_addr).post_with("/v1/sql?db=public", sql.as_bytes(), &[("Accept", "text/csv")])
}

fn psql(s: &Server, sql: &str) -> (bool, String, String) {
    common::psql(s.pg_addr.port(), sql)
}

/// Rows of `cpu` in each shard, read on its leader.
/// [`rows_on_leaders`] once it reaches `shards` shards (a leadership the balancer is moving
/// leaves its shard without a leader for a moment), or after 20 s, whatever it then is.
async fn per_shard_rows(servers: &[Server], shards: usize) -> std::collections::BTreeMap<u64, u64> {
    let start = Instant::now();
    loop {
        let rows = rows_on_leaders(servers).await;
        if rows.len() >= shards || start.elapsed() > Duration::from_secs(20) {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows of `cpu` per shard, counted on the replicas that lead their shards now.
async fn rows_on_leaders(servers: &[Server]) -> std::collections::BTreeMap<u64, u64> {
    let mut out = std::collections::BTreeMap::new();
    for s in servers {
        for shard in s.cluster().expect("cluster").shards.all() {
            if out.contains_key(&shard.id) || !shard.is_leader() {
                continue;
            }
            let session = ebb_query::SqlSession::new(shard.db.clone(), "public");
            let n = match session.query("SELECT count(*) FROM cpu").await {
                Ok(b) => datafusion::arrow::array::AsArray::as_primitive::<
                    datafusion::arrow::datatypes::Int64Type,
                >(b[0].column(0))
                .value(0) as u64,
                Err(ebb_query::QueryError::UnknownTable(_)) => 0,
                Err(e) => panic!("shard {}: {e}", shard.id),
            };
            out.insert(shard.id, n);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_protocol_insert_and_leaders_over_the_cluster() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, config).await;

    // Every node names a leader for every shard, held here or not, once placement settles
    // (4 shards x 2 replicas on 3 nodes: each node lacks at least one shard).
    let start = Instant::now();
    loop {
        let answers: Vec<_> = servers
            .iter()
            .map(|s| http_sql(s, "SELECT shard, leader FROM system.shards WHERE NOT moving"))
            .collect();
        let settled = answers.iter().all(|(status, body)| {
            *status == 200
                && body.lines().skip(1).count() == 4
                && body.lines().skip(1).all(|l| l.split(',').nth(1).is_some_and(|v| !v.is_empty()))
        });
        if settled {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "leaders never settled: {answers:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held: Vec<usize> =
        servers.iter().map(|s| s.cluster().expect("cluster").shards.ids().len()).collect();
    assert!(held.iter().any(|n| *n < 4), "some node must lack a shard: {held:?}");

    // The table comes from a line-protocol write; INSERT then adds rows through PostgreSQL.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut lp = String::new();
    for h in 0..8 {
        lp.push_str(&format!("cpu,host=w{h} usage=1.5,note=\"lp\" {BASE}\n"));
    }
    let r = agent
        .post(&format!("http://{}/write?db=public", servers[0].http_addr))
        .send(lp.as_bytes())
        .expect("write");
    assert_eq!(r.status().as_u16(), 204);

    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=ebb dbname=public", servers[1].pg_addr.port()),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect to node 2");
    tokio::spawn(conn);
    let values: Vec<String> = (0..40)
        .map(|h| format!("(to_timestamp_nanos({}), 'i{h}', {h}.25, 'a\"b')", BASE + h))
        .collect();
    let inserted = client
        .execute(
            &format!("INSERT INTO cpu (time, host, usage, note) VALUES {}", values.join(", ")),
            &[],
        )
        .await
        .expect("INSERT over the cluster");
    assert_eq!(inserted, 40);

    // Rows are routed by series, not copied to every shard.
    let rows = per_shard_rows(&servers, 4).await;
    assert_eq!(rows.len(), 4, "a leader for every shard: {rows:?}");
    assert_eq!(rows.values().sum::<u64>(), 48, "per shard: {rows:?}");
    assert!(rows.values().filter(|n| **n > 0).count() >= 2, "one shard took every row: {rows:?}");

    // Extended protocol with a parameter, on node 2.
    let row = client
        .query_one("SELECT count(*), max(usage) FROM cpu WHERE host = $1", &[&"i7"])
        .await
        .expect("parameterized query");
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(row.get::<_, f64>(1), 7.25);
    // One prepared statement, many runs: each answers for its own values; a column written
    // after it was prepared (on the shard of one series) shows up once prepared again.
    let stmt_sql = "SELECT * FROM cpu WHERE host = $1 AND time >= $2";
    let stmt = client.prepare(stmt_sql).await.expect("prepare");
    let since = std::time::UNIX_EPOCH + Duration::from_nanos(BASE.unsigned_abs());
    for h in [3, 7, 11, 39] {
        let rows = client.query(&stmt, &[&format!("i{h}"), &since]).await.expect("run");
        assert_eq!(rows.len(), 1, "i{h}");
        assert_eq!(rows[0].get::<_, f64>("usage"), f64::from(h) + 0.25);
    }
    let lp = format!("cpu,host=i5 extra=9 {}", BASE + 5);
    let r =
        agent.post(&format!("http://{}/write?db=public", servers[2].http_addr)).send(lp.as_bytes());
    assert_eq!(r.expect("write").status().as_u16(), 204);
    // As in PostgreSQL: the client holds the first answer's columns, so `*` fails until the
    // statement is prepared again.
    let e = client.query(&stmt, &[&"i5", &since]).await.expect_err("columns changed");
    let code = e.as_db_error().map(|d| d.code().code().to_owned());
    assert_eq!(code.as_deref(), Some("0A000"), "{e:?}");
    let stmt = client.prepare(stmt_sql).await.expect("prepare again");
    let rows = client.query(&stmt, &[&"i5", &since]).await.expect("run after a new column");
    assert_eq!(rows[0].get::<_, Option<f64>>("extra"), Some(9.0));

    // `host` was written as a tag: the string survived with its quote.
    let note: String =
        client.query_one("SELECT note FROM cpu WHERE host = 'i3'", &[]).await.expect("note").get(0);
    assert_eq!(note, "a\"b");

    // The psql binary (simple protocol) on node 3: count, DELETE with its tag, count again.
    let s3 = &servers[2];
    assert_eq!(psql(s3, "SELECT count(*) FROM cpu"), (true, "48".into(), String::new()));
    let hosts: Vec<String> = (0..8).map(|h| format!("'w{h}'")).collect();
    let (ok, out, err) = psql(s3, &format!("DELETE FROM cpu WHERE host IN ({})", hosts.join(", ")));
    assert!(ok, "{err}");
    assert!(out.contains("DELETE 8"), "{out} / {err}");
    assert_eq!(psql(s3, "SELECT count(*) FROM cpu").1, "40");
    let (ok, _, err) = psql(s3, "SELECT * FROM nowhere");
    assert!(!ok && err.contains("nowhere"), "{err}");
    // INSERT of a row without a field value is refused and writes nothing.
    let e = client
        .execute(
            &format!("INSERT INTO cpu (time, host) VALUES (to_timestamp_nanos({BASE}), 'x')"),
            &[],
        )
        .await
        .expect_err("a row without fields");
    let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message.contains("at least one field"), "{e:?}");
    assert_eq!(psql(s3, "SELECT count(*) FROM cpu").1, "40");

    // Cluster metrics: replicas held, and engine figures summed over them.
    let mut m = agent.get(&format!("http://{}/metrics", s3.http_addr)).call().expect("metrics");
    let text = m.body_mut().read_to_string().expect("body");
    let held_here = s3.cluster().expect("cluster").shards.ids().len();
    assert!(text.contains(&format!("ebb_shard_replicas {held_here}\n")), "{text}");
    assert!(text.contains("ebb_raft_append_bytes_received_total"), "{text}");
    assert!(text.contains("ebb_last_seq{shard="), "{text}");
    // The memtable budget all replicas share: one engine per replica held, and what they hold.
    let gauge = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or("");
        line.split(' ').nth(1).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    };
    assert_eq!(gauge("ebb_memtable_budget_limit_bytes"), (512u64 << 20) as f64, "{text}");
    assert!(gauge("ebb_memtable_budget_engines") >= held_here as f64, "{text}");
    assert!(gauge("ebb_memtable_budget_used_bytes") > 0.0, "{text}");

    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}
