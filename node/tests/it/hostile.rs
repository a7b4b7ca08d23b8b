//! What a hostile client with a login tries, each attack as a client would send it: reading
//! through a write, requests that would abort, freeze or bloat the node, and writes whose
//! acknowledgement would be untrue. Each test fails if the defect it reproduces comes back.

use std::io::Write;

use crate::common::{basic, loopback, rss, secured, As, Http, ADMIN_PW};
use ebb_node::config::Config;
use ebb_node::server::Server;

fn gzip(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).expect("gzip");
    gz.finish().expect("gzip")
}

/// `cat a.gz b.gz | curl -H 'Content-Encoding: gzip' --data-binary @- /write`: every member's
/// lines are written, not only the first's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_body_of_several_members_is_written_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let mut body = gzip("cpu,host=a usage=1 1700000000000000000\n");
        body.extend(gzip("cpu,host=b usage=2 1700000000000000000\n"));
        body.extend(gzip("cpu,host=c usage=3 1700000000000000000\n"));
        let (s, b) = h.post_with("/write?db=public", &body, &[("Content-Encoding", "gzip")]);
        assert_eq!(s, 204, "{b}");
        assert_eq!(h.count("SELECT count(*) AS c FROM cpu"), 3);
        // A damaged second member fails the whole request: nothing of it is written.
        let mut bad = gzip("cpu,host=d usage=4 1700000000000000000\n");
        let second = gzip("cpu,host=e usage=5 1700000000000000000\n");
        bad.extend(&second[..second.len() - 6]);
        let (s, b) = h.post_with("/write?db=public", &bad, &[("Content-Encoding", "gzip")]);
        assert_eq!(s, 400, "{b}");
        assert_eq!(h.count("SELECT count(*) AS c FROM cpu"), 3);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// A user with WRITE but no READ learns nothing of the data through `INSERT ... SELECT`: not
