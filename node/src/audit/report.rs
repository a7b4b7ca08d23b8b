//! `ebb audit report`: every delete request of a period with its deadline, when it was
//! persisted on every replica, its slack, and its verification, as self-contained HTML (a
//! table and a chart of persistence latency against the deadline), JSON or CSV.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::VerifyReport;

/// One replica's row of `system.deletions`, as the report reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRow {
    /// Request id.
    pub id: u64,
    /// Request kind.
    pub kind: String,
    /// What it deletes.
    pub target: String,
    /// Who issued it (empty: not recorded).
    #[serde(default)]
    pub issued_by: String,
    /// Rows it hid on this replica's shard (`None`: not counted).
    pub rows: Option<u64>,
    /// Issue time (ms).
    pub issued_ms: u64,
    /// Deadline (ms), if any.
    pub deadline_ms: Option<u64>,
    /// Shard.
    pub shard: u64,
    /// Node.
    pub node: u64,
    /// When the replica applied it (ms).
    pub applied_ms: Option<u64>,
    /// When its data was gone from the replica (ms).
    pub persisted_ms: Option<u64>,
    /// The replica's status.
    pub replica_status: String,
    /// The request's status.
    pub status: String,
}

/// One request over all its replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRow {
    /// Request id.
    pub id: u64,
    /// `delete`, `erase`, `drop`, `retention`.
    pub kind: String,
    /// What it deletes.
    pub target: String,
    /// Who issued it: user, protocol and client address (empty: not recorded).
    pub issued_by: String,
    /// Rows deleted (over its shards; `None`: not counted, as for a table drop or a retention
    /// purge).
    pub rows: Option<u64>,
    /// Issue time (ms).
    pub issued_ms: u64,
    /// Deadline (ms), if any.
    pub deadline_ms: Option<u64>,
    /// Replicas it reached.
    pub replicas: u64,
    /// Of those, persisted.
    pub replicas_persisted: u64,
    /// When the last replica persisted it (ms), once all have.
    pub persisted_ms: Option<u64>,
    /// Deadline minus persistence time (ms; negative: late), once persisted.
    pub slack_ms: Option<i64>,
    /// `persisted`, `pending`, `at risk` or `late`.
    pub status: String,
    /// The verification, if one was run.
    pub verification: Option<Verification>,
}

/// A verification's outcome, in short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// The verdict.
    pub pass: bool,
    /// Replicas scanned.
    pub replicas: u64,
    /// Files (and memtables) scanned.
    pub sources: u64,
    /// Bytes they hold.
    pub bytes: u64,
    /// Covered values found.
    pub found: u64,
}

impl From<&VerifyReport> for Verification {
    fn from(v: &VerifyReport) -> Self {
        Verification {
            pass: v.pass,
            replicas: v.replicas.len() as u64,
            sources: v.sources_scanned,
            bytes: v.bytes_scanned,
            found: v.found,
        }
    }
}

/// The report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// When it was made (ms).
    pub generated_ms: u64,
    /// Start of the period (ms).
    pub since_ms: u64,
    /// The server it was made from.
    pub server: String,
    /// Every request issued in the period, oldest first.
    pub requests: Vec<RequestRow>,
}

