//! Prepared queries answer what their SQL with the values written in answers: through many
//! values (some bound to a generic plan, some not taken over by the scan), with `now()`, after
//! a table gains a column, and after it is dropped and made again.

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use ebb_query::front::{FrontDoor, PreparedQuery, Principal, Protocol, Session, Target};
use ebb_query::lp::Precision;
use ebb_query::{Database, QueryError, SqlSession};
use ebb_storage::Options;

use crate::common::numbers;

const SEC: i64 = 1_000_000_000;
const BY_MINUTE: &str = "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS bucket, \
                         max(usage) AS max_usage, count(*) AS n FROM cpu \
                         WHERE host = $1 AND time >= $2 AND time < $3 \
                         GROUP BY bucket ORDER BY bucket";

fn open() -> (tempfile::TempDir, Arc<Database>, Session) {
    let dir = tempfile::tempdir().expect("dir");
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("open"));
    let door = FrontDoor::new(Target::local(db.clone())).expect("door");
    let session = door.open(Principal::trusted(Protocol::Postgres, None), "m");
    (dir, db, session)
}

/// Four hosts, a point every 30 s for an hour from t = 1000 s.
fn load(db: &Database) {
    let mut body = String::new();
    for k in 0..120i64 {
        for h in 0..4i64 {
            let usage = (k * 7 + h * 13) % 100;
            body.push_str(&format!("cpu,host=h{h} usage={usage}.25 {}\n", (1_000 + 30 * k) * SEC));
        }
    }
    db.write_lines("m", &body, Precision::Nanoseconds, 0).expect("write");
}

async fn text_of(out: ebb_query::QueryOutput) -> String {
    let batches = datafusion::physical_plan::common::collect(out.stream).await.expect("rows");
    pretty_format_batches(&batches).expect("format").to_string()
}

async fn prepared(s: &Session, q: &Arc<PreparedQuery>, values: Vec<ScalarValue>) -> String {
    let out = s.execute_prepared(q, values).await.expect("run").expect("planned ahead");
    text_of(out).await
}

/// The error a run fails with.
async fn refused(s: &Session, q: &Arc<PreparedQuery>, values: Vec<ScalarValue>) -> QueryError {
    match s.execute_prepared(q, values).await {
        Ok(_) => panic!("{} ran", q.sql()),
        Err(e) => e,
    }
}

async fn sql(s: &Session, sql: &str) -> String {
    text_of(s.execute(sql).await.expect(sql)).await
}

fn literal(v: &ScalarValue) -> String {
    match v {
        ScalarValue::Utf8(Some(s)) => format!("'{s}'"),
        ScalarValue::TimestampNanosecond(Some(n), None) => format!("to_timestamp_nanos({n})"),
        ScalarValue::Null | ScalarValue::Utf8(None) => "NULL".into(),
        other => panic!("no literal for {other:?}"),
    }
}

/// `text` with `$n` replaced by the literal of `values[n - 1]`, highest first.
fn written_in(text: &str, values: &[ScalarValue]) -> String {
    let mut out = text.to_string();
    for (i, v) in values.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), &literal(v));
    }
    out
}

#[tokio::test]
async fn runs_answer_what_the_sql_with_the_values_written_in_answers() {
    let (_dir, db, s) = open();
    load(&db);
    let q = Arc::new(PreparedQuery::new(BY_MINUTE));
    let mut next = numbers(0x2545_f491_4f6c_dd1du64);
    let mut rows_seen = 0;
    for run in 0..40 {
        let host = ScalarValue::Utf8(Some(format!("h{}", next(5))));
        let a = (900 + next(3_900)) * SEC + next(SEC);
        let b = a + (next(1_200) - 100) * SEC;
        let values = vec![
            host,
            ScalarValue::TimestampNanosecond(Some(a), None),
            ScalarValue::TimestampNanosecond(Some(b), None),
        ];
        let want = sql(&s, &written_in(BY_MINUTE, &values)).await;
        let got = prepared(&s, &q, values.clone()).await;
        assert_eq!(got, want, "run {run} with {values:?}");
        rows_seen += want.lines().count().saturating_sub(4);
        if run == 0 {
            assert!(q.generic(), "the first run verifies the generic plan");
        }
    }
    assert!(rows_seen > 100, "the runs found rows ({rows_seen})");
    assert!(q.generic(), "runs bind the generic plan");

    // Values the scan does not take over (a null time) are optimized on their own, and
    // answer what the SQL answers.
    let values = vec![
        ScalarValue::Utf8(Some("h1".into())),
        ScalarValue::Null,
        ScalarValue::TimestampNanosecond(Some(5_000 * SEC), None),
    ];
    assert_eq!(
        prepared(&s, &q, values.clone()).await,
        sql(&s, &written_in(BY_MINUTE, &values)).await
    );
    let values = vec![
        ScalarValue::Utf8(None),
        ScalarValue::TimestampNanosecond(Some(0), None),
        ScalarValue::TimestampNanosecond(Some(5_000 * SEC), None),
    ];
    assert_eq!(
        prepared(&s, &q, values.clone()).await,
        sql(&s, &written_in(BY_MINUTE, &values)).await
    );
    assert!(q.generic(), "values not taken over leave the generic plan for the next run");

    // Strings stand for timestamps as SQL casts them.
    let values = vec![
        ScalarValue::Utf8(Some("h2".into())),
        ScalarValue::Utf8(Some("1970-01-01T00:20:00".into())),
        ScalarValue::Utf8(Some("1970-01-01T00:40:00".into())),
    ];
    let want = sql(
        &s,
        &written_in(
            BY_MINUTE,
            &[
                values[0].clone(),
                ScalarValue::TimestampNanosecond(Some(1_200 * SEC), None),
                ScalarValue::TimestampNanosecond(Some(2_400 * SEC), None),
            ],
        ),
    )
    .await;
    assert_eq!(prepared(&s, &q, values).await, want);
}

