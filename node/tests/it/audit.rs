//! Deletion audits on one server: an erasure persisted within its deadline and verified; an
//! erasure held back by a long-lived snapshot (compaction cannot drop data a reader still
//! sees) turns `at risk`, then `late`, and the metrics say so; and the audit report renders in
//! headless Chromium with every request, status and verification.

use std::process::Command;
use std::time::Duration;

use crate::common::{loopback, until, Http, BASE};
use ebb_node::cli::audit::{report, verify, ReportFormat, VerifyScope};
use ebb_node::config::Config;
use ebb_node::server::Server;

fn config(dir: &std::path::Path) -> Config {
    Config { delete_deadline: Some(Duration::from_secs(3600)), ..loopback(dir) }
}

fn lines() -> String {
    let mut s = String::new();
    for user in ["alice", "bob", "carol"] {
        for p in 0..200 {
            let t = BASE + p * 1_000_000_000;
            s.push_str(&format!("temp,user={user} c={p}.5,note=\"{user}-marker-{p}\" {t}\n"));
        }
    }
    s
}

/// The overall status of request `id` in `system.deletions`.
fn status(h: &Http, id: u64) -> String {
    let v = h.json(&format!("SELECT status FROM system.deletions WHERE id = {id}"));
    v[0]["status"].as_str().unwrap_or_default().to_string()
}

#[test]
fn erasures_are_verified_go_late_when_held_back_and_report_renders() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = rt.block_on(Server::start(&config(dir.path()))).expect("start");
    let h = Http::new(server.http_addr);
    assert_eq!(h.post("/write?db=public", &lines()).0, 204);
    let db = server.database().expect("single node").clone();
    db.flush().expect("flush"); // the data is in SSTs, as it would be after a while

    // Carol: erased with a 3 s deadline; FADE compacts in time; the verification passes.
    let v = h.json("ERASE WHERE user = 'carol' DEADLINE '3s'");
    assert_eq!(v[0]["rows_erased"], 200, "{v}");
    let carol = v[0]["erasure_id"].as_u64().expect("id");
    until(30, "carol persisted", || status(&h, carol) == "persisted");
    let (out, pass) = verify(&h.base, carol, false).expect("verify");
    assert!(pass && out.contains("PASS") && out.contains("; 0 unaccounted byte runs"), "{out}");
    assert_eq!(h.metric("ebb_deletions_late_total"), 0.0);
    // Bytes nothing on disk accounts for fail the audit, named with their file and offset.
    let stray = db.engine().dir().join("left-behind.bin");
    std::fs::write(&stray, b"\0\0carol-marker-7").expect("stray file");
    let (out, pass) = verify(&h.base, carol, false).expect("verify");
    assert!(
        !pass && out.contains("UNACCOUNTED unknown left-behind.bin: 14 bytes at offset 2"),
        "{out}"
    );
    std::fs::remove_file(&stray).expect("remove");
    assert!(verify(&h.base, carol, false).expect("verify").1);

    // Alice: a reader holds a snapshot from before the erasure, so nothing can drop her data.
    let snapshot = db.engine().snapshot();
    let v = h.json("ERASE WHERE user = 'alice' DEADLINE '4s'");
    let alice = v[0]["erasure_id"].as_u64().expect("id");
    assert_eq!(h.json("SELECT count(*) AS c FROM temp WHERE user = 'alice'")[0]["c"], 0);
    assert_eq!(status(&h, alice), "pending");
    assert!(h.metric("ebb_deletions_pending") >= 1.0);
    until(10, "alice at risk", || status(&h, alice) == "at risk");
    assert_eq!(h.metric("ebb_deletions_at_risk"), 1.0);
    until(10, "alice late", || status(&h, alice) == "late");
    assert_eq!(h.metric("ebb_deletions_late_total"), 1.0);
    assert!(h.metric("ebb_deletion_oldest_pending_seconds") >= 4.0);
    // Still stored: the verification finds it (the check can fail).
    let (out, pass) = verify(&h.base, alice, false).expect("verify");
    assert!(!pass && out.contains("FAIL") && !out.contains(": 0 found;"), "{out}");
    // The reader goes; the data goes, late.
    drop(snapshot);
    until(30, "alice persisted", || {
        let v = h.json(&format!("SELECT persisted_at FROM system.deletions WHERE id = {alice}"));
        !v[0]["persisted_at"].is_null()
    });
    assert_eq!(status(&h, alice), "late", "persisted after the deadline stays late");
    assert!(verify(&h.base, alice, false).expect("verify").1);
    assert_eq!(h.metric("ebb_deletions_pending"), 0.0);

    // The report, in three formats; the HTML rendered by headless Chromium.
    let url = h.base.clone();
    let json = report(&url, "1d", ReportFormat::Json, VerifyScope::Erasures).expect("report");
    let r: serde_json::Value = serde_json::from_str(&json).expect("json");
    let reqs = r["requests"].as_array().expect("requests");
    let find = |id: u64| reqs.iter().find(|q| q["id"] == id).expect("request in report");
    assert_eq!(find(carol)["status"], "persisted");
    assert_eq!(find(carol)["verification"]["pass"], true);
    assert_eq!(find(alice)["status"], "late");
    assert!(find(alice)["slack_ms"].as_i64().expect("slack") < 0);
    let csv = report(&url, "1d", ReportFormat::Csv, VerifyScope::None).expect("csv");
    assert!(csv.lines().any(|l| l.starts_with(&format!("{alice},erase,")) && l.contains(",late,")));
    let html = report(&url, "1d", ReportFormat::Html, VerifyScope::Erasures).expect("html");
    let file = dir.path().join("report.html");
    std::fs::write(&file, html).expect("write");
    let dom = chromium_dom(&file);
    assert!(dom.contains("Deletion audit report"), "{dom}");
    for (id, status) in [(carol, "persisted"), (alice, "late")] {
        let row = format!("<tr class=\"{status}\" data-id=\"{id}\">");
        assert!(dom.contains(&row), "no row {row} in {dom}");
    }
    assert!(dom.contains("pass: 0 found"), "{dom}");
    assert_eq!(dom.matches("<rect class=\"bar").count(), reqs.len(), "a bar per request");
    assert!(dom.contains("id=\"count-late\">1 late"), "{dom}");
    rt.block_on(server.shutdown()).expect("shutdown");
}

/// The DOM of `file` after headless Chromium loaded and rendered it.
fn chromium_dom(file: &std::path::Path) -> String {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("headless Chromium is needed (Debian package chromium; .ci/run installs it)");
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
