//! `ebb-bench security`: what TLS and authentication cost. Two `ebb server`s on loopback, run
//! one after the other on the same data: one plain (no users, HTTP), one secured as the README
//! tells users to run it (an admin, a `WRITE`+`READ` token sent as `Authorization: Bearer`,
//! HTTPS with a certificate from `ebb cert`). Measured: line-protocol ingest over
//! keep-alive connections (rows/s) and a small query's latency (one host, one hour, by
//! minute; median of sequential runs), with a new TLS connection per query as a second figure.
//! `RESULT` lines name the secured server `ebb` and the plain one `plain`, so a ratio below 1
//! is the cost.

use std::path::Path;

use crate::ebb_server::Server;
use crate::report::{median, Better, Comparison};
use crate::tsbs::{generate, Dataset, START_S};

/// Runs the comparison `repeat` times (plain and secured alternate) and reports medians.
pub fn security(
    work: &Path,
    ds: Dataset,
    clients: usize,
    reps: usize,
    repeat: usize,
) -> Result<Vec<Comparison>, String> {
    let batches = generate(ds, 5000);
    let t0 = START_S * 1_000_000_000;
    let h1 = t0 + 3600 * 1_000_000_000;
    let q = format!(
        "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS m, max(usage_user) \
         FROM cpu WHERE hostname = 'host_7' AND time >= to_timestamp_nanos({t0}) \
         AND time < to_timestamp_nanos({h1}) GROUP BY m ORDER BY m"
    );
    println!(
        "security {}: {} rows, {clients} clients; query median of {reps}; {repeat} rounds",
        ds.label(),
        ds.rows()
    );
    // [plain, secured] x [ingest, query kept alive, query on a new connection]
    let mut figures = [[Vec::new(), Vec::new(), Vec::new()], [Vec::new(), Vec::new(), Vec::new()]];
    for round in 0..repeat {
        for (i, secured) in [(0, false), (1, true)] {
            let dir = work.join(format!("security-{round}-{i}"));
            let _ = std::fs::remove_dir_all(&dir);
            let s = Server::start(&dir, secured, &[])?;
            let rate = s.ingest(&batches, ds.rows(), clients)?;
            let kept = s.latency(&q, reps, false)?;
            let fresh = s.latency(&q, reps, true)?;
            let name = if secured { "TLS + token" } else { "plain" };
            println!(
                "  round {round} {name:<12} ingest {rate:>9.0} rows/s   query {kept:>6.2} ms \
                 (new connection {fresh:>6.2} ms)"
            );
            figures[i][0].push(rate);
            figures[i][1].push(kept);
            figures[i][2].push(fresh);
            drop(s);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let metrics = [
        ("ingest_rows_per_sec", Better::Higher),
        ("small_query_ms", Better::Lower),
        ("small_query_new_connection_ms", Better::Lower),
    ];
    Ok(metrics
        .iter()
        .enumerate()
        .map(|(m, (metric, better))| Comparison {
            bench: "security".into(),
            metric: (*metric).into(),
            params: vec![("dataset".into(), ds.label()), ("clients".into(), clients.to_string())],
            ebb: median(&figures[1][m]),
            baseline: "plain".into(),
            base: median(&figures[0][m]),
            better: *better,
        })
        .collect())
}