#[tokio::test]
async fn bad_values_are_refused_and_other_statements_run_as_sql() {
    let (_dir, db, s) = open();
    load(&db);
    let q = Arc::new(PreparedQuery::new(BY_MINUTE));
    let two = vec![ScalarValue::Utf8(Some("h1".into())), ScalarValue::Utf8(Some("x".into()))];
    let err = refused(&s, &q, two).await;
    assert!(matches!(err, QueryError::Invalid(_)), "{err}");
    let bad = vec![
        ScalarValue::Utf8(Some("h1".into())),
        ScalarValue::Utf8(Some("not a time".into())),
        ScalarValue::TimestampNanosecond(Some(0), None),
    ];
    let err = refused(&s, &q, bad).await;
    assert!(err.to_string().contains("$2"), "{err}");

    let delete = Arc::new(PreparedQuery::new("DELETE FROM cpu WHERE time < $1"));
    let values = vec![ScalarValue::TimestampNanosecond(Some(0), None)];
    assert!(s.execute_prepared(&delete, values).await.expect("run").is_none());
    let system = Arc::new(PreparedQuery::new("SELECT count(*) FROM system.tables WHERE name = $1"));
    let values = vec![ScalarValue::Utf8(Some("cpu".into()))];
    assert!(s.execute_prepared(&system, values).await.expect("run").is_none());
}

#[tokio::test]
async fn now_is_read_at_each_run() {
    let (_dir, db, s) = open();
    load(&db);
    let q = Arc::new(PreparedQuery::new(
        "SELECT count(*) AS n FROM cpu WHERE host = $1 AND time < now()",
    ));
    let h1 = || vec![ScalarValue::Utf8(Some("h1".into()))];
    assert!(prepared(&s, &q, h1()).await.contains("| 120 |"));
    assert!(!q.generic(), "now() is folded per run: no generic plan");
    let now = ebb_query::now_ns();
    let line = format!("cpu,host=h1 usage=1 {}\n", now + 300 * SEC);
    db.write_lines("m", &line, Precision::Nanoseconds, 0).expect("write");
    assert!(prepared(&s, &q, h1()).await.contains("| 120 |"), "a point in the future");
}

#[tokio::test]
async fn a_table_that_changes_is_planned_again() {
    let (_dir, db, s) = open();
    load(&db);
    let values = || {
        vec![
            ScalarValue::Utf8(Some("h3".into())),
            ScalarValue::TimestampNanosecond(Some(1_000 * SEC), None),
        ]
    };
    let star = Arc::new(PreparedQuery::new("SELECT * FROM cpu WHERE host = $1 AND time = $2"));
    let named = Arc::new(PreparedQuery::new("SELECT usage FROM cpu WHERE host = $1 AND time = $2"));
    assert!(!prepared(&s, &star, values()).await.contains("idle"));
    assert!(prepared(&s, &named, values()).await.contains(" 39.25 "));
    db.write_lines("m", "cpu,host=h3 usage=5,idle=95 1000000000000\n", Precision::Nanoseconds, 0)
        .expect("write");
    // The named column reads the new value; `*` would answer with another column, which a
    // client holding the first answer's columns cannot take.
    assert!(prepared(&s, &named, values()).await.contains(" 5.0 "));
    for _ in 0..2 {
        let err = refused(&s, &star, values()).await;
        assert!(err.to_string().contains("must not change result type"), "{err}");
    }
    let again = Arc::new(PreparedQuery::new(star.sql()));
    let fresh = prepared(&s, &again, values()).await;
    assert!(fresh.contains("idle") && fresh.contains("| 95.0 |"), "{fresh}");

    s.execute("DROP TABLE cpu").await.expect("drop");
    let err = refused(&s, &named, values()).await;
    assert!(err.to_string().contains("cpu"), "{err}");
    db.write_lines("m", "cpu,host=h3 usage=7 1000000000000\n", Precision::Nanoseconds, 0)
        .expect("write");
    assert!(prepared(&s, &named, values()).await.contains(" 7.0 "));
}

