//! The server end to end on loopback: line protocol and SQL over HTTP, the real `psql` binary
//! (simple query protocol) and a Postgres driver (extended protocol), bad input of every kind,
//! and a restart.

use std::io::Write;
use std::time::Duration;

use crate::common::{loopback, psql, Http, BASE};
use ebb_node::config::Config;
use ebb_node::server::Server;

fn config(dir: &std::path::Path) -> Config {
    Config {
        retention_check_interval: Duration::from_millis(200),
        max_body_bytes: 1 << 20,
        ..loopback(dir)
    }
}

fn lines(hosts: usize, points: usize) -> String {
    let mut s = String::new();
    for h in 0..hosts {
        for p in 0..points {
            let t = BASE + p as i64 * 60_000_000_000;
            s.push_str(&format!("cpu,host=h{h} usage={}.5,idle={}i {t}\n", p, 100 - p as i64));
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_psql_driver_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path());
    let server = Server::start(&cfg).await.expect("start");
    let (http_addr, pg_port) = (server.http_addr, server.pg_addr.port());

    let checks = tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        assert_eq!(h.get("/health").0, 200);
        assert_eq!(h.get("/ready").0, 200);
        // Line protocol, v1 and v2 endpoints, gzip.
        let (s, b) = h.post_with("/write?db=public", lines(3, 60).as_bytes(), &[]);
        assert_eq!(s, 204, "{b}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"mem,host=h0 used=1i 1700000000000000000\n").expect("gzip");
        let gz = gz.finish().expect("gzip");
        let (s, b) = h.post_with(
            "/api/v2/write?bucket=public&precision=ns",
            &gz,
            &[("Content-Encoding", "gzip")],
        );
        assert_eq!(s, 204, "{b}");
        assert_eq!(h.json("SELECT count(*) AS c FROM cpu")[0]["c"], 180);
        // An admin flush writes the memtable to a file; the rows read the same from it.
        let flushes = h.metric("ebb_flushes_total");
        assert!(h.metric("ebb_memtable_bytes") > 0.0);
        let (s, b) = h.post("/v1/admin/flush", "");
        assert_eq!((s, b.as_str()), (200, r#"{"engines_flushed":1}"#));
        assert_eq!(h.metric("ebb_flushes_total"), flushes + 1.0);
        assert_eq!(h.json("SELECT count(*) AS c FROM cpu")[0]["c"], 180);
        let v = h.json(
            "SELECT host, date_bin(interval '30 minutes', time, to_timestamp_nanos(1700000000000000000)) AS b, \
             avg(usage) AS a FROM cpu WHERE host = 'h1' GROUP BY host, b ORDER BY b",
        );
        assert_eq!(v.as_array().map(Vec::len), Some(2), "{v}");
        assert_eq!(v[0]["a"], 15.0, "{v}"); // mean of 0.5 .. 29.5
                                            // CSV and text formats.
        let (s, csv) = h.post_with(
            "/v1/sql?db=public",
            b"SELECT host FROM cpu WHERE host = 'h0' LIMIT 2",
            &[("Accept", "text/csv")],
        );
        assert_eq!((s, csv.as_str()), (200, "host\nh0\nh0\n"));
        let (s, t) = h.post_with("/v1/sql", b"SELECT 1 AS one", &[("Accept", "text/plain")]);
        assert!(s == 200 && t.contains("| one |") && t.contains("(1 row)"), "{t}");

        // Bad input: 4xx with a reason; nothing from a rejected request is applied.
        let (s, b) =
            h.post_with("/write?db=public", b"cpu,host=h9 usage=1 1\ncpu,host=h9 usage= 2\n", &[]);
        assert!(s == 400 && b.contains("line 2"), "{s} {b}");
        let (s, b) = h.post_with("/write?db=public", b"cpu,host=h9 usage=\"text\" 1\n", &[]);
        assert!(s == 400 && b.contains("usage"), "{s} {b}");
        let (s, b) = h.post_with("/write", b"cpu usage=1 1\n", &[]);
        assert!(s == 400 && b.contains("database"), "{s} {b}");
        let (s, _) = h.post_with("/write?db=public&precision=weeks", b"cpu usage=1 1\n", &[]);
        assert_eq!(s, 400);
        let big = vec![b'#'; 2 << 20];
        assert_eq!(h.post_with("/write?db=public", &big, &[]).0, 413);
        let (s, b) = h.sql("SELEC 1");
        assert!(s == 400 && b.contains("error"), "{s} {b}");
        assert!((400..500).contains(&h.sql("SELECT * FROM nosuch").0));
        assert!((400..500).contains(&h.sql("DELETE FROM cpu WHERE usage > 1").0));
        assert_eq!(h.json("SELECT count(*) AS c FROM cpu")[0]["c"], 180, "rejected writes applied");

        // Deletes: a time window (first 10 minutes of every host) and a tag.
        let v = h.json("DELETE FROM cpu WHERE time < to_timestamp_nanos(1700000000000000000) + interval '10 minutes'");
        assert_eq!(v[0]["rows_deleted"], 30, "{v}");
        let id = v[0]["delete_id"].as_u64().expect("delete id");
        let v = h.json(&format!("SELECT kind, rows, status FROM system.deletions WHERE id = {id}"));
        assert_eq!((&v[0]["kind"], &v[0]["rows"]), (&"delete".into(), &30.into()), "{v}");
        let v = h.json("SELECT kind FROM system.engine_deletes ORDER BY id DESC LIMIT 1");
        assert_eq!(v[0]["kind"], "time_window", "{v}");
        let v = h.json("DELETE FROM cpu WHERE host = 'h2'");
        assert_eq!(v[0]["rows_deleted"], 50, "{v}");
        assert_eq!(h.json("SELECT count(*) AS c FROM cpu")[0]["c"], 100);

        // Retention: a table keeping one hour refuses older writes.
        h.json("CREATE TABLE events (src TAG, n BIGINT) WITH (retention = '1h')");
        let (s, b) = h.post_with("/write?db=public", b"events,src=a n=1i 1\n", &[]);
        assert!(s == 400 && b.contains("retention"), "{s} {b}");
        let (s, _) = h.post_with("/write?db=public", b"events,src=a n=1i\n", &[]);
        assert_eq!(s, 204);
        assert_eq!(h.json("SELECT count(*) AS c FROM events")[0]["c"], 1);

        let (s, m) = h.get("/metrics");
        assert!(s == 200 && m.contains("ebb_rows_written_total 182"), "{m}");
        assert!(m.contains("ebb_write_errors_total 6"), "{m}");
    });
    checks.await.expect("http checks");

    // psql (simple query protocol).
    let ps = tokio::task::spawn_blocking(move || {
        let (ok, out, err) = psql(pg_port, "SELECT count(*) FROM cpu");
        assert!(ok && out == "100", "{out} {err}");
        let (ok, out, err) =
            psql(pg_port, "SELECT host, max(usage) FROM cpu GROUP BY host ORDER BY host");
        assert!(ok && out == "h0|59.5\nh1|59.5", "{out} {err}");
        let (ok, out, err) = psql(pg_port, "DELETE FROM cpu WHERE host = 'h1' AND time >= to_timestamp_nanos(1700000000000000000) + interval '50 minutes'");
        assert!(ok && out.contains("DELETE 10"), "{out} {err}");
        let (ok, _, err) = psql(pg_port, "SELECT * FROM nosuch");
        assert!(!ok && err.contains("nosuch"), "{err}");
        let (ok, out, err) = psql(pg_port, "INSERT INTO cpu (time, host, usage) VALUES (to_timestamp_nanos(1700000000000000000), 'h7', 2.5)");
        assert!(ok && out.contains("INSERT 0 1"), "{out} {err}");
    });
    ps.await.expect("psql checks");

    // A Postgres driver (extended protocol, parameters).
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={pg_port} user=ebb dbname=public"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    let rows = client
        .query("SELECT count(*) FROM cpu WHERE host = $1", &[&"h0"])
        .await
        .expect("prepared query");
    assert_eq!(rows[0].get::<_, i64>(0), 50);
    let e = client.query("SELECT nosuch FROM cpu", &[]).await.expect_err("bad column");
    assert!(e.to_string().contains("nosuch") || format!("{e:?}").contains("nosuch"), "{e:?}");
    let rows = client.query("SELECT 1 + 1", &[]).await.expect("still usable after an error");
    assert_eq!(rows[0].get::<_, i64>(0), 2);
    drop(client);

    // Restart: shutdown flushes, a new server sees everything.
    server.shutdown().await.expect("shutdown");
    let server = Server::start(&config(dir.path())).await.expect("restart");
    let addr = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(addr);
        assert_eq!(h.json("SELECT count(*) AS c FROM cpu")[0]["c"], 91);
        assert_eq!(h.json("SELECT count(*) AS c FROM mem")[0]["c"], 1);
    })
    .await
    .expect("after restart");
    server.shutdown().await.expect("shutdown");
}