impl Report {
    /// Groups replica rows into requests.
    pub fn new(server: &str, since_ms: u64, generated_ms: u64, rows: &[ReplicaRow]) -> Report {
        let mut requests: Vec<RequestRow> = Vec::new();
        let mut sorted: Vec<&ReplicaRow> = rows.iter().collect();
        sorted.sort_by_key(|r| (r.issued_ms, r.id, r.shard, r.node));
        for r in sorted {
            let i = match requests.iter().position(|q| q.id == r.id) {
                Some(i) => i,
                None => {
                    requests.push(RequestRow {
                        id: r.id,
                        kind: r.kind.clone(),
                        target: r.target.clone(),
                        issued_by: r.issued_by.clone(),
                        rows: None,
                        issued_ms: r.issued_ms,
                        deadline_ms: r.deadline_ms,
                        replicas: 0,
                        replicas_persisted: 0,
                        persisted_ms: None,
                        slack_ms: None,
                        status: r.status.clone(),
                        verification: None,
                    });
                    requests.len() - 1
                }
            };
            let q = &mut requests[i];
            q.replicas += 1;
            if r.persisted_ms.is_some() {
                q.replicas_persisted += 1;
                q.persisted_ms = q.persisted_ms.max(r.persisted_ms);
            }
        }
        for q in &mut requests {
            // Rows are per shard: count each shard once (its replicas agree).
            let mut shards: Vec<(u64, Option<u64>)> =
                rows.iter().filter(|r| r.id == q.id).map(|r| (r.shard, r.rows)).collect();
            shards.sort_unstable();
            shards.dedup_by_key(|s| s.0);
            q.rows = shards.iter().map(|s| s.1).sum();
            if q.replicas_persisted < q.replicas {
                q.persisted_ms = None;
            }
            q.slack_ms = match (q.deadline_ms, q.persisted_ms) {
                (Some(d), Some(p)) => Some(d as i64 - p as i64),
                _ => None,
            };
        }
        Report { generated_ms, since_ms, server: server.to_string(), requests }
    }

    /// Counts of requests by status, in a fixed order.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        ["persisted", "pending", "at risk", "late"]
            .iter()
            .map(|s| (*s, self.requests.iter().filter(|r| r.status == *s).count()))
            .collect()
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// As CSV, one line per request.
    pub fn to_csv(&self) -> String {
        let mut o = String::from(
            "id,kind,target,issued_by,rows,issued_at,deadline,persisted_at,slack_seconds,status,\
             replicas,replicas_persisted,verified,found,sources_scanned,bytes_scanned\n",
        );
        for r in &self.requests {
            let v = r.verification.as_ref();
            let _ = writeln!(
                o,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                r.id,
                r.kind,
                csv_field(&r.target),
                csv_field(&r.issued_by),
                r.rows.map(|n| n.to_string()).unwrap_or_default(),
                iso(Some(r.issued_ms)),
                iso(r.deadline_ms),
                iso(r.persisted_ms),
                r.slack_ms.map(|s| format!("{:.3}", s as f64 / 1000.0)).unwrap_or_default(),
                r.status,
                r.replicas,
                r.replicas_persisted,
                v.map(|v| if v.pass { "pass" } else { "fail" }).unwrap_or(""),
                v.map(|v| v.found.to_string()).unwrap_or_default(),
                v.map(|v| v.sources.to_string()).unwrap_or_default(),
                v.map(|v| v.bytes.to_string()).unwrap_or_default(),
            );
        }
        o
    }

