//! The command-line clients against a running server: `ebb import` (what it writes and where it
//! stops, named by the file's own line numbers, a string value spanning lines counting its
//! lines; `--from-line` to resume and `--skip-invalid` to leave refused lines out) and
//! `ebb sql` (every statement's result, headers on empty results, errors as sentences).

use std::process::Command;

use crate::common::{loopback, Http};
use ebb_node::server::Server;

/// `ebb ARGS...` against `url`: exit success, standard output, standard error.
fn ebb(url: &str, args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args(args)
        .env("EBB_URL", url)
        .output()
        .expect("run ebb");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// `ebb import FILE ARGS...` against `url`.
fn import(url: &str, file: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let mut all = vec![std::ffi::OsStr::new("import"), file.as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    ebb(url, &all)
}

/// `ebb sql ARGS... -c SQL` against `url`.
fn sql(url: &str, args: &[&str], sql: &str) -> (bool, String, String) {
    let mut all = vec![std::ffi::OsStr::new("sql")];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    all.extend([std::ffi::OsStr::new("-c"), std::ffi::OsStr::new(sql)]);
    ebb(url, &all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_names_file_lines_resumes_and_skips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(&dir.path().join("data"))).await.expect("start");
    let http_addr = server.http_addr;
    let file = dir.path().join("points.lp");
    let checks = tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        let url = format!("http://{http_addr}");
        let now = 1_700_000_000_000_000_000i64;
        // 3,001 lines: a comment at 10, a point whose string spans lines 20-21, a malformed
        // line at 2,002, a float field given a string at 2,501 (refused by the server).
        let mut text = String::new();
        let (mut line, mut cpu) = (0, 0u64);
        while line < 3_001 {
            let next = line + 1;
            let l = match next {
                10 => "# a comment\n".to_string(),
                20 => format!("log,host=a msg=\"first\nsecond\" {now}\n"),
                2_002 => "cpu,host=h usage=oops\n".to_string(),
                2_501 => format!("cpu,host=h0 usage=\"text\" {now}\n"),
                n => {
                    cpu += 1;
                    format!("cpu,host=h{} usage={n}.5 {}\n", n % 7, now + n as i64)
                }
            };
            line += l.matches('\n').count();
            text.push_str(&l);
        }
        std::fs::write(&file, &text).expect("write file");
        assert_eq!(text.lines().count(), 3_001);
        let count = |t: &str| h.count(&format!("SELECT count(*) AS c FROM {t}"));

        // Stops at the malformed line: everything before it written, nothing after.
        let (ok, out, err) = import(&url, &file, &["--batch", "500"]);
        assert!(!ok, "{out}{err}");
        assert!(out.contains("wrote 1999 points from lines 1-2001"), "{out}");
        assert!(err.contains("line 2002: field \"usage\""), "{err}");
        assert!(err.contains("--from-line 2002"), "{err}");
        assert_eq!((count("cpu"), count("log")), (1_998, 1));
        assert_eq!(h.json("SELECT msg FROM log")[0]["msg"], "first\nsecond");

        // Resumed past it: stops at the line the server refuses, named by the file's number.
        let (ok, out, err) = import(&url, &file, &["--batch", "200", "--from-line", "2003"]);
        assert!(!ok, "{out}{err}");
        assert!(out.contains("wrote 498 points from lines 2003-2500"), "{out}");
        assert!(
            err.contains(
                "line 2501: field \"usage\" of table \"cpu\" is float, the write has string\n"
            ),
            "{err}"
        );
        assert_eq!(count("cpu"), 1_998 + 498);

        // Skipping what is refused writes the rest and lists what was left out.
        let (ok, out, err) = import(&url, &file, &["--batch", "300", "--skip-invalid"]);
        assert!(ok, "{out}{err}");
        assert!(out.contains("skipped 2 refused lines:\n  line 2002: "), "{out}");
        assert!(out.contains("\n  line 2501: field \"usage\""), "{out}");
        assert_eq!(count("cpu"), cpu);

        // A string left open swallows no more than its bound: its line is refused and the
        // lines after it are read again as points of their own.
        let mut open = String::from("open,h=a v=1 1\nopen,h=b s=\"never closed 2\n");
        for i in 0..1_500 {
            open.push_str(&format!("open,h=c{i} v=1 {}\n", 3 + i));
        }
        let open_file = file.with_file_name("open.lp");
        std::fs::write(&open_file, &open).expect("write file");
        let (ok, out, err) = import(&url, &open_file, &["--skip-invalid"]);
        assert!(ok, "{out}{err}");
        assert!(out.contains("wrote 1501 points from lines 1-1502"), "{out}");
        assert!(out.contains("skipped 1 refused line:\n  line 2: unterminated string"), "{out}");
        assert_eq!(count("open"), 1_501);
    });
    checks.await.expect("checks");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_shows_every_result_with_headers_and_errors_as_sentences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let http_addr = server.http_addr;
    let checks = tokio::task::spawn_blocking(move || {
        let h = Http::new(http_addr);
        let url = format!("http://{http_addr}");
        let (s, b) = h.post("/write?db=public", "cpu,host=a usage=1 1700000000000000000");
        assert_eq!(s, 204, "{b}");

        // Every statement's result, in order; an empty result keeps its header.
        let (ok, out, err) = sql(
            &url,
            &[],
            "SELECT * FROM cpu WHERE host = 'none'; SELECT 1; CREATE TABLE t (host TAG, v DOUBLE)",
        );
        assert!(ok, "{err}");
        let expected = "\
+------+------+-------+
| time | host | usage |
+------+------+-------+
+------+------+-------+
(0 rows)

+---+
| 1 |
+---+
| 1 |
+---+
(1 row)

CREATE TABLE
";
        assert_eq!(out, expected);
        let (ok, out, err) =
            sql(&url, &["--format", "csv"], "SELECT host, usage FROM cpu WHERE host = 'none'");
        assert!(ok, "{err}");
        assert_eq!(out, "host,usage\n");
        let (s, body) = h.post_with(
            "/v1/sql",
            b"SELECT host FROM cpu WHERE host = 'none'",
            &[("Accept", "text/csv")],
        );
        assert_eq!((s, body.as_str()), (200, "host\n"));

        // Errors as sentences, with the statement's own text.
        let (ok, _, err) = sql(&url, &[], "SELEC 1");
        assert!(!ok);
        assert!(
            err.contains("SQL syntax: expected an SQL statement, found SELEC at line 1, column 1"),
            "{err}"
        );
        let (ok, _, err) = sql(&url, &[], "DELETE FROM cpu WHERE usage > 5");
        assert!(!ok);
        assert!(
            err.contains("cannot delete WHERE \"usage\" > 5.0: it filters on field usage"),
            "{err}"
        );
        assert!(!err.contains("Float64"), "{err}");

        // A text table holds every row to size its columns: past its bound, the answer says
        // to ask for a streamed format instead of holding more.
        let (ok, _, err) = sql(&url, &[], "SELECT * FROM generate_series(1, 10000000)");
        assert!(!ok);
        assert!(err.contains("more than a text table shows: ask for CSV"), "{err}");
        let (s, body) = h.post_with(
            "/v1/sql",
            b"SELECT count(*) AS c FROM (SELECT * FROM generate_series(1, 10000000))",
            &[("Accept", "text/plain")],
        );
        assert!(s == 200 && body.contains("10000000"), "{s} {body}");
    });
    checks.await.expect("checks");
    server.shutdown().await.expect("shutdown");
}

/// `ebb --version` names the release and the commit, and the chart's `appVersion` is the same
/// release.
#[test]
fn the_version_names_the_release_and_its_commit() {
    let (ok, out, err) = ebb("http://127.0.0.1:1", &[std::ffi::OsStr::new("--version")]);
    assert!(ok, "{err}");
    let release = env!("CARGO_PKG_VERSION");
    let commit = out
        .trim()
        .strip_prefix(&format!("ebb {release} (commit "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{out}"
    );
    // Built in the repository, the commit is its HEAD's.
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    if let Some(head) = head.ok().filter(|h| h.status.success()) {
        if std::env::var("EBB_COMMIT").is_err() {
            assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim(), "{out}");
        }
    }
    let chart =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../helm/ebb/Chart.yaml"))
            .expect("Chart.yaml");
    let app = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string());
    assert_eq!(app.as_deref(), Some(release), "the chart's appVersion is the release");
}
