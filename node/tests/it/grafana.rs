//! The Grafana dashboard shipped in the Helm chart (`helm/ebb/dashboards/ebb.json`): every
//! panel's SQL, with Grafana's `$__timeFilter` macro and the dashboard's variables expanded as
//! Grafana's PostgreSQL data source expands them, runs through `psql` against a three-node
//! cluster (the chart's deployment) holding data, deletes and compactions, and answers rows.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::{loopback, psql, start_cluster, until, Http};
use ebb_node::config::Config;

/// `$__timeFilter(col)` over the last six hours (the dashboard's default range), as Grafana
/// writes it: `col BETWEEN '<from>' AND '<to>'` in RFC 3339, UTC.
fn expand(sql: &str, table: &str, now_s: i64) -> String {
    let rfc = |s: i64| {
        chrono::DateTime::from_timestamp(s, 0)
            .expect("time")
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    let mut out = sql.replace("$table", table);
    while let Some(at) = out.find("$__timeFilter(") {
        let rest = &out[at + "$__timeFilter(".len()..];
        let end = rest.find(')').expect("macro closes");
        let col = rest[..end].to_string();
        let with = format!("{col} BETWEEN '{}' AND '{}'", rfc(now_s - 6 * 3600), rfc(now_s + 60));
        out.replace_range(at..at + "$__timeFilter(".len() + end + 1, &with);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_panel_answers_through_postgres() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../helm/ebb/dashboards/ebb.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("json");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers =
        start_cluster(&dirs, |d| Config { shards: 4, replication: 2, ..loopback(d) }).await;
    let (http, pg) = (servers[0].http_addr, servers[1].pg_addr.port());
    tokio::task::spawn_blocking(move || {
        until(60, "the cluster ready", || Http::new(http).get("/ready").0 == 200);
        let h = Http::new(http);
        let now_s = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64;
        let body: String = (0..2_000)
            .map(|i| format!("cpu,host=h{} usage={} {}\n", i % 20, i % 100, (now_s - i) * 1_000_000_000))
            .collect();
        assert_eq!(h.post("/write?db=public", &body).0, 204);
        // A delete and an erasure with a short deadline: requests in system.deletions, and the
        // flushes and compactions that persist them in system.compactions.
        assert_eq!(h.sql("DELETE FROM cpu WHERE host = 'h0'").0, 200);
        assert_eq!(h.sql("ERASE WHERE host = 'h1' DEADLINE '20s'").0, 200);
        until(90, "the erasure persisted on every replica", || {
            let (_, body) = h.sql("SELECT count(*) AS c FROM system.deletions WHERE kind = 'erase' AND status = 'persisted'");
            body.contains("\"c\":") && !body.contains("\"c\":0")
        });

        // The `table` variable's query, then every panel's.
        let var = dashboard["templating"]["list"]
            .as_array()
            .expect("variables")
            .iter()
            .find(|v| v["name"] == "table")
            .expect("table variable");
        let (ok, tables, err) = psql(pg, var["query"].as_str().expect("query"));
        assert!(ok && tables.lines().any(|t| t == "cpu"), "{tables} {err}");
        let panels = dashboard["panels"].as_array().expect("panels");
        assert!(panels.len() >= 10, "{} panels", panels.len());
        let mut answers = std::collections::BTreeMap::new();
        for p in panels {
            let title = p["title"].as_str().expect("title");
            for t in p["targets"].as_array().expect("targets") {
                let sql = expand(t["rawSql"].as_str().expect("rawSql"), "cpu", now_s);
                assert!(!sql.contains('$'), "{title}: unexpanded {sql}");
                let (ok, out, err) = psql(pg, &sql);
                assert!(ok, "panel {title:?}: {sql}\n{err}");
                assert!(!out.trim().is_empty(), "panel {title:?} answered no rows: {sql}");
                answers.insert(title.to_string(), out);
            }
        }
        // Answers that must hold on this cluster.
        assert_eq!(answers["Late"].trim(), "0");
        assert!(answers["Persisted"].trim().parse::<u64>().expect("count") >= 1);
        assert_eq!(answers["Raft: nodes"].lines().count(), 3, "{}", answers["Raft: nodes"]);
        // A gauge: an election on a loaded machine can leave a shard leaderless for a moment,
        // so the panel is asked again until every shard has a leader (its other columns hold).
        let title = "Raft: shards without a leader, moving, splitting";
        let panel = panels.iter().find(|p| p["title"] == title).expect("leaders panel");
        let sql = expand(panel["targets"][0]["rawSql"].as_str().expect("rawSql"), "cpu", now_s);
        let mut answer = answers[title].trim().to_string();
        until(60, "every shard with a leader", || {
            let shards: Vec<&str> = answer.split('|').collect();
            assert_eq!(shards[1..], ["0", "0", "4"], "{answer}");
            if shards[0] == "0" {
                return true;
            }
            answer = psql(pg, &sql).1.trim().to_string();
            false
        });
        assert!(answers["Tables"].contains("public|cpu"), "{}", answers["Tables"]);
        let ingested: u64 = answers["Rows ingested per minute ($table)"]
            .lines()
            .filter_map(|l| l.rsplit('|').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(ingested, 2_000 - 100 - 100, "rows left after the DELETE and the ERASE");
        // Statements from both nodes that ran them: HTTP on the first, psql on the second.
        let kinds = &answers["Statements per minute, by kind"];
        for kind in ["select", "delete", "erase"] {
            assert!(kinds.lines().any(|l| l.contains(&format!("|{kind}|"))), "{kind}: {kinds}");
        }
        let (ok, by_node, err) = psql(
            pg,
            "SELECT node, protocol, kind, count(*) FROM system.queries \
             WHERE kind IN ('erase', 'select') AND ok GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        );
        assert!(ok, "{err}");
        let ids: Vec<String> = [("http_addr", http.port()), ("pg_addr", pg)]
            .iter()
            .map(|(col, port)| {
                let sql = format!("SELECT id FROM system.nodes WHERE {col} LIKE '%:{port}'");
                let (ok, id, err) = psql(pg, &sql);
                assert!(ok && id.trim().lines().count() == 1, "{id} {err}");
                id.trim().to_string()
            })
            .collect();
        assert!(by_node.lines().any(|l| l.starts_with(&format!("{}|http|erase|1", ids[0]))), "{by_node}");
        assert!(by_node.lines().any(|l| l.starts_with(&format!("{}|postgres|select|", ids[1]))), "{by_node}");
        let (ok, failed, err) = psql(pg, "SELECT count(*) FROM system.queries WHERE NOT ok");
        assert!(ok && failed.trim() == "0", "{failed} {err}");
        assert!(!psql(pg, "SELECT * FROM no_such_table").0);
        let (_, failed, _) = psql(pg, "SELECT kind FROM system.queries WHERE NOT ok");
        assert_eq!(failed.trim(), "error", "the failed statement is recorded");
    })
    .await
    .expect("panels");
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

/// What Grafana's PostgreSQL data source sends while a user builds a panel: its table picker
/// (every table outside the system schemas, named relative to the search path), its column
/// picker for the chosen table (`parse_ident` of the qualified name), and a time-series query
/// as its `$__timeGroupAlias` and `$__timeFilter` macros expand. Each answers through `psql`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_source_pickers_and_a_time_series_query_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ebb_node::server::Server::start(&loopback(dir.path())).await.expect("start");
    let (http, pg) = (server.http_addr, server.pg_addr.port());
    tokio::task::spawn_blocking(move || {
        let lines: String = (0..120)
            .map(|i| {
                format!("weather,city=c{} temp={}.5 {}\n", i % 3, i % 40, 1_704_067_200 + i * 30)
            })
            .collect();
        let (s, b) = Http::new(http).post("/write?db=public&precision=s", &lines);
        assert_eq!(s, 204, "{b}");
        let run = |sql: &str| {
            let (ok, out, err) = psql(pg, sql);
            assert!(ok, "{sql}\n{err}");
            out
        };
        // The search path's schemas, as the pickers compute them.
        let in_path = "quote_ident(table_schema) IN (SELECT CASE WHEN trim(s[i]) = '\"$user\"' \
             THEN user ELSE trim(s[i]) END FROM generate_series(array_lower(string_to_array(\
             current_setting('search_path'), ','), 1), array_upper(string_to_array(\
             current_setting('search_path'), ','), 1)) AS i, \
             string_to_array(current_setting('search_path'), ',') s)";
        let tables = run(&format!(
            "SELECT CASE WHEN {in_path} THEN quote_ident(table_name) \
             ELSE quote_ident(table_schema) || '.' || quote_ident(table_name) END AS \"table\" \
             FROM information_schema.tables \
             WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') \
             ORDER BY CASE WHEN {in_path} THEN 0 ELSE 1 END, 1"
        ));
        assert!(tables.lines().any(|t| t == "weather" || t == "public.weather"), "{tables}");
        let columns = run("SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" \
             FROM information_schema.columns WHERE \
             CASE WHEN array_length(parse_ident('public.weather'), 1) = 2 \
             THEN quote_ident(table_schema) = (parse_ident('public.weather'))[1] \
             AND quote_ident(table_name) = (parse_ident('public.weather'))[2] \
             ELSE quote_ident(table_name) = 'public.weather' END");
        let names: Vec<&str> = columns.lines().filter_map(|l| l.split('|').next()).collect();
        assert_eq!(names, ["time", "city", "temp"], "{columns}");
        let series =
            run("SELECT floor(extract(epoch from time)/600)*600 AS \"time\", city AS metric, \
             avg(temp) AS value FROM weather \
             WHERE time BETWEEN '2024-01-01T00:00:00Z' AND '2024-01-01T01:00:00Z' \
             GROUP BY 1, 2 ORDER BY 1, 2");
        // 120 points 30 s apart: an hour, six 10-minute buckets for each of three cities.
        assert_eq!(series.lines().count(), 18, "{series}");
        assert!(series.starts_with("1704067200|c0|"), "{series}");
    })
    .await
    .expect("queries");
    server.shutdown().await.expect("stop");
}
