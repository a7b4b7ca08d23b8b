//! The README's console sessions, run as written against a fresh server, in order: each
//! ```` ```console ```` block not marked `<!-- not run: ... -->` is a series of `$ ` commands
//! with the output the README shows for each. The commands run in `bash` with the server's
//! addresses put in for the defaults (`127.0.0.1:7080`, `-p 7432`) and the `ebb` just built
//! first on `PATH`; the output must hold the README's lines in order (a reader sees the same),
//! once ids, times and a deletion's status (which vary from run to run) and the widths of table
//! borders are set aside. A query whose answer comes a moment later (a rollup's refresh) is
//! asked again for up to 20 s; a command that changes something runs once.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::loopback;
use ebb_node::server::Server;

/// One `$ ` command of a session and the lines the README shows after it.
#[derive(Debug)]
struct Step {
    /// Where the block starts in README.md (1-based), for messages.
    line: usize,
    command: String,
    output: Vec<String>,
}

/// The runnable console sessions of `readme`, in order.
fn steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let (mut in_block, mut skip, mut start) = (false, false, 0);
    let mut open: Option<Step> = None;
    let mut previous = "";
    let lines: Vec<&str> = readme.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        i += 1;
        if !in_block {
            if l.starts_with("```console") {
                in_block = true;
                skip = previous.starts_with("<!-- not run");
                start = i;
            }
            previous = l;
            continue;
        }
        if l.starts_with("```") {
            in_block = false;
            steps.extend(open.take());
            previous = l;
            continue;
        }
        if skip {
            continue;
        }
        if let Some(cmd) = l.strip_prefix("$ ") {
            steps.extend(open.take());
            // A command goes on while a quote is open or a line ends with a backslash.
            let mut command = cmd.to_string();
            while (open_quote(&command) || command.ends_with('\\')) && i < lines.len() {
                command.push('\n');
                command.push_str(lines[i]);
                i += 1;
            }
            open = Some(Step { line: start, command, output: Vec::new() });
        } else if let Some(step) = open.as_mut() {
            if !l.trim().is_empty() {
                step.output.push(l.to_string());
            }
        }
    }
    steps
}

/// Whether `text` leaves a single- or double-quoted string open (as the shell reads it).
fn open_quote(text: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') | (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    quote.is_some()
}

/// A line with what varies between runs set aside: ids, times, a deletion's status, and runs
/// of spaces and of the dashes that draw table borders.
fn normalized(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.trim_end_matches('\r').chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut run = String::from(c);
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() || matches!(d, '-' | ':' | 'T' | '.') && run.len() >= 4 {
                    run.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            let digits = run.chars().filter(char::is_ascii_digit).count();
            // A time (2026-11-23T03:01:56.144) or an id (19 digits): set aside.
            let time = run.len() >= 19 && run.contains('T') && run.contains(':');
            if digits >= 15 || time {
                out.push('#');
            } else {
                out.push_str(&run);
            }
            continue;
        }
        out.push(c);
    }
    let out = out.replace("persisted", "STATUS").replace("pending", "STATUS");
    let mut squeezed = String::new();
    for c in out.chars() {
        let last = squeezed.chars().last();
        if (c == ' ' || c == '-' || c == '+') && last == Some(c) {
            continue;
        }
        squeezed.push(c);
    }
    squeezed.trim().to_string()
}

/// Whether `expected`'s lines appear in `actual` in order (curl's full headers, psql's blank
/// lines and `(n rows)` spacing may add lines).
fn holds(actual: &str, expected: &[String]) -> bool {
    let mut have = actual.lines().map(normalized).filter(|l| !l.is_empty());
    expected
        .iter()
        .map(|l| normalized(l))
        .filter(|l| !l.is_empty())
        .all(|want| have.by_ref().any(|got| got == want))
}

fn is_read(command: &str) -> bool {
    let c = command.to_ascii_uppercase();
    (c.contains("\"SELECT") || c.contains("'SELECT")) && !c.contains("WRITE?")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_console_sessions_run_as_written() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let steps = steps(&readme);
    assert!(steps.len() >= 15, "{} runnable commands found", steps.len());
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(&dir.path().join("ebb-data"))).await.expect("start");
    let (http, pg) = (server.http_addr, server.pg_addr.port());
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ebb")).parent().expect("bin dir").to_path_buf();
    let work = dir.path().to_path_buf();
    let checks = tokio::task::spawn_blocking(move || {
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        for step in &steps {
            let command = step
                .command
                .replace("127.0.0.1:7080", &http.to_string())
                .replace("-p 7432", &format!("-p {pg}"));
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let out = Command::new("bash")
                    .args(["-c", &format!("{command} 2>&1")])
                    .current_dir(&work)
                    .env("PATH", &path)
                    .env("EBB_URL", format!("http://{http}"))
                    .env("PGHOST", "127.0.0.1")
                    .env("PGPORT", pg.to_string())
                    .output()
                    .expect("bash");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                if holds(&text, &step.output) {
                    break;
                }
                assert!(
                    is_read(&command) && Instant::now() < deadline,
                    "README.md, the session at line {}:\n$ {}\nshows\n{}\nbut printed\n{text}",
                    step.line,
                    step.command,
                    step.output.join("\n"),
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        steps.len()
    });
    let ran = checks.await.expect("the sessions");
    eprintln!("{ran} README commands ran as written");
    server.shutdown().await.expect("shutdown");
}

#[test]
fn sessions_split_into_commands_and_their_output() {
    let md = "text\n```console\n$ curl -d '\na b'\nout 1\n\n$ echo \\\n  x\nx\n```\n<!-- not run: needs a cluster -->\n```console\n$ skipped\n```\n";
    let s = steps(md);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[0].command, "curl -d '\na b'");
    assert_eq!(s[0].output, ["out 1"]);
    assert_eq!(s[1].command, "echo \\\n  x");
    assert_eq!(s[1].output, ["x"]);
    assert_eq!(
        normalized("| 1882616452047749175 | delete |    2 | pending |"),
        "| # | delete | 2 | STATUS |"
    );
    assert_eq!(normalized("| 3 | 2026-11-23T03:01:56.144 | | persisted |"), "| 3 | # | | STATUS |");
    assert_eq!(normalized("+------+----+"), "+-+-+");
}
