//! The SQL layer end to end on one database: line-protocol writes, queries with pushdown,
//! aggregation and `date_bin`, `INSERT`, `DELETE` by time and by tag, DDL with retention,
//! system tables, bad input, and a restart.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use ebb_query::lp::Precision;
use ebb_query::{Database, QueryError, SqlSession};
use ebb_storage::Options;

const H: i64 = 3_600_000_000_000; // an hour in ns
const BASE: i64 = 1_700_000_000_000_000_000;

fn open(dir: &std::path::Path) -> Arc<Database> {
    Arc::new(Database::open(dir, Options::default()).expect("open"))
}

fn body(hosts: usize, points: usize) -> String {
    let mut s = String::new();
    for h in 0..hosts {
        for p in 0..points {
            let t = BASE + p as i64 * 60_000_000_000; // one a minute
            s.push_str(&format!(
                "cpu,host=h{h},region={} usage={},n={}i {t}\n",
                if h % 2 == 0 { "eu" } else { "us" },
                (h * 100 + p) as f64 / 10.0,
                p
            ));
        }
    }
    s
}

/// The batches as a text table with runs of spaces collapsed.
fn text(batches: &[RecordBatch]) -> String {
    let t = pretty_format_batches(batches).expect("format").to_string();
    t.split(' ').filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
}

