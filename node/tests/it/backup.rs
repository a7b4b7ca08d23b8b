//! Backups of a single node: `BACKUP TO` (admins only), incremental sets, `system.backups`,
//! restores that give back exactly the state at each backup, and damaged sets refused by
//! `verify` and `restore` with the object named.

use std::path::{Path, PathBuf};

use ebb_node::server::Server;

use crate::common::{basic, secured, As, Http, ADMIN_PW, BASE};

/// Writes `hosts` hosts x `points` points of `cpu` from host number `first`.
fn write_hosts(admin: &As, first: usize, hosts: usize, points: usize) {
    let mut lines = String::new();
    for h in first..first + hosts {
        for p in 0..points {
            let t = BASE + (p as i64) * 1_000_000_000;
            lines.push_str(&format!(
                "cpu,host=h{h} usage={}.5,note=\"row {p} of h{h}\" {t}\n",
                p % 97
            ));
        }
    }
    let (s, b) = admin.write(&lines);
    assert_eq!(s, 204, "{b}");
}

fn count(admin: &As, sql: &str) -> u64 {
    let rows: serde_json::Value = serde_json::from_str(&admin.ok(sql)).expect("json");
    rows[0]["c"].as_u64().expect("a count")
}

/// Runs `BACKUP TO dest` and returns its row.
fn backup(admin: &As, dest: &Path) -> serde_json::Value {
    let rows: serde_json::Value =
        serde_json::from_str(&admin.ok(&format!("BACKUP TO '{}'", dest.display()))).expect("json");
    let row = rows[0].clone();
    assert_eq!(row["state"], "done", "{row}");
    row
}

async fn restore_and_count(dest: &Path, id: &str, into: &Path) -> (u64, u64) {
    let progress = ebb_backup::Progress::default();
    let set = ebb_node::backup::restore::restore(
        dest.to_str().expect("utf-8"),
        Some(id),
        into,
        None,
        &progress,
    )
    .await
    .expect("restore");
    assert_eq!(set.id, id);
    assert_eq!(progress.snapshot().files_done, set.files() as u64);
    let server = Server::start(&secured(into)).await.expect("start on the restored directory");
    let http = Http::new(server.http_addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    let all = count(&admin, "SELECT count(*) AS c FROM cpu");
    let h0 = count(&admin, "SELECT count(*) AS c FROM cpu WHERE host = 'h0'");
    server.shutdown().await.expect("shutdown");
    (all, h0)
}

/// The largest object at a directory destination.
fn largest_object(dest: &Path) -> PathBuf {
    let mut all = Vec::new();
    for fan in std::fs::read_dir(dest.join("objects")).expect("objects") {
        for o in std::fs::read_dir(fan.expect("entry").path()).expect("fan") {
            let p = o.expect("entry").path();
            all.push((std::fs::metadata(&p).expect("stat").len(), p));
        }
    }
    all.sort();
    all.pop().expect("an object").1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_restore_exactly_the_state_they_were_taken_at() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("backups"));
    let server = Server::start(&secured(&data)).await.expect("start");
    let http = Http::new(server.http_addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    admin.ok("CREATE USER writer WITH PASSWORD 'w-pass'");
    admin.ok("GRANT READ, WRITE ON DATABASE public TO writer");
    write_hosts(&admin, 0, 20, 50);

    // Only an admin backs up.
    let writer = As { http: &http, auth: basic("writer", "w-pass") };
    let (s, b) = writer.sql(&format!("BACKUP TO '{}'", dest.display()));
    assert_eq!(s, 403, "{b}");
    assert!(!dest.exists(), "a refused backup wrote nothing");
    // Credentials never go in the URI.
    let (s, b) = admin.sql("BACKUP TO 's3://AKIA:hunter2@bucket/p'");
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("credentials do not go in the URI") && !b.contains("hunter2"), "{b}");

    let first = backup(&admin, &dest);
    assert_eq!((first["kind"].as_str(), first["parts"].as_u64()), (Some("node"), Some(1)));
    assert!(first["bytes"].as_u64() > Some(0));
    assert_eq!(first["bytes_copied"], first["bytes"], "a first backup copies everything");

    // More rows, and a delete: the second set holds both, and copies only what is new.
    write_hosts(&admin, 20, 10, 50);
    admin.ok("DELETE FROM cpu WHERE host = 'h0'");
    let second = backup(&admin, &dest);
    let (bytes, copied) =
        (second["bytes"].as_u64().expect("n"), second["bytes_copied"].as_u64().expect("n"));
    assert!(copied < bytes, "an incremental backup copied {copied} of {bytes} bytes");
    assert!(copied > 0);

    let listed: serde_json::Value =
        serde_json::from_str(&admin.ok("SELECT id, state FROM system.backups ORDER BY started"))
            .expect("json");
    let ids: Vec<&str> =
        listed.as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id")).collect();
    let (id1, id2) = (first["id"].as_str().expect("id"), second["id"].as_str().expect("id"));
    assert_eq!(ids, [id1, id2], "{listed}");
    server.shutdown().await.expect("shutdown");

    // Each set gives back the state it was taken at.
    assert_eq!(restore_and_count(&dest, id1, &tmp.path().join("r1")).await, (1000, 50));
    assert_eq!(restore_and_count(&dest, id2, &tmp.path().join("r2")).await, (1450, 0));
    // A directory in use is never restored over.
    let e = ebb_node::backup::restore::restore(
        dest.to_str().expect("utf-8"),
        Some(id1),
        &data,
        None,
        &ebb_backup::Progress::default(),
    )
    .await
    .expect_err("restored over a data directory");
    assert!(e.to_string().contains("already exists"), "{e}");

    // A flipped byte: verify fails naming the object, and a restore leaves nothing behind.
    let victim = largest_object(&dest);
    let mut bytes = std::fs::read(&victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&victim, bytes).expect("write");
    let name = victim.file_name().expect("name").to_string_lossy().to_string();
    let (report, pass) = ebb_node::cli::backup::verify(dest.to_str().expect("utf-8"), id2, None)
        .await
        .expect("verify runs");
    assert!(!pass && report.contains(&name) && report.contains("damaged"), "{report}");
    let into = tmp.path().join("r3");
    let e = ebb_node::backup::restore::restore(
        dest.to_str().expect("utf-8"),
        Some(id2),
        &into,
        None,
        &ebb_backup::Progress::default(),
    )
    .await
    .expect_err("a damaged set restored");
    assert!(e.to_string().contains(&name), "{e}");
    assert!(!into.exists(), "a failed restore left {}", into.display());
}

