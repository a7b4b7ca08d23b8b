//! Aggregates computed in the scan (partial aggregates, page summaries) answer what DataFusion's
//! row-by-row aggregation answers: rows in memtables and in files, overwritten, deleted by time
//! window and by tag, grouped by tags and `date_bin` buckets of several widths, or not grouped.
//!
//! Each query is compared with the same query whose `max` reads an expression (`x + 0`), which
//! the scan does not aggregate, so DataFusion aggregates every row. Float values are multiples
//! of 0.25, so every sum is exact whatever the order of addition.

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use ebb_query::front::{FrontDoor, Principal, Protocol, Session, Target};
use ebb_query::lp::Precision;
use ebb_query::Database;
use ebb_storage::Options;

use crate::common::numbers;

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_000_000;
const HOSTS: i64 = 6;
/// Two hours at one point per 10 s.
const POINTS: i64 = 720;

fn open() -> (tempfile::TempDir, Arc<Database>, Session) {
    let dir = tempfile::tempdir().expect("dir");
    // Small pages, so a host's hour spans many.
    let opts = Options { page_size: 512, ..Options::default() };
    let db = Arc::new(Database::open(dir.path(), opts).expect("open"));
    let door = FrontDoor::new(Target::local(db.clone())).expect("door");
    let session = door.open(Principal::trusted(Protocol::Postgres, None), "m");
    (dir, db, session)
}

/// Lines for every host at points `points` (some fields missing now and then).
fn lines(points: std::ops::Range<i64>, next: &mut impl FnMut(i64) -> i64) -> String {
    let mut body = String::new();
    for k in points {
        for h in 0..HOSTS {
            let t = (T0 + 10 * k) * SEC + next(SEC);
            let mut fields = vec![format!("f={}", (next(8_000) - 4_000) as f64 * 0.25)];
            if next(10) > 0 {
                fields.push(format!("i={}i", next(2_000) - 1_000));
            }
            if next(10) > 1 {
                fields.push(format!("u={}u", next(5_000)));
            }
            if next(3) == 0 {
                fields.push(format!("ok={}", next(2) == 0));
            }
            body.push_str(&format!("m,host=h{h},dc=d{} {} {t}\n", h % 2, fields.join(",")));
        }
    }
    body
}

async fn text(s: &Session, sql: &str) -> String {
    let out = s.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let batches = datafusion::physical_plan::common::collect(out.stream).await.expect("rows");
    pretty_format_batches(&batches).expect("format").to_string()
}

/// The first number in a text table (a one-row answer's first column).
fn first_number(t: &str) -> u64 {
    let row = t.lines().filter(|l| l.starts_with('|')).nth(1).expect("a row");
    row.split('|').nth(1).expect("a cell").trim().parse().expect("a number")
}

/// The number in column `name` of the first row of table `t`.
fn number_in(t: &str, name: &str) -> u64 {
    let mut rows = t.lines().filter(|l| l.starts_with('|'));
    let header: Vec<&str> = rows.next().expect("a header").split('|').map(str::trim).collect();
    let at = header.iter().position(|h| *h == name).expect("the column");
    let row = rows.next().expect("a row");
    row.split('|').nth(at).expect("a cell").trim().parse().expect("a number")
}

fn ts(secs: i64) -> String {
    format!("to_timestamp({secs})")
}

/// Queries with `MAX` standing for the aggregate the reference reads through an expression.
fn queries(next: &mut impl FnMut(i64) -> i64) -> Vec<String> {
    let a = T0 - 300 + next(POINTS * 10);
    let b = a + 60 + next(4_000);
    let end = T0 + next(POINTS * 10 + 600);
    let bucket = ["1 minute", "7 minutes", "1 hour", "90 seconds"][next(4) as usize];
    let hosts = format!("'h{}', 'h{}'", next(HOSTS), next(HOSTS));
    vec![
        format!(
            "SELECT date_bin(interval '{bucket}', time, to_timestamp(0)) AS b, host, min(f), \
             MAX(f), sum(f), count(f), avg(f), count(*) FROM m WHERE time >= {} AND time < {} \
             GROUP BY b, host ORDER BY b, host",
            ts(a),
            ts(b)
        ),
        format!(
            "SELECT host, min(i), MAX(i), sum(i), count(i), max(u), sum(u), min(u) FROM m \
             WHERE host IN ({hosts}) GROUP BY host ORDER BY host"
        ),
        format!(
            "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS minute, MAX(f) \
             FROM m WHERE time < {} GROUP BY minute ORDER BY minute DESC LIMIT 5",
            ts(end)
        ),
        format!(
            "SELECT count(*), sum(f), MAX(u), count(ok) FROM m WHERE time >= {} AND time < {}",
            ts(a),
            ts(b)
        ),
        "SELECT dc, date_bin(interval '15 minutes', time, to_timestamp(300)) AS b, avg(f), \
         MAX(i), count(ok) FROM m GROUP BY dc, b ORDER BY dc, b"
            .to_string(),
        // The newest buckets only: across the deleted window's gap, without a time bound,
        // before any data.
        format!(
            "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS minute, host, \
             MAX(f), count(*) FROM m WHERE time < {} GROUP BY minute, host \
             ORDER BY minute DESC, host LIMIT {}",
            ts(T0 + 2_500 + next(60)),
            1 + next(40)
        ),
        format!(
            "SELECT date_bin(interval '5 minutes', time) AS b, MAX(i) FROM m GROUP BY b \
             ORDER BY b DESC LIMIT {}",
            1 + next(4)
        ),
        format!(
            "SELECT date_bin(interval '1 minute', time) AS b, MAX(u) FROM m WHERE time < {} \
             GROUP BY b ORDER BY b DESC LIMIT 5",
            ts(T0 - 100)
        ),
        // The earliest and latest time, per host and per bucket.
        "SELECT host, MAXT(time) AS last, MINT(time) AS first, count(*) FROM m GROUP BY host \
         ORDER BY host"
            .to_string(),
        format!(
            "SELECT date_bin(interval '{bucket}', time, to_timestamp(0)) AS b, MAXT(time) AS last, \
             MINT(time) AS first, MAX(f) FROM m WHERE time >= {} AND time < {} GROUP BY b \
             ORDER BY b",
            ts(a),
            ts(b)
        ),
    ]
}

