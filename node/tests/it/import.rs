//! `ebb import` against a running server: what it writes and where it stops, named by the
//! file's own line numbers (a string value spanning lines counts its lines), `--from-line` to
//! resume and `--skip-invalid` to leave refused lines out.

use std::process::Command;

use crate::common::{loopback, Http};
use ebb_node::server::Server;

/// `ebb import FILE ARGS...` against `url`: exit success, standard output, standard error.
fn import(url: &str, file: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ebb"))
        .arg("import")
        .arg(file)
        .args(["--url", url])
        .args(args)
        .output()
        .expect("run ebb import");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
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
    });
    checks.await.expect("checks");
    server.shutdown().await.expect("shutdown");
}