/// A free loopback port.
fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// An `ebb` server process, killed when dropped (a failing test leaves none behind).
struct Proc(std::process::Child);

impl Proc {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `ebb` binary serving `data` on loopback with user `admin`, backups throttled to 32 KiB
/// a second.
fn spawn_server(data: &Path) -> (Proc, std::net::SocketAddr) {
    let http = port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args(["server", "--data-dir"])
        .arg(data)
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--pg-addr", &format!("127.0.0.1:{}", port())])
        .args(["--flight-addr", &format!("127.0.0.1:{}", port())])
        .args(["--grpc-addr", &format!("127.0.0.1:{}", port())])
        .args(["--backup-rate", "32KiB"])
        .env("EBB_LOG", "warn")
        .env("EBB_ADMIN_PASSWORD", ADMIN_PW)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(Proc)
        .expect("start ebb");
    let addr = format!("127.0.0.1:{http}").parse().expect("addr");
    let h = Http::new(addr);
    crate::common::until(30, "the server up", || {
        std::net::TcpStream::connect(addr).is_ok() && h.get("/ready").0 == 200
    });
    (child, addr)
}

#[test]
fn a_backup_killed_midway_leaves_no_set_and_prune_collects_its_objects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("backups"));
    let (mut child, addr) = spawn_server(&data);
    let http = Http::new(addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    write_hosts(&admin, 0, 40, 200);
    let first = backup(&admin, &dest);
    let id1 = first["id"].as_str().expect("id").to_string();
    write_hosts(&admin, 40, 40, 200);
    // A second backup, killed with the server once it has uploaded something.
    let to = dest.clone();
    let running = std::thread::spawn(move || {
        let http = Http::new(addr);
        As { http: &http, auth: basic("admin", ADMIN_PW) }
            .sql(&format!("BACKUP TO '{}'", to.display()))
    });
    crate::common::until(60, "the second backup midway", || {
        let rows: serde_json::Value = serde_json::from_str(
            &admin.ok("SELECT bytes_done, bytes, bytes_copied FROM system.backups \
                 WHERE state = 'running'"),
        )
        .expect("json");
        let n = |k: &str| rows[0][k].as_u64().unwrap_or(0);
        n("bytes_done") > 0 && n("bytes_done") < n("bytes")
    });
    assert_eq!(dest.join("running").read_dir().expect("leases").count(), 1, "a lease is held");
    child.kill();
    let _ = running.join();

    // After a restart, only the finished set is there, and the killed backup's lease is gone.
    let (mut child, addr) = spawn_server(&data);
    let http = Http::new(addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    crate::common::until(30, "the lease released", || {
        dest.join("running").read_dir().map(|d| d.count()).unwrap_or(0) == 0
    });
    let listed: serde_json::Value =
        serde_json::from_str(&admin.ok("SELECT id, state FROM system.backups")).expect("json");
    let ids: Vec<&str> =
        listed.as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(ids, [id1.as_str()], "{listed}");
    assert!(!data.join("backup").join("staging").exists(), "staging was cleaned");
    child.kill();
    // Prune (keeping the one set) removes what the killed backup uploaded; the set verifies.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let at = dest.to_str().expect("utf-8");
    let pruned = rt.block_on(ebb_node::cli::backup::prune(at, 1)).expect("prune");
    assert!(pruned.starts_with("removed 0 sets"), "{pruned}");
    let (kept, left) = rt.block_on(async {
        let store = ebb_backup::BackupStore::open(
            &ebb_backup::Destination::parse(at).expect("uri"),
            ebb_backup::Throttle::none(),
        )
        .await
        .expect("open");
        let set = store.set(&id1).await.expect("the set");
        let kept: std::collections::HashSet<String> =
            set.objects().map(|o| o.hash.clone()).collect();
        (kept, store.object_hashes().await.expect("objects"))
    });
    assert_eq!(left, kept, "what is left is exactly what the kept set uses");
    let (report, pass) =
        rt.block_on(ebb_node::cli::backup::verify(at, &id1, None)).expect("verify");
    assert!(pass, "{report}");
}
