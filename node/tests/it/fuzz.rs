//! Fuzzing every protocol against a running node: structure-aware generators (from a printed
//! seed) for line protocol, Prometheus remote write, the PostgreSQL wire protocol before and
//! after login, Arrow Flight SQL, raw HTTP requests and SQL text with deep and wide expressions.
//! Throughout, the node must answer `/health` promptly, stay under a memory bound, never panic
//! in a protocol decoder, never answer 5xx to bad input (a 503 naming the limit a statement ran
//! into is the one allowed), and never apply a write it refused.
//!
//! Each campaign runs `EBB_FUZZ_CASES` cases (default 150), within `EBB_FUZZ_SECS` seconds
//! (default 120, an upper limit only); `EBB_FUZZ_SEED` repeats a run. The long mode is
//! `EBB_FUZZ_CASES=100000000 EBB_FUZZ_SECS=600 cargo test -p ebb-node --test it --release fuzz::`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{loopback, rss, Http};
use ebb_node::config::{Config, Secret};
use ebb_node::server::Server;

const ADMIN_PW: &str = "fuzz admin password";

/// How many cases a campaign runs, and until when at the latest.
struct Budget {
    cases: usize,
    until: Instant,
    seed: u64,
}

impl Budget {
    fn from_env(campaign: &str) -> Budget {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        let seed = var("EBB_FUZZ_SEED").unwrap_or_else(rand::random);
        let cases = var("EBB_FUZZ_CASES").unwrap_or(150) as usize;
        let secs = var("EBB_FUZZ_SECS").unwrap_or(120);
        println!("fuzz {campaign}: seed {seed} (EBB_FUZZ_SEED), {cases} cases within {secs} s");
        Budget { cases, until: Instant::now() + Duration::from_secs(secs), seed }
    }

    fn more(&self, case: usize) -> bool {
        case < self.cases && Instant::now() < self.until
    }
}

/// Panics whose location is in a protocol library (pgwire, hyper, tonic, prost, snap, flate2)
/// or in `bytes`, where the decoders' reads panic.
static DECODER_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_decoder_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // `bytes`: the decoders' reads of a message shorter than they expect panic there.
            let lib =
                ["pgwire", "hyper", "tonic", "prost", "snap", "flate2", "h2-", "axum", "/bytes-"];
            if info.location().is_some_and(|l| lib.iter().any(|n| l.file().contains(n))) {
                DECODER_PANICS.fetch_add(1, Ordering::Relaxed);
            }
            previous(info);
        }));
    });
}

/// Asks `/health` every 100 ms while a campaign runs; notes how long each answer took and the
/// peak memory.
struct Watch {
    stop: Arc<AtomicBool>,
    probes: Arc<Mutex<Vec<Duration>>>,
    peak: Arc<Mutex<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn start(http: SocketAddr) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let probes: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let peak: Arc<Mutex<u64>> = Arc::default();
        let (s, p, m) = (Arc::clone(&stop), Arc::clone(&probes), Arc::clone(&peak));
        let thread = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into();
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = agent
                    .get(&format!("http://{http}/health"))
                    .call()
                    .is_ok_and(|r| r.status().as_u16() == 200);
                let took = if ok { t.elapsed() } else { Duration::from_secs(3600) };
                p.lock().expect("probes").push(took);
                let mut peak = m.lock().expect("peak");
                *peak = (*peak).max(rss());
                drop(peak);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watch { stop, probes, peak, thread: Some(thread) }
    }

    /// Stops watching and checks: every probe answered within 5 s, 95% within 1 s, and the
    /// memory stayed within `limit` bytes of `base`.
    fn finish(mut self, campaign: &str, base: u64, limit: u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("watch");
        }
        let mut probes = self.probes.lock().expect("probes").clone();
        probes.sort();
        let peak = *self.peak.lock().expect("peak");
        let p95 = probes.get(probes.len() * 95 / 100).copied().unwrap_or_default();
        let max = probes.last().copied().unwrap_or_default();
        println!(
            "fuzz {campaign}: {} health probes, p95 {p95:?}, max {max:?}; peak memory +{} MiB",
            probes.len(),
            peak.saturating_sub(base) >> 20
        );
        assert!(max < Duration::from_secs(5), "{campaign}: /health took {max:?}");
        assert!(p95 < Duration::from_secs(1), "{campaign}: /health p95 {p95:?}");
        assert!(peak < base + limit, "{campaign}: memory grew by {} MiB", (peak - base) >> 20);
        assert_eq!(DECODER_PANICS.load(Ordering::Relaxed), 0, "{campaign}: a decoder panicked");
    }
}

