//! `ebb-bench ingest`: a TSBS devops-shaped load (the `cpu` measurement: 10 tags, 10 float
//! fields, one point per host every 10 s), pre-generated as 5,000-line batches and sent over
//! HTTP line protocol by the same client to EbbDB, InfluxDB 1.x, VictoriaMetrics and QuestDB.
//! The same data feeds `ebb-bench query` ([`crate::tsbs_query`]).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rand::Rng;

use crate::peers::{dir_bytes, start_build, Running, System};
use crate::report::{Better, Comparison};
use crate::workload::rng;
use crate::workload::WriteSync;

/// 2016-01-01T00:00:00Z, TSBS's default start, in seconds.
pub const START_S: i64 = 1_451_606_400;
/// Seconds between two points of a host.
const INTERVAL_S: i64 = 10;

const REGIONS: [&str; 9] = [
    "us-east-1",
    "us-west-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-northeast-1",
    "sa-east-1",
];
/// The `cpu` measurement's fields, in TSBS's order.
pub(crate) const FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];

/// A data set: hosts x hours.
#[derive(Debug, Clone, Copy)]
pub struct Dataset {
    /// Hosts.
    pub hosts: usize,
    /// Hours of data.
    pub hours: usize,
}

impl Dataset {
    /// `1000x1h`.
    pub fn label(&self) -> String {
        format!("{}x{}h", self.hosts, self.hours)
    }

    /// Rows (points) in it.
    pub fn rows(&self) -> usize {
        self.hosts * self.hours * 3600 / INTERVAL_S as usize
    }
}

impl std::str::FromStr for Dataset {
    type Err = String;

    /// `HOSTSxHOURS`, e.g. `1000x1` or `1000x1h`.
    fn from_str(s: &str) -> Result<Dataset, String> {
        let parse = || -> Option<Dataset> {
            let (h, t) = s.trim().trim_end_matches('h').split_once('x')?;
            Some(Dataset { hosts: h.parse().ok()?, hours: t.parse().ok()? })
        };
        match parse() {
            Some(d) if d.hosts > 0 && d.hours > 0 => Ok(d),
            _ => Err(format!("data set {s:?} is not HOSTSxHOURS, e.g. 1000x1")),
        }
    }
}

/// The data set as line-protocol batches of `batch` lines, in time order (all hosts at one
/// time, then the next), as TSBS generates it.
pub fn generate(ds: Dataset, batch: usize) -> Vec<String> {
    let mut r = rng(42);
    let tags: Vec<String> = (0..ds.hosts)
        .map(|h| {
            let region = REGIONS[h % REGIONS.len()];
            format!(
                "hostname=host_{h},region={region},datacenter={region}{},rack={},os=Ubuntu16.{},arch=x{},team={},service={},service_version={},service_environment={}",
                ["a", "b", "c"][h % 3],
                r.gen_range(0..100),
                ["04LTS", "10", "04"][h % 3],
                ["86", "64"][h % 2],
                ["SF", "NYC", "LON", "CHI"][h % 4],
                r.gen_range(0..20),
                r.gen_range(0..2),
                ["production", "staging", "test"][h % 3],
            )
        })
        .collect();
    let mut state: Vec<[f64; 10]> = (0..ds.hosts).map(|_| [50.0; 10]).collect();
    let steps = ds.hours * 3600 / INTERVAL_S as usize;
    let mut out = Vec::new();
    let mut cur = String::with_capacity(batch * 300);
    let mut n = 0;
    for step in 0..steps {
        let t = (START_S + step as i64 * INTERVAL_S) * 1_000_000_000;
        for (h, tag) in tags.iter().enumerate() {
            cur.push_str("cpu,");
            cur.push_str(tag);
            cur.push(' ');
            for (i, f) in FIELDS.iter().enumerate() {
                let v = &mut state[h][i];
                *v = (*v + r.gen_range(-1.0..1.0)).clamp(0.0, 100.0);
                if i > 0 {
                    cur.push(',');
                }
                cur.push_str(&format!("{f}={:.2}", *v));
            }
            cur.push_str(&format!(" {t}\n"));
            n += 1;
            if n == batch {
                out.push(std::mem::take(&mut cur));
                n = 0;
            }
        }
    }
    if n > 0 {
        out.push(cur);
    }
    out
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Sends every batch with `clients` concurrent connections; returns seconds taken.
pub fn load(s: &Running, batches: &[String], clients: usize) -> Result<f64, String> {
    load_spread(std::slice::from_ref(&s.url), s.system.name(), batches, clients)
}

/// Sends every batch to database `bench` with `clients` concurrent connections, client `i`
/// writing to `urls[i % urls.len()]`; returns seconds taken.
pub fn load_spread(
    urls: &[String],
    name: &str,
    batches: &[String],
    clients: usize,
) -> Result<f64, String> {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let res: Vec<Result<(), String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let url = format!("{}/write?db=bench", urls[c % urls.len()]);
                let next = &next;
                sc.spawn(move || {
                    let a = agent();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(b) = batches.get(i) else { return Ok(()) };
                        let mut resp =
                            a.post(&url).send(b.as_bytes()).map_err(|e| e.to_string())?;
                        if !resp.status().is_success() {
                            let body = resp.body_mut().read_to_string().unwrap_or_default();
                            return Err(format!(
                                "{name} rejected batch {i}: {} {body}",
                                resp.status()
                            ));
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("client panicked".into())))
            .collect()
    });
    res.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(start.elapsed().as_secs_f64())
}

