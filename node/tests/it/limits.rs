//! Resource limits against hostile or careless clients: a prepared statement naming a huge
//! placeholder number is refused, and the server keeps serving.

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