/// True if an answer is one bad input may get: not a 5xx, but for a 503 naming the limit a
/// statement ran into.
fn acceptable(status: u16, body: &str) -> bool {
    status < 500
        || (status == 503
            && ["query_memory", "statement_timeout", "max_statements"]
                .iter()
                .any(|l| body.contains(l)))
}

/// Text from a pool that holds what parsers trip on.
fn text(rng: &mut StdRng, max: usize) -> String {
    const POOL: &[&str] = &[
        "a", "b", "z", "0", "9", "_", "-", ".", ",", "=", " ", "\\", "\"", "'", "\n", "\r", "\t",
        "#", "é", "日", "\u{0}", "\u{7f}", "$1", "--", "/*", "*/", ";", "(", ")", "NaN", "inf",
    ];
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| POOL[rng.gen_range(0..POOL.len())]).collect()
}

/// A byte-level mutation of `body`: flips, cuts, repeats, inserts.
fn mutate(rng: &mut StdRng, body: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..4) {
        if body.is_empty() {
            body.push(rng.gen());
            continue;
        }
        let at = rng.gen_range(0..body.len());
        match rng.gen_range(0..5) {
            0 => body[at] ^= 1 << rng.gen_range(0..8),
            1 => body.truncate(at),
            2 => {
                let end = (at + rng.gen_range(1..64)).min(body.len());
                let piece = body[at..end].to_vec();
                for _ in 0..rng.gen_range(1..20) {
                    body.splice(at..at, piece.iter().copied());
                }
            }
            3 => body.insert(at, rng.gen()),
            _ => body[at] = [0u8, 0xff, b'\n', b' ', b',', b'='][rng.gen_range(0..6)],
        }
    }
}

fn servers() -> (tempfile::TempDir, Config, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = Config {
        limits: ebb_query::front::Limits {
            query_memory_bytes: 64 << 20,
            statement_timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        },
        ..loopback(&dir.path().join("open"))
    };
    let secured = Config {
        admin_password: Some(Secret(ADMIN_PW.into())),
        ..loopback(&dir.path().join("secured"))
    };
    (dir, open, secured)
}

/// A line-protocol request of `case`, its lines in table `name`.
fn lines(rng: &mut StdRng, name: &str) -> String {
    let mut out = String::new();
    for _ in 0..rng.gen_range(1..40) {
        out.push_str(name);
        for _ in 0..rng.gen_range(0..6) {
            out.push_str(&format!(",{}={}", text(rng, 4), text(rng, 6)));
        }
        out.push(' ');
        for f in 0..rng.gen_range(1..5) {
            if f > 0 {
                out.push(',');
            }
            let value = match rng.gen_range(0..8) {
                0 => format!("{}", rng.gen::<f64>()),
                1 => format!("{}i", rng.gen::<i64>()),
                2 => format!("{}u", rng.gen::<u64>()),
                3 => ["t", "false", "TRUE", "F"][rng.gen_range(0..4)].to_string(),
                4 => format!("\"{}\"", text(rng, 12)),
                5 => format!("{}e{}", rng.gen_range(-9..9), rng.gen_range(-400..400)),
                6 => text(rng, 5),
                _ => "1".to_string(),
            };
            out.push_str(&format!("{}={value}", ["f", "g", "h", "time", "v"][rng.gen_range(0..5)]));
        }
        match rng.gen_range(0..5) {
            0 => {}
            1 => out.push_str(&format!(" {}", rng.gen::<i64>())),
            2 => out.push_str(&format!(" {}", text(rng, 4))),
            _ => out.push_str(&format!(
                " {}",
                1_700_000_000_000_000_000i64 + rng.gen_range(0..1_000_000_000)
            )),
        }
        out.push(if rng.gen_bool(0.1) { '\r' } else { '\n' });
    }
    out
}

