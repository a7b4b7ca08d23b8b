//! Prometheus metrics: request counters kept here, engine figures read when scraped.

use std::collections::HashSet;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_query::Database;

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters of the server's front ends.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Line-protocol write requests.
    pub write_requests: Counter,
    /// Write requests rejected.
    pub write_errors: Counter,
    /// Lines accepted.
    pub lines_written: Counter,
    /// Rows (points) written.
    pub rows_written: Counter,
    /// SQL requests over HTTP.
    pub sql_requests: Counter,
    /// SQL requests that failed.
    pub sql_errors: Counter,
    /// PostgreSQL connections accepted.
    pub pg_connections: Counter,
    /// Retention purges written.
    pub retention_purges: Counter,
    /// Rollup buckets recomputed from their sources.
    pub rollup_buckets: Counter,
    /// Samples written by Prometheus remote write.
    pub prometheus_samples_written: Counter,
    /// Remote-write samples not stored (NaN or infinite values, series refused).
    pub prometheus_samples_skipped: Counter,
    /// Prometheus remote read requests.
    pub prometheus_reads: Counter,
    /// Delete requests seen late (by this process), for `ebb_deletions_late_total`.
    pub late_seen: parking_lot::Mutex<std::collections::HashSet<u64>>,
}

fn line(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

impl Metrics {
    /// The Prometheus text exposition of the counters and the state of `engines`: the single
    /// node's database (shard `None`), or every shard replica a cluster node holds. Sizes and
    /// counts are summed over them; sequence numbers are given per shard.
    pub fn render(&self, engines: &[(Option<u64>, Arc<Database>)]) -> String {
        let mut o = String::new();
        let c = |o: &mut String, name: &str, help: &str, v: &Counter| {
            line(o, name, "counter", help, v.get())
        };
        c(
            &mut o,
            "ebb_write_requests_total",
            "Line-protocol write requests.",
            &self.write_requests,
        );
        c(&mut o, "ebb_write_errors_total", "Write requests rejected.", &self.write_errors);
        c(&mut o, "ebb_lines_written_total", "Line-protocol lines accepted.", &self.lines_written);
        c(&mut o, "ebb_rows_written_total", "Rows written.", &self.rows_written);
        c(&mut o, "ebb_sql_requests_total", "SQL requests over HTTP.", &self.sql_requests);
        c(&mut o, "ebb_sql_errors_total", "SQL requests that failed.", &self.sql_errors);
        c(
            &mut o,
            "ebb_pg_connections_total",
            "PostgreSQL connections accepted.",
            &self.pg_connections,
        );
        c(
            &mut o,
            "ebb_retention_purges_total",
            "Retention purges written.",
            &self.retention_purges,
        );
        c(
            &mut o,
            "ebb_rollup_buckets_total",
            "Rollup buckets recomputed from their sources.",
            &self.rollup_buckets,
        );
        c(
            &mut o,
            "ebb_prometheus_samples_written_total",
            "Samples written by Prometheus remote write.",
            &self.prometheus_samples_written,
        );
        c(
            &mut o,
            "ebb_prometheus_samples_skipped_total",
            "Remote-write samples not stored: NaN or infinite values, or of series refused.",
            &self.prometheus_samples_skipped,
        );
        c(
            &mut o,
            "ebb_prometheus_reads_total",
            "Prometheus remote read requests.",
            &self.prometheus_reads,
        );
        let stats: Vec<_> = engines.iter().map(|(_, db)| db.engine().stats()).collect();
        let levels = stats.iter().map(|s| s.levels.len()).max().unwrap_or(0);
        let level_sum = |f: &dyn Fn(&ebb_storage::LevelStats) -> u64| -> Vec<u64> {
            (0..levels).map(|i| stats.iter().filter_map(|s| s.levels.get(i)).map(f).sum()).collect()
        };
        let labelled = |o: &mut String, name: &str, help: &str, values: &[u64]| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (i, v) in values.iter().enumerate() {
                let _ = writeln!(o, "{name}{{level=\"{i}\"}} {v}");
            }
        };
        labelled(&mut o, "ebb_level_bytes", "Bytes of SSTs per level.", &level_sum(&|l| l.bytes));
        labelled(
            &mut o,
            "ebb_level_files",
            "SST files per level.",
            &level_sum(&|l| l.files as u64),
        );
        let sum =
            |f: &dyn Fn(&ebb_storage::EngineStats) -> u64| -> u64 { stats.iter().map(f).sum() };
        line(
            &mut o,
            "ebb_memtable_bytes",
            "gauge",
            "Bytes in the active memtable.",
            sum(&|s| s.memtable_bytes as u64),
        );
        if let Some(b) =
            engines.iter().find_map(|(_, db)| db.engine().options().write_budget.clone())
        {
            line(
                &mut o,
                "ebb_memtable_budget_used_bytes",
                "gauge",
                "Memtable bytes (active and sealed) of the engines sharing the memtable budget, \
                 as they last reported them; past the limit, written engines flush early.",
                b.used() as u64,
            );
            line(
                &mut o,
                "ebb_memtable_budget_limit_bytes",
                "gauge",
                "The memtable budget.",
                b.limit() as u64,
            );
            line(
                &mut o,
                "ebb_memtable_budget_engines",
                "gauge",
                "Engines sharing the memtable budget (shard replicas, open or closing).",
                b.engines() as u64,
            );
        }
        line(
            &mut o,
            "ebb_deletion_records",
            "gauge",
            "Deletes the deletion ledgers hold (system.deletions), pending and persisted.",
            sum(&|s| s.deletion_records),
        );
        line(
            &mut o,
            "ebb_deletion_records_dropped_early_total",
            "counter",
            "Persisted deletes a ledger forgot before their 30 days, over the 100,000 it keeps.",
            sum(&|s| s.deletion_records_dropped_early),
        );
        line(&mut o, "ebb_flushes_total", "counter", "Memtable flushes.", sum(&|s| s.flushes));
        line(&mut o, "ebb_compactions_total", "counter", "Compactions.", sum(&|s| s.compactions));
        line(
            &mut o,
            "ebb_bytes_compacted_total",
            "counter",
            "Bytes written by compactions.",
            sum(&|s| s.bytes_compacted),
        );
        line(
            &mut o,
            "ebb_write_stalls_total",
            "counter",
            "Writes stalled behind flushes.",
            sum(&|s| s.write_stalls),
        );
        line(
            &mut o,
            "ebb_window_pages_dropped_total",
            "counter",
            "Pages dropped unread by time-window deletes.",
            sum(&|s| s.window_pages_dropped),
        );
        line(
            &mut o,
            "ebb_summarized_pages_total",
            "counter",
            "Pages aggregate scans answered from their summaries without reading them.",
            sum(&|s| s.summarized_pages),
        );
        line(
            &mut o,
            "ebb_summarized_memtable_runs_total",
            "counter",
            "Memtable runs (one series over ten minutes) aggregate scans answered from their \
             summaries without reading them.",
            sum(&|s| s.summarized_runs),
        );
        let groups: Vec<_> = engines.iter().map(|(_, db)| db.group_commits()).collect();
        line(
            &mut o,
            "ebb_write_groups_total",
            "counter",
            "Commits of line-protocol writes planned meanwhile (one engine batch or Raft \
             proposal each).",
            groups.iter().map(|g| g.groups).sum::<u64>(),
        );
        line(
            &mut o,
            "ebb_grouped_writes_total",
            "counter",
            "Line-protocol writes committed in groups (a coordinator's share of a request counts \
             once per shard).",
            groups.iter().map(|g| g.writes).sum::<u64>(),
        );
        self.render_deletions(engines, &mut o);
        let per_shard = |o: &mut String, name: &str, help: &str, f: &dyn Fn(&Database) -> u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (shard, db) in engines {
                match shard {
                    Some(id) => {
                        let _ = writeln!(o, "{name}{{shard=\"{id}\"}} {}", f(db));
                    }
                    None => {
                        let _ = writeln!(o, "{name} {}", f(db));
                    }
                }
            }
        };
        per_shard(&mut o, "ebb_persisted_seq", "Highest sequence number durably in SSTs.", &|db| {
            db.engine().persisted_seq()
        });
        per_shard(&mut o, "ebb_last_seq", "Highest sequence number applied.", &|db| {
            db.engine().last_seq()
        });
        o
    }

    /// Delete requests on the replicas here: pending (not yet persisted on some replica),
    /// the age of the oldest of them, at risk, and late ones seen so far.
    fn render_deletions(&self, engines: &[(Option<u64>, Arc<Database>)], o: &mut String) {
        use ebb_query::deletions::{local_deletions, DeletionState};
        let now_ms = ebb_query::now_ms();
        let (mut pending, mut at_risk) = (HashSet::new(), HashSet::new());
        let mut oldest: Option<u64> = None;
        let mut late = self.late_seen.lock();
        for (shard, db) in engines {
            for r in local_deletions(db, shard.unwrap_or(0), 0) {
                let state = r.state(now_ms);
                if state == DeletionState::Late {
                    late.insert(r.id);
                }
                if r.persisted_at_ms.is_none() {
                    pending.insert(r.id);
                    oldest = Some(oldest.map_or(r.issued_at_ms, |o| o.min(r.issued_at_ms)));
                    if state == DeletionState::AtRisk {
                        at_risk.insert(r.id);
                    }
                }
            }
        }
        let age = oldest.map_or(0.0, |t| now_ms.saturating_sub(t) as f64 / 1000.0);
        line(
            o,
            "ebb_deletions_pending",
            "gauge",
            "Delete requests whose data is not yet physically gone from every replica here.",
            pending.len(),
        );
        line(
            o,
            "ebb_deletion_oldest_pending_seconds",
            "gauge",
            "Age of the oldest pending delete request (0 if none).",
            age,
        );
        line(
            o,
            "ebb_deletions_at_risk",
            "gauge",
            "Pending delete requests with less than a quarter of their time left.",
            at_risk.len(),
        );
        line(o, "ebb_deletions_late_total", "counter", "Delete requests seen past their deadline (persisted late, or still pending after it) since start.", late.len());
    }
}
