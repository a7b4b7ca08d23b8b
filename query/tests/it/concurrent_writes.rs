//! Writes planned in parallel outside the writer lock: concurrent requests that create the same
//! tables, series and columns, and write the same points, leave one catalog entry per name and
//! every point with every field any request gave it; the same holds after a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, Float64Array, StringArray};
use ebb_query::lp::Precision;
use ebb_query::{Database, SqlSession};
use ebb_storage::Options;

const BASE: i64 = 1_700_000_000_000_000_000;
const SEC: i64 = 1_000_000_000;
const WRITERS: usize = 4;
const REQUESTS: usize = 40;

/// Request `r` of writer `w`: points of hosts and times shared by every writer, in tables
/// `t0`..`t2` (created by whichever request comes first), each writer setting its own field
/// `f{w}` plus the shared field `v` (only which fields a point has is checked).
fn request(w: usize, r: usize) -> (String, Vec<(String, String, i64)>) {
    let mut body = String::new();
    let mut points = Vec::new();
    for k in 0..12 {
        let table = format!("t{}", (r + k) % 3);
        let host = format!("h{}", (r * 7 + k * 3) % 23);
        let t = BASE + ((r + k) % 17) as i64 * SEC;
        body.push_str(&format!("{table},host={host} f{w}={}.5,v={} {t}\n", r, k % 5));
        points.push((table, host, t));
    }
    (body, points)
}

async fn snapshot(db: &Arc<Database>) -> BTreeMap<(String, String, i64), BTreeSet<String>> {
    let s = SqlSession::new(db.clone(), "bench");
    let mut out = BTreeMap::new();
    for table in ["t0", "t1", "t2"] {
        let batches =
            s.query(&format!("SELECT * FROM {table} ORDER BY host, time")).await.expect("query");
        for b in batches {
            let schema = b.schema();
            let host_col = schema.index_of("host").expect("host column");
            let hosts = b.column(host_col).as_any().downcast_ref::<StringArray>().expect("host");
            let times = b
                .column(schema.index_of("time").expect("time"))
                .as_any()
                .downcast_ref::<datafusion::arrow::array::TimestampNanosecondArray>()
                .expect("time")
                .clone();
            for row in 0..b.num_rows() {
                let mut fields = BTreeSet::new();
                for (i, f) in schema.fields().iter().enumerate() {
                    if f.name().starts_with('f') || f.name() == "v" {
                        let col = b.column(i).as_any().downcast_ref::<Float64Array>().expect("f");
                        if col.is_valid(row) {
                            fields.insert(f.name().clone());
                        }
                    }
                }
                let key = (table.to_string(), hosts.value(row).to_string(), times.value(row));
                assert!(out.insert(key, fields).is_none(), "a point appears twice");
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_create_each_name_once_and_keep_every_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("open"));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for r in 0..REQUESTS {
                    let (body, _) = request(w, r);
                    db.write_lines("bench", &body, Precision::Nanoseconds, 0).expect("write");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    // The oracle: every point with the union of the fields written to it.
    let mut want: BTreeMap<(String, String, i64), BTreeSet<String>> = BTreeMap::new();
    for w in 0..WRITERS {
        for r in 0..REQUESTS {
            for p in request(w, r).1 {
                let f = want.entry(p).or_default();
                f.insert(format!("f{w}"));
                f.insert("v".into());
            }
        }
    }
    let got = snapshot(&db).await;
    assert_eq!(got, want);
    // One series per host per table, one table per name.
    let tables = db.catalog().tables();
    assert_eq!(tables.len(), 3);
    for def in &tables {
        let hosts: BTreeSet<&String> =
            want.keys().filter(|(t, _, _)| *t == def.name).map(|(_, h, _)| h).collect();
        assert_eq!(db.catalog().with_series(def.id, |idx| idx.len()), hosts.len(), "{}", def.name);
        let fields: BTreeSet<&str> = def.fields.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields.len(), def.fields.len(), "a column appears twice in {}", def.name);
    }
    drop(db);
    let db = Arc::new(Database::open(dir.path(), Options::default()).expect("reopen"));
    assert_eq!(snapshot(&db).await, want);
}