/// Runs every query scan-aggregated and row-aggregated; returns how many were planned as
/// scan aggregates, and how many of those as scans of the newest buckets.
async fn compare(s: &Session, next: &mut impl FnMut(i64) -> i64, rounds: usize) -> (usize, usize) {
    let (mut pushed, mut newest) = (0, 0);
    for _ in 0..rounds {
        for q in queries(next) {
            let fast = q
                .replace("MAX(f)", "max(f)")
                .replace("MAX(i)", "max(i)")
                .replace("MAX(u)", "max(u)")
                .replace("MAXT(time)", "max(time)")
                .replace("MINT(time)", "min(time)");
            // A bin of one nanosecond is the time itself, as an expression.
            let same_time = "date_bin(interval '1 nanosecond', time, to_timestamp(0))";
            let slow = q
                .replace("MAX(f)", "max(f + 0.0)")
                .replace("MAX(i)", "max(i + 0)")
                .replace("MAX(u)", "max(u + 0)")
                .replace("MAXT(time)", &format!("max({same_time})"))
                .replace("MINT(time)", &format!("min({same_time})"));
            let plan = text(s, &format!("EXPLAIN {fast}")).await;
            if plan.contains("EbbPartialAggregate") {
                pushed += 1;
            }
            if plan.contains("newest_buckets") {
                newest += 1;
            }
            assert!(!text(s, &format!("EXPLAIN {slow}")).await.contains("EbbPartialAggregate"));
            let (got, want) = (text(s, &fast).await, text(s, &slow).await);
            // Column names differ only in the one aggregate (and so column widths).
            let cells = |t: &str| -> Vec<String> {
                let t = t
                    .replace("max(f + 0.0)", "max(m.f)")
                    .replace("max(i + 0)", "max(m.i)")
                    .replace("max(u + 0)", "max(m.u)");
                t.lines()
                    .filter(|l| !l.starts_with('+'))
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect()
            };
            assert_eq!(cells(&got), cells(&want), "{fast}");
        }
    }
    (pushed, newest)
}

#[tokio::test]
async fn scan_aggregates_answer_what_row_aggregates_answer() {
    let (_dir, db, s) = open();
    let mut next = numbers(0x9e37_79b9_7f4a_7c15);
    db.write_lines("m", &lines(0..POINTS, &mut next), Precision::Nanoseconds, 0).expect("write");
    // In the memtable.
    assert_eq!(compare(&s, &mut next, 2).await, (20, 8), "every query is aggregated in the scan");
    // Runs answered from the summaries the memtable kept as their rows arrived.
    assert!(db.engine().stats().summarized_runs > 20, "memtable runs answered from summaries");
    // In files, compacted: pages answered from summaries.
    db.flush().expect("flush");
    db.engine().compact_range(None, None).expect("compact");
    let before = db.engine().stats().summarized_pages;
    compare(&s, &mut next, 3).await;
    assert!(db.engine().stats().summarized_pages > before + 50, "pages answered from summaries");
    // Some rows overwritten (same times, new values), in the memtable over the files.
    let mut again = numbers(0x9e37_79b9_7f4a_7c15);
    let mut body = lines(0..POINTS, &mut again);
    body = body
        .lines()
        .filter(|_| next(4) == 0)
        .map(|l| {
            let (series, rest) = l.split_once(' ').expect("line");
            let (fields, time) = rest.split_once(' ').expect("line");
            let others = fields.split_once(',').map_or("", |(_, o)| o);
            let sep = if others.is_empty() { "" } else { "," };
            format!("{series} f=0.75{sep}{others} {time}\n")
        })
        .collect();
    db.write_lines("m", &body, Precision::Nanoseconds, 0).expect("overwrite");
    compare(&s, &mut next, 3).await;
    // Deleted by time window and by tag, before and after compaction; a delete counts the
    // rows it deletes, pages answered from summaries included.
    db.flush().expect("flush");
    db.engine().compact_range(None, None).expect("compact");
    let window = format!("time >= {} AND time < {}", ts(T0 + 1_000), ts(T0 + 2_500));
    for target in [window.as_str(), "host = 'h3'"] {
        let want = first_number(&text(&s, &format!("SELECT count(*) FROM m WHERE {target}")).await);
        let before = db.engine().stats().summarized_pages;
        let got =
            number_in(&text(&s, &format!("DELETE FROM m WHERE {target}")).await, "rows_deleted");
        assert_eq!(got, want, "{target}");
        assert!(db.engine().stats().summarized_pages > before, "{target}: pages counted unread");
    }
    compare(&s, &mut next, 3).await;
    db.flush().expect("flush");
    db.engine().compact_range(None, None).expect("compact");
    let before = db.engine().stats().summarized_pages;
    compare(&s, &mut next, 3).await;
    assert!(db.engine().stats().summarized_pages > before, "summaries after the deletes");
}
