//! A line-protocol request split between shards is all or nothing when any shard would refuse
//! its part: the receiving node checks the request whole, and every shard checks its part,
//! before any shard writes.

#![allow(clippy::unwrap_used)]

use ebb_node::cluster::view::Settings;
use ebb_query::lp::Precision;

use crate::cluster::{sql, wait_settled};
use crate::cluster_harness::Harness;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_one_shard_would_refuse_writes_nothing_anywhere() {
    let mut h = Harness::new();
    h.settings = Settings { shards: 4, replication: 1 };
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    wait_settled(&h, 1).await;
    let p = Precision::Seconds;
    let router = h.nodes[&0].router.clone();
    // `v` is an integer on the one shard that holds h0.
    router.write_lines("db", "cpu,host=h0 v=1i 1\n", p, 0).await.unwrap();

    // Floats for 40 series: the shard holding h0 refuses its part, the others would take
    // theirs; nothing is written.
    let body: String = (0..40).map(|s| format!("cpu,host=h{s} v=2.5 2\n")).collect();
    let err = router.write_lines("db", &body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("integer"), "{err}");
    let n = sql(&h, 1, "SELECT count(*) AS n FROM cpu").await;
    assert!(n.contains("| 1 |"), "nothing of the refused request was written: {n}");

    // Lines that conflict with each other on different shards (a new table): refused whole.
    let body = "mem,host=h1 used=1 1\nmem,host=h2 used=1i 1\nmem,host=h3 used=1 1\n";
    let err = router.write_lines("db", body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    let body = "mem,host=h1 used=1 1\nmem,used=h2 free=1 1\n";
    let err = router.write_lines("db", body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");

    // A request every shard accepts is written whole, twice (the second time its shape is
    // known to pass).
    let body: String = (0..40).map(|s| format!("cpu,host=h{s} v=3i 3\n")).collect();
    for t in [3, 4] {
        let body = body.replace(" 3\n", &format!(" {t}\n"));
        let w = router.write_lines("db", &body, p, 0).await.unwrap();
        assert_eq!(w.rows, 40);
    }
    let n = sql(&h, 1, "SELECT count(*) AS n FROM cpu").await;
    assert!(n.contains("| 81 |"), "{n}");

    // A field one shard's write added after the shape was accepted: a new shape, checked again.
    router.write_lines("db", "cpu,host=h0 w=1i 5\n", p, 0).await.unwrap();
    let body: String = (0..40).map(|s| format!("cpu,host=h{s} v=6i,w=0.5 6\n")).collect();
    let err = router.write_lines("db", &body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("\"w\" of table \"cpu\" is integer"), "{err}");
    // A tag that is a field of the table, given in the last line only.
    let mut body: String = (0..39).map(|s| format!("cpu,host=h{s} w=7i 7\n")).collect();
    body.push_str("cpu,host=h39,v=x w=7i 7\n");
    let err = router.write_lines("db", &body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("line 40") && err.to_string().contains("not a tag"), "{err}");
    let n = sql(&h, 1, "SELECT count(*) AS n FROM cpu").await;
    assert!(n.contains("| 82 |"), "nothing of the refused requests was written: {n}");
    // A line only its own shard refuses (`time` as a field), after lines for other shards.
    let mut body: String = (0..39).map(|s| format!("disk,host=h{s} free=1i 8\n")).collect();
    body.push_str("disk,host=h39 time=1i 8\n");
    let err = router.write_lines("db", &body, p, 0).await.unwrap_err();
    assert!(err.to_string().contains("line 40"), "{err}");
    let n =
        sql(&h, 1, "SELECT table_name FROM information_schema.tables WHERE table_name = 'disk'")
            .await;
    assert!(!n.contains("disk"), "no shard created the table: {n}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_sent_again_is_applied_once_even_after_a_delete() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let router = h.nodes[&1].router.clone();
    let p = Precision::Seconds;
    router.write_lines("db", "reg,host=a v=1i 1\n", p, 0).await.unwrap();
    // What a coordinator sends a shard, and sends again when it heard nothing back.
    let shard = (1..=4)
        .find(|s| {
            h.nodes.values().any(|n| {
                n.shards.get(*s).is_some_and(|r| {
                    r.db.catalog().table("db", "reg").is_some_and(|t| {
                        r.db.catalog().with_series(t.id, |idx| idx.iter().next().is_some())
                    })
                })
            })
        })
        .unwrap();
    let mut points = ebb_query::lp::wire::PointsWriter::default();
    for (no, line) in ebb_query::lp::Lines::new("reg,host=a v=2i 1\n").map(Result::unwrap) {
        points.push(no, &line);
    }
    let req = ebb_node::cluster::proto::WritePointsRequest {
        shard,
        database: "db".into(),
        points: points.finish().into(),
        precision: ebb_node::cluster::proto::Precision::Seconds.into(),
        now_ns: 0,
        hops: 3,
        check_only: false,
        write_id: Some(ebb_query::db::new_request_id()),
    };
    let first = router.write_shard(&req).await.unwrap();
    assert_eq!(first.rows, 1);
    let v = sql(&h, 0, "SELECT v FROM reg").await;
    assert!(v.contains("| 2 |"), "{v}");
    let s = ebb_query::SqlSession::on(router.clone(), h.nodes[&1].meta.clone(), "db");
    s.query("DELETE FROM reg WHERE host = 'a'").await.unwrap();
    // The same write again (a retry): answered as the first, and the deleted row stays gone.
    let again = router.write_shard(&req).await.unwrap();
    assert_eq!(again, first);
    let n = sql(&h, 2, "SELECT count(*) AS n FROM reg").await;
    assert!(n.contains("| 0 |"), "a retried write brought back a deleted row: {n}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
