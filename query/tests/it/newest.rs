//! `SELECT DISTINCT ON (tags) ... ORDER BY tags, time DESC` reads each series' newest row only,
//! and answers what reading every row answers: with rows written out of order, the newest rows
//! of some series deleted, groups of several series, and after a restart (when the newest time
//! of a series is not known).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Float64Array, StringArray, TimestampNanosecondArray};
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::LogicalPlan;
use ebb_query::lp::Precision;
use ebb_query::sql::ShardTable;
use ebb_query::{Database, SqlSession};
use ebb_storage::Options;

const SEC: i64 = 1_000_000_000;
const NEWEST: &str = "SELECT DISTINCT ON (region) region, host, time, v FROM cpu \
                      ORDER BY region, time DESC";

/// `(region, host, time, v)` rows of `sql`'s answer.
async fn rows(db: &Arc<Database>, sql: &str) -> Vec<(String, String, i64, f64)> {
    let s = SqlSession::new(db.clone(), "m");
    let mut out = Vec::new();
    for b in s.query(sql).await.expect("query") {
        let col = |i: usize| b.column(i).clone();
        let (r, h) = (col(0), col(1));
        let r = r.as_any().downcast_ref::<StringArray>().expect("region");
        let h = h.as_any().downcast_ref::<StringArray>().expect("host");
        let t = col(2);
        let t = t.as_any().downcast_ref::<TimestampNanosecondArray>().expect("time");
        let v = col(3);
        let v = v.as_any().downcast_ref::<Float64Array>().expect("v");
        for i in 0..b.num_rows() {
            out.push((r.value(i).into(), h.value(i).into(), t.value(i), v.value(i)));
        }
    }
    out
}

/// True if the optimized plan of `sql` scans `cpu` for each series' newest row only.
async fn reads_newest_only(db: &Arc<Database>, sql: &str) -> bool {
    let s = SqlSession::new(db.clone(), "m");
    let state = s.context().state();
    let plan = state.create_logical_plan(sql).await.expect("plan");
    let plan = state.optimize(&plan).expect("optimize");
    let mut found = false;
    plan.apply(|p| {
        if let LogicalPlan::TableScan(scan) = p {
            let provider = source_as_provider(&scan.source).expect("provider");
            if let Some(t) = provider.downcast_ref::<ShardTable>() {
                found |= t.newest_only();
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })
    .expect("walk");
    found
}

/// The newest row per region, from every row.
fn oracle(all: &[(String, String, i64, f64)]) -> BTreeMap<String, (i64, f64)> {
    let mut out: BTreeMap<String, (i64, f64)> = BTreeMap::new();
    for (r, _, t, v) in all {
        let e = out.entry(r.clone()).or_insert((*t, *v));
        if *t > e.0 {
            *e = (*t, *v);
        }
    }
    out
}

fn by_region(rows: &[(String, String, i64, f64)]) -> BTreeMap<String, (i64, f64)> {
    rows.iter().map(|(r, _, t, v)| (r.clone(), (*t, *v))).collect()
}

#[tokio::test]
async fn distinct_on_tags_by_newest_time_reads_each_series_newest_row() {
    let dir = tempfile::tempdir().expect("dir");
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("open"));
    let mut body = String::new();
    // Two regions of three hosts; times written in scrambled order, one write per request so
    // later requests land behind earlier ones.
    for k in 0..60i64 {
        let (h, t) = (k % 6, (k * 37) % 60);
        let region = if h < 3 { "east" } else { "west" };
        body.push_str(&format!("cpu,region={region},host=h{h} v={k}.5 {}\n", 1_000 + t));
    }
    for line in body.lines() {
        db.write_lines("m", line, Precision::Seconds, 0).expect("write");
    }
    assert!(reads_newest_only(&db, NEWEST).await);
    // Not rewritten: filters, or an order that does not end with the newest time.
    assert!(!reads_newest_only(&db, &NEWEST.replace("FROM cpu", "FROM cpu WHERE v > 3")).await);
    assert!(!reads_newest_only(&db, &NEWEST.replace("time DESC", "time")).await);
    assert!(!reads_newest_only(&db, &NEWEST.replace("time DESC", "v DESC")).await);
    let by_field = NEWEST.replace("ON (region)", "ON (v)").replace("BY region,", "BY v,");
    assert!(!reads_newest_only(&db, &by_field).await);

    let all = "SELECT region, host, time, v FROM cpu";
    let check = |label: &'static str| {
        let db = db.clone();
        async move {
            let want = oracle(&rows(&db, all).await);
            let got = rows(&db, NEWEST).await;
            assert_eq!(got.len(), want.len(), "{label}: {got:?}");
            assert_eq!(by_region(&got), want, "{label}");
        }
    };
    check("written").await;

    // The newest rows of both regions deleted: older ones answer.
    let s = SqlSession::new(db.clone(), "m");
    let newest = rows(&db, NEWEST).await;
    for (_, h, t, _) in &newest {
        let at = |s: i64| format!("'1970-01-01T00:{:02}:{:02}Z'", s / 60, s % 60);
        let sql = format!(
            "DELETE FROM cpu WHERE host = '{h}' AND time >= {} AND time < {}",
            at(t / SEC),
            at(t / SEC + 1)
        );
        s.query(&sql).await.expect("delete");
    }
    check("after deleting the newest rows").await;
    assert_ne!(by_region(&rows(&db, NEWEST).await), by_region(&newest));

    // A restart forgets the newest times; a backfill then writes only older rows.
    drop(s);
    db.flush().expect("flush");
    drop(db);
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("reopen"));
    db.write_lines("m", "cpu,region=east,host=h0 v=-1 1001", Precision::Seconds, 0)
        .expect("backfill");
    let want = oracle(&rows(&db, "SELECT region, host, time, v FROM cpu").await);
    assert_eq!(by_region(&rows(&db, NEWEST).await), want, "after a restart and a backfill");
    // A second restart; the first read learns each series' newest time, the second uses it,
    // and a write and a delete in between are seen.
    db.flush().expect("flush");
    drop(db);
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("reopen"));
    let first = rows(&db, NEWEST).await;
    assert_eq!(by_region(&first), want, "read once after a restart");
    db.write_lines("m", "cpu,region=west,host=h5 v=5.25 3000", Precision::Seconds, 0)
        .expect("newer");
    let east = first.iter().find(|r| r.0 == "east").expect("east");
    let s = SqlSession::new(db.clone(), "m");
    s.query(&format!("DELETE FROM cpu WHERE host = '{}'", east.1)).await.expect("delete");
    let want = oracle(&rows(&db, "SELECT region, host, time, v FROM cpu").await);
    assert_eq!(want["west"], (3000 * SEC, 5.25));
    assert_eq!(by_region(&rows(&db, NEWEST).await), want, "read again");
}
