//! `ebb erase` and `ebb audit`: erasure requests, verification of a request on every replica,
//! and the deletion audit report, through a server's HTTP API.

use std::io::Write;

use super::sql::{run_one, OutputFormat};
use super::url;
use crate::audit::report::{ReplicaRow, Report, Verification};
use crate::audit::VerifyReport;
use crate::error::{NodeError, Result};

fn agent() -> ureq::Agent {
    super::agent()
}

/// `ebb erase --tag user=alice`: runs `ERASE` and describes what it did.
pub fn erase(base: &str, db: &str, tag: &str, deadline: Option<&str>) -> Result<String> {
    let (name, value) = tag
        .split_once('=')
        .filter(|(n, _)| !n.is_empty())
        .ok_or_else(|| NodeError::Client(format!("--tag {tag:?}: give it as name=value")))?;
    let mut sql = format!(
        "ERASE WHERE \"{}\" = '{}' IN DATABASE \"{}\"",
        name.replace('"', "\"\""),
        value.replace('\'', "''"),
        db.replace('"', "\"\"")
    );
    if let Some(d) = deadline {
        sql.push_str(&format!(" DEADLINE '{}'", d.replace('\'', "''")));
    }
    let body = run_one(base, db, &sql, OutputFormat::Json)?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&body)
        .map_err(|e| NodeError::Client(format!("unexpected answer {body:?}: {e}")))?;
    let sum = |k: &str| rows.iter().filter_map(|r| r.get(k).and_then(|v| v.as_u64())).sum::<u64>();
    let id = rows.iter().find_map(|r| r.get("erasure_id").and_then(|v| v.as_u64()));
    let Some(id) = id else {
        return Err(NodeError::Client(format!("unexpected answer {body:?}")));
    };
    Ok(format!(
        "erased {} rows of {} series in {} tables: erasure id {id}\n\
         follow it with: ebb sql -c \"SELECT * FROM system.deletions WHERE id = {id}\"\n\
         prove it once persisted with: ebb audit verify {id}\n",
        sum("rows_erased"),
        sum("series"),
        rows.iter().filter_map(|r| r.get("tables").and_then(|v| v.as_u64())).max().unwrap_or(0),
    ))
}

/// Asks the server to verify request `id` on every replica.
pub fn fetch_verify(base: &str, id: u64) -> Result<VerifyReport> {
    let mut resp = agent()
        .get(&url(base, "/v1/audit/verify"))
        .query("id", id.to_string())
        .call()
        .map_err(|e| NodeError::Client(format!("cannot reach {base}: {e}")))?;
    let status = resp.status();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| NodeError::Client(format!("reading the response: {e}")))?;
    if !status.is_success() {
        return Err(NodeError::Client(format!("ERROR ({status}): {body}")));
    }
    serde_json::from_str(&body).map_err(|e| NodeError::Client(format!("unexpected answer: {e}")))
}

/// `ebb audit verify ID`: the verification as text (or JSON), and its verdict.
pub fn verify(base: &str, id: u64, json: bool) -> Result<(String, bool)> {
    let v = fetch_verify(base, id)?;
    if json {
        return Ok((serde_json::to_string_pretty(&v).unwrap_or_default() + "\n", v.pass));
    }
    let mut o = format!("request {id}\n");
    for r in &v.replicas {
        let files = r.sources.len();
        let bytes: u64 = r.sources.iter().map(|s| s.bytes).sum();
        let entries: u64 = r.sources.iter().map(|s| s.entries).sum();
        let what = match (&r.error, r.holds_request) {
            (Some(e), _) => format!("NOT SCANNED: {e}"),
            (None, false) => "holds no delete of this request (nothing was deleted here)".into(),
            (None, true) => format!(
                "scanned {files} files ({bytes} bytes, {entries} entries): {} found; \
                 {} files ({} bytes) accounted for byte by byte: {} unaccounted runs",
                r.found(),
                r.files_accounted,
                r.bytes_accounted,
                r.unaccounted.len()
            ),
        };
        match &r.copy {
            Some(copy) => o.push_str(&format!("  {copy} shard {}: {what}\n", r.shard)),
            None => o.push_str(&format!("  shard {} node {}: {what}\n", r.shard, r.node)),
        }
        for u in r.unaccounted.iter().take(20) {
            o.push_str(&format!(
                "    UNACCOUNTED {} {}: {} bytes at offset {}\n",
                u.kind, u.file, u.len, u.offset
            ));
        }
        for s in r.sources.iter().filter(|s| s.found > 0) {
            o.push_str(&format!(
                "    {} {}: {} covered values, e.g. {}\n",
                s.kind,
                s.name,
                s.found,
                s.examples.first().map(String::as_str).unwrap_or("")
            ));
        }
    }
    let unaccounted: usize = v.replicas.iter().map(|r| r.unaccounted.len()).sum();
    o.push_str(&format!(
        "{}: {} files, {} bytes, {} entries scanned on {} replica(s) and {} backup part(s); \
         {} deleted values found; {unaccounted} unaccounted byte runs\n",
        if v.pass { "PASS" } else { "FAIL" },
        v.sources_scanned,
        v.bytes_scanned,
        v.entries_scanned,
        v.replicas.iter().filter(|r| r.copy.is_none()).count(),
        v.replicas.iter().filter(|r| r.copy.is_some()).count(),
        v.found
    ));
    Ok((o, v.pass))
}

