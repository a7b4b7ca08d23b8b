//! Access control end to end: users, grants and tokens over HTTP (Basic, Bearer, InfluxDB
//! `Token` and `u`/`p`), the real `psql` logging in with SCRAM-SHA-256, refusals with the
//! right status and SQLSTATE, browser requests without credentials, the refusal to serve other
//! machines without users, users surviving a restart, and users of a cluster made on one node
//! and honoured on another.

use crate::common::{basic, loopback, psql_as, secured, start_cluster, until, As, Http, ADMIN_PW};
use ebb_node::config::{Config, Secret};
use ebb_node::server::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_protocol_authenticates_and_every_statement_is_authorized() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let (http_addr, pg_port) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        // Nobody gets in without credentials, or with wrong ones.
        for (status, body) in [
            h.sql("SELECT 1"),
            h.post("/write?db=public", "cpu,host=a usage=1"),
            h.post("/api/v2/write?bucket=public", "cpu,host=a usage=1"),
            h.post("/v1/sql?db=public&u=admin&p=wrong", "SELECT 1"),
            h.post_with("/v1/sql", b"SELECT 1", &[("Authorization", &basic("admin", "nope"))]),
            h.post_with("/v1/sql", b"SELECT 1", &[("Authorization", "Bearer ebb_unknown")]),
            h.get("/v1/audit/verify?id=1"),
        ] {
            assert_eq!(status, 401, "{body}");
            assert!(body.contains("authentication failed"), "{body}");
        }
        // Health and metrics stay open (probes and scrapers).
        assert_eq!(h.get("/health").0, 200);
        assert_eq!(h.get("/metrics").0, 200);

        admin.ok("CREATE USER reader WITH PASSWORD 'r-pass'");
        admin.ok("CREATE USER writer WITH PASSWORD 'w-pass'");
        admin.ok("CREATE USER dpo WITH PASSWORD 'd-pass'");
        admin.ok("GRANT READ ON DATABASE public TO reader");
        admin.ok("GRANT READ, WRITE ON DATABASE public TO writer");
        admin.ok("GRANT DELETE ON DATABASE public TO dpo");
        let users = admin.ok("SELECT name, password FROM system.users ORDER BY name");
        assert!(users.contains("\"admin\"") && users.contains("\"dpo\""), "{users}");
        assert!(!users.contains("argon2") && !users.contains("r-pass"), "{users}");
        let grants = admin.ok("SELECT \"user\", database, privilege FROM system.grants");
        assert!(grants.contains("{\"user\":\"reader\",\"database\":\"public\",\"privilege\":\"READ\"}"), "{grants}");

        let reader = As { http: &h, auth: basic("reader", "r-pass") };
        let writer = As { http: &h, auth: basic("writer", "w-pass") };
        let dpo = As { http: &h, auth: basic("dpo", "d-pass") };
        // Writes: a writer's, with an InfluxDB v2 token header later; a reader's refused.
        let (s, b) = writer.write("steps,user=alice count=1i 1700000000000000000\nsteps,user=bob count=2i 1700000000000000000");
        assert_eq!(s, 204, "{b}");
        let (s, b) = reader.write("steps,user=carol count=3i 1700000000000000000");
        assert_eq!(s, 403, "{b}");
        assert!(b.contains("WRITE"), "{b}");
        // Reads.
        assert!(reader.ok("SELECT count(*) AS c FROM steps").contains("2"));
        // What a reader may not do.
        for sql in [
            "DELETE FROM steps WHERE user = 'alice'",
            "ERASE WHERE user = 'alice'",
            "DROP TABLE steps",
            "ALTER TABLE steps SET (retention = '1d')",
            "INSERT INTO steps (time, user, count) VALUES (now(), 'eve', 1)",
            "CREATE TABLE t2 (a TAG, v DOUBLE)",
            "SELECT * FROM system.users",
            "CREATE USER mallory WITH PASSWORD 'x'",
            "GRANT ADMIN ON ALL DATABASES TO reader",
            "SELECT * FROM system.deletions",
            "SELECT * FROM other.steps",
        ] {
            let (s, b) = reader.sql(sql);
            assert_eq!(s, 403, "reader ran {sql}: {b}");
            assert!(b.contains("permission denied"), "{b}");
        }
        // A writer may insert but not drop or delete.
        writer.ok("INSERT INTO steps (time, user, count) VALUES (to_timestamp_nanos(1700000060000000000), 'carol', 5)");
        for sql in ["DROP TABLE steps", "DELETE FROM steps WHERE user = 'bob'", "ERASE WHERE user = 'bob'"] {
            assert_eq!(writer.sql(sql).0, 403, "writer ran {sql}");
        }
        // The DPO account deletes and erases without reading.
        assert_eq!(dpo.sql("SELECT * FROM steps").0, 403);
        let erased = dpo.ok("ERASE WHERE user = 'alice'");
        assert!(erased.contains("\"rows_erased\":1"), "{erased}");
        dpo.ok("DELETE FROM steps WHERE user = 'bob'");
        // Every deletion names who asked for it.
        let who = admin.ok("SELECT kind, issued_by FROM system.deletions ORDER BY id");
        let rows: serde_json::Value = serde_json::from_str(&who).expect("json");
        for r in rows.as_array().expect("rows") {
            let by = r["issued_by"].as_str().unwrap_or_default();
            assert!(by.starts_with("dpo via http from 127.0.0.1:"), "{who}");
        }
        assert_eq!(rows.as_array().map(Vec::len), Some(2), "{who}");
        // Every statement is in system.queries with who ran it, refusals as failed; a reader
        // may not read it (it is in `system`), the admin may.
        assert_eq!(reader.sql("SELECT * FROM system.queries").0, 403);
        let flush = |auth: &str| {
            h.post_with("/v1/admin/flush", b"", &[("Authorization", auth)]).0
        };
        assert_eq!(flush(&reader.auth), 403, "only an admin flushes memtables");
        assert_eq!(flush(&admin.auth), 200);
        let q = admin.ok(
            "SELECT \"user\", kind, ok, count(*) AS n, sum(rows) AS rows FROM system.queries \
             WHERE \"user\" IN ('reader', 'dpo') GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        );
        let rows: serde_json::Value = serde_json::from_str(&q).expect("json");
        let find = |user: &str, kind: &str, ok: bool| {
            rows.as_array().expect("rows").iter().find(|r| {
                r["user"] == user && r["kind"] == kind && r["ok"] == ok
            })
        };
        let refused = find("reader", "error", false).unwrap_or_else(|| panic!("{q}"));
        assert!(refused["n"].as_u64().expect("n") >= 7, "{q}");
        assert_eq!(find("reader", "select", true).map(|r| r["rows"].clone()), Some(1.into()), "{q}");
        assert!(find("dpo", "erase", true).is_some() && find("dpo", "delete", true).is_some(), "{q}");
        assert!(h.metric("ebb_statements_failed_total") >= 7.0);
        assert!(reader.ok("SELECT user FROM steps").contains("carol"));
        assert!(!reader.ok("SELECT user FROM steps").contains("alice"));

        // Tokens: shown once, work as Bearer and as InfluxDB v2 Token, dropped by id.
        let made: serde_json::Value = serde_json::from_str(&admin.ok("CREATE TOKEN FOR writer")).expect("json");
        let (token, id) = (made[0]["token"].as_str().expect("token"), made[0]["id"].as_str().expect("id"));
        assert!(token.starts_with("ebb_"));
        let tokens = admin.ok("SELECT * FROM system.tokens");
        assert!(tokens.contains(id) && !tokens.contains(token), "{tokens}");
        let bearer = format!("Bearer {token}");
        let (s, b) = h.post_with("/api/v2/write?bucket=public", b"steps,user=dan count=4i 1700000000000000000", &[("Authorization", &format!("Token {token}"))]);
        assert_eq!(s, 204, "{b}");
        let (s, b) = h.post_with("/v1/sql?db=public", b"SELECT count(*) AS c FROM steps", &[("Authorization", &bearer)]);
        assert_eq!(s, 200, "{b}");
        // InfluxDB v1 query parameters.
        let (s, b) = h.post("/write?db=public&u=writer&p=w-pass", "steps,user=erin count=6i 1700000000000000000");
        assert_eq!(s, 204, "{b}");
        admin.ok(&format!("DROP TOKEN '{id}'"));
        let (s, _) = h.post_with("/v1/sql", b"SELECT 1", &[("Authorization", &bearer)]);
        assert_eq!(s, 401);

        // A web page cannot send statements without credentials in a header.
        let (s, b) = h.post_with(
            "/v1/sql?db=public&u=admin&p=correct%20horse%20battery",
            b"DROP TABLE steps",
            &[("Origin", "http://evil.example"), ("Content-Type", "text/plain")],
        );
        assert_eq!(s, 403, "{b}");
        assert!(reader.ok("SELECT count(*) AS c FROM steps").contains("c"));

        // psql logs in with SCRAM-SHA-256; refusals carry their SQLSTATE.
        let (ok, out, err) = psql_as(pg_port, "reader", "r-pass", "SELECT count(*) FROM steps");
        assert!(ok, "{err}");
        assert!(out.parse::<u64>().is_ok(), "{out}");
        let failed = |err: &str| err.to_lowercase().contains("password authentication failed");
        let (ok, _, err) = psql_as(pg_port, "reader", "wrong", "SELECT 1");
        // The refusal names the user who tried.
        assert!(!ok && failed(&err) && err.contains("\"reader\""), "{err}");
        let (ok, _, err) = psql_as(pg_port, "nobody", "x", "SELECT 1");
        assert!(!ok && failed(&err), "{err}");
        let (ok, _, err) = psql_as(pg_port, "reader", "r-pass", "DROP TABLE steps");
        assert!(!ok && err.contains("permission denied"), "{err}");
        let (ok, _, err) = psql_as(pg_port, "admin", ADMIN_PW, "DELETE FROM steps WHERE user = 'dan'");
        assert!(ok, "{err}");
        let by = admin.ok("SELECT issued_by FROM system.deletions WHERE target LIKE '%dan%'");
        assert!(by.contains("admin via postgres from 127.0.0.1:"), "{by}");
        let metrics = h.get("/metrics").1;
        let refused = metrics.lines().find(|l| l.starts_with("ebb_access_refused_total "));
        assert!(refused.is_some_and(|l| !l.ends_with(" 0")), "{metrics}");
        let (ok, _, err) = psql_as(pg_port, "admin", ADMIN_PW, "ALTER USER reader WITH PASSWORD 'r2'");
        assert!(ok, "{err}");
        assert!(!psql_as(pg_port, "reader", "r-pass", "SELECT 1").0);
        assert!(psql_as(pg_port, "reader", "r2", "SELECT 1").0);

        // The last administrator cannot be removed.
        let (s, b) = admin.sql("DROP USER admin");
        assert_eq!(s, 400, "{b}");
        admin.ok("DROP USER writer");
        assert_eq!(writer.sql("SELECT 1").0, 401);
    })
    .await
    .expect("checks");

    // A prepared statement is authorized at every run, against the grants of the moment.
    let conf = format!("host=127.0.0.1 port={pg_port} user=reader password=r2 dbname=public");
    let (client, conn) =
        tokio_postgres::connect(&conf, tokio_postgres::NoTls).await.expect("reader");
    tokio::spawn(conn);
    let stmt = client.prepare("SELECT count(*) FROM steps WHERE user = $1").await.expect("prepare");
    for _ in 0..3 {
        let rows = client.query(&stmt, &[&"carol"]).await.expect("granted");
        assert_eq!(rows[0].get::<_, i64>(0), 1);
    }
    let grants = |sql: &'static str| {
        tokio::task::spawn_blocking(move || {
            let h = Http::new(http_addr);
            As { http: &h, auth: basic("admin", ADMIN_PW) }.ok(sql);
        })
    };
    grants("REVOKE READ ON DATABASE public FROM reader").await.expect("revoke");
    let e = client.query(&stmt, &[&"carol"]).await.expect_err("revoked");
    let code = e.as_db_error().map(|d| d.code().code().to_owned());
    assert_eq!(code.as_deref(), Some("42501"), "{e:?}");
    grants("GRANT READ ON DATABASE public TO reader").await.expect("grant");
    assert_eq!(
        client.query(&stmt, &[&"carol"]).await.expect("granted again")[0].get::<_, i64>(0),
        1
    );
    drop(client);
    server.shutdown().await.expect("shutdown");

    // Users, grants and passwords survive a restart; the admin password is not applied again.
    let cfg = Config { admin_password: Some(Secret("another".into())), ..secured(dir.path()) };
    let server = Server::start(&cfg).await.expect("restart");
    let http_addr = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        let reader = As { http: &h, auth: basic("reader", "r2") };
        assert!(reader.ok("SELECT count(*) AS c FROM steps").contains("c"));
        assert_eq!(As { http: &h, auth: basic("admin", "another") }.sql("SELECT 1").0, 401);
        assert_eq!(As { http: &h, auth: basic("admin", ADMIN_PW) }.sql("SELECT 1").0, 200);
    })
    .await
    .expect("checks after restart");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reaching_other_machines_needs_users() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = Config { http_addr: "0.0.0.0:0".parse().expect("addr"), ..loopback(dir.path()) };
    let err = Server::start(&open).await.err().expect("refused").to_string();
    assert!(err.contains("--admin-password-file") && err.contains("--insecure"), "{err}");
    let insecure = Config { insecure: true, ..open.clone() };
    Server::start(&insecure).await.expect("insecure starts").shutdown().await.expect("stop");
    let secured = Config { admin_password: Some(Secret("pw".into())), ..open };
    let server = Server::start(&secured).await.expect("secured starts");
    let h = Http::new(([127, 0, 0, 1], server.http_addr.port()).into());
    let status = tokio::task::spawn_blocking(move || h.sql("SELECT 1").0).await.expect("task");
    assert_eq!(status, 401);
    server.shutdown().await.expect("stop");
    // The embedded default keeps working with no setup: loopback, no users, anyone may.
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("loopback");
    let h = Http::new(server.http_addr);
    let (status, body) =
        tokio::task::spawn_blocking(move || h.sql("SELECT 1 AS one")).await.expect("task");
    assert_eq!(status, 200, "{body}");
    server.shutdown().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_users_are_made_on_one_node_and_honoured_on_all() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, secured).await;
    let addrs: Vec<_> = servers.iter().map(|s| s.http_addr).collect();
    tokio::task::spawn_blocking(move || {
        let hs: Vec<Http> = addrs.iter().map(|a| Http::new(*a)).collect();
        let admin = |i: usize| As { http: &hs[i], auth: basic("admin", ADMIN_PW) };
        // The admin exists once, whichever node created it.
        let users = admin(1).ok("SELECT name FROM system.users");
        assert_eq!(users.matches("\"admin\"").count(), 1, "{users}");
        // Made on the last node (not the metadata leader's, in general).
        admin(2).ok("CREATE USER reader WITH PASSWORD 'r'");
        admin(2).ok("GRANT READ ON DATABASE public TO reader");
        let (s, b) = admin(0).write(
            "cpu,host=a usage=1 1700000000000000000\ncpu,host=b usage=2 1700000000000000000",
        );
        assert_eq!(s, 204, "{b}");
        for h in &hs {
            let reader = As { http: h, auth: basic("reader", "r") };
            until(20, "the user reaches every node", || reader.sql("SELECT 1").0 == 200);
            assert!(reader.ok("SELECT count(*) AS c FROM cpu").contains("2"));
            let (s, b) = reader.sql("DELETE FROM cpu WHERE host = 'a'");
            assert_eq!(s, 403, "{b}");
            assert_eq!(h.sql("SELECT 1").0, 401);
            // The cluster's id, its join tokens and the statements about them are the admin's.
            for sql in [
                "SELECT * FROM system.cluster",
                "SELECT * FROM system.join_tokens",
                "CREATE JOIN TOKEN",
                "ALTER CLUSTER FINALIZE UPGRADE",
            ] {
                let (s, b) = reader.sql(sql);
                assert_eq!(s, 403, "reader ran {sql}: {b}");
            }
        }
        let minted = admin(0).ok("CREATE JOIN TOKEN VALID FOR '10m' USES 2");
        assert!(minted.contains("\"token\":\"ebbj_"), "{minted}");
        let listing = || admin(1).ok("SELECT id, token, uses_left FROM system.join_tokens");
        until(20, "the token reaches every node", || listing().contains("\"uses_left\":2"));
        let listed = listing();
        assert!(!listed.contains("ebbj_"), "the list shows a secret: {listed}");
        // A cluster lists its tables as a single node does, to each user only what it may
        // read; its shards' catalogs show in system.tables, one row set per shard.
        let (s, b) = hs[1].post_with(
            "/write?db=other",
            b"secret,ssn=1 v=1 1700000000000000000",
            &[("Authorization", &basic("admin", ADMIN_PW))],
        );
        assert_eq!(s, 204, "{b}");
        let reader = As { http: &hs[0], auth: basic("reader", "r") };
        for view in ["tables", "columns"] {
            let sql = format!("SELECT DISTINCT table_schema FROM information_schema.{view}");
            let listed = reader.ok(&sql);
            assert!(listed.contains("public") && !listed.contains("other"), "{view}: {listed}");
        }
        let every = "SELECT DISTINCT table_schema FROM information_schema.tables";
        assert!(admin(2).ok(every).contains("other"), "the admin sees every database");
        // `columns` is PostgreSQL's, of the session's database alone.
        let columns = "SELECT DISTINCT table_schema FROM information_schema.columns";
        assert!(!admin(2).ok(columns).contains("other"), "{}", admin(2).ok(columns));
        let tables = admin(0).ok("SELECT shard, database, name FROM system.tables");
        let tables: serde_json::Value = serde_json::from_str(&tables).expect("json");
        let rows = tables.as_array().expect("rows");
        assert!(rows.iter().any(|r| r["name"] == "secret" && r["shard"].is_u64()), "{tables}");
        assert!(rows.iter().any(|r| r["name"] == "cpu"), "{tables}");
        // A cluster erasure names its issuer on every replica.
        admin(1).ok("ERASE WHERE host = 'b'");
        let rows = admin(2).ok("SELECT DISTINCT issued_by FROM system.deletions");
        let rows: serde_json::Value = serde_json::from_str(&rows).expect("json");
        let by: Vec<&str> =
            rows.as_array().expect("rows").iter().filter_map(|r| r["issued_by"].as_str()).collect();
        assert_eq!(by.len(), 1, "{rows}");
        assert!(by[0].starts_with("admin via http from 127.0.0.1:"), "{rows}");
    })
    .await
    .expect("checks");
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_guessed_from_an_address_is_refused_there_for_a_while() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let (http_addr, pg_port) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        let admin = As { http: &h, auth: basic("admin", ADMIN_PW) };
        admin.ok("SELECT 1");
        let limit = ebb_query::front::throttle::MAX_FAILURES;
        for i in 0..limit {
            let (s, body) =
                As { http: &h, auth: basic("admin", &format!("guess {i}")) }.sql("SELECT 1");
            assert_eq!(s, 401, "{body}");
        }
        // Now even the right password of that user is refused from this address, without
        // being checked, and told why.
        let (s, body) = admin.sql("SELECT 1");
        assert_eq!(s, 401);
        assert!(body.contains("too many failed login attempts"), "{body}");
        let (ok, _, err) = psql_as(pg_port, "admin", ADMIN_PW, "SELECT 1");
        assert!(!ok && err.contains("too many failed login attempts"), "psql too: {err}");
        assert!(h.metric("ebb_auth_failures_total") >= f64::from(limit + 1));
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}