/// through an error that prints values, nor through the row count of a filtered copy; the
/// same through a subquery in `INSERT ... VALUES` or in a `DELETE`'s condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_cannot_read_through_an_insert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        admin.ok("CREATE USER writer WITH PASSWORD 'w-pass'");
        admin.ok("GRANT WRITE ON DATABASE public TO writer");
        admin.ok("CREATE USER dpo WITH PASSWORD 'd-pass'");
        admin.ok("GRANT DELETE ON DATABASE public TO dpo");
        admin.ok("GRANT WRITE ON DATABASE scratch TO dpo");
        let (s, b) = h.post_with(
            "/write?db=public",
            b"cpu,host=a,region=eu usage=12.5 1700000000000000000\n\
              cpu,host=b,region=us usage=40 1700000000000000000\n",
            &[("Authorization", &admin.auth)],
        );
        assert_eq!(s, 204, "{b}");
        let writer = As { http: &h, auth: basic("writer", "w-pass") };
        // What the writer may do: insert values.
        writer.ok("INSERT INTO cpu (time, host, region, usage) VALUES (to_timestamp_nanos(1700000060000000000), 'c', 'eu', 1.0)");
        for sql in [
            "INSERT INTO cpu (time, host, usage) SELECT time, host, CAST(concat('x', region, '/', \
             host, '/', CAST(usage AS VARCHAR)) AS DOUBLE) FROM cpu",
            "INSERT INTO cpu (time, host, usage) SELECT time, host, usage FROM cpu WHERE usage > 39",
            "INSERT INTO cpu (time, host, usage) VALUES (now(), 'z', (SELECT max(usage) FROM cpu))",
            "INSERT INTO cpu (time, host, usage) WITH c AS (SELECT * FROM cpu) SELECT time, host, usage FROM c",
            "EXPLAIN INSERT INTO cpu (time, host, usage) SELECT time, host, usage FROM cpu",
        ] {
            let (s, b) = writer.sql(sql);
            assert_eq!(s, 403, "writer ran {sql}: {b}");
            assert!(b.contains("READ") && !b.contains("12.5") && !b.contains("eu/"), "{b}");
        }
        // A DELETE reads its target through a subquery only with READ.
        let dpo = As { http: &h, auth: basic("dpo", "d-pass") };
        let (s, b) = dpo.sql(
            "DELETE FROM cpu WHERE host IN (SELECT host FROM cpu WHERE usage > 39)",
        );
        assert_eq!(s, 403, "{b}");
        let (s, b) = h.post_with(
            "/v1/sql?db=scratch",
            b"INSERT INTO copy (time, host, usage) SELECT time, host, usage FROM public.cpu",
            &[("Authorization", &dpo.auth)],
        );
        assert_eq!(s, 403, "{b}");
        // Nothing was copied; the admin's own INSERT ... SELECT still works.
        assert!(admin.ok("SELECT count(*) AS c FROM cpu").contains("\"c\":3"));
        admin.ok("INSERT INTO cpu (time, host, usage) SELECT time, 'copy', usage FROM cpu WHERE host = 'a'");
        assert!(admin.ok("SELECT count(*) AS c FROM cpu").contains("\"c\":4"));
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// Deep and wide SQL from a user without any grant is refused before it is planned, over HTTP
/// and psql, with the setting named and SQLSTATE 54001; the node keeps serving. Chains just
/// under the limit plan and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_and_wide_sql_is_refused_before_planning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let (http, pg_port) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        admin.ok("CREATE USER nobody WITH PASSWORD 'n-pass'");
        admin.ok("CREATE USER reader WITH PASSWORD 'r-pass'");
        admin.ok("GRANT READ ON DATABASE public TO reader");
        let (s, b) = h.post_with(
            "/write?db=public",
            b"cpu,host=h0 usage=1 1700000000000000000\n",
            &[("Authorization", &admin.auth)],
        );
        assert_eq!(s, 204, "{b}");
        let nobody = As { http: &h, auth: basic("nobody", "n-pass") };
        let reader = As { http: &h, auth: basic("reader", "r-pass") };
        let chain = |n: usize| format!("SELECT {}", vec!["1"; n].join("+"));
        let in_list = |n: usize| {
            let items: Vec<String> = (0..n).map(|i| format!("'h{i}'")).collect();
            format!("SELECT count(*) FROM cpu WHERE host IN ({})", items.join(","))
        };
        for (sql, setting) in [
            (chain(2_000), "max_expression_depth"),
            (chain(200_000), "max_expression_depth"),
            (
                format!("SELECT 1 WHERE {}", vec!["1 = 1"; 3_000].join(" OR ")),
                "max_expression_depth",
            ),
            (in_list(14_000), "max_list_items"),
            ("SELECT 1;".repeat(100_000), "max_statements_per_request"),
        ] {
            let started = std::time::Instant::now();
            let (s, b) = nobody.sql(&sql);
            assert_eq!(s, 400, "{b}");
            assert!(b.contains(setting), "{b}");
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "refused at once");
            assert_eq!(h.get("/health").0, 200);
        }
        // Found by the fuzzer: arguments that fit no signature were answered 500.
        let (s, b) = reader.sql("SELECT range(1.5, 2, 3)");
        assert_eq!(s, 400, "{b}");
        // Found by the fuzzer: `$1` without a value was answered 500.
        let (s, b) = reader.sql("SELECT $1");
        assert_eq!(s, 400, "{b}");
        // A subquery value without a column (found by the fuzzer: the planner panicked).
        let (s, b) = admin.sql("DELETE FROM cpu WHERE (SELECT FROM cpu LIMIT 1)");
        assert_eq!(s, 400, "{b}");
        // Within the limits: planned, run, and fast enough.
        let started = std::time::Instant::now();
        let (s, b) = reader.sql(&chain(500));
        assert!(s == 200 && b.trim_end().ends_with(":500}]"), "{s}");
        let (s, b) = reader.sql(&in_list(10_000));
        assert_eq!(s, 200, "{b}");
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        // psql: SQLSTATE 54001 (stack depth limit exceeded), and the connection keeps working.
        let out = std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &pg_port.to_string(), "-U", "nobody", "-d", "public"])
            .args(["-At", "-v", "VERBOSITY=verbose", "-c", &chain(3_000), "-c", "SELECT 42"])
            .env("PGPASSWORD", "n-pass")
            .output()
            .expect("psql");
        let (out, err) =
            (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(err.contains("54001") && err.contains("max_expression_depth"), "{err}");
        assert!(out.contains("42"), "{out} {err}");
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// A query whose work multiplies its input (a cross join of two series of 10^8, counted), by a
/// user who may only read, stops at the session's statement timeout, and a client that hangs up stops it too; `/health`
/// answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_join_stops_at_its_deadline_and_health_answers_meanwhile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        // Table functions are read in a database: READ on it.
        admin.ok("CREATE USER nobody WITH PASSWORD 'n-pass'");
        admin.ok("GRANT READ ON DATABASE public TO nobody");
        let nobody = As { http: &h, auth: basic("nobody", "n-pass") };
        let cross =
            "SELECT count(*) FROM generate_series(1,100000000) a, generate_series(1,100000000) b";
        std::thread::scope(|s| {
            let started = std::time::Instant::now();
            let q = s.spawn(|| nobody.sql(&format!("SET statement_timeout = '3s'; {cross}")));
            let mut slowest = std::time::Duration::ZERO;
            while !q.is_finished() {
                let t = std::time::Instant::now();
                assert_eq!(h.get("/health").0, 200);
                slowest = slowest.max(t.elapsed());
                std::thread::sleep(std::time::Duration::from_millis(100));
                assert!(started.elapsed() < std::time::Duration::from_secs(30), "not stopped");
            }
            let (status, body) = q.join().expect("query thread");
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("statement_timeout"), "{body}");
            assert!(slowest < std::time::Duration::from_secs(1), "/health took {slowest:?}");
        });
        // A client that goes away: the statement stops, and the threads are free again (a
        // query that needs them answers promptly).
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(2)))
            .build()
            .into();
        let gone = agent
            .post(&format!("{}/v1/sql?db=public", h.base))
            .header("Authorization", &nobody.auth)
            .send(cross.as_bytes());
        assert!(gone.is_err(), "the client gave up");
        std::thread::sleep(std::time::Duration::from_secs(1));
        let started = std::time::Instant::now();
        for _ in 0..4 {
            let (s, b) = nobody.sql("SELECT count(*) AS c FROM generate_series(1, 3000000)");
            assert_eq!(s, 200, "{b}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// Scalar functions that build large values stay within the statement's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_from_scalar_functions_are_refused() {
    use ebb_query::front::Limits;
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = Limits { query_memory_bytes: 64 << 20, ..Limits::default() };
    let server = Server::start(&Config { limits, ..loopback(dir.path()) }).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let before = rss();
        for sql in [
            "SELECT length(repeat('x', 1000000000))",
            "SELECT length(lpad('x', 1000000000))",
            "SELECT cardinality(array_repeat(1, 1000000000))",
            "SELECT cardinality(range(1, 1000000000))",
            "SELECT cardinality(range(TIMESTAMP '1970-01-01', TIMESTAMP '2200-01-01', INTERVAL '1 second'))",
            "SELECT cardinality(generate_series(DATE '1970-01-01', DATE '2200-01-01', INTERVAL '1 month' - INTERVAL '30 days'))",
            "SELECT cardinality(array_resize([1], 1000000000))",
            "WITH a AS (SELECT repeat('x', 10000000) AS s) SELECT length(s||s||s||s||s||s||s||s||s||s||s||s) FROM a",
            "WITH a AS (SELECT repeat('x', 10000000) AS s) SELECT length(concat(s,s,s,s,s,s,s,s,s,s,s,s)) FROM a",
        ] {
            let (s, b) = h.sql(sql);
            assert_eq!(s, 503, "{sql}: {b}");
            assert!(b.contains("query_memory"), "{b}");
        }
        assert!(rss() < before + (1 << 30), "memory grew by {} MiB", (rss() - before) >> 20);
        // Values within the limit are built.
        assert_eq!(h.json("SELECT length(repeat('ab', 1000)) AS n")[0]["n"], 2000);
        assert_eq!(h.json("SELECT 'a' || 'b' AS s")[0]["s"], "ab");
        // Time in proportion to the product of the lengths, in one call no deadline stops.
        let (s, b) = h.sql("SELECT levenshtein(repeat('a', 1000000), repeat('b', 1000000))");
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("character pairs"), "{b}");
        assert_eq!(h.json("SELECT levenshtein('kitten', 'sitting') AS d")[0]["d"], 3);
        // Found by the fuzzer: DataFusion's lpad and rpad panicked on a negative length when
        // the fill is not a constant string.
        for sql in ["SELECT lpad('x', -5, NULL) AS s", "SELECT rpad('x', -5, NULL) AS s"] {
            assert!(h.json(sql)[0]["s"].is_null(), "{sql}");
        }
        assert_eq!(h.json("SELECT rpad('ab', -1) AS s")[0]["s"], "");
        let days = "SELECT cardinality(range(DATE '2024-01-01', DATE '2025-01-01', INTERVAL '1 day')) AS n";
        assert_eq!(h.json(days)[0]["n"], 366);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// Tags per line, columns per table and new series per request are limited, each error naming
/// its setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_bounded_in_tags_columns_and_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = Config {
        write_limits: ebb_query::WriteLimits {
            max_tags_per_line: 100,
            max_columns_per_table: 300,
            max_series_per_request: 5_000,
        },
        ..loopback(dir.path())
    };
    let server = Server::start(&cfg).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let tags: String = (0..101).map(|i| format!(",k{i}=v")).collect();
        let (s, b) = h.post("/write?db=public", &format!("t{tags} f=1 1700000000000000000"));
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("max_tags_per_line") && b.contains("line 1"), "{b}");
        // One tag key per line: the 300th column is refused, nothing of the request written.
        let lines: String =
            (0..400).map(|i| format!("t,k{i}=v f=1 {}\n", 1700000000000000000i64 + i)).collect();
        let (s, b) = h.post("/write?db=public", &lines);
        assert_eq!(s, 400, "{b}");
        // `time`, the field and 297 tags fill the table: line 299's tag would be the 301st.
        assert!(b.contains("max_columns_per_table") && b.contains("line 299"), "{b}");
        let (s, b) = h.sql("SELECT * FROM t");
        assert!(s == 404 && b.contains("table public.t does not exist"), "nothing written: {b}");
        let series: String =
            (0..5_001).map(|i| format!("s,host=h{i} f=1 1700000000000000000\n")).collect();
        let (s, b) = h.post("/write?db=public", &series);
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("max_series_per_request"), "{b}");
        // Within the limits, 290 tag keys over 290 lines: written.
        let lines: String =
            (0..290).map(|i| format!("w,k{i}=v f=1 {}\n", 1700000000000000000i64 + i)).collect();
        let (s, b) = h.post("/write?db=public", &lines);
        assert_eq!(s, 204, "{b}");
        assert_eq!(h.count("SELECT count(*) AS c FROM w"), 290);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// Within the default limits, a table of 997 tags and 100,000 new series each with only the
