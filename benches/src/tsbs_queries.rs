//! The TSBS devops query set in three dialects: EbbDB SQL (DataFusion), QuestDB SQL and
//! InfluxQL, with TSBS's parameters (random hosts, random windows of 1, 8 or 12 hours inside the
//! data set). Every instance is generated from one seed, so each system answers the same
//! questions in the same order.
//!
//! The shapes follow TSBS's generators (`cmd/tsbs_generate_queries/databases/{timescaledb,
//! questdb,influx}/devops.go`). Two differences, so that all three systems compute the same
//! answer: `groupby-orderby-limit` takes the *last* five minutes before the window end in every
//! dialect (TSBS's TimescaleDB form; its QuestDB and InfluxQL forms return the first five of
//! the data set), and `cpu-max-all-8` groups by hour bucket in QuestDB (TSBS's QuestDB form
//! groups by hour of day).

use rand::Rng;

use crate::tsbs::{Dataset, FIELDS, START_S};
use crate::workload::rng;

/// The queries measured: the TSBS devops set, then three a dashboard or a new user asks of
/// the whole data set (`count`, `mean-per-host-hour`, `max-time-per-host`).
pub const NAMES: [&str; 10] = [
    "single-groupby-1-1-1",
    "single-groupby-5-8-1",
    "cpu-max-all-8",
    "double-groupby-1",
    "high-cpu-1",
    "lastpoint",
    "groupby-orderby-limit",
    "count",
    "mean-per-host-hour",
    "max-time-per-host",
];

/// A dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// EbbDB SQL.
    Ebb,
    /// QuestDB SQL.
    QuestDb,
    /// InfluxQL.
    InfluxQl,
}

/// One query instance: its parameters, printable in every dialect.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Which TSBS query.
    pub name: &'static str,
    hosts: Vec<usize>,
    /// Window start and end, seconds since the epoch.
    start: i64,
    end: i64,
}