/// Line protocol and remote write into a node without users: nothing refused is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_line_protocol_and_remote_write() {
    count_decoder_panics();
    let (_dir, open, _) = servers();
    let server = Server::start(&open).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let budget = Budget::from_env("writes");
        let mut rng = StdRng::seed_from_u64(budget.seed);
        let h = Http::new(http);
        let (base, watch) = (rss(), Watch::start(http));
        // Names of refused line-protocol requests since the tables were last checked.
        let mut refused = Vec::new();
        let (mut refusals, mut dropped) = (0usize, 0usize);
        // Nothing of a refused request was written; then every table goes (a mutated request
        // may write a table of a name no request chose), so a long run keeps a small catalog.
        let check_and_drop = |refused: &mut Vec<String>| -> usize {
            let tables = h.json(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
            );
            let tables: Vec<String> = tables
                .as_array()
                .map(|a| {
                    a.iter().filter_map(|t| t["table_name"].as_str().map(String::from)).collect()
                })
                .unwrap_or_default();
            for name in refused.drain(..) {
                assert!(
                    !tables.contains(&name),
                    "seed {}: refused {name} was written",
                    budget.seed
                );
            }
            for t in &tables {
                let (s, b) = h.sql(&format!("DROP TABLE IF EXISTS \"{}\"", t.replace('"', "\"\"")));
                assert!(acceptable(s, &b), "{s} {b}");
            }
            tables.len()
        };
        let mut case = 0;
        while budget.more(case) {
            let name = format!("fz_{case}_{}", rng.gen::<u32>());
            let (path, body, headers): (&str, Vec<u8>, Vec<(&str, &str)>) = if rng.gen_bool(0.7) {
                let mut body = lines(&mut rng, &name).into_bytes();
                if rng.gen_bool(0.3) {
                    mutate(&mut rng, &mut body);
                }
                if rng.gen_bool(0.1) {
                    let mut gz =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    gz.write_all(&body).expect("gzip");
                    let mut gz = gz.finish().expect("gzip");
                    if rng.gen_bool(0.3) {
                        mutate(&mut rng, &mut gz);
                    }
                    ("/write?db=public", gz, vec![("Content-Encoding", "gzip")])
                } else {
                    ("/write?db=public&precision=ns", body, vec![])
                }
            } else {
                use ebb_node::prom::proto::{Label, Sample, TimeSeries, WriteRequest};
                use prost::Message;
                let series = (0..rng.gen_range(0..20))
                    .map(|_| {
                        let mut labels =
                            vec![Label { name: "__name__".into(), value: name.clone() }];
                        for _ in 0..rng.gen_range(0..6) {
                            labels
                                .push(Label { name: text(&mut rng, 5), value: text(&mut rng, 8) });
                        }
                        let samples = (0..rng.gen_range(0..5))
                            .map(|_| Sample {
                                value: [
                                    rng.gen(),
                                    f64::NAN,
                                    f64::INFINITY,
                                    f64::from_bits(0x7ff0_0000_0000_0002),
                                ][rng.gen_range(0..4)],
                                timestamp: rng.gen_range(1_600_000_000_000i64..1_800_000_000_000),
                            })
                            .collect();
                        TimeSeries { labels, samples }
                    })
                    .collect();
                let req = WriteRequest { timeseries: series, ..Default::default() };
                let mut raw = req.encode_to_vec();
                if rng.gen_bool(0.2) {
                    mutate(&mut rng, &mut raw);
                }
                let mut body = snap::raw::Encoder::new().compress_vec(&raw).expect("snappy");
                if rng.gen_bool(0.1) {
                    mutate(&mut rng, &mut body);
                }
                ("/api/v1/write?db=public", body, vec![("Content-Encoding", "snappy")])
            };
            let (status, answer) = h.post_with(path, &body, &headers);
            assert!(
                acceptable(status, &answer),
                "seed {} case {case}: {status} {answer}",
                budget.seed
            );
            if (400..500).contains(&status) && path.starts_with("/write") {
                refused.push(name);
                refusals += 1;
            }
            case += 1;
            if case % 200 == 0 {
                dropped += check_and_drop(&mut refused);
            }
        }
        dropped += check_and_drop(&mut refused);
        println!("fuzz writes: {case} requests, {refusals} refused, {dropped} tables dropped");
        watch.finish("writes", base, 1536 << 20);
    })
    .await
    .expect("campaign");
    server.shutdown().await.expect("shutdown");
}

