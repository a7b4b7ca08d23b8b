//! Resource limits against hostile or careless clients: a prepared statement naming a huge
//! placeholder number is refused, and the server keeps serving; statements over their memory or
//! time fail alone; a session shortens its own time limit; requests beyond the running-statement
//! limit wait their turn.

use crate::common::loopback;
use ebb_node::server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_placeholder_is_refused_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let pg_port = server.pg_addr.port();
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={pg_port} user=ebb dbname=public"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    for sql in ["SELECT $100000000000", "SELECT $65536", "SELECT $99999999999999999999999"] {
        // Parse, then Describe: what once asked for terabytes of parameter slots.
        let e = client.prepare(sql).await.expect_err("refused");
        let code = e.code().map(|c| c.code().to_string());
        assert_eq!(code.as_deref(), Some("42P02"), "{sql}: {e:?}");
    }
    let rows = client.query("SELECT $1 AS v", &[&"still serving"]).await.expect("query");
    assert_eq!(rows[0].get::<_, String>(0), "still serving");
    drop(client);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn statements_over_their_memory_or_time_fail_while_others_run() {
    use crate::common::Http;
    use ebb_node::config::Config;
    use ebb_query::front::Limits;
    use std::time::Duration;

    let dir = tempfile::tempdir().expect("tempdir");
    let limits = Limits {
        server_memory_bytes: 64 << 20,
        query_memory_bytes: 4 << 20,
        statement_timeout: Some(Duration::from_secs(2)),
        max_statements: 64,
        ..Limits::default()
    };
    let server = Server::start(&Config { limits, ..loopback(dir.path()) }).await.expect("start");
    let (http, pg_port) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        // A hash join whose build side needs far more than 4 MiB: refused, not the server.
        let join = "SELECT count(*) AS c FROM generate_series(1, 2000000) a(x) \
                    JOIN generate_series(1, 2000000) b(y) ON x = y";
        let small = "SELECT count(*) AS c FROM generate_series(1, 1000)";
        std::thread::scope(|s| {
            let big = s.spawn(|| h.sql(join));
            for _ in 0..20 {
                assert_eq!(h.count(small), 1000, "others keep running");
            }
            let (status, body) = big.join().expect("join thread");
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("query_memory"), "{body}");
        });
        // A statement past its time is canceled with a reason.
        let start = std::time::Instant::now();
        let (status, body) = h.sql("SELECT count(*) FROM generate_series(1, 50000000000)");
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("statement_timeout"), "{body}");
        assert!(start.elapsed() < Duration::from_secs(20), "canceled in time");
        assert_eq!(h.count(small), 1000);
        let (ok, _, err) =
            crate::common::psql(pg_port, "SELECT count(*) FROM generate_series(1, 50000000000)");
        assert!(!ok && err.contains("statement_timeout"), "{err}");
        // Results larger than a statement's memory are streamed, never held whole: chunked,
        // without a length, and complete.
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        for accept in ["application/json", "text/csv"] {
            let mut resp = agent
                .post(&format!("{}/v1/sql", h.base))
                .header("Accept", accept)
                .send("SELECT value, 'padding padding padding padding' AS p FROM generate_series(1, 300000)")
                .expect("request");
            assert_eq!(resp.status().as_u16(), 200);
            assert!(resp.headers().get("content-length").is_none(), "{accept}: not streamed");
            let body = resp.body_mut().with_config().limit(1 << 30).read_to_string().expect("body");
            let rows = match accept {
                "text/csv" => body.lines().count() - 1,
                _ => serde_json::from_str::<serde_json::Value>(&body).expect("json").as_array().map_or(0, Vec::len),
            };
            assert_eq!(rows, 300_000, "{accept}");
        }
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_set_their_timeout_and_statements_take_turns() {
    use crate::common::Http;
    use ebb_node::config::Config;
    use ebb_query::front::Limits;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().expect("tempdir");
    let limits = Limits {
        statement_timeout: Some(Duration::from_secs(60)),
        max_statements: 1,
        ..Limits::default()
    };
    let server = Server::start(&Config { limits, ..loopback(dir.path()) }).await.expect("start");
    let (http, pg_port) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let slow = "SELECT count(*) FROM generate_series(1, 50000000000)";
        // psql: the session's own limit, shown, then reset to the server's.
        let start = Instant::now();
        let (ok, out, err) = crate::common::psql(
            pg_port,
            &format!("SET statement_timeout = '300ms'; SHOW statement_timeout; {slow}"),
        );
        assert!(!ok && err.contains("statement_timeout"), "{out} {err}");
        assert!(out.contains("300ms"), "{out}");
        assert!(start.elapsed() < Duration::from_secs(20), "the session's limit applied");
        let (ok, out, err) = crate::common::psql(
            pg_port,
            "SET statement_timeout TO 5000; RESET statement_timeout; SHOW statement_timeout",
        );
        assert!(ok && out.ends_with("60s"), "{out} {err}");
        // A session cannot lift the server's limit.
        let (ok, out, _) =
            crate::common::psql(pg_port, "SET statement_timeout = '2h'; SHOW statement_timeout");
        assert!(ok && out.ends_with("60s"), "{out}");
        let (ok, _, err) = crate::common::psql(pg_port, "SET statement_timeout = 'soon'");
        assert!(!ok && err.contains("not a duration"), "{err}");
        // HTTP: the setting holds for the rest of the request.
        let h = Http::new(http);
        let (status, body) = h.sql(&format!("SET statement_timeout = 200; {slow}"));
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("statement_timeout"), "{body}");
        // One statement at a time: a second request waits for the first, then runs. The
        // requests before hold their slot until their statements have wound down: the slot
        // seen taken below must be the first's.
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.metric("ebb_statements_running") > 0.0 {
            assert!(Instant::now() < deadline, "an earlier statement never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                let t = Instant::now();
                let r = h.sql(&format!("SET statement_timeout = '1s'; {slow}"));
                (r, t.elapsed(), t)
            });
            // The first holds the one statement slot before the second is sent.
            let deadline = Instant::now() + Duration::from_secs(30);
            while h.metric("ebb_statements_running") < 1.0 {
                assert!(Instant::now() < deadline, "the first statement never ran");
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(h.count("SELECT count(*) AS c FROM generate_series(1, 10)"), 10);
            let second_done = Instant::now();
            let ((status, _), ran, first_sent) = first.join().expect("first");
            assert_eq!(status, 503);
            assert!(ran >= Duration::from_millis(900), "{ran:?}");
            // Sent while the first held the slot, the second could not finish before the
            // first's timeout freed it: at least a second after the first was sent. (Which
            // client thread sees its answer first is up to the scheduler, so the two answers'
            // arrival times are not compared.)
            let waited = second_done.duration_since(first_sent);
            assert!(
                waited >= Duration::from_secs(1),
                "the second did not wait its turn: {waited:?}"
            );
        });
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}
