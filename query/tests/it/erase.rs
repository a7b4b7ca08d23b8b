//! `ERASE` on one database: every series with the tag value goes, in every table, from reads
//! and from the series index (also after a restart); other users keep their rows; later
//! writes start new series; deadlines longer than the configured one are refused; the
//! request shows in `system.deletions` and is persisted once compaction removes the data.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use ebb_query::lp::Precision;
use ebb_query::{Database, SqlSession};
use ebb_storage::Options;

const BASE: i64 = 1_700_000_000_000_000_000;

fn open(dir: &std::path::Path) -> Arc<Database> {
    let opts = Options { delete_deadline: Some(Duration::from_secs(3600)), ..Options::default() };
    Arc::new(Database::open(dir, opts).expect("open"))
}

fn body() -> String {
    let mut s = String::new();
    for (u, user) in ["alice", "bob", "carol"].iter().enumerate() {
        for d in 0..3 {
            for p in 0..50 {
                let t = BASE + p * 1_000_000_000;
                s.push_str(&format!(
                    "temp,user={user},device=d{d} c={}.5,note=\"{user}-marker-{p}\" {t}\n",
                    u * 10 + p as usize
                ));
            }
        }
        s.push_str(&format!("login,user={user} ok=true {BASE}\n"));
    }
    s.push_str(&format!("other,host=h1 v=1i {BASE}\n"));
    s
}

async fn rows(s: &SqlSession, sql: &str) -> Vec<RecordBatch> {
    s.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn count(s: &SqlSession, sql: &str) -> u64 {
    let b = rows(s, sql).await;
    b.iter().map(|b| b.num_rows() as u64).sum()
}

fn u64_at(b: &[RecordBatch], col: &str) -> u64 {
    let c = b[0].column_by_name(col).unwrap_or_else(|| panic!("no column {col}"));
    c.as_primitive::<UInt64Type>().value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_removes_a_users_series_everywhere_and_is_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    db.write_lines("public", &body(), Precision::Nanoseconds, BASE).expect("write");
    let s = SqlSession::new(db.clone(), "public");
    assert_eq!(count(&s, "SELECT * FROM temp WHERE user = 'alice'").await, 150);

    // Refused: a deadline beyond the configured one, a missing database, bad syntax.
    for (sql, why) in [
        ("ERASE WHERE user = 'alice' DEADLINE '2h'", "longer than the configured"),
        ("ERASE WHERE user = 'alice' IN DATABASE nosuch", "does not exist"),
        ("ERASE user = 'alice'", "ERASE syntax"),
    ] {
        let e = s.query(sql).await.err().unwrap_or_else(|| panic!("{sql} accepted"));
        assert!(e.to_string().contains(why), "{sql}: {e}");
        assert!(e.is_client_error(), "{sql}: {e}");
    }

    let out = rows(&s, "ERASE WHERE user = 'alice' DEADLINE '10m'").await;
    assert_eq!(u64_at(&out, "rows_erased"), 151);
    assert_eq!((u64_at(&out, "series"), u64_at(&out, "tables")), (4, 2));
    let id = u64_at(&out, "erasure_id");
    // Gone from reads and from the series index; others untouched.
    assert_eq!(count(&s, "SELECT * FROM temp WHERE user = 'alice'").await, 0);
    assert_eq!(count(&s, "SELECT * FROM login WHERE user = 'alice'").await, 0);
    assert_eq!(count(&s, "SELECT * FROM temp").await, 300);
    assert_eq!(count(&s, "SELECT * FROM other").await, 1);
    let series = |t: &'static str| {
        let s = &s;
        async move {
            let b = rows(s, &format!("SELECT series FROM system.tables WHERE name = '{t}'")).await;
            u64_at(&b, "series")
        }
    };
    assert_eq!(series("temp").await, 6);
    assert_eq!(series("login").await, 2);
    // The request, with its deadline.
    let q = format!("SELECT kind, target, rows, deadline - issued_at AS d, status FROM system.deletions WHERE id = {id}");
    let b = rows(&s, &q).await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let target = b[0].column_by_name("target").unwrap().as_string::<i32>().value(0).to_string();
    assert_eq!(target, "ERASE WHERE user = 'alice' IN DATABASE public DEADLINE '10m'");
    assert_eq!(u64_at(&b, "rows"), 151);
    let status = b[0].column_by_name("status").unwrap().as_string::<i32>().value(0).to_string();
    assert_eq!(status, "pending");

    // A later write for alice starts a new series.
    let w = db
        .write_lines(
            "public",
            "temp,user=alice,device=d0 c=1.0 1700000100000000000\n",
            Precision::Nanoseconds,
            BASE,
        )
        .expect("write");
    assert_eq!(w.series_created, 1);
    assert_eq!(count(&s, "SELECT * FROM temp WHERE user = 'alice'").await, 1);

    // Compacted: the request is persisted (the engine has no log of another's to wait for).
    db.engine().compact_range(None, None).expect("compact");
    db.engine().wait_for_background().expect("background");
    let q = format!(
        "SELECT status, persisted_at IS NOT NULL AS p FROM system.deletions WHERE id = {id}"
    );
    let b = rows(&s, &q).await;
    let status = b[0].column(0).as_string::<i32>().value(0).to_string();
    assert_eq!(status, "persisted");
    let ids: Vec<u64> =
        db.engine().delete_requests().into_iter().find(|r| r.request.id == id).unwrap().delete_ids;
    let c = db.engine().coverage(&ids).unwrap();
    let scans = db.engine().audit(&c).unwrap();
    assert_eq!(scans.iter().map(|s| s.found).sum::<u64>(), 0, "{scans:?}");

    // After a restart the erased series stay out of the index.
    drop(s);
    db.flush().expect("flush");
    drop(db);
    let db = open(dir.path());
    let s = SqlSession::new(db.clone(), "public");
    assert_eq!(count(&s, "SELECT * FROM temp WHERE user = 'alice'").await, 1);
    let b = rows(&s, "SELECT series FROM system.tables WHERE name = 'temp'").await;
    assert_eq!(u64_at(&b, "series"), 7);
    assert!(!b[0].column(0).is_null(0));
}
