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
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