/// An expression `depth` operators deep or a list `width` items wide, from a grammar.
fn expression(rng: &mut StdRng, budget: usize) -> String {
    if budget == 0 {
        return match rng.gen_range(0..6) {
            0 => rng.gen_range(-5..100).to_string(),
            1 => format!("'{}'", text(rng, 4).replace('\'', "''")),
            2 => "time".into(),
            3 => "v".into(),
            4 => "NULL".into(),
            _ => "1.5".into(),
        };
    }
    match rng.gen_range(0..9) {
        0 => {
            let n = rng.gen_range(1..budget.max(2));
            let op = [" + ", " * ", " OR ", " AND ", " || ", " = ", " - "][rng.gen_range(0..7)];
            (0..n).map(|_| expression(rng, 0)).collect::<Vec<_>>().join(op)
        }
        1 => format!("({})", expression(rng, budget / 2)),
        2 => {
            let f = [
                "abs",
                "lower",
                "upper",
                "repeat",
                "lpad",
                "concat",
                "length",
                "coalesce",
                "date_bin",
                "array_repeat",
                "range",
                "md5",
                "sqrt",
                "nullif",
                "round",
            ];
            let n = rng.gen_range(1..4);
            let args: Vec<String> = (0..n).map(|_| expression(rng, budget / 3)).collect();
            format!("{}({})", f[rng.gen_range(0..f.len())], args.join(", "))
        }
        3 => {
            let n = rng.gen_range(1..budget.clamp(2, 20_000));
            let items: Vec<String> = (0..n).map(|i| format!("'h{i}'")).collect();
            format!("{} IN ({})", expression(rng, 0), items.join(","))
        }
        4 => format!(
            "CASE WHEN {} THEN {} ELSE {} END",
            expression(rng, budget / 3),
            expression(rng, 0),
            expression(rng, 0)
        ),
        5 => format!(
            "CAST({} AS {})",
            expression(rng, budget / 2),
            ["INT", "DOUBLE", "VARCHAR", "BOOLEAN", "TIMESTAMP"][rng.gen_range(0..5)]
        ),
        6 => format!("NOT {}", expression(rng, budget - 1)),
        7 => format!("(SELECT {} FROM t LIMIT 1)", expression(rng, budget / 2)),
        _ => text(rng, 8),
    }
}

/// SQL text, deep and wide, over HTTP and the PostgreSQL simple protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_text_deep_and_wide() {
    count_decoder_panics();
    let (_dir, open, _) = servers();
    let server = Server::start(&open).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let budget = Budget::from_env("sql");
        let mut rng = StdRng::seed_from_u64(budget.seed);
        let h = Http::new(http);
        assert_eq!(
            h.post(
                "/write?db=public",
                "t,k=a v=1 1700000000000000000\nt,k=b v=2 1700000000000000000"
            )
            .0,
            204
        );
        // Found by the fuzzer: a scalar subquery of two rows was a server error (500).
        let (s, b) = h.sql("SELECT (SELECT '_' FROM t LIMIT 9) FROM t GROUP BY k");
        assert_eq!(s, 400, "{b}");
        let (base, watch) = (rss(), Watch::start(http));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let url = format!("http://{http}/v1/sql?db=public");
        let mut case = 0;
        while budget.more(case) {
            let size = [3, 30, 300, 3_000, 30_000][rng.gen_range(0..5)];
            let sql = match rng.gen_range(0..6) {
                0 => format!("SELECT {}", expression(&mut rng, size)),
                1 => format!("SELECT count(*) FROM t WHERE {}", expression(&mut rng, size)),
                2 => format!(
                    "SELECT {} FROM t",
                    (0..rng.gen_range(1..size.max(2)))
                        .map(|_| expression(&mut rng, 1))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                3 => "SELECT 1;".repeat(rng.gen_range(1..size.max(2))),
                4 => format!("DELETE FROM t WHERE {}", expression(&mut rng, size / 10)),
                _ => {
                    let mut b =
                        format!("SELECT {} FROM t GROUP BY k", expression(&mut rng, size / 10))
                            .into_bytes();
                    mutate(&mut rng, &mut b);
                    String::from_utf8_lossy(&b).into_owned()
                }
            };
            // An answer within a minute: a statement that cannot be stopped is a freeze.
            let (status, answer) = match agent.post(&url).send(sql.as_bytes()) {
                Ok(mut r) => {
                    (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default())
                }
                Err(e) => panic!(
                    "seed {} case {case}: no answer ({e}): {}",
                    budget.seed,
                    sql.chars().take(300).collect::<String>()
                ),
            };
            assert!(
                acceptable(status, &answer),
                "seed {} case {case}: {status} {answer}: {}",
                budget.seed,
                sql.chars().take(300).collect::<String>()
            );
            case += 1;
        }
        println!("fuzz sql: {case} statements");
        watch.finish("sql", base, 1536 << 20);
    })
    .await
    .expect("campaign");
    server.shutdown().await.expect("shutdown");
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn startup(user: &str) -> Vec<u8> {
    let body = format!("\u{0}\u{3}\u{0}\u{0}user\u{0}{user}\u{0}database\u{0}public\u{0}\u{0}");
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend_from_slice(body.as_bytes());
    m
}

