//! Rollups on one database: a rollup read after maintenance equals the same aggregate computed
//! from its source, through backfill, late and replacing writes, new tags, `DELETE` by tag and
//! time, time-window deletes, `ERASE` and restarts (its dirty marks are stored); writes and
//! deletes aimed at a rollup are refused; bad definitions are refused with a reason; and a
//! model test drives random operations against the source aggregate as the oracle.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use ebb_query::lp::Precision;
use ebb_query::{Database, SqlSession};
use ebb_storage::Options;
use proptest::prelude::*;

const M: i64 = 60_000_000_000; // a minute in ns
const BASE: i64 = 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % (60 * M);

const CREATE: &str = "CREATE MATERIALIZED VIEW cpu_10m AS SELECT date_bin(INTERVAL '10 minutes', \
                      time) AS time, region, count(*) AS n, sum(v) AS total, min(v) AS lo, \
                      max(k) AS hi, avg(v) AS mean, count(k) AS nk FROM cpu GROUP BY 1, region";
const ORACLE: &str = "SELECT date_bin(INTERVAL '10 minutes', time) AS time, region, count(*) AS \
                      n, sum(v) AS total, min(v) AS lo, max(k) AS hi, avg(v) AS mean, count(k) \
                      AS nk FROM cpu GROUP BY 1, region ORDER BY 1, 2";
const READ: &str = "SELECT * FROM cpu_10m ORDER BY 1, 2";

fn open(dir: &std::path::Path) -> Arc<Database> {
    Arc::new(Database::open(dir, Options::default()).expect("open"))
}

fn text(batches: &[RecordBatch]) -> String {
    pretty_format_batches(batches).expect("format").to_string()
}