pub(crate) fn prepare(s: &Running) -> Result<(), String> {
    if s.system == System::Influx {
        let mut r = agent()
            .post(&format!("{}/query", s.url))
            .query("q", "CREATE DATABASE bench")
            .send_empty()
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!(
                "CREATE DATABASE: {}",
                r.body_mut().read_to_string().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

fn print(c: &Comparison) {
    println!("{}", c.line());
}

/// An earlier `ebb` build measured alternately with this one, `rounds` times each (the
/// median is reported, as `before`).
#[derive(Debug, Clone)]
pub struct Before {
    /// The earlier `ebb` binary.
    pub bin: std::path::PathBuf,
    /// Runs of each build.
    pub rounds: usize,
}

/// Part `ingest`: rows/s per system and data set, EbbDB started with `ebb_args` (alternating
/// with an earlier build if `before` is given), then each of `peers`.
pub fn ingest(
    work: &Path,
    sets: &[Dataset],
    clients: usize,
    ebb_args: &[String],
    sync: WriteSync,
    peers: &[System],
    before: Option<&Before>,
) -> Result<(), String> {
    for ds in sets {
        let batches = generate(*ds, 5000);
        let warm: Vec<String> = batches.iter().map(|b| b.replace("cpu,", "warmup,")).collect();
        let rows = ds.rows() as f64;
        println!(
            "ingest {}: {} rows in {} batches, {clients} clients",
            ds.label(),
            ds.rows(),
            batches.len()
        );
        for sys in std::iter::once(System::Ebb).chain(peers.iter().copied()) {
            println!("  {:<16} durability: {}", sys.name(), sys.durability(sync));
        }
        let rounds = before.map_or(1, |b| b.rounds.max(1));
        let builds = (0..rounds).flat_map(|_| {
            let earlier = before.map(|b| ("before", System::Ebb, Some(b.bin.as_path())));
            std::iter::once(("ebb", System::Ebb, None)).chain(earlier)
        });
        let runs = builds.chain(peers.iter().map(|p| (p.name(), *p, None)));
        let mut rates: Vec<(&str, f64)> = Vec::new();
        for (name, sys, bin) in runs {
            let dir = work.join(format!("{name}-{}", ds.label()));
            let _ = std::fs::remove_dir_all(&dir);
            let s = start_build(sys, bin, &dir, ebb_args, sync)?;
            prepare(&s)?;
            // Warm-up: the same load into another table, so that no system is measured cold
            // (QuestDB's JIT compiler, every server's allocator and caches).
            load(&s, &warm, clients)?;
            let secs = load(&s, &batches, clients)?;
            let rate = rows / secs;
            drop(s);
            println!(
                "  {:<16} {:>10.0} rows/s ({secs:.2} s), {} MiB on disk",
                name,
                rate,
                dir_bytes(&dir) >> 20
            );
            rates.push((name, rate));
            let _ = std::fs::remove_dir_all(&dir);
        }
        let median = |name: &str| {
            let mut v: Vec<f64> = rates.iter().filter(|r| r.0 == name).map(|r| r.1).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let ebb = median("ebb").unwrap_or(0.0);
        let others = before.map(|_| "before").into_iter().chain(peers.iter().map(|p| p.name()));
        for other in others {
            print(&Comparison {
                bench: "ingest".into(),
                metric: "rows_per_sec".into(),
                params: vec![("dataset".into(), ds.label()), ("sync".into(), sync.name().into())],
                ebb,
                baseline: other.into(),
                base: median(other).unwrap_or(0.0),
                better: Better::Higher,
            });
        }
    }
    Ok(())
}