/// A PostgreSQL message of the extended protocol, of SCRAM or of garbage, often malformed.
fn pg_message(rng: &mut StdRng) -> Vec<u8> {
    let count = |rng: &mut StdRng| -> [u8; 2] {
        [0u16, 1, 2, 3, 0x7fff, 0xffff][rng.gen_range(0..6)].to_be_bytes()
    };
    let len = |rng: &mut StdRng| -> [u8; 4] {
        [-1i32, 0, 1, 3, 4, 8, 0x7fff_fff0, -5][rng.gen_range(0..8)].to_be_bytes()
    };
    let mut body = Vec::new();
    let tag = match rng.gen_range(0..10) {
        0 => {
            body.extend_from_slice(b"s1\0");
            body.extend_from_slice(format!("SELECT $1, {}\0", expression(rng, 5)).as_bytes());
            body.extend_from_slice(&count(rng));
            for _ in 0..rng.gen_range(0..4) {
                body.extend_from_slice(&[0, 0, 0, [23u8, 25, 0, 114][rng.gen_range(0..4)]]);
            }
            b'P'
        }
        1 => {
            body.extend_from_slice(b"\0s1\0");
            body.extend_from_slice(&count(rng));
            for _ in 0..rng.gen_range(0..3) {
                body.extend_from_slice(&[0, rng.gen_range(0..3)]);
            }
            body.extend_from_slice(&count(rng));
            for _ in 0..rng.gen_range(0..3) {
                body.extend_from_slice(&len(rng));
                body.extend_from_slice(&[b'7'; 4][..rng.gen_range(0..4)]);
            }
            body.extend_from_slice(&count(rng));
            b'B'
        }
        2 => {
            body.push([b'S', b'P', b'X'][rng.gen_range(0..3)]);
            body.extend_from_slice(b"s1\0");
            b'D'
        }
        3 => {
            body.extend_from_slice(b"\0");
            body.extend_from_slice(&len(rng));
            b'E'
        }
        4 => b'S',
        5 => {
            body.extend_from_slice(format!("SELECT {}\0", expression(rng, 20)).as_bytes());
            b'Q'
        }
        6 => {
            body.extend_from_slice(b"SCRAM-SHA-256\0");
            body.extend_from_slice(&len(rng));
            body.extend_from_slice(b"n,,n=,r=abcdef");
            b'p'
        }
        7 => {
            body.push([b'S', b'P'][rng.gen_range(0..2)]);
            body.extend_from_slice(b"s1\0");
            b'C'
        }
        8 => rng.gen(),
        _ => b'H',
    };
    let mut m = message(tag, &body);
    if rng.gen_bool(0.2) {
        mutate(rng, &mut m);
    }
    m
}