async fn run(s: &SqlSession, sql: &str) -> Vec<RecordBatch> {
    s.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Maintains, then checks the rollup against the oracle; returns the rollup's text.
async fn same(db: &Arc<Database>, s: &SqlSession) -> String {
    db.maintain_rollups().expect("maintain");
    let want = text(&run(s, ORACLE).await);
    let got = text(&run(s, READ).await);
    assert_eq!(got, want, "rollup differs from its source's aggregate");
    got
}

/// A line of `cpu`: user `u`, minute `m`, value `v` (integer-valued, so sums are exact).
fn line(u: usize, m: i64, v: i64) -> String {
    let region = ["eu", "us", "ap"][u % 3];
    format!("cpu,user=u{u},region={region} v={v},k={}i {}\n", v * 2, BASE + m * M)
}

/// Minute `m` as a SQL timestamp.
fn at(m: i64) -> String {
    format!("to_timestamp_nanos({})", BASE + m * M)
}

fn write(db: &Database, body: &str) {
    db.write_lines("public", body, Precision::Nanoseconds, BASE + 1000 * M).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollup_follows_its_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = open(dir.path());
    let mut body = String::new();
    for u in 0..6 {
        for m in 0..60 {
            body.push_str(&line(u, m, (u as i64 * 7 + m) % 23));
        }
    }
    write(&db, &body);
    let mut s = SqlSession::new(db.clone(), "public");
    run(&s, CREATE).await;
    // Filled from the rows already there.
    let first = same(&db, &s).await;
    assert_eq!(first.lines().count(), 4 + 6 * 3, "{first}");

    // Late data, a replaced point, a new tag and a new series.
    write(&db, &format!("{}{}", line(1, 3, 100), line(2, 61, 5)));
    write(&db, &format!("cpu,user=u0,region=eu v=9 {}\n", BASE + 5 * M)); // replaces v, keeps k
    write(&db, &format!("cpu,user=u9,region=eu,rack=r1 v=4,k=1i {}\n", BASE + 7 * M));
    let before = text(&run(&s, READ).await);
    same(&db, &s).await;
    assert_ne!(before, text(&run(&s, READ).await), "changes reached the rollup");

    // Deletes by tag and time, cutting buckets in two; then a time window.
    run(
        &s,
        &format!("DELETE FROM cpu WHERE user = 'u1' AND time >= {} AND time < {}", at(13), at(37)),
    )
    .await;
    same(&db, &s).await;
    run(&s, &format!("DELETE FROM cpu WHERE time >= {} AND time < {}", at(44), at(51))).await;
    same(&db, &s).await;

    // Erasure reaches the rollup's partials: the erased user's contribution is gone from
    // every bucket, although the rollup groups by region only.
    let erased = run(&s, "ERASE WHERE user = 'u2'").await;
    assert!(text(&erased).contains("| 2 "), "source and rollup erased: {}", text(&erased));
    same(&db, &s).await;
    // The rollup's stored partials, read as its table (not merged by its view).
    let shards = Arc::new(ebb_query::sql::shard::LocalShards::new(db.clone()));
    let stored = ebb_query::sql::ShardTable::load(shards, "public", "cpu_10m").await.unwrap();
    let raw = datafusion::prelude::SessionContext::new();
    raw.register_table("cpu_10m", Arc::new(stored.expect("the rollup's table"))).unwrap();
    let left = raw.sql("SELECT count(*) FROM cpu_10m WHERE user = 'u2'").await.unwrap();
    let left = left.collect().await.unwrap();
    let left = datafusion::arrow::util::pretty::pretty_format_batches(&left).unwrap().to_string();
    assert!(left.contains("| 0 "), "{left}");

    // Marks survive a restart: written, not maintained, reopened.
    write(&db, &line(4, 22, 1000));
    drop((s, raw));
    Arc::try_unwrap(db).map(drop).unwrap_or_else(|_| panic!("database still shared"));
    db = open(dir.path());
    s = SqlSession::new(db.clone(), "public");
    assert!(same(&db, &s).await.contains("| 2000 "), "the restarted marks were recomputed");

    // What may not be done to a rollup, or to its source while it has one.
    let refused = |sql: &'static str| {
        let s = &s;
        async move {
            match s.query(sql).await {
                Ok(_) => panic!("{sql} accepted"),
                Err(e) => e.to_string(),
            }
        }
    };
    assert!(refused("INSERT INTO cpu_10m (time, region, n) VALUES (0, 'x', 1)")
        .await
        .contains("rollup"));
    let e = refused("DELETE FROM cpu_10m WHERE time < now()").await;
    assert!(e.contains("rollup"), "{e}");
    assert!(refused("DROP TABLE cpu").await.contains("DROP MATERIALIZED VIEW"));
    assert!(refused("DROP MATERIALIZED VIEW cpu").await.contains("not a rollup"));
    let lp = db.write_lines("public", "cpu_10m n=1i 1", Precision::Nanoseconds, 1);
    assert!(lp.expect_err("write to a rollup").to_string().contains("rollup of cpu"));
    run(&s, "DROP MATERIALIZED VIEW cpu_10m").await;
    run(&s, "DROP TABLE cpu").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollups_keep_their_source_retention_unless_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let s = SqlSession::new(db.clone(), "public");
    run(&s, "CREATE TABLE m (host TAG, v DOUBLE) WITH (retention = '30d')").await;
    let def =
        "AS SELECT date_bin(INTERVAL '1 hour', time) AS time, host, max(v) FROM m GROUP BY 1, 2";
    run(&s, &format!("CREATE MATERIALIZED VIEW m_1h {def}")).await;
    run(&s, &format!("CREATE MATERIALIZED VIEW m_1d WITH (retention = '365d') {def}")).await;
    run(&s, &format!("CREATE MATERIALIZED VIEW IF NOT EXISTS m_1d {def}")).await;
    run(&s, "ALTER TABLE m_1h SET (retention = '90d')").await;
    let t = text(
        &run(
            &s,
            "SELECT name, retention, rollup IS NOT NULL AS r FROM system.tables ORDER BY name",
        )
        .await,
    );
    for want in [
        "| m    | 30d       | false |",
        "| m_1d | 365d      | true  |",
        "| m_1h | 90d       | true  |",
    ] {
        assert!(t.contains(want), "{want}\n{t}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_definitions_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    write(&db, &format!("{}other x=1 {BASE}\n", line(0, 0, 1)));
    db.write_lines("public", &format!("cpu s=\"a\" {BASE}"), Precision::Nanoseconds, BASE)
        .expect("string field");
    let s = SqlSession::new(db.clone(), "public");
    let bin = "date_bin(INTERVAL '1 hour', time)";
    for (sql, why) in [
        (format!("SELECT {bin} AS time, count(*) FROM cpu WHERE v > 1 GROUP BY 1"), "filter"),
        (format!("SELECT {bin} AS time, sum(s) FROM cpu GROUP BY 1"), "numeric"),
        (format!("SELECT {bin} AS time, region, sum(v) FROM cpu GROUP BY 1"), "every tag"),
        (format!("SELECT {bin} AS time, v, sum(v) FROM cpu GROUP BY 1, v"), "not a tag"),
        (format!("SELECT {bin} AS time, median(v) FROM cpu GROUP BY 1"), "median"),
        (
            "SELECT date_bin(INTERVAL '1 month', time) AS time, sum(v) FROM cpu GROUP BY 1".into(),
            "width",
        ),
        ("SELECT region, sum(v) FROM cpu GROUP BY region".into(), "bucket"),
        (format!("SELECT {bin} AS time, sum(v) FROM cpu JOIN other ON true GROUP BY 1"), "joins"),
        (format!("SELECT {bin} AS time, sum(v) FROM nope GROUP BY 1"), "nope"),
        (format!("SELECT {bin} AS time, sum(v) AS region FROM cpu GROUP BY 1"), "region"),
    ] {
        let sql = format!("CREATE MATERIALIZED VIEW r AS {sql}");
        let err = s.query(&sql).await.err().unwrap_or_else(|| panic!("{sql} accepted"));
        assert!(err.to_string().contains(why), "{sql}: {err}");
    }
    assert!(db.catalog().table("public", "r").is_none());
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// Points `(user, minute, value)`.
    Write(Vec<(usize, i64, i64)>),
    /// `DELETE` of one user's rows in `[from, to)` minutes.
    DeleteUser(usize, i64, i64),
    /// `DELETE` of every row in `[from, to)` minutes.
    DeleteWindow(i64, i64),
    /// One `DELETE` of two users' rows, each in its own range (`OR`).
    DeleteTwo((usize, i64, i64), (usize, i64, i64)),
    /// `ERASE` of one user.
    Erase(usize),
    /// Maintenance now.
    Maintain,
    /// Close and reopen.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop::collection::vec((0..5usize, 0..90i64, -50..50i64), 1..20).prop_map(Op::Write),
        1 => (0..5usize, 0..90i64, 0..40i64).prop_map(|(u, a, n)| Op::DeleteUser(u, a, a + n)),
        1 => (0..90i64, 1..40i64).prop_map(|(a, n)| Op::DeleteWindow(a, a + n)),
        1 => ((0..5usize, 0..45i64, 0..8i64), (0..4usize, 0..45i64, 0..8i64)).prop_map(
            // Two users and four different bounds (the planner merges shared conditions,
            // which DELETE then cannot take): even and odd minutes.
            |((u, a, n), (d, b, m))| {
                let v = (u + 1 + d) % 5;
                Op::DeleteTwo((u, 2 * a, 2 * (a + n) + 1), (v, 2 * b + 1, 2 * (b + m) + 2))
            }
        ),
        1 => (0..5usize).prop_map(Op::Erase),
        2 => Just(Op::Maintain),
        1 => Just(Op::Restart),
    ]
}

async fn model(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut db = open(dir.path());
    write(&db, &line(0, 0, 1));
    let mut s = SqlSession::new(db.clone(), "public");
    run(&s, CREATE).await;
    for op in ops {
        match op {
            Op::Write(points) => {
                write(&db, &points.iter().map(|&(u, m, v)| line(u, m, v)).collect::<String>())
            }
            Op::DeleteUser(u, a, b) => {
                let sql = format!(
                    "DELETE FROM cpu WHERE user = 'u{u}' AND time >= {} AND time < {}",
                    at(a),
                    at(b)
                );
                run(&s, &sql).await;
            }
            Op::DeleteWindow(a, b) => {
                let sql = format!("DELETE FROM cpu WHERE time >= {} AND time < {}", at(a), at(b));
                run(&s, &sql).await;
            }
            Op::DeleteTwo((u, a, b), (v, c, d)) => {
                let sql = format!(
                    "DELETE FROM cpu WHERE (user = 'u{u}' AND time >= {} AND time < {}) OR \
                     (user = 'u{v}' AND time >= {} AND time < {})",
                    at(a),
                    at(b),
                    at(c),
                    at(d)
                );
                run(&s, &sql).await;
            }
            Op::Erase(u) => {
                run(&s, &format!("ERASE WHERE user = 'u{u}'")).await;
            }
            Op::Maintain => {
                db.maintain_rollups().expect("maintain");
            }
            Op::Restart => {
                drop(s);
                Arc::try_unwrap(db).map(drop).unwrap_or_else(|_| panic!("database still shared"));
                db = open(dir.path());
                s = SqlSession::new(db.clone(), "public");
            }
        }
    }
    same(&db, &s).await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn rollup_equals_its_source_aggregate(ops in prop::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(model(ops));
    }
}

/// Maintenance runs in a loop beside writes, deletes and erasures (planned outside the writer
/// lock, it must never write back what a delete or an erasure removed meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_beside_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    write(&db, &line(0, 0, 1));
    let s = SqlSession::new(db.clone(), "public");
    run(&s, CREATE).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let keeper = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rounds += db.maintain_rollups().expect("maintain").buckets;
            }
            rounds
        })
    };
    let mut next = crate::common::numbers(7);
    for i in 0..1000 {
        let body: String =
            (0..20).map(|_| line(next(6) as usize, next(120), next(100) - 50)).collect();
        write(&db, &body);
        match i % 10 {
            3 => {
                let (u, a) = (next(6), next(100));
                run(
                    &s,
                    &format!(
                        "DELETE FROM cpu WHERE user = 'u{u}' AND time >= {} AND time < {}",
                        at(a),
                        at(a + next(30))
                    ),
                )
                .await;
            }
            6 => {
                let a = next(100);
                run(
                    &s,
                    &format!("DELETE FROM cpu WHERE time >= {} AND time < {}", at(a), at(a + 7)),
                )
                .await;
            }
            9 => {
                run(&s, &format!("ERASE WHERE user = 'u{}'", next(6))).await;
            }
            _ => {}
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(keeper.join().expect("keeper") > 0, "maintenance ran during the changes");
    same(&db, &s).await;
}

/// A bucket reaching past its source's retention horizon keeps what expired: newer rows are
/// merged into it, and a change that would need a recompute leaves it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_past_the_source_horizon_are_not_recomputed() {
    const MIN_MS: u64 = 60_000;
    let h_ms: u64 = 1_700_002_800_000; // a whole hour
    let clock = ebb_storage::ManualClock::new(h_ms);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options { clock: ebb_storage::Clock::manual(&clock), ..Options::default() };
    let db = Arc::new(Database::open(dir.path(), opts).expect("open"));
    let s = SqlSession::new(db.clone(), "public");
    run(&s, "CREATE TABLE m (host TAG, v DOUBLE) WITH (retention = '2h')").await;
    run(
        &s,
        "CREATE MATERIALIZED VIEW m_1h WITH (retention = 'none') AS SELECT date_bin(INTERVAL \
         '1 hour', time) AS time, count(*) AS n, sum(v) AS total FROM m GROUP BY 1",
    )
    .await;
    let at = |min_before: u64| (h_ms - min_before * MIN_MS) as i64 * 1_000_000;
    let now_ns = |c: &ebb_storage::ManualClock| c.now_ms() as i64 * 1_000_000;
    // Ten-minute points from 90 minutes before the hour: [H-2h, H-1h) holds H-90, -80, -70.
    let body: String =
        (1..=9).map(|k| format!("m,host=a v={} {}\n", 1u64 << k, at(k * 10))).collect();
    db.write_lines("public", &body, Precision::Nanoseconds, now_ns(&clock)).expect("write");
    db.maintain_rollups().expect("maintain");
    let first = "SELECT n, total FROM m_1h ORDER BY time LIMIT 1";
    assert!(
        text(&run(&s, first).await).contains("| 3 | 896.0 |"),
        "{}",
        text(&run(&s, first).await)
    );
    // 35 minutes on, the point at H-90 has expired from the source.
    clock.advance(35 * MIN_MS);
    // A late point older than the bucket's newest would need a recompute: the bucket stands.
    db.write_lines(
        "public",
        &format!("m,host=a v=1 {}\n", at(75)),
        Precision::Nanoseconds,
        now_ns(&clock),
    )
    .expect("late write");
    db.maintain_rollups().expect("maintain");
    assert!(
        text(&run(&s, first).await).contains("| 3 | 896.0 |"),
        "{}",
        text(&run(&s, first).await)
    );
    // A newer one is merged, and what expired stays counted.
    db.write_lines(
        "public",
        &format!("m,host=a v=2048 {}\n", at(65)),
        Precision::Nanoseconds,
        now_ns(&clock),
    )
    .expect("newer write");
    db.maintain_rollups().expect("maintain");
    assert!(
        text(&run(&s, first).await).contains("| 4 | 2944.0 |"),
        "{}",
        text(&run(&s, first).await)
    );
}