/// Which requests `ebb audit report` verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyScope {
    /// Only erasures.
    Erasures,
    /// Erasures, `DELETE`s and dropped tables (not retention purges).
    Deletes,
    /// Every persisted request.
    All,
    /// None.
    None,
}

/// Format of `ebb audit report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A self-contained HTML page with a chart.
    Html,
    /// JSON.
    Json,
    /// CSV, one line per request.
    Csv,
}

/// `ebb audit report`: every request issued in the last `since`, verified per `scope`.
pub fn report(base: &str, since: &str, format: ReportFormat, scope: VerifyScope) -> Result<String> {
    let span = ebb_query::sql::ddl::parse_retention(since).ok().flatten().ok_or_else(|| {
        NodeError::Client(format!("--since {since:?}: give a duration such as 30d"))
    })?;
    let now = ebb_query::now_ms();
    let since_ms = now.saturating_sub(span.as_millis() as u64);
    let ms = |c: &str| format!("CAST({c} AS BIGINT) / 1000000 AS {c}_ms");
    let sql = format!(
        "SELECT id, kind, target, issued_by, rows, {}, {}, shard, node, {}, {}, replica_status, \
         status \
         FROM system.deletions WHERE issued_at >= to_timestamp_millis({since_ms})",
        ms("issued_at"),
        ms("deadline"),
        ms("applied_at"),
        ms("persisted_at")
    );
    let body = run_one(base, "public", &sql, OutputFormat::Json)?;
    let raw: Vec<serde_json::Value> = serde_json::from_str(&body)
        .map_err(|e| NodeError::Client(format!("unexpected answer: {e}")))?;
    let u = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64());
    let s = |v: &serde_json::Value, k: &str| {
        v.get(k).and_then(|x| x.as_str()).unwrap_or_default().to_string()
    };
    let rows: Vec<ReplicaRow> = raw
        .iter()
        .map(|v| ReplicaRow {
            id: u(v, "id").unwrap_or(0),
            kind: s(v, "kind"),
            target: s(v, "target"),
            issued_by: s(v, "issued_by"),
            rows: u(v, "rows"),
            issued_ms: u(v, "issued_at_ms").unwrap_or(0),
            deadline_ms: u(v, "deadline_ms"),
            shard: u(v, "shard").unwrap_or(0),
            node: u(v, "node").unwrap_or(0),
            applied_ms: u(v, "applied_at_ms"),
            persisted_ms: u(v, "persisted_at_ms"),
            replica_status: s(v, "replica_status"),
            status: s(v, "status"),
        })
        .collect();
    let mut report = Report::new(base, since_ms, now, &rows);
    let wanted = |kind: &str| match scope {
        VerifyScope::Erasures => kind == "erase",
        VerifyScope::Deletes => kind != "retention",
        VerifyScope::All => true,
        VerifyScope::None => false,
    };
    let todo: Vec<usize> = (0..report.requests.len())
        .filter(|&i| wanted(&report.requests[i].kind) && report.requests[i].persisted_ms.is_some())
        .collect();
    // On a terminal one line is rewritten in place; elsewhere each step is a line of its own.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    for (n, &i) in todo.iter().enumerate() {
        let id = report.requests[i].id;
        let line = format!("verifying request {}/{} ({id})", n + 1, todo.len());
        match terminal {
            true => eprint!("\r{line}"),
            false => eprintln!("{line}"),
        }
        let _ = std::io::stderr().flush();
        let v = fetch_verify(base, id);
        if terminal && (v.is_err() || n + 1 == todo.len()) {
            eprintln!();
        }
        report.requests[i].verification = Some(Verification::from(&v?));
    }
    Ok(match format {
        ReportFormat::Html => report.to_html(),
        ReportFormat::Json => report.to_json() + "\n",
        ReportFormat::Csv => report.to_csv(),
    })
}