/// `bytes` in hex, for a failure to show the input that caused it.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The PostgreSQL wire protocol, before login (a node with users) and after (one without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wire_protocol() {
    count_decoder_panics();
    let (_dir, open, secured) = servers();
    let open = Server::start(&open).await.expect("start");
    let secured = Server::start(&secured).await.expect("start");
    let (pg_open, pg_secured, http) = (open.pg_addr, secured.pg_addr, open.http_addr);
    tokio::task::spawn_blocking(move || {
        let budget = Budget::from_env("pgwire");
        let mut rng = StdRng::seed_from_u64(budget.seed);
        let (base, watch) = (rss(), Watch::start(http));
        let mut case = 0;
        while budget.more(case) {
            let (addr, user) = match rng.gen_bool(0.5) {
                true => (pg_open, "ebb"),
                false => (pg_secured, "admin"),
            };
            let Ok(mut c) = TcpStream::connect(addr) else { continue };
            c.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
            c.set_write_timeout(Some(Duration::from_secs(2))).expect("timeout");
            let mut wire = match rng.gen_range(0..10) {
                0 => {
                    let mut s = startup(user);
                    mutate(&mut rng, &mut s);
                    s
                }
                1 => vec![0, 0, 0, 8, 4, 210, 22, 47],
                _ => startup(user),
            };
            for _ in 0..rng.gen_range(0..8) {
                wire.extend(pg_message(&mut rng));
            }
            let panics = DECODER_PANICS.load(Ordering::Relaxed);
            let _ = c.write_all(&wire);
            let mut sink = vec![0u8; 1 << 16];
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                match c.read(&mut sink) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            // Connections run one at a time: a decoder's panic is this one's.
            assert_eq!(
                DECODER_PANICS.load(Ordering::Relaxed),
                panics,
                "seed {} case {case}: a decoder panicked on {}",
                budget.seed,
                hex(&wire)
            );
            case += 1;
        }
        // Both still log in and answer.
        let (ok, out, err) = crate::common::psql(pg_open.port(), "SELECT 3");
        assert!(ok && out == "3", "{err}");
        let (ok, out, err) =
            crate::common::psql_as(pg_secured.port(), "admin", ADMIN_PW, "SELECT 4");
        assert!(ok && out == "4", "{err}");
        println!("fuzz pgwire: {case} connections");
        watch.finish("pgwire", base, 1536 << 20);
    })
    .await
    .expect("campaign");
    open.shutdown().await.expect("shutdown");
    secured.shutdown().await.expect("shutdown");
}

/// Raw HTTP requests, malformed or not, with and without credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests() {
    count_decoder_panics();
    let (_dir, _, secured) = servers();
    let server = Server::start(&secured).await.expect("start");
    let http = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let budget = Budget::from_env("http");
        let mut rng = StdRng::seed_from_u64(budget.seed);
        let (base, watch) = (rss(), Watch::start(http));
        let auth = format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("admin:{ADMIN_PW}")
            )
        );
        let mut case = 0;
        while budget.more(case) {
            let method =
                ["GET", "POST", "PUT", "DELETE", "OPTIONS", "POS T", ""][rng.gen_range(0..7)];
            let path = [
                "/write?db=public",
                "/v1/sql?db=public",
                "/api/v1/write?db=public",
                "/api/v1/read?db=public",
                "/api/v2/write?bucket=public",
                "/health",
                "/v1/admin/flush",
                "/v1/audit/verify?id=x",
                "/%ff%00",
                "/metrics",
            ][rng.gen_range(0..10)];
            let body = match rng.gen_range(0..3) {
                0 => lines(&mut rng, "h").into_bytes(),
                1 => format!("SELECT {}", expression(&mut rng, 10)).into_bytes(),
                _ => (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect(),
            };
            let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            if rng.gen_bool(0.6) {
                head.push_str(&format!("Authorization: {auth}\r\n"));
            }
            match rng.gen_range(0..5) {
                0 => head.push_str("Transfer-Encoding: chunked\r\n"),
                1 => head
                    .push_str(&format!("Content-Length: {}\r\n", rng.gen_range(0..1_000_000u64))),
                2 => head.push_str("Content-Encoding: gzip\r\n"),
                _ => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
            }
            if rng.gen_bool(0.2) {
                head.push_str(&format!("{}: {}\r\n", text(&mut rng, 6), text(&mut rng, 20)));
            }
            head.push_str("Connection: close\r\n\r\n");
            let mut wire = head.into_bytes();
            wire.extend_from_slice(&body);
            if rng.gen_bool(0.2) {
                mutate(&mut rng, &mut wire);
            }
            let Ok(mut c) = TcpStream::connect(http) else { continue };
            c.set_read_timeout(Some(Duration::from_secs(3))).expect("timeout");
            let _ = c.write_all(&wire);
            let _ = c.shutdown(std::net::Shutdown::Write);
            let mut answer = Vec::new();
            let _ = c.take(1 << 16).read_to_end(&mut answer);
            let answer = String::from_utf8_lossy(&answer);
            if let Some(status) = answer
                .strip_prefix("HTTP/1.1 ")
                .and_then(|s| s.get(..3))
                .and_then(|s| s.parse::<u16>().ok())
            {
                assert!(
                    acceptable(status, &answer),
                    "seed {} case {case}: {}",
                    budget.seed,
                    answer.chars().take(400).collect::<String>()
                );
            }
            case += 1;
        }
        println!("fuzz http: {case} requests");
        watch.finish("http", base, 1536 << 20);
    })
    .await
    .expect("campaign");
    server.shutdown().await.expect("shutdown");
}