/// last tag (one 4 MB write): each series holds its one value. Series held a slot for every
/// tag up to their last, 2.4 GB kept for this write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_of_one_late_tag_costs_one_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        for part in 0..4 {
            let tags: String =
                (part * 250..(part * 250 + 250).min(997)).map(|i| format!(",k{i}=v")).collect();
            let (s, b) = h.post("/write?db=public", &format!("t{tags} f=1 {}", 1_000 + part));
            assert_eq!(s, 204, "{b}");
        }
        let before = rss();
        let lines: String =
            (0..100_000).map(|i| format!("t,k996=v{i} f=1 1700000000000000000\n")).collect();
        let (s, b) = h.post("/write?db=public", &lines);
        assert_eq!(s, 204, "{b}");
        let grew = rss().saturating_sub(before);
        assert!(grew < 1 << 30, "a 4 MB write kept {} MiB", grew >> 20);
        assert_eq!(h.count("SELECT count(*) AS c FROM t WHERE k996 LIKE 'v_%'"), 100_000);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// Before any password: a PostgreSQL client that announces a 1 GiB message and streams it is
/// cut off within a small bound; slow anonymous HTTP uploads are answered 401 without their
/// bodies being read, so they hold no connection `/health` or an admin needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_large_is_read_before_a_password() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = Config { max_connections: 10, ..secured(dir.path()) };
    let server = Server::start(&cfg).await.expect("start");
    let (http, pg) = (server.http_addr, server.pg_addr);
    tokio::task::spawn_blocking(move || {
        // pgwire: a startup packet for a user with a password, then a Query header for
        // 0x3ffffffd bytes, streamed.
        let mut startup = Vec::new();
        let body = b"\x00\x03\x00\x00user\x00admin\x00database\x00public\x00\x00";
        startup.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        startup.extend_from_slice(body);
        let mut sent_total = 0usize;
        for _ in 0..4 {
            let mut c = TcpStream::connect(pg).expect("connect");
            c.set_write_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
            c.write_all(&startup).expect("startup");
            c.write_all(&[b'Q', 0x3f, 0xff, 0xff, 0xfd]).expect("header");
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0usize;
            while sent < (256 << 20) {
                match c.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            assert!(sent < (16 << 20), "the server kept reading: {sent} bytes");
            sent_total += sent;
        }
        assert!(sent_total > 0);
        // Before the password, a SASLInitialResponse whose data length overruns the message:
        // the connection is closed, nothing panics, and logins still work.
        let mut c = TcpStream::connect(pg).expect("connect");
        c.write_all(&startup).expect("startup");
        let mut msg = b"SCRAM-SHA-256\0".to_vec();
        msg.extend_from_slice(&0x7fff_ffffi32.to_be_bytes());
        msg.extend_from_slice(b"n,,n=,r=abc");
        let mut framed = vec![b'p'];
        framed.extend_from_slice(&((msg.len() + 4) as i32).to_be_bytes());
        framed.extend_from_slice(&msg);
        c.write_all(&framed).expect("sasl");
        c.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        let (ok, out, err) = crate::common::psql_as(pg.port(), "admin", ADMIN_PW, "SELECT 7");
        assert!(ok && out == "7", "{out} {err}");

        // HTTP: ten anonymous uploads that announce 60 MB and trickle: each is refused at
        // once, and /health and an admin get through.
        let mut slow = Vec::new();
        for _ in 0..10 {
            let mut c = TcpStream::connect(http).expect("connect");
            let head = format!(
                "POST /write?db=public HTTP/1.1\r\nHost: {http}\r\nContent-Length: 60000000\r\n\r\nc"
            );
            c.write_all(head.as_bytes()).expect("head");
            slow.push(c);
        }
        let mut answers = 0;
        for c in &mut slow {
            c.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
            let mut buf = [0u8; 64];
            if let Ok(n) = c.read(&mut buf) {
                if String::from_utf8_lossy(&buf[..n]).contains(" 401 ") {
                    answers += 1;
                }
            }
        }
        assert_eq!(answers, 10, "every anonymous upload is refused before its body");
        let h = Http::new(http);
        let started = std::time::Instant::now();
        assert_eq!(h.get("/health").0, 200);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        admin.ok("SELECT 1");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        drop(slow);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// A page whose name resolves to a node without users (DNS rebinding) is refused by its `Host`;
/// no 401 asks a browser for Basic credentials; a browser request from another site needs a
/// bearer token, whatever its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebinding_and_cross_site_requests_are_refused() {
    let open_dir = tempfile::tempdir().expect("tempdir");
    let open = Server::start(&loopback(open_dir.path())).await.expect("start");
    let dir = tempfile::tempdir().expect("tempdir");
    let secured_server = Server::start(&secured(dir.path())).await.expect("start");
    let (open_http, http) = (open.http_addr, secured_server.http_addr);
    tokio::task::spawn_blocking(move || {
        let o = Http::new(open_http);
        assert_eq!(o.post("/write?db=public", "cpu,host=a usage=1 1700000000000000000").0, 204);
        // A page of attacker.example whose name now resolves to 127.0.0.1: to the browser its
        // requests are same-origin.
        let rebound = [
            ("Host", "attacker.example:7080"),
            ("Origin", "http://attacker.example:7080"),
            ("Sec-Fetch-Site", "same-origin"),
            ("Content-Type", "application/json"),
        ];
        let (s, b) = o.post_with("/v1/sql?db=public", b"DROP TABLE cpu", &rebound);
        assert_eq!(s, 403, "{b}");
        let (s, b) = o.post_with("/write?db=public", b"cpu,host=evil usage=1", &rebound);
        assert_eq!(s, 403, "{b}");
        assert_eq!(o.count("SELECT count(*) AS c FROM cpu"), 1, "the table is still there");
        // Clients that are not browsers reach it by any name (a container's, say).
        let (s, b) = o.post_with("/v1/sql?db=public", b"SELECT 1", &[("Host", "ebbdb:7080")]);
        assert_eq!(s, 200, "{b}");
        for host in ["localhost:7080", "127.0.0.1:7080", "[::1]:7080"] {
            assert_eq!(o.post_with("/v1/sql", b"SELECT 1", &[("Host", host)]).0, 200, "{host}");
        }

        let h = Http::new(http);
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let resp = agent.post(&format!("{}/v1/sql", h.base)).send("SELECT 1").expect("request");
        assert_eq!(resp.status().as_u16(), 401);
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(!challenge.to_ascii_lowercase().contains("basic"), "{challenge}");
        let admin = basic("admin", ADMIN_PW);
        let (s, b) = h.post_with(
            "/v1/sql?db=public",
            b"SELECT 1",
            &[
                ("Origin", "http://evil.example"),
                ("Content-Type", "application/json"),
                ("Authorization", &admin),
            ],
        );
        assert_eq!(s, 403, "a browser's cross-site request with Basic credentials: {b}");
        let (s, b) = h.post_with(
            "/v1/sql?db=public",
            b"SELECT 1",
            &[("Sec-Fetch-Site", "cross-site"), ("Authorization", &admin)],
        );
        assert_eq!(s, 403, "{b}");
        let same = format!("http://{http}");
        let (s, b) = h.post_with(
            "/v1/sql?db=public",
            b"SELECT 1",
            &[("Origin", &same), ("Content-Type", "application/json"), ("Authorization", &admin)],
        );
        assert_eq!(s, 200, "same origin: {b}");
        let made: serde_json::Value = serde_json::from_str(
            &As { http: &h, auth: admin.clone() }.ok("CREATE TOKEN FOR admin"),
        )
        .expect("json");
        let bearer = format!("Bearer {}", made[0]["token"].as_str().expect("token"));
        let (s, b) = h.post_with(
            "/v1/sql?db=public",
            b"SELECT 1",
            &[("Origin", "http://dashboard.example"), ("Authorization", &bearer)],
        );
        assert_eq!(s, 200, "a bearer token from another site: {b}");
    })
    .await
    .expect("checks");
    open.shutdown().await.expect("shutdown");
    secured_server.shutdown().await.expect("shutdown");
}

/// What a user may not read stays hidden from Describe; the data directory is its owner's
/// alone; the reserved databases take no writes; wrong passwords lock out the user guessing
/// from that address only, told as too many attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_schemas_files_reserved_names_and_throttling() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = Server::start(&secured(&data)).await.expect("start");
    let (http, pg_port) = (server.http_addr, server.pg_addr.port());
    let mode = std::fs::metadata(&data).expect("data dir").permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "data directory mode {mode:o}");
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        admin.ok("CREATE USER reader WITH PASSWORD 'r-pass'");
        admin.ok("GRANT READ ON DATABASE public TO reader");
        for db in ["other", "public"] {
            let (s, b) = h.post_with(
                &format!("/write?db={db}"),
                b"secret,ssn=123 v=1 1700000000000000000",
                &[("Authorization", &admin.auth)],
            );
            assert_eq!(s, 204, "{b}");
        }
        for db in ["system", "information_schema", "pg_catalog"] {
            let (s, b) = h.post_with(
                &format!("/write?db={db}"),
                b"t v=1",
                &[("Authorization", &admin.auth)],
            );
            assert_eq!(s, 400, "{db}: {b}");
            assert!(b.contains("reserved"), "{b}");
        }
        // information_schema lists only what a user may read.
        admin.ok("CREATE USER lister WITH PASSWORD 'l-pass'");
        admin.ok("GRANT READ ON DATABASE public TO lister");
        let lister = As { http: &h, auth: basic("lister", "l-pass") };
        for view in ["tables", "columns"] {
            let sql = format!("SELECT DISTINCT table_schema FROM information_schema.{view}");
            let listed = lister.ok(&sql);
            assert!(listed.contains("public") && !listed.contains("other"), "{view}: {listed}");
        }
        let every = "SELECT DISTINCT table_schema FROM information_schema.tables";
        assert!(admin.ok(every).contains("other"), "the admin sees every database");
        // Ten wrong passwords for one user lock that user out from this address, told so;
        // another user from the same address still logs in.
        for _ in 0..10 {
            let (s, _) = h.post_with(
                "/v1/sql",
                b"SELECT 1",
                &[("Authorization", &basic("reader", "guess"))],
            );
            assert_eq!(s, 401);
        }
        let (s, b) =
            h.post_with("/v1/sql", b"SELECT 1", &[("Authorization", &basic("reader", "r-pass"))]);
        assert_eq!(s, 401);
        assert!(b.contains("too many failed login attempts"), "{b}");
        let (ok, _, err) = crate::common::psql_as(pg_port, "reader", "r-pass", "SELECT 1");
        assert!(!ok && err.contains("too many failed login attempts"), "{err}");
        admin.ok("SELECT 1");
        let (ok, out, err) = crate::common::psql_as(pg_port, "admin", ADMIN_PW, "SELECT 5");
        assert!(ok && out == "5", "{err}");
    })
    .await
    .expect("checks");
    // Describe of a table in a database the user may not read: refused, no columns.
    let (client, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={pg_port} user=admin password='{ADMIN_PW}' dbname=public"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    client.batch_execute("CREATE USER viewer WITH PASSWORD 'v-pass'").await.expect("user");
    client.batch_execute("GRANT READ ON DATABASE public TO viewer").await.expect("grant");
    let (viewer, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={pg_port} user=viewer password=v-pass dbname=public"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    let e = viewer.prepare("SELECT * FROM other.secret").await.expect_err("refused");
    assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{e:?}");
    let st = viewer.prepare("SELECT * FROM public.secret").await.expect("own database");
    assert_eq!(st.columns().len(), 3);
    drop((client, viewer));
    server.shutdown().await.expect("shutdown");
}

/// Malformed extended-protocol messages close their connection without a panic, and a row
/// count of -1 asks for every row; the server keeps serving.
/// One PostgreSQL protocol message: its type byte, length and body.
fn pg_msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A PostgreSQL connection as user `ebb` to `public`, read up to its first ReadyForQuery.
fn pg_login(pg: std::net::SocketAddr) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(pg).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(60))).expect("timeout");
    let body = b"\x00\x03\x00\x00user\x00ebb\x00database\x00public\x00\x00";
    let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(body);
    c.write_all(&startup).expect("startup");
    pg_read_until(&mut c, b"Z\x00\x00\x00\x05I");
    c
}