/// `1970-01-01T..Z` of `nanos` (under a day).
fn rfc3339(nanos: i64) -> String {
    let (secs, frac) = (nanos / SEC, nanos % SEC);
    format!("1970-01-01T{:02}:{:02}:{:02}.{frac:09}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[tokio::test]
async fn queries_sent_as_sql_share_plans_and_answer_as_before() {
    let (_dir, db, s) = open();
    load(&db);
    let plain = SqlSession::new(db.clone(), "m");
    let old_way = |sql: String| {
        let plain = &plain;
        async move {
            match plain.query(&sql).await {
                Ok(b) => Ok(pretty_format_batches(&b).expect("format").to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    let mut next = numbers(0x9e37_79b9_7f4a_7c15u64);
    for run in 0..30 {
        let a = (900 + next(3_900)) * SEC + next(SEC);
        let b = a + (next(1_200) - 100) * SEC;
        let sql = format!(
            "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS bucket, \
             max(usage) AS m, count(*) AS n FROM cpu WHERE host IN ('h{}', 'h{}') \
             AND time >= '{}' AND time < '{}' AND usage > {}.5 GROUP BY bucket ORDER BY bucket",
            next(5),
            next(5),
            rfc3339(a),
            rfc3339(b),
            next(60),
        );
        let got = text_of(s.execute(&sql).await.expect(&sql)).await;
        assert_eq!(Ok(got), old_way(sql.clone()).await, "run {run}: {sql}");
    }
    assert_eq!(s.cached_plans(), 1, "the runs share one plan");

    // A table that gains a column: the same text answers with it (no client holds columns).
    let star = "SELECT * FROM cpu WHERE host = 'h2' AND time = '1970-01-01T00:16:40Z'";
    assert!(!sql_text(&s, star).await.contains("idle"));
    let line = format!("cpu,host=h2 idle=3 {}\n", 1_000 * SEC);
    db.write_lines("m", &line, Precision::Nanoseconds, 0).expect("write");
    for _ in 0..2 {
        let now = sql_text(&s, star).await;
        assert_eq!(Ok(now.clone()), old_way(star.to_string()).await);
        assert!(now.contains("idle"), "{now}");
    }
    assert_eq!(s.cached_plans(), 2);

    // Literals that do not fit, and other mistakes, fail as they did.
    for bad in [
        "SELECT count(*) FROM cpu WHERE host = 'h1' AND time >= 'not a time'",
        "SELECT nosuch FROM cpu WHERE host = 'h1'",
        "SELECT * FROM nowhere WHERE host = 'h1'",
    ] {
        let err = s.execute(bad).await.err().map(|e| e.to_string());
        assert_eq!(err, old_way(bad.to_string()).await.err(), "{bad}");
        assert!(err.is_some(), "{bad}");
    }
}

#[tokio::test]
async fn values_keep_their_meaning() {
    let (_dir, db, s) = open();
    let body: String = (1..=3).map(|n| format!("jobs,q=a n={n}i {}\n", n * SEC)).collect();
    db.write_lines("m", &body, Precision::Nanoseconds, 0).expect("write");
    let plain = SqlSession::new(db.clone(), "m");
    // A fraction compared with an integer column is compared as a fraction.
    let q = Arc::new(PreparedQuery::new("SELECT count(*) AS c FROM jobs WHERE n < $1"));
    // (It runs as SQL with 2.5 written in, which the caller does.)
    let fraction = vec![ScalarValue::Float64(Some(2.5))];
    assert!(s.execute_prepared(&q, fraction).await.expect("run").is_none());
    assert!(prepared(&s, &q, vec![ScalarValue::Int64(Some(2))]).await.contains("| 1 |"));
    for sql in [
        "SELECT count(*) AS c FROM jobs WHERE n < 2.5",
        "SELECT count(*) AS c FROM jobs WHERE n = 2.5",
        "SELECT count(*) AS c FROM jobs WHERE n IN (1, 2.5)",
        "SELECT count(*) AS c FROM jobs WHERE n BETWEEN 1.5 AND 3",
    ] {
        let want = pretty_format_batches(&plain.query(sql).await.expect(sql)).expect("format");
        assert_eq!(sql_text(&s, sql).await, want.to_string(), "{sql}");
    }
    // A placeholder sent without a value is an error, never a filter left out.
    let err = s.execute("SELECT * FROM jobs WHERE q = $1").await.err().expect("no value");
    assert!(err.to_string().contains("$1"), "{err}");
}

async fn sql_text(s: &Session, sql: &str) -> String {
    text_of(s.execute(sql).await.expect(sql)).await
}