/// The call's error, or the first error its answer stream yields.
async fn first_error<T>(
    call: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
) -> Option<tonic::Status> {
    use futures::StreamExt;
    let mut answers = match call {
        Ok(answers) => answers.into_inner(),
        Err(e) => return Some(e),
    };
    while let Some(answer) = answers.next().await {
        if let Err(e) = answer {
            return Some(e);
        }
    }
    None
}

/// Arrow Flight SQL: statements, garbage descriptors and tickets, actions (prepared statements,
/// transactions) and updates through DoPut, whole or mutated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_requests() {
    use arrow_flight::flight_service_client::FlightServiceClient;
    use arrow_flight::sql::{
        ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
        CommandPreparedStatementQuery, CommandStatementQuery, CommandStatementUpdate,
        ProstMessageExt,
    };
    use arrow_flight::{Action, FlightData, FlightDescriptor, Ticket};
    use prost::Message;
    count_decoder_panics();
    let (_dir, open, _) = servers();
    let server = Server::start(&open).await.expect("start");
    let (flight, http) = (server.flight_addr, server.http_addr);
    let budget = Budget::from_env("flight");
    let mut rng = StdRng::seed_from_u64(budget.seed);
    let base = rss();
    let watch = Watch::start(http);
    let channel = tonic::transport::Channel::from_shared(format!("http://{flight}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = FlightServiceClient::new(channel);
    let (s, b) = tokio::task::spawn_blocking(move || {
        Http::new(http).post("/write?db=public", "f v=1 1700000000000000000")
    })
    .await
    .expect("write");
    assert_eq!(s, 204, "{b}");
    // Found by the fuzzer: a command whose query is not UTF-8 was answered `Internal`.
    let cmd = CommandStatementQuery { query: "SELECT 1".into(), transaction_id: None };
    let mut bad = cmd.as_any().encode_to_vec();
    let at = bad.windows(8).position(|w| w == b"SELECT 1").expect("query bytes");
    bad[at] = 0xff;
    let e = client.get_flight_info(FlightDescriptor::new_cmd(bad)).await.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    // Found by the fuzzer: a VALUES row that does not cast to its columns was `Internal`.
    let query = "INSERT INTO f (time, v) VALUES (now(), [1, 2])".to_string();
    let cmd = CommandStatementUpdate { query, transaction_id: None }.as_any().encode_to_vec();
    let data = FlightData {
        flight_descriptor: Some(FlightDescriptor::new_cmd(cmd)),
        ..FlightData::default()
    };
    let e = first_error(client.do_put(futures::stream::iter(vec![data])).await).await;
    let e = e.expect("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let mut case = 0;
    while budget.more(case) {
        let status = match rng.gen_range(0..6) {
            0 => {
                let size = [3, 50, 3000][rng.gen_range(0..3)];
                let query = format!("SELECT {}", expression(&mut rng, size));
                let cmd = CommandStatementQuery { query, transaction_id: None };
                let mut bytes = cmd.as_any().encode_to_vec();
                if rng.gen_bool(0.3) {
                    mutate(&mut rng, &mut bytes);
                }
                client.get_flight_info(FlightDescriptor::new_cmd(bytes)).await.err()
            }
            1 => {
                let ticket: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
                client.do_get(Ticket { ticket: ticket.into() }).await.err()
            }
            2 => {
                let bytes: Vec<u8> = (0..rng.gen_range(0..128)).map(|_| rng.gen()).collect();
                if rng.gen_bool(0.5) {
                    client.get_flight_info(FlightDescriptor::new_cmd(bytes)).await.err()
                } else {
                    client.poll_flight_info(FlightDescriptor::new_cmd(bytes)).await.err()
                }
            }
            3 => {
                // Actions: prepared statements made and closed, transactions, unknown types.
                let (kind, mut body) = match rng.gen_range(0..4) {
                    0 => {
                        let query = format!("SELECT {}", expression(&mut rng, 50));
                        let req =
                            ActionCreatePreparedStatementRequest { query, transaction_id: None };
                        ("CreatePreparedStatement", req.as_any().encode_to_vec())
                    }
                    1 => {
                        let handle: Vec<u8> =
                            (0..rng.gen_range(0..32)).map(|_| rng.gen()).collect();
                        let req = ActionClosePreparedStatementRequest {
                            prepared_statement_handle: handle.into(),
                        };
                        ("ClosePreparedStatement", req.as_any().encode_to_vec())
                    }
                    2 => {
                        ("BeginTransaction", (0..rng.gen_range(0..32)).map(|_| rng.gen()).collect())
                    }
                    _ => ("Unheard", (0..rng.gen_range(0..32)).map(|_| rng.gen()).collect()),
                };
                if rng.gen_bool(0.4) {
                    mutate(&mut rng, &mut body);
                }
                let action = Action { r#type: kind.into(), body: body.into() };
                first_error(client.do_action(action).await).await
            }
            4 => {
                // DoPut: an update (INSERT, DELETE, garbage) or a prepared query's parameters.
                let mut cmd = if rng.gen_bool(0.7) {
                    let query = match rng.gen_range(0..3) {
                        0 => format!(
                            "INSERT INTO f (time, v) VALUES (now(), {})",
                            expression(&mut rng, 20)
                        ),
                        1 => format!("DELETE FROM f WHERE v > {}", expression(&mut rng, 20)),
                        _ => expression(&mut rng, 50),
                    };
                    CommandStatementUpdate { query, transaction_id: None }.as_any().encode_to_vec()
                } else {
                    let handle: Vec<u8> = (0..rng.gen_range(0..32)).map(|_| rng.gen()).collect();
                    let cmd =
                        CommandPreparedStatementQuery { prepared_statement_handle: handle.into() };
                    cmd.as_any().encode_to_vec()
                };
                if rng.gen_bool(0.4) {
                    mutate(&mut rng, &mut cmd);
                }
                let data = FlightData {
                    flight_descriptor: Some(FlightDescriptor::new_cmd(cmd)),
                    ..FlightData::default()
                };
                first_error(client.do_put(futures::stream::iter(vec![data])).await).await
            }
            _ => {
                let bytes: Vec<u8> = (0..rng.gen_range(0..128)).map(|_| rng.gen()).collect();
                client.get_flight_info(FlightDescriptor::new_cmd(bytes)).await.err()
            }
        };
        if let Some(s) = status {
            let limit =
                ["query_memory", "statement_timeout"].iter().any(|l| s.message().contains(l));
            assert!(
                !matches!(s.code(), tonic::Code::Internal | tonic::Code::Unknown) || limit,
                "seed {} case {case}: {s:?}",
                budget.seed
            );
        }
        case += 1;
    }
    println!("fuzz flight: {case} requests");
    tokio::task::spawn_blocking(move || watch.finish("flight", base, 1536 << 20))
        .await
        .expect("watch");
    drop(client);
    server.shutdown().await.expect("shutdown");
}