async fn one_u64(s: &SqlSession, sql: &str) -> u64 {
    let b = s.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let col = b[0].column(0);
    datafusion::arrow::compute::cast(col, &datafusion::arrow::datatypes::DataType::UInt64)
        .expect("cast")
        .as_any()
        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        .expect("u64")
        .value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_query_delete_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let w = db.write_lines("public", &body(4, 120), Precision::Nanoseconds, BASE).expect("write");
    assert_eq!((w.lines, w.rows, w.tables_created, w.series_created), (480, 480, 1, 4));
    let s = SqlSession::new(db.clone(), "public");

    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu").await, 480);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host = 'h1'").await, 120);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host IN ('h1', 'h2')").await, 240);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host != 'h1'").await, 360);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE region = 'eu' AND n < 10").await, 20);
    let t1 = "to_timestamp_nanos(1700000000000000000) + interval '30 minutes'";
    assert_eq!(one_u64(&s, &format!("SELECT count(*) FROM cpu WHERE time < {t1}")).await, 120);
    assert_eq!(
        one_u64(&s, &format!("SELECT count(*) FROM cpu WHERE host = 'h3' AND time >= {t1}")).await,
        90
    );
    assert_eq!(one_u64(&s, "SELECT count(*) FROM (SELECT * FROM cpu LIMIT 7)").await, 7);

    // Aggregation by hour with date_bin: two hours per host.
    let b = s
        .query(
            "SELECT host, date_bin(interval '1 hour', time, to_timestamp_nanos(1700000000000000000)) AS hour, \
             max(usage) AS mx, count(*) AS c FROM cpu WHERE host = 'h0' GROUP BY host, hour ORDER BY hour",
        )
        .await
        .expect("date_bin");
    let t = text(&b);
    assert!(t.contains("| h0 |"), "{t}");
    assert!(t.contains("| 5.9 | 60 |") && t.contains("| 11.9 | 60 |"), "{t}");

    // INSERT through SQL (time defaults to now when omitted).
    let out = s
        .query("INSERT INTO cpu (time, host, region, usage) VALUES (to_timestamp_nanos(1700000000000000000), 'h9', 'eu', 1.5)")
        .await
        .expect("insert");
    assert!(text(&out).contains("| 1 "), "{}", text(&out));
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host = 'h9'").await, 1);

    // A time-window delete (no tag predicate): the first 30 minutes of every series.
    let b = s.query(&format!("DELETE FROM cpu WHERE time < {t1}")).await.expect("delete window");
    let t = text(&b);
    assert!(t.contains("rows_deleted") && t.contains("| 121 "), "{t}");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu").await, 360);
    // A tag delete: all of h1.
    let b = s.query("DELETE FROM cpu WHERE host = 'h1'").await.expect("delete tag");
    assert!(text(&b).contains("| 90 "), "{}", text(&b));
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu").await, 270);
    // Deletes show in the ledger, engine deletes and requests.
    let q = "SELECT count(*) FROM system.engine_deletes WHERE kind = 'time_window'";
    assert!(one_u64(&s, q).await >= 1);
    let q = "SELECT count(*) FROM system.engine_deletes WHERE kind = 'range'";
    assert_eq!(one_u64(&s, q).await, 1);
    let q = "SELECT count(*) FROM system.deletions WHERE kind = 'delete' AND status = 'pending'";
    assert_eq!(one_u64(&s, q).await, 2);
    let q = "SELECT rows FROM system.deletions WHERE target LIKE '%h1%'";
    assert_eq!(one_u64(&s, q).await, 90);

    // Refused deletes, with reasons.
    for (sql, why) in [
        ("DELETE FROM cpu", "without WHERE"),
        ("DELETE FROM cpu WHERE usage > 3", "field usage"),
        ("DELETE FROM cpu WHERE date_trunc('hour', time) = time", "compared directly"),
        ("DELETE FROM nosuch WHERE host = 'a'", "nosuch"),
    ] {
        let e = s.query(sql).await.err().unwrap_or_else(|| panic!("{sql} accepted"));
        assert!(e.to_string().contains(why), "{sql}: {e}");
        assert!(e.is_client_error(), "{sql}: {e}");
    }
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu").await, 270, "refused deletes changed data");

    // Restart: everything is still there.
    drop(s);
    db.flush().expect("flush");
    drop(db);
    let db = open(dir.path());
    let s = SqlSession::new(db.clone(), "public");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu").await, 270);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host = 'h1'").await, 0);
    assert_eq!(one_u64(&s, "SELECT count(*) FROM cpu WHERE host = 'h2'").await, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_writes_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    db.write_lines("public", "m,t=a v=1 1\n", Precision::Nanoseconds, 0).expect("write");
    // A type conflict on line 3 rejects the whole request, including the new table on line 1.
    let e = db
        .write_lines(
            "public",
            "other v=1 1\nm,t=b v=2 2\nm,t=c v=\"x\" 3\n",
            Precision::Nanoseconds,
            0,
        )
        .expect_err("type conflict");
    assert!(matches!(e, QueryError::TypeConflict { line: Some(3), .. }), "{e}");
    let e = db
        .write_lines("public", "m v=1 1\nm v= 2\n", Precision::Nanoseconds, 0)
        .expect_err("syntax");
    assert!(e.to_string().contains("line 2"), "{e}");
    let s = SqlSession::new(db.clone(), "public");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM m").await, 1);
    assert!(s.query("SELECT * FROM other").await.is_err(), "table from a rejected request exists");
    // Same point written twice: fields merge, the later value wins.
    db.write_lines("public", "m,t=a w=5i 1\nm,t=a v=9 1\n", Precision::Nanoseconds, 0)
        .expect("merge");
    let b = s.query("SELECT v, w FROM m WHERE t = 'a'").await.expect("select");
    assert!(text(&b).contains("| 9.0 | 5 |"), "{}", text(&b));
    // Precision.
    db.write_lines("public", "m,t=p v=1 2\n", Precision::Seconds, 0).expect("seconds");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM m WHERE time = to_timestamp_seconds(2)").await, 1);
    // Bad SQL is a client error.
    for sql in ["SELEC 1", "SELECT nosuch FROM m", "SELECT * FROM nosuch", "UPDATE m SET v = 1"] {
        let e = s.query(sql).await.expect_err(sql);
        assert!(e.is_client_error(), "{sql}: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_retention_and_system_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let s = SqlSession::new(db.clone(), "public");
    s.query("CREATE TABLE weather (city TAG, temp DOUBLE, ok BOOLEAN, time TIMESTAMP) WITH (retention = '1h')")
        .await
        .expect("create");
    let now = ebb_query::now_ns();
    let old = now - 2 * H;
    // Older than the retention horizon: refused with the line.
    let e = db
        .write_lines(
            "public",
            &format!("weather,city=a temp=1 {old}\n"),
            Precision::Nanoseconds,
            now,
        )
        .expect_err("beyond retention");
    assert!(matches!(e, QueryError::BeyondRetention { line: Some(1), .. }), "{e}");
    // Times in the message as RFC 3339, not nanoseconds.
    assert!(e.to_string().contains(&ebb_query::rfc3339(old)), "{e}");
    db.write_lines(
        "public",
        &format!("weather,city=a temp=1 {}\n", now - H / 2),
        Precision::Nanoseconds,
        now,
    )
    .expect("recent");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM weather").await, 1);
    let t = text(
        &s.query("SELECT retention, tags, fields FROM system.tables WHERE name = 'weather'")
            .await
            .expect("tables"),
    );
    assert!(t.contains("1h") && t.contains("city") && t.contains("temp:float"), "{t}");
    // A table with retention: new files get the KiWi+ time-series layout, h > 1 from level 1.
    let q = "SELECT count(*) FROM system.layout WHERE level >= 1 AND tile_pages > 1 \
             AND reason = 'time-series default'";
    assert_eq!(
        one_u64(&s, q).await,
        6,
        "{}",
        text(&s.query("SELECT * FROM system.layout").await.expect("layout"))
    );
    assert_eq!(one_u64(&s, "SELECT max(tile_pages) FROM system.layout WHERE level = 0").await, 1);
    // Shorter retention: the row expires at once.
    s.query("ALTER TABLE weather SET (retention = '10m')").await.expect("alter");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM weather").await, 0);
    assert!(db.purge_expired().expect("purge") >= 1);
    s.query("CREATE TABLE IF NOT EXISTS weather (city TAG)").await.expect("if not exists");
    assert!(s.query("CREATE TABLE weather (city TAG)").await.is_err());
    let t = text(&s.query("SHOW TABLES").await.expect("show"));
    assert!(t.contains("weather"), "{t}");
    let t = text(&s.query("DESCRIBE weather").await.expect("describe"));
    assert!(t.contains("temp") && t.contains("Float64"), "{t}");
    s.query("DROP TABLE weather").await.expect("drop");
    assert!(s.query("SELECT * FROM weather").await.is_err());
    s.query("DROP TABLE IF EXISTS weather").await.expect("drop if exists");
    // The drop and the retention purge do not count their rows: NULL, never a made-up 0.
    for kind in ["drop", "retention"] {
        let q =
            format!("SELECT count(*) FROM system.deletions WHERE kind = '{kind}' AND rows IS NULL");
        assert_eq!(one_u64(&s, &q).await, 1, "{kind}");
    }
    let q = "SELECT count(*) FROM system.deletions WHERE rows IS NULL AND kind <> 'drop' \
             AND kind <> 'retention'";
    assert_eq!(one_u64(&s, q).await, 0, "other requests count their rows");
    db.flush().expect("flush");
    let t = text(
        &s.query("SELECT kind, count(*) FROM system.compactions GROUP BY kind")
            .await
            .expect("compactions"),
    );
    assert!(t.contains("flush"), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_scans_read_every_row_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    db.write_lines("public", &body(40, 30), Precision::Nanoseconds, BASE).expect("write");
    let one = SqlSession::new(db.clone(), "public");
    one.query("SET datafusion.execution.target_partitions = 1").await.expect("set");
    let four = SqlSession::new(db.clone(), "public");
    four.query("SET datafusion.execution.target_partitions = 4").await.expect("set");
    let plan = text(&four.query("EXPLAIN SELECT count(*) FROM cpu").await.expect("explain"));
    assert!(plan.contains("partitions=4"), "{plan}");
    let small =
        text(&four.query("EXPLAIN SELECT * FROM cpu WHERE host = 'h3'").await.expect("explain"));
    assert!(small.contains("partitions=1"), "{small}");
    let lo = BASE + 5 * 60_000_000_000;
    let hi = BASE + 17 * 60_000_000_000;
    for sql in [
        "SELECT host, count(*) AS c, sum(n) AS s, min(time) AS t FROM cpu GROUP BY host ORDER BY host"
            .to_string(),
        format!(
            "SELECT host, count(*) AS c, max(usage) AS u FROM cpu WHERE region = 'eu' \
             AND time >= to_timestamp_nanos({lo}) AND time < to_timestamp_nanos({hi}) \
             GROUP BY host ORDER BY host"
        ),
        format!(
            "SELECT count(*) AS c FROM cpu WHERE time >= to_timestamp_nanos({lo}) \
             AND time < to_timestamp_nanos({hi})"
        ),
    ] {
        let a = text(&one.query(&sql).await.expect("one partition"));
        let b = text(&four.query(&sql).await.expect("four partitions"));
        assert_eq!(a, b, "{sql}");
    }
    assert_eq!(one_u64(&four, "SELECT count(*) FROM cpu").await, 40 * 30);
    assert_eq!(
        one_u64(
            &four,
            &format!(
                "SELECT count(*) FROM cpu WHERE time >= to_timestamp_nanos({lo}) \
                 AND time < to_timestamp_nanos({hi})"
            )
        )
        .await,
        40 * 12
    );
    assert_eq!(one_u64(&four, "SELECT count(DISTINCT host) FROM cpu").await, 40);
}

#[tokio::test]
async fn tables_created_without_retention_get_the_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    db.set_default_retention(Some(std::time::Duration::from_secs(2 * 3600)));
    let s = SqlSession::new(db.clone(), "public");
    let now = ebb_query::now_ns();
    // Created by a write: the rows older than two hours are gone at once.
    let lines = format!("m,host=a v=1 {}\nm,host=a v=2 {}\n", now - 3 * H, now - H / 2);
    db.write_lines("public", &lines, Precision::Nanoseconds, now).expect("write");
    assert_eq!(one_u64(&s, "SELECT count(*) FROM m").await, 1);
    // Created by DDL without a retention, and with one.
    s.query("CREATE TABLE d (city TAG, t DOUBLE, time TIMESTAMP)").await.expect("create");
    s.query("CREATE TABLE e (city TAG, t DOUBLE, time TIMESTAMP) WITH (retention = '7d')")
        .await
        .expect("create with retention");
    let t = text(
        &s.query("SELECT name, retention FROM system.tables ORDER BY name").await.expect("tables"),
    );
    assert!(
        t.contains("| d | 2h |") && t.contains("| e | 7d |") && t.contains("| m | 2h |"),
        "{t}"
    );
}

/// Sessions share one base of functions and rules, not their catalogs: sessions over two
/// databases in one process (two shards of a node) each see their own tables and rows.
#[tokio::test]
async fn sessions_over_two_databases_see_their_own_tables() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(d1.path()), open(d2.path()));
    a.write_lines("m", "only_a,host=x v=1 1\n", Precision::Seconds, 0).unwrap();
    b.write_lines("m", "only_b,host=x v=1 1\nonly_b,host=y v=2 2\n", Precision::Seconds, 0)
        .unwrap();
    let (sa, sb) = (SqlSession::new(a.clone(), "m"), SqlSession::new(b.clone(), "m"));
    for _ in 0..2 {
        let na =
            pretty_format_batches(&sa.query("SELECT count(*) AS n FROM only_a").await.unwrap())
                .unwrap()
                .to_string();
        let nb =
            pretty_format_batches(&sb.query("SELECT count(*) AS n FROM only_b").await.unwrap())
                .unwrap()
                .to_string();
        assert!(na.contains("| 1 |") && nb.contains("| 2 |"), "{na}\n{nb}");
        assert!(sa.query("SELECT * FROM only_b").await.is_err());
        assert!(sb.query("SELECT * FROM only_a").await.is_err());
    }
}