/// Reads `c` until `end` has been seen; returns what was read.
fn pg_read_until(c: &mut std::net::TcpStream, end: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !seen.windows(end.len()).any(|w| w == end) {
        let n = c.read(&mut buf).expect("read");
        assert!(n > 0, "closed before {end:?}: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

/// An Execute asking for every row (a row count of 0, as every driver sends) of a result larger
/// than memory should hold gets its rows as they are produced: the first arrives while the node
/// holds a small part of the result. A portal suspended by a row count resumes where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_streams_its_rows() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let pg = server.pg_addr;
    tokio::task::spawn_blocking(move || {
        // A row count of 2, then of 0: two rows and PortalSuspended, then the other three.
        let mut c = pg_login(pg);
        c.write_all(&pg_msg(b'P', b"\0SELECT * FROM generate_series(1, 5)\0\x00\x00")).expect("p");
        c.write_all(&pg_msg(b'B', b"\0\0\x00\x00\x00\x00\x00\x00")).expect("bind");
        c.write_all(&pg_msg(b'E', b"\0\x00\x00\x00\x02")).expect("execute");
        c.write_all(&pg_msg(b'E', b"\0\x00\x00\x00\x00")).expect("execute");
        c.write_all(&pg_msg(b'S', b"")).expect("sync");
        let seen = pg_read_until(&mut c, b"Z\x00\x00\x00\x05I");
        let rows = seen.windows(7).filter(|w| w[0] == b'D' && w[5..] == [0, 1]).count();
        assert_eq!(rows, 5, "{}", String::from_utf8_lossy(&seen));
        assert!(seen.windows(5).any(|w| w == b"s\x00\x00\x00\x04"), "PortalSuspended");
        assert!(seen.windows(9).any(|w| w == b"SELECT 3\0"), "{}", String::from_utf8_lossy(&seen));
        // 2 GB of rows (2 million of 1,000 bytes): the first row arrives while the process
        // holds far less than the result.
        let before = rss();
        let mut c = pg_login(pg);
        let sql = b"\0SELECT repeat('x', 1000) AS v FROM generate_series(1, 2000000)\0\x00\x00";
        c.write_all(&pg_msg(b'P', sql)).expect("parse");
        c.write_all(&pg_msg(b'B', b"\0\0\x00\x00\x00\x00\x00\x00")).expect("bind");
        c.write_all(&pg_msg(b'E', b"\0\x00\x00\x00\x00")).expect("execute");
        c.write_all(&pg_msg(b'S', b"")).expect("sync");
        let mut first = [0u8; 64 << 10];
        let mut got = 0;
        while got < first.len() {
            let n = c.read(&mut first[got..]).expect("read");
            assert!(n > 0, "closed");
            got += n;
        }
        let grew = rss().saturating_sub(before);
        assert!(grew < 1 << 30, "the node held {} MiB before the first rows", grew >> 20);
        assert!(first.windows(5).any(|w| w == b"xxxxx"), "rows");
        drop(c);
        let (ok, out, err) = crate::common::psql(pg.port(), "SELECT 12");
        assert!(ok && out == "12", "{err}");
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_postgres_messages_close_their_connection() {
    use std::io::{Read, Write};
    // Panics in pgwire's decoders, whatever test of this binary runs meanwhile.
    static PGWIRE_PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.location().is_some_and(|l| l.file().contains("pgwire")) {
            PGWIRE_PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        previous(info);
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let pg = server.pg_addr;
    tokio::task::spawn_blocking(move || {
        let msg = pg_msg;
        let login = || pg_login(pg);
        let closed = |mut c: std::net::TcpStream| {
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
            rest
        };
        for bad in [
            msg(b'P', b"\0SELECT 1\0\xff\xff"),
            msg(b'B', b"\0\0\x00\x00\x00\x01\x7f\xff\xff\xf0a\x00\x00"),
            msg(b'B', b"\0\0\x00\x00\x00\x01\xff\xff\xff\xfb\x00\x00"),
            msg(b'E', b"\0"),
            // Found by the fuzzer: pgwire reads a query up to its first zero byte and decodes
            // the rest as a message of its own (here a Parse too short for its type count).
            msg(b'Q', b"SELECT 1\0P\x00\x00\x00\x07\x00\x00\xff"),
        ] {
            let mut c = login();
            c.write_all(&bad).expect("message");
            c.write_all(&msg(b'S', b"")).expect("sync");
            let _ = closed(c);
        }
        // Parse, Bind, Execute with max_rows -1, Sync: every row comes back.
        let mut c = login();
        c.write_all(&msg(b'P', b"\0SELECT * FROM generate_series(1, 3)\0\x00\x00")).expect("parse");
        c.write_all(&msg(b'B', b"\0\0\x00\x00\x00\x00\x00\x00")).expect("bind");
        c.write_all(&msg(b'E', b"\0\xff\xff\xff\xff")).expect("execute");
        c.write_all(&msg(b'S', b"")).expect("sync");
        let seen = pg_read_until(&mut c, b"Z\x00\x00\x00\x05I");
        assert!(seen.windows(9).any(|w| w == b"SELECT 3\0"), "{}", String::from_utf8_lossy(&seen));
        let (ok, out, err) = crate::common::psql(pg.port(), "SELECT 11");
        assert!(ok && out == "11", "{err}");
        assert_eq!(
            PGWIRE_PANICS.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "a decoder panicked"
        );
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}
