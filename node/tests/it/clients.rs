//! PostgreSQL clients nobody here wrote, unchanged, against a server with users: psql's
//! meta-commands (`\l \dt \d TABLE \dn \du`), the PostgreSQL JDBC driver (typed prepared
//! statements, a batch INSERT, `DatabaseMetaData`: `JdbcCheck.java`), SQLAlchemy 2 with
//! psycopg 3 and pandas (`sqlalchemy_check.py`), node-postgres (`pg_check.js`) and the catalog
//! queries of DBeaver's navigator and Metabase's sync (`catalog_replay.py`). Each user
//! sees only the databases and tables it may read. The InfluxDB v2 Python client writes line
//! protocol with an API token (`influx_v2_check.py`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{psql_as, ready_cluster, secured, ADMIN_PW};
use ebb_node::config::Config;
use ebb_node::server::Server;

/// The client programs' directory.
fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// What `.ci/run` installs the clients into (`EBB_CI_VENV`, and the jars beside it).
fn venv() -> PathBuf {
    std::env::var_os("EBB_CI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/ebb-ci-venv")
    })
}

/// Runs `program` with `args`, failing the test with its output unless it exits 0 having
/// printed `passed`.
fn run_client(mut program: Command, passed: &str) {
    let out = program.output().expect("run the client");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains(passed), "client failed:\n{stdout}\n{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn psql_jdbc_and_sqlalchemy_read_the_catalog_as_each_user_may() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let port = server.pg_addr.port();
    tokio::task::spawn_blocking(move || postgres_clients(port)).await.expect("clients");
    server.shutdown().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgresql_clients_on_a_three_node_cluster() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers =
        ready_cluster(&dirs, |d| Config { shards: 4, replication: 2, ..secured(d) }).await;
    // Through a node that is not the first: it routes to every shard's leader.
    let port = servers[2].pg_addr.port();
    tokio::task::spawn_blocking(move || postgres_clients(port)).await.expect("clients");
    for s in servers {
        s.shutdown().await.expect("stop");
    }
}