/// `'2016-01-01T05:17:32Z'` (TSBS drops fractional seconds).
pub fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("'{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z'", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `count` instances of query `name` over data set `ds`, from `seed`.
pub fn instances(name: &'static str, ds: Dataset, count: usize, seed: u64) -> Vec<Instance> {
    let mut r = rng(seed);
    let span = ds.hours as i64 * 3600;
    (0..count)
        .map(|_| {
            let (nhosts, hours) = match name {
                "single-groupby-1-1-1" => (1, 1),
                "single-groupby-5-8-1" => (8, 1),
                "cpu-max-all-8" => (8, 8),
                "double-groupby-1" => (0, 12),
                "high-cpu-1" => (1, 12),
                "groupby-orderby-limit" => (0, 1),
                "count" | "mean-per-host-hour" | "max-time-per-host" => (0, ds.hours as i64),
                _ => (0, 0),
            };
            let len = (hours * 3600).min(span);
            let start = START_S + r.gen_range(0..=span - len);
            let mut hosts: Vec<usize> = Vec::with_capacity(nhosts);
            while hosts.len() < nhosts.min(ds.hosts) {
                let h = r.gen_range(0..ds.hosts);
                if !hosts.contains(&h) {
                    hosts.push(h);
                }
            }
            Instance { name, hosts, start, end: start + len }
        })
        .collect()
}

impl Instance {
    /// The first host, and the window start and end in seconds since the epoch: bind
    /// parameters.
    pub fn params(&self) -> (String, u64, u64) {
        let host = format!("host_{}", self.hosts.first().copied().unwrap_or(0));
        (host, self.start.max(0) as u64, self.end.max(0) as u64)
    }

    fn host_list(&self) -> String {
        let names: Vec<String> = self.hosts.iter().map(|h| format!("'host_{h}'")).collect();
        names.join(", ")
    }

    fn host_or_chain(&self) -> String {
        let names: Vec<String> =
            self.hosts.iter().map(|h| format!("hostname = 'host_{h}'")).collect();
        format!("({})", names.join(" or "))
    }

    /// The query text in `d`.
    pub fn text(&self, d: Dialect) -> String {
        let (s, e) = (rfc3339(self.start), rfc3339(self.end));
        let ts = if d == Dialect::QuestDb { "timestamp" } else { "time" };
        let hosts = match d {
            Dialect::InfluxQl => self.host_or_chain(),
            _ => format!("hostname IN ({})", self.host_list()),
        };
        let window = format!("{ts} >= {s} AND {ts} < {e}");
        let maxes = |n: usize| -> String {
            let v: Vec<String> = FIELDS[..n]
                .iter()
                .map(|m| match d {
                    Dialect::InfluxQl => format!("max({m})"),
                    _ => format!("max({m}) AS max_{m}"),
                })
                .collect();
            v.join(", ")
        };
        let bin = |every: &str| format!("date_bin(interval '{every}', time, to_timestamp(0))");
        match (self.name, d) {
            ("single-groupby-1-1-1" | "single-groupby-5-8-1" | "cpu-max-all-8", _) => {
                let n = match self.name {
                    "single-groupby-1-1-1" => 1,
                    "single-groupby-5-8-1" => 5,
                    _ => 10,
                };
                let (every, influx_every) = if self.name == "cpu-max-all-8" {
                    ("1 hour", "1h")
                } else {
                    ("1 minute", "1m")
                };
                match d {
                    Dialect::Ebb => format!(
                        "SELECT {} AS bucket, {} FROM cpu WHERE {hosts} AND {window} \
                         GROUP BY bucket ORDER BY bucket",
                        bin(every),
                        maxes(n)
                    ),
                    Dialect::QuestDb => format!(
                        "SELECT timestamp, {} FROM cpu WHERE {hosts} AND {window} SAMPLE BY {influx_every}",
                        maxes(n)
                    ),
                    Dialect::InfluxQl => format!(
                        "SELECT {} from cpu where {hosts} and {window} group by time({influx_every})",
                        maxes(n)
                    ),
                }
            }
            ("double-groupby-1", Dialect::Ebb) => format!(
                "SELECT {} AS hour, hostname, avg(usage_user) AS mean_usage_user FROM cpu \
                 WHERE {window} GROUP BY hour, hostname ORDER BY hour, hostname",
                bin("1 hour")
            ),
            ("double-groupby-1", Dialect::QuestDb) => format!(
                "SELECT timestamp, hostname, avg(usage_user) AS avg_usage_user FROM cpu \
                 WHERE {window} SAMPLE BY 1h"
            ),
            ("double-groupby-1", Dialect::InfluxQl) => format!(
                "SELECT mean(usage_user) from cpu where {window} group by time(1h),hostname"
            ),
            ("high-cpu-1", Dialect::InfluxQl) => {
                format!("SELECT * from cpu where usage_user > 90.0 and {hosts} and {window}")
            }
            ("high-cpu-1", _) => {
                format!("SELECT * FROM cpu WHERE usage_user > 90.0 AND {hosts} AND {window}")
            }
            ("lastpoint", Dialect::Ebb) => {
                "SELECT DISTINCT ON (hostname) * FROM cpu ORDER BY hostname, time DESC".into()
            }
            ("lastpoint", Dialect::QuestDb) => {
                "SELECT * FROM cpu LATEST ON timestamp PARTITION BY hostname".into()
            }
            ("lastpoint", Dialect::InfluxQl) => {
                "SELECT * from cpu group by \"hostname\" order by time desc limit 1".into()
            }
            ("groupby-orderby-limit", Dialect::Ebb) => format!(
                "SELECT {} AS minute, max(usage_user) FROM cpu WHERE time < {e} \
                 GROUP BY minute ORDER BY minute DESC LIMIT 5",
                bin("1 minute")
            ),
            ("groupby-orderby-limit", Dialect::QuestDb) => format!(
                "SELECT timestamp AS minute, max(usage_user) FROM cpu WHERE timestamp < {e} \
                 SAMPLE BY 1m ORDER BY minute DESC LIMIT 5"
            ),
            ("groupby-orderby-limit", Dialect::InfluxQl) => format!(
                "SELECT max(usage_user) from cpu WHERE time < {e} group by time(1m) \
                 order by time desc limit 5"
            ),
            ("count", Dialect::Ebb) => "SELECT count(*) AS n FROM cpu".into(),
            ("count", Dialect::QuestDb) => "SELECT count() AS n FROM cpu".into(),
            ("count", Dialect::InfluxQl) => "SELECT count(usage_user) FROM cpu".into(),
            ("mean-per-host-hour", Dialect::Ebb) => format!(
                "SELECT {} AS hour, hostname, avg(usage_user) AS mean_usage_user FROM cpu \
                 GROUP BY hour, hostname ORDER BY hour, hostname",
                bin("1 hour")
            ),
            ("mean-per-host-hour", Dialect::QuestDb) => {
                "SELECT timestamp, hostname, avg(usage_user) AS avg_usage_user FROM cpu \
                 SAMPLE BY 1h"
                    .into()
            }
            // InfluxQL bounds a `GROUP BY time` by now() unless told: the whole data set.
            ("mean-per-host-hour", Dialect::InfluxQl) => format!(
                "SELECT mean(usage_user) from cpu where {window} group by time(1h),hostname"
            ),
            ("max-time-per-host", Dialect::Ebb) => {
                "SELECT hostname, max(time) AS last FROM cpu GROUP BY hostname".into()
            }
            ("max-time-per-host", Dialect::QuestDb) => {
                "SELECT hostname, max(timestamp) AS last FROM cpu".into()
            }
            ("max-time-per-host", Dialect::InfluxQl) => {
                "SELECT last(usage_user) from cpu group by hostname".into()
            }
            (other, _) => format!("-- unknown TSBS query {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339(START_S), "'2016-01-01T00:00:00Z'");
        assert_eq!(rfc3339(START_S + 86_400 * 31 + 3661), "'2016-02-01T01:01:01Z'");
        assert_eq!(rfc3339(951_782_400), "'2000-02-29T00:00:00Z'");
    }

    #[test]
    fn windows_stay_inside_the_data_set_and_hosts_are_distinct() {
        let ds = Dataset { hosts: 10, hours: 12 };
        for name in NAMES {
            for i in instances(name, ds, 50, 7) {
                assert!(i.start >= START_S && i.end <= START_S + 12 * 3600, "{name}");
                let mut h = i.hosts.clone();
                h.sort_unstable();
                h.dedup();
                assert_eq!(h.len(), i.hosts.len());
                for d in [Dialect::Ebb, Dialect::QuestDb, Dialect::InfluxQl] {
                    assert!(!i.text(d).starts_with("--"), "{name} {d:?}");
                }
            }
        }
        let eight = instances("cpu-max-all-8", ds, 1, 1);
        assert_eq!(eight[0].hosts.len(), 8);
        assert_eq!(eight[0].end - eight[0].start, 8 * 3600);
    }
}