    /// As a self-contained HTML page.
    pub fn to_html(&self) -> String {
        let mut o = String::new();
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>EbbDB deletion audit report</title><style>{CSS}</style></head><body>\
             <h1>Deletion audit report</h1><p class=\"meta\">Server {} &middot; requests issued \
             from {} to {} &middot; generated {}</p>",
            esc(&self.server),
            iso(Some(self.since_ms)),
            iso(Some(self.generated_ms)),
            iso(Some(self.generated_ms)),
        );
        o.push_str("<ul class=\"counts\">");
        for (s, n) in self.counts() {
            let _ = write!(o, "<li class=\"{}\" id=\"count-{}\">{n} {s}</li>", class(s), class(s));
        }
        o.push_str("</ul>");
        let verified = self.requests.iter().filter(|r| r.verification.is_some()).count();
        let passed = self
            .requests
            .iter()
            .filter(|r| r.verification.as_ref().is_some_and(|v| v.pass))
            .count();
        let _ = write!(
            o,
            "<p id=\"verification-summary\">{verified} verified on every replica; {passed} passed \
             (no deleted value found in any file, log segment or snapshot).</p>"
        );
        o.push_str("<h2>Persistence latency against the deadline</h2>");
        o.push_str(&self.chart());
        o.push_str(
            "<h2>Requests</h2><table id=\"requests\"><thead><tr><th>id</th><th>kind</th>\
             <th>what</th><th>issued by</th><th>rows</th><th>issued</th><th>deadline</th><th>persisted</th>\
             <th>slack</th><th>replicas</th><th>status</th><th>verification</th></tr></thead>\
             <tbody>",
        );
        for r in &self.requests {
            let v = match &r.verification {
                None => "not run".to_string(),
                Some(v) => format!(
                    "{}: {} found in {} files ({}) on {} replica(s)",
                    if v.pass { "pass" } else { "FAIL" },
                    v.found,
                    v.sources,
                    bytes(v.bytes),
                    v.replicas
                ),
            };
            let _ = write!(
                o,
                "<tr class=\"{}\" data-id=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td>\
                 <td>{}</td></tr>",
                class(&r.status),
                r.id,
                r.id,
                esc(&r.kind),
                esc(&r.target),
                if r.issued_by.is_empty() { "not recorded".to_string() } else { esc(&r.issued_by) },
                r.rows.map_or_else(|| "not counted".to_string(), |n| n.to_string()),
                iso(Some(r.issued_ms)),
                iso(r.deadline_ms),
                iso(r.persisted_ms),
                r.slack_ms.map(seconds).unwrap_or_default(),
                r.replicas_persisted,
                r.replicas,
                esc(&r.status),
                esc(&v),
            );
        }
        o.push_str("</tbody></table></body></html>\n");
        o
    }

    /// An SVG bar per request: time from issue to persistence (or to now while pending),
    /// with a mark at its deadline.
    fn chart(&self) -> String {
        let (w, row, left, right) = (900.0, 18.0, 150.0, 20.0);
        let shown: Vec<&RequestRow> = self.requests.iter().rev().take(200).rev().collect();
        let h = 40.0 + row * shown.len().max(1) as f64;
        let span = |r: &RequestRow| -> (f64, f64) {
            let end = r.persisted_ms.unwrap_or(self.generated_ms);
            let took = end.saturating_sub(r.issued_ms) as f64 / 1000.0;
            let allowed =
                r.deadline_ms.map_or(0.0, |d| d.saturating_sub(r.issued_ms) as f64 / 1000.0);
            (took, allowed)
        };
        let max = shown
            .iter()
            .map(|r| {
                let (a, b) = span(r);
                a.max(b)
            })
            .fold(1.0, f64::max);
        let axis = LogAxis::new(max);
        let x = |s: f64| left + (w - left - right) * axis.at(s);
        let mut o = format!(
            "<svg id=\"latency-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" \
             height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"persistence \
             latency against deadline\">"
        );
        for s in axis.ticks() {
            let _ = write!(
                o,
                "<line x1=\"{0:.1}\" y1=\"20\" x2=\"{0:.1}\" y2=\"{1:.1}\" class=\"grid\"/>\
                 <text x=\"{0:.1}\" y=\"14\" class=\"axis\">{2}</text>",
                x(s),
                h - 10.0,
                seconds((s * 1000.0) as i64).trim_start_matches('+'),
            );
        }
        for (i, r) in shown.iter().enumerate() {
            let y = 24.0 + row * i as f64;
            let (took, allowed) = span(r);
            let _ = write!(
                o,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{} {}</text>\
                 <rect class=\"bar {}\" data-id=\"{}\" x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" \
                 height=\"{:.1}\"><title>{}: {} after issue</title></rect>",
                left - 6.0,
                y + row * 0.6,
                esc(&r.kind),
                r.id % 100_000,
                class(&r.status),
                r.id,
                (x(took) - left).max(1.0),
                row * 0.7,
                r.id,
                seconds((took * 1000.0) as i64).trim_start_matches('+'),
            );
            if r.deadline_ms.is_some() {
                let _ = write!(
                    o,
                    "<line class=\"deadline\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\"/>",
                    x(allowed),
                    y - 2.0,
                    y + row * 0.7 + 2.0
                );
            }
        }
        o.push_str(
            "</svg><p class=\"legend\">Bars: time from issue to persistence on every \
                    replica (to now while pending). Black marks: the deadline. The time axis is \
                    logarithmic, so a 30-second deadline and a day-long one both show.</p>",
        );
        o
    }
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;width:100%;font-size:12px}td:nth-child(3){min-width:18em}th,td{border-bottom:1px solid #ddd;padding:4px 6px;\
text-align:left;vertical-align:top}th{background:#f4f4f4}.meta{color:#666}\
.counts{list-style:none;padding:0;display:flex;gap:1em}.counts li{padding:4px 10px;\
border-radius:4px;background:#eee}.persisted{color:#14632d}.late{color:#a11}\
.at-risk{color:#a65b00}.pending{color:#555}rect.bar{fill:#999}rect.persisted{fill:#2e9d4f}\
rect.late{fill:#c0392b}rect.at-risk{fill:#e67e22}line.deadline{stroke:#000;stroke-width:2}\
line.grid{stroke:#eee}text.axis{font-size:11px;text-anchor:middle;fill:#666}\
text.label{font-size:11px;text-anchor:end;fill:#333}.legend{color:#666;font-size:12px}";

fn class(status: &str) -> String {
    status.replace(' ', "-")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Milliseconds as `+1.234s`, `-2m05s`, `+3h02m`.
fn seconds(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "+" };
    let s = ms.unsigned_abs() as f64 / 1000.0;
    match s {
        s if s < 60.0 => format!("{sign}{s:.3}s"),
        s if s < 3600.0 => format!("{sign}{}m{:02}s", (s / 60.0) as u64, s as u64 % 60),
        s => format!("{sign}{}h{:02}m", (s / 3600.0) as u64, (s as u64 % 3600) / 60),
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Milliseconds since the epoch as an ISO 8601 UTC time (empty for `None`).
fn iso(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return String::new() };
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// A logarithmic time axis from [`LogAxis::FLOOR`] to the longest time shown: deadlines of
/// seconds and of days differ by four orders of magnitude, and a linear axis would leave the
/// short ones invisible.
#[derive(Debug, Clone, Copy)]
struct LogAxis {
    /// The longest time shown, in seconds.
    max: f64,
}

impl LogAxis {
    /// Times below this (in seconds) are drawn at the axis' start.
    const FLOOR: f64 = 0.1;
    /// Tick marks: round times, in seconds.
    const TICKS: [f64; 9] =
        [0.1, 1.0, 10.0, 60.0, 600.0, 3_600.0, 21_600.0, 86_400.0, 7.0 * 86_400.0];

    fn new(max: f64) -> LogAxis {
        LogAxis { max: max.max(Self::FLOOR * 10.0) }
    }

    /// Where `secs` falls, from 0 (the floor) to 1 (the longest time).
    fn at(&self, secs: f64) -> f64 {
        let span = (self.max / Self::FLOOR).ln();
        ((secs.max(Self::FLOOR) / Self::FLOOR).ln() / span).clamp(0.0, 1.0)
    }

    /// The tick marks within the axis, and its end.
    fn ticks(&self) -> Vec<f64> {
        let mut t: Vec<f64> = Self::TICKS.iter().copied().filter(|&t| t < self.max * 0.9).collect();
        t.push(self.max);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, shard: u64, node: u64, persisted: Option<u64>, status: &str) -> ReplicaRow {
        ReplicaRow {
            id,
            kind: "erase".into(),
            target: "ERASE WHERE user = 'a<b>'".into(),
            issued_by: "dpo via http from 127.0.0.1:5000".into(),
            rows: Some(10 * shard),
            issued_ms: 1_000,
            deadline_ms: Some(11_000),
            shard,
            node,
            applied_ms: Some(1_001),
            persisted_ms: persisted,
            replica_status: status.into(),
            status: status.into(),
        }
    }

    #[test]
    fn requests_combine_replicas_and_render() {
        let rows = vec![
            row(7, 1, 1, Some(3_000), "persisted"),
            row(7, 1, 2, Some(4_000), "persisted"),
            row(7, 2, 1, Some(3_500), "persisted"),
            row(8, 1, 1, None, "pending"),
        ];
        let r = Report::new("http://x", 0, 5_000, &rows);
        assert_eq!(r.requests.len(), 2);
        let q = &r.requests[0];
        assert_eq!((q.id, q.rows, q.replicas, q.replicas_persisted), (7, Some(30), 3, 3));
        assert_eq!((q.persisted_ms, q.slack_ms), (Some(4_000), Some(7_000)));
        assert_eq!(r.requests[1].persisted_ms, None);
        let html = r.to_html();
        assert!(html.contains("a&lt;b&gt;") && !html.contains("a<b>"), "escaped");
        assert_eq!(html.matches("<rect class=\"bar").count(), 2);
        assert!(html.contains("id=\"count-persisted\">1 persisted"));
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 3);
        let line = csv.lines().nth(1).unwrap();
        assert!(
            line.starts_with(
                "7,erase,ERASE WHERE user = 'a<b>',dpo via http from 127.0.0.1:5000,30,"
            ),
            "{line}"
        );
        assert!(html.contains("<td>dpo via http from 127.0.0.1:5000</td>"));
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_chart_shows_short_deadlines_beside_long_ones() {
        let axis = LogAxis::new(86_400.0);
        // A 30-second deadline takes more than a third of a day-long axis (1/2880 linearly).
        assert!(axis.at(30.0) > 0.4 && axis.at(30.0) < 0.5, "{}", axis.at(30.0));
        assert_eq!((axis.at(0.0), axis.at(86_400.0)), (0.0, 1.0));
        assert!(axis.at(1.0) < axis.at(10.0) && axis.at(10.0) < axis.at(60.0));
        assert_eq!(axis.ticks().last(), Some(&86_400.0));
        assert!(axis.ticks().contains(&60.0) && axis.ticks().contains(&3_600.0));
        // A retention purge of a day and an erasure of 30 s: the erasure's bar is no sliver.
        let mut rows = vec![row(1, 1, 1, Some(31_000), "persisted")];
        let mut day = row(2, 1, 1, Some(86_000_000), "persisted");
        day.deadline_ms = Some(86_401_000);
        rows.push(day);
        let html = Report::new("http://x", 0, 86_500_000, &rows).to_html();
        let width = |id: u64| -> f64 {
            let at = html.find(&format!("data-id=\"{id}\"")).unwrap();
            let rest = &html[at..];
            let w = rest.split("width=\"").nth(1).unwrap();
            w[..w.find('"').unwrap()].parse().unwrap()
        };
        assert!(width(1) > 0.4 * width(2), "{} against {}", width(1), width(2));
    }

    #[test]
    fn uncounted_rows_stay_uncounted() {
        // A table drop: one shard did not count its rows, so the request has no count.
        let mut rows = vec![row(9, 1, 1, Some(3_000), "persisted"), row(9, 2, 1, None, "pending")];
        rows[1].rows = None;
        for r in &mut rows {
            r.kind = "drop".into();
        }
        let r = Report::new("http://x", 0, 5_000, &rows);
        assert_eq!(r.requests[0].rows, None);
        assert!(r.to_html().contains("<td>not counted</td>"));
        let line = r.to_csv().lines().nth(1).unwrap().to_string();
        assert!(
            line.contains(",drop,ERASE WHERE user = 'a<b>',dpo via http from 127.0.0.1:5000,,"),
            "{line}"
        );
        assert!(r.to_json().contains("\"rows\": null"));
    }
}