/// psql, pgjdbc, SQLAlchemy and node-postgres against the PostgreSQL port `port` of a server
/// (or cluster node) with users.
fn postgres_clients(port: u16) {
    {
        let admin = |sql: &str| {
            let (ok, out, err) = psql_as(port, "admin", ADMIN_PW, sql);
            assert!(ok, "{sql}: {err}");
            out
        };
        admin("CREATE TABLE cpu (host TAG, usage DOUBLE, idle BIGINT)");
        admin("INSERT INTO cpu (time, host, usage, idle) VALUES ('2024-01-01T00:00:00Z', 'a', 1.5, 2)");
        admin("CREATE DATABASE secret");
        admin("CREATE TABLE secret.salaries (name TAG, amount DOUBLE)");
        admin("CREATE USER reader WITH PASSWORD 'r-pass'");
        admin("GRANT READ ON DATABASE public TO reader");
        admin("CREATE USER writer WITH PASSWORD 'w-pass'");
        admin("GRANT WRITE ON DATABASE public TO writer");

        // psql's meta-commands (unaligned, tuples only: one row a line, `|` between fields).
        assert_eq!(admin("\\dt"), "public|cpu|table|postgres");
        let columns = admin("\\d cpu");
        assert!(
            columns.contains("time|timestamp without time zone||not null|")
                && columns.contains("host|text|||")
                && columns.contains("usage|double precision|||")
                && columns.contains("idle|bigint|||"),
            "{columns}"
        );
        let described = admin("\\d+ cpu");
        assert!(
            described.contains("time|timestamp without time zone||not null||plain|")
                && described.contains("host|text||||extended|"),
            "{described}"
        );
        let databases = admin("\\l");
        let names: Vec<&str> = databases.lines().filter_map(|l| l.split('|').next()).collect();
        // The databases there are, and no other (no `postgres`).
        assert_eq!(names, ["public", "secret"], "{databases}");
        assert_eq!(admin("\\dn"), "public|postgres");
        let roles = admin("\\du");
        for user in ["admin", "reader", "writer"] {
            assert!(roles.lines().any(|l| l.starts_with(&format!("{user}|"))), "{roles}");
        }
        assert_eq!(
            admin("SELECT current_database(), current_schema(), current_user, version() LIKE 'PostgreSQL 16%'"),
            "public|public|admin|t"
        );
        assert_eq!(admin("SHOW search_path"), "public");

        // A reader sees its database, not the secret one, and only itself among the users.
        let reader = |sql: &str| {
            let (ok, out, err) = psql_as(port, "reader", "r-pass", sql);
            assert!(ok, "{sql}: {err}");
            out
        };
        assert_eq!(reader("\\dt"), "public|cpu|table|postgres");
        let listed = reader("\\l");
        assert!(listed.contains("public|") && !listed.contains("secret"), "{listed}");
        let roles = reader("\\du");
        assert!(roles.starts_with("reader|") && roles.lines().count() == 1, "{roles}");
        assert_eq!(
            reader("SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'salaries'"),
            "0"
        );
        // What clients ask before offering a table: the user's own grants (another user's
        // only to an admin).
        assert_eq!(
            reader(
                "SELECT has_table_privilege('cpu', 'SELECT'), has_table_privilege('cpu', 'INSERT'), \
                 has_table_privilege('secret.salaries', 'SELECT'), \
                 has_database_privilege('secret', 'CONNECT'), \
                 has_table_privilege('admin', 'cpu', 'SELECT')"
            ),
            "t|f|f|f|"
        );
        assert_eq!(
            admin(
                "SELECT has_table_privilege('writer', 'cpu', 'INSERT'), \
                 has_table_privilege('writer', 'cpu', 'SELECT, INSERT'), \
                 has_table_privilege('writer', 'cpu', 'SELECT')"
            ),
            "t|t|f"
        );
        // A writer may not read, so it is shown no table at all.
        let (ok, out, err) = psql_as(port, "writer", "w-pass", "\\dt");
        assert!(ok && out.is_empty(), "{out} {err}");

        // pgjdbc, as DBeaver and Metabase use it.
        let jar = venv().join("jars/postgresql-42.7.14.jar");
        assert!(jar.exists(), "{} is missing: run .ci/run once", jar.display());
        let mut java = Command::new("java");
        java.arg("-cp").arg(&jar).arg(clients().join("JdbcCheck.java"));
        java.args([&port.to_string(), "admin", ADMIN_PW, "jdbc_check"]);
        run_client(java, "JDBC CHECKS PASSED");

        // SQLAlchemy 2 + psycopg 3 + pandas, as notebooks and Superset use them.
        let mut python = Command::new(venv().join("bin/python"));
        python.arg(clients().join("sqlalchemy_check.py"));
        python.args([&port.to_string(), "admin", ADMIN_PW, "sqlalchemy_check"]);
        run_client(python, "SQLALCHEMY CHECKS PASSED");

        // The catalog queries of DBeaver's navigator and Metabase's sync, as their sources
        // write them, with pgjdbc's server-side parameters.
        let mut python = Command::new(venv().join("bin/python"));
        python.arg(clients().join("catalog_replay.py"));
        python.args([&port.to_string(), "admin", ADMIN_PW, "public", "cpu"]);
        run_client(python, "CATALOG REPLAY PASSED");

        // node-postgres, as Node.js services use it (installed beside the venv by .ci/run).
        let mut node = Command::new("node");
        node.env("NODE_PATH", venv().join("node/node_modules"));
        node.arg(clients().join("pg_check.js"));
        node.args([&port.to_string(), "admin", ADMIN_PW, "node_pg_check"]);
        run_client(node, "NODE-POSTGRES CHECKS PASSED");
        // A current_setting() as drivers ask for it.
        assert_eq!(
            admin("SELECT current_setting('search_path'), current_setting('server_version_num')"),
            "public|160006"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_influxdb_v2_client_writes_with_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let (port, http) = (server.pg_addr.port(), server.http_addr);
    tokio::task::spawn_blocking(move || influx_client(port, http)).await.expect("client");
    server.shutdown().await.expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_influxdb_v2_client_writes_to_a_three_node_cluster() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers =
        ready_cluster(&dirs, |d| Config { shards: 4, replication: 2, ..secured(d) }).await;
    let (port, http) = (servers[1].pg_addr.port(), servers[2].http_addr);
    tokio::task::spawn_blocking(move || influx_client(port, http)).await.expect("client");
    for s in servers {
        s.shutdown().await.expect("stop");
    }
}

/// The InfluxDB v2 client writes through HTTP address `http` with a token minted over the
/// PostgreSQL port `port`; what it wrote is read back there.
fn influx_client(port: u16, http: std::net::SocketAddr) {
    {
        let admin = |sql: &str| {
            let (ok, out, err) = psql_as(port, "admin", ADMIN_PW, sql);
            assert!(ok, "{sql}: {err}");
            out
        };
        admin("CREATE USER telegraf WITH PASSWORD 't-pass'");
        admin("GRANT WRITE ON DATABASE public TO telegraf");
        let token = admin("CREATE TOKEN FOR telegraf");
        let token = token.split('|').find(|f| f.starts_with("ebb_")).expect("a token").to_string();
        let mut python = Command::new(venv().join("bin/python"));
        python.arg(clients().join("influx_v2_check.py"));
        python.args([&format!("http://{http}"), &token, "public"]);
        run_client(python, "INFLUX V2 CHECKS PASSED");
        assert_eq!(
            admin("SELECT count(*), count(DISTINCT city), sum(CASE WHEN rain THEN 1 ELSE 0 END) FROM weather"),
            "11|4|5"
        );
    }
}
