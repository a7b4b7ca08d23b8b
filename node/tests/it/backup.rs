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
    let restored = ebb_node::backup::restore::restore(
        dest.to_str().expect("utf-8"),
        Some(id),
        into,
        None,
        None,
        &progress,
    )
    .await
    .expect("restore");
    let set = restored.set;
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

/// Set `id` at the directory destination `dest`.
async fn set_at(dest: &Path, id: &str) -> ebb_backup::BackupSet {
    let d = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&d, ebb_backup::Throttle::none()).await.expect("open");
    store.set(id).await.expect("the set")
}

/// The file of the largest object of set `id` at a directory destination.
async fn largest_object(dest: &Path, id: &str) -> PathBuf {
    let set = set_at(dest, id).await;
    let o = set.objects().max_by_key(|o| o.len).expect("an object");
    dest.join(o.key().as_ref())
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
    admin.ok("GRANT READ ON DATABASE system TO writer");
    write_hosts(&admin, 0, 20, 50);

    // Only an admin backs up, or reads where backups are kept.
    let writer = As { http: &http, auth: basic("writer", "w-pass") };
    let (s, b) = writer.sql(&format!("BACKUP TO '{}'", dest.display()));
    assert_eq!(s, 403, "{b}");
    assert!(!dest.exists(), "a refused backup wrote nothing");
    writer.ok("SELECT count(*) FROM system.deletions");
    let (s, b) = writer.sql("SELECT * FROM system.backups");
    assert_eq!(s, 403, "{b}");
    // Credentials never go in the URI.
    let (s, b) = admin.sql("BACKUP TO 's3://AKIA:hunter2@bucket/p'");
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("credentials do not go in the URI") && !b.contains("hunter2"), "{b}");

    let first = backup(&admin, &dest);
    assert_eq!((first["kind"].as_str(), first["parts"].as_u64()), (Some("node"), Some(1)));
    let mode = std::fs::metadata(&dest).expect("dest").permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0, "private: {mode:?}");
    assert!(first["bytes"].as_u64() > Some(0));
    assert_eq!(first["bytes_copied"], first["bytes"], "a first backup copies everything");

    // More rows: the second set holds them all, and copies only what is new.
    write_hosts(&admin, 20, 10, 50);
    let second = backup(&admin, &dest);
    let (bytes, copied) =
        (second["bytes"].as_u64().expect("n"), second["bytes_copied"].as_u64().expect("n"));
    assert!(copied < bytes, "an incremental backup copied {copied} of {bytes} bytes");
    assert!(copied > 0);
    // A delete, and h0's rows written again after it (both sets taken so far are purged of
    // the delete; the third holds the delete and the rows after it).
    admin.ok("DELETE FROM cpu WHERE host = 'h0'");
    write_hosts(&admin, 0, 1, 50);
    let third = backup(&admin, &dest);

    let listed: serde_json::Value =
        serde_json::from_str(&admin.ok("SELECT id, state FROM system.backups ORDER BY started"))
            .expect("json");
    let ids: Vec<&str> =
        listed.as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id")).collect();
    let (id1, id2) = (first["id"].as_str().expect("id"), second["id"].as_str().expect("id"));
    let id3 = third["id"].as_str().expect("id");
    assert_eq!(ids, [id1, id2, id3], "{listed}");

    // Over PostgreSQL's extended protocol (what drivers use), BACKUP is described and answered
    // as one row.
    let conf = format!(
        "host=127.0.0.1 port={} user=admin password='{ADMIN_PW}' dbname=public",
        server.pg_addr.port()
    );
    let (client, conn) = tokio_postgres::connect(&conf, tokio_postgres::NoTls).await.expect("pg");
    tokio::spawn(conn);
    let stmt = client.prepare(&format!("BACKUP TO '{}'", dest.display())).await.expect("prepare");
    assert_eq!(stmt.columns().first().map(|c| c.name()), Some("id"));
    let rows = client.query(&stmt, &[]).await.expect("backup over pg");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>("state"), "done");
    let fourth = rows[0].get::<_, String>("id");
    assert!(fourth.as_str() > id3);
    server.shutdown().await.expect("shutdown");

    // Each set gives back the state it was taken at, minus what was deleted after it: the
    // delete reached the first two sets; the rows written after the delete are in the third
    // and survive its restore (the set's ledger holds the delete, so it is not applied again).
    assert_eq!(restore_and_count(&dest, id1, &tmp.path().join("r1")).await, (950, 0));
    assert_eq!(restore_and_count(&dest, id2, &tmp.path().join("r2")).await, (1450, 0));
    assert_eq!(restore_and_count(&dest, id3, &tmp.path().join("r3")).await, (1500, 50));
    // A directory in use is never restored over.
    let e = restore_with_keys(&dest, id1, &data, None)
        .await
        .expect_err("restored over a data directory");
    assert!(e.to_string().contains("already exists"), "{e}");

    // A flipped byte: verify fails naming the object, and a restore leaves nothing behind.
    let victim = largest_object(&dest, id2).await;
    let mut bytes = std::fs::read(&victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&victim, bytes).expect("write");
    let name = victim.file_name().expect("name").to_string_lossy().to_string();
    let (report, pass) = ebb_node::cli::backup::verify(dest.to_str().expect("utf-8"), id2, None)
        .await
        .expect("verify runs");
    assert!(!pass && report.contains(&name) && report.contains("damaged"), "{report}");
    let into = tmp.path().join("r-damaged");
    let e = restore_with_keys(&dest, id2, &into, None).await.expect_err("a damaged set restored");
    assert!(e.to_string().contains(&name), "{e}");
    assert!(!into.exists(), "a failed restore left {}", into.display());
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
/// a second. Every port is chosen by the server (0), and the HTTP address read from the line
/// it prints once ready, so no other test can take a port between choosing and binding it.
fn spawn_server(data: &Path) -> (Proc, std::net::SocketAddr) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args(["server", "--data-dir"])
        .arg(data)
        .args(["--http-addr", "127.0.0.1:0", "--pg-addr", "127.0.0.1:0"])
        .args(["--flight-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .args(["--backup-rate", "32KiB"])
        .env("EBB_LOG", "warn")
        .env("EBB_ADMIN_PASSWORD", ADMIN_PW)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Proc)
        .expect("start ebb");
    // The ready line goes to standard error, with the logs.
    let stdout = child.0.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(rest) = line.strip_prefix("EbbDB ready: HTTP http://") {
                let addr = rest.split_whitespace().next().unwrap_or_default().to_string();
                let _ = tx.send(addr);
            }
        }
    });
    let addr: std::net::SocketAddr = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the server's ready line")
        .parse()
        .expect("addr");
    let h = Http::new(addr);
    crate::common::until(30, "the server up", || h.get("/ready").0 == 200);
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
    // Enough new data that the throttled second backup (32 KiB/s) runs for seconds.
    write_hosts(&admin, 40, 40, 1000);
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
        // Its part is taken and uploading (a file's bytes count once it is whole, so at
        // 32 KiB/s the first may take a while to show).
        let n = |k: &str| rows[0][k].as_u64().unwrap_or(0);
        n("bytes") > 0 && n("bytes_done") + (64 << 10) < n("bytes")
    });
    let locks = dest.join("locks").join("shared");
    assert_eq!(locks.read_dir().expect("locks").count(), 1, "a lock is held");
    // While it runs, a second backup and a prune are refused as busy.
    let (s, b) = admin.sql(&format!("BACKUP TO '{}'", dest.display()));
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("already running a backup"), "{b}");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let at = dest.to_str().expect("utf-8");
    let e = rt.block_on(ebb_node::cli::backup::prune(at, 1)).expect_err("pruned under a backup");
    assert!(e.to_string().contains("busy"), "{e}");
    child.kill();
    let _ = running.join();

    // After a restart, only the finished set is there, and the killed backup's lease is gone.
    let (mut child, addr) = spawn_server(&data);
    let http = Http::new(addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    crate::common::until(30, "the lock released", || {
        locks.read_dir().map(|d| d.count()).unwrap_or(0) == 0
    });
    let listed: serde_json::Value =
        serde_json::from_str(&admin.ok("SELECT id, state FROM system.backups")).expect("json");
    let ids: Vec<&str> =
        listed.as_array().expect("rows").iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(ids, [id1.as_str()], "{listed}");
    assert!(!data.join("backup").join("staging").exists(), "staging was cleaned");
    child.kill();
    // Prune (keeping the one set) removes what the killed backup uploaded; the set verifies.
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
        let left: std::collections::HashSet<String> =
            store.object_sizes().await.expect("objects").into_keys().collect();
        (kept, left)
    });
    assert_eq!(left, kept, "what is left is exactly what the kept set uses");
    let (report, pass) =
        rt.block_on(ebb_node::cli::backup::verify(at, &id1, None)).expect("verify");
    assert!(pass, "{report}");
}

/// Rows of `users`, points `from..to`, each with a marker value naming its user and point.
fn write_users(admin: &As, users: &[&str], from: i64, to: i64) {
    let mut lines = String::new();
    for u in users {
        for p in from..to {
            let t = BASE + p * 1_000_000_000;
            lines.push_str(&format!("temp,user={u} c={p}.5,note=\"secret-{u}-{p}\" {t}\n"));
        }
    }
    let (s, b) = admin.write(&lines);
    assert_eq!(s, 204, "{b}");
}

/// The objects at the directory destination `dest` whose bytes (SST pages decompressed, for
/// the objects some set names as an SST file) contain `needle`.
async fn objects_with(dest: &Path, needle: &[u8]) -> Vec<String> {
    let d = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&d, ebb_backup::Throttle::none()).await.expect("open");
    let mut names = std::collections::HashMap::new();
    for l in store.list().await.expect("sets") {
        for p in l.set.expect("a readable set").parts {
            for f in p.files {
                names.insert(f.object.hash, f.name);
            }
        }
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut out = Vec::new();
    for fan in std::fs::read_dir(dest.join("objects")).expect("objects") {
        for o in std::fs::read_dir(fan.expect("entry").path()).expect("fan") {
            let path = o.expect("entry").path();
            let hash = path.file_name().expect("name").to_string_lossy().to_string();
            let text = match names.get(&hash) {
                Some(name) if name.ends_with(".sst") => {
                    let copy = scratch.path().join(name);
                    std::fs::copy(&path, &copy).expect("copy");
                    ebb_storage::audit::plaintext(&copy).expect("an SST")
                }
                _ => std::fs::read(&path).expect("read"),
            };
            if text.windows(needle.len()).any(|w| w == needle) {
                out.push(format!("{hash} ({})", names.get(&hash).map_or("no set", |n| n)));
            }
        }
    }
    out
}

/// Polls `f` every 100 ms until it holds, failing after `secs` seconds.
async fn until_async<F: std::future::Future<Output = bool>>(
    secs: u64,
    what: &str,
    mut f: impl FnMut() -> F,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {secs} s");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Waits until request `id` is purged from every one of `sets` at `dest` and its journal entry
/// is gone (the purge removes it after sweeping), then checks no object holds `marker`.
async fn purged_everywhere(
    store: &ebb_backup::BackupStore,
    dest: &Path,
    sets: &[&str],
    id: u64,
    marker: &[u8],
) {
    until_async(180, "every set purged", || async {
        for s in sets {
            if !set_at(dest, s).await.purged(id) {
                return false;
            }
        }
        true
    })
    .await;
    until_async(60, "the journal entry removed", || async {
        store.journal().await.expect("journal").is_empty()
    })
    .await;
    assert_eq!(objects_with(dest, marker).await, Vec::<String>::new());
}

/// Each backup set as a copy of request `id` in `system.deletions`, with its status (once per
/// set: a cluster's set has a row per shard).
fn backup_copies(admin: &As, id: u64) -> Vec<(String, String)> {
    let rows: serde_json::Value = serde_json::from_str(&admin.ok(&format!(
        "SELECT DISTINCT copy, replica_status FROM system.deletions WHERE id = {id} \
         AND copy <> 'replica' ORDER BY copy"
    )))
    .expect("json");
    let row = |r: &serde_json::Value| {
        (
            r["copy"].as_str().expect("copy").to_string(),
            r["replica_status"].as_str().expect("status").to_string(),
        )
    };
    rows.as_array().expect("rows").iter().map(row).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erase_reaches_every_set_and_every_restore() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("backups"));
    let server = Server::start(&secured(&data)).await.expect("start");
    let http = Http::new(server.http_addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    write_users(&admin, &["alice", "bob", "carol"], 0, 200);
    let first = backup(&admin, &dest);
    write_users(&admin, &["alice", "bob"], 200, 400);
    let second = backup(&admin, &dest);
    let (id1, id2) = (first["id"].as_str().expect("id"), second["id"].as_str().expect("id"));
    let marker = b"secret-alice-";
    assert!(!objects_with(&dest, marker).await.is_empty(), "the check sees the markers");

    // Another server's backup holds the destination, so no purge can run for now.
    let at = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&at, ebb_backup::Throttle::none()).await.expect("open");
    let other = store.lock(ebb_backup::LockKind::Shared, "elsewhere").await.expect("lock");
    let erased: serde_json::Value =
        serde_json::from_str(&admin.ok("ERASE WHERE user = 'alice'")).expect("json");
    let erasure = erased[0]["erasure_id"].as_u64().expect("an erasure id");
    until_async(30, "the erasure in the destination's journal, complete", || async {
        let j = store.journal().await.expect("journal");
        j.iter().any(|e| e.id == erasure && e.completed_ms.is_some())
    })
    .await;
    assert_eq!(set_at(&dest, id1).await.generation, 1, "no purge ran under the lock");
    // Each set is a copy of the erasure, pending while the journal holds it.
    let pending = backup_copies(&admin, erasure);
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert_eq!(pending[0].0, format!("backup {id1}"), "{pending:?}");
    assert!(pending.iter().all(|(_, s)| s == "pending"), "{pending:?}");
    // The audit fails while a set still holds what the erasure covers.
    let v = admin.verify(erasure);
    assert!(!v.pass, "{v:?}");
    let waiting: Vec<_> = v.replicas.iter().filter(|r| r.copy.is_some()).collect();
    assert_eq!(waiting.len(), 2, "{v:?}");
    assert!(waiting.iter().all(|r| r.error.as_deref().is_some_and(|e| e.contains("not reached"))));

    // Restoring the older set before its purge ran: the journal is applied first.
    let r1 = tmp.path().join("r1");
    let restored = restore_with_keys(&dest, id1, &r1, None).await.expect("restore");
    assert_eq!(restored.journal_applied, [erasure]);
    assert_eq!(
        crate::cluster_erasure::files_with(&r1, marker),
        Vec::<String>::new(),
        "no file of the restored directory holds an erased value"
    );
    {
        let s = Server::start(&secured(&r1)).await.expect("start on the restored set");
        let h = Http::new(s.http_addr);
        let a = As { http: &h, auth: basic("admin", ADMIN_PW) };
        let per_user =
            |u: &str| count(&a, &format!("SELECT count(*) AS c FROM temp WHERE user = '{u}'"));
        assert_eq!((per_user("alice"), per_user("bob"), per_user("carol")), (0, 200, 200));
        s.shutdown().await.expect("shutdown");
    }

    // Once the destination is free, both sets are purged: no object holds an erased value,
    // and the journal entry goes (every set holds the request).
    store.unlock(&other).await;
    purged_everywhere(&store, &dest, &[id1, id2], erasure, marker).await;
    // The server sees the purged sets once its purge round ends (up to 60 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let persisted = loop {
        let p = backup_copies(&admin, erasure);
        let done = p.len() == 2 && p.iter().all(|(_, s)| s == "persisted");
        if done || std::time::Instant::now() > deadline {
            break p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(persisted.len(), 2, "{persisted:?}");
    assert!(persisted.iter().all(|(_, s)| s == "persisted"), "{persisted:?}");
    let mut named = std::collections::HashSet::new();
    for id in [id1, id2] {
        let s = set_at(&dest, id).await;
        assert_eq!(s.generation, 2, "{id}");
        assert!(store
            .verify(&s, &ebb_backup::Progress::default())
            .await
            .expect("verify")
            .is_empty());
        named.extend(s.objects().map(|o| o.hash.clone()));
    }
    let left: std::collections::HashSet<String> =
        store.object_sizes().await.expect("objects").into_keys().collect();
    assert_eq!(left, named, "the objects that held the erased values are gone");
    // The audit scans every set as it scans the replica: every byte accounted for, no value.
    // (The replica itself compacts the erased rows away by the erasure's deadline.)
    let v = admin.verify(erasure);
    let sets: Vec<_> = v.replicas.iter().filter(|r| r.copy.is_some()).collect();
    assert_eq!(sets.len(), 2, "{v:?}");
    for r in sets {
        assert!(r.holds_request && r.error.is_none() && r.found() == 0, "{r:?}");
        assert!(r.files_accounted > 0 && r.unaccounted.is_empty(), "{r:?}");
        assert!(r.sources.iter().any(|s| s.kind.contains("sst")), "{r:?}");
    }

    // The destination is this server's: another server's backup to it is refused (its
    // deletes must not reach these sets, nor these server's deletes its sets). The server
    // restored from it continues this one, and backs up there.
    let origin = set_at(&dest, id1).await.origin.expect("a set records its origin");
    assert_eq!(set_at(&dest, id2).await.origin.as_deref(), Some(origin.as_str()));
    // A server that lost its origin file takes the one its destination was claimed with.
    std::fs::remove_file(data.join("backup").join("origin")).expect("the origin file");
    let again = backup(&admin, &dest);
    let again = set_at(&dest, again["id"].as_str().expect("id")).await;
    assert_eq!(again.origin.as_deref(), Some(origin.as_str()), "the destination's origin");
    {
        let s = Server::start(&secured(&tmp.path().join("other"))).await.expect("start");
        let h = Http::new(s.http_addr);
        let a = As { http: &h, auth: basic("admin", ADMIN_PW) };
        let (status, body) = a.sql(&format!("BACKUP TO '{}'", dest.display()));
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("another server or cluster"), "{body}");
        s.shutdown().await.expect("shutdown");
    }
    server.shutdown().await.expect("shutdown");
    {
        let s = Server::start(&secured(&r1)).await.expect("start on the restored set");
        let h = Http::new(s.http_addr);
        let a = As { http: &h, auth: basic("admin", ADMIN_PW) };
        let row = backup(&a, &dest);
        let set = set_at(&dest, row["id"].as_str().expect("id")).await;
        assert_eq!(set.origin.as_deref(), Some(origin.as_str()), "the restored server's set");
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_backup_under_writes_restores_into_a_cluster_of_another_size() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let dest_dir = tempfile::tempdir().expect("tempdir");
    let dest = dest_dir.path().join("backups");
    // Backups throttled, so one is still running when a node is stopped (each part holds a
    // few KiB; its leader's bucket starts with one second of bytes).
    let config = |d: &Path| ebb_node::config::Config {
        shards: 4,
        replication: 3,
        scaling: ebb_node::config::scaling::Scaling {
            backup_rate: Some(2 << 10),
            ..Default::default()
        },
        ..secured(d)
    };
    let admin = |h| As { http: h, auth: basic("admin", ADMIN_PW) };
    let mut servers = crate::common::start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    let settled = std::time::Instant::now();
    loop {
        // Every shard on all three nodes (the rebalancer moves them there after the start).
        let (s, b) = admin(&hs[0]).sql(
            "SELECT count(*) AS c FROM system.shards WHERE leader IS NOT NULL AND NOT moving \
             AND length(replicas) - length(replace(replicas, ',', '')) = 2",
        );
        if s == 200 && b.contains("\"c\":4") {
            break;
        }
        assert!(settled.elapsed().as_secs() < 60, "placement never settled: {b}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (s, b) = admin(&hs[0]).write(&lines_for(0, 200));
    assert_eq!(s, 204, "{b}");
    let (s, b) = admin(&hs[1]).sql("CREATE USER auditor WITH PASSWORD 'a-pass'");
    assert_eq!(s, 200, "{b}");
    // Writes go on through another node while the backup runs.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let acked = std::sync::Arc::new(AtomicU64::new(200));
    let writer = {
        let (stop, acked, addr) = (stop.clone(), acked.clone(), servers[1].http_addr);
        std::thread::spawn(move || {
            let h = Http::new(addr);
            let w = As { http: &h, auth: basic("admin", ADMIN_PW) };
            let mut p = 200;
            while !stop.load(Ordering::Relaxed) {
                // Refused while a stopped node's shards elect new leaders: sent again.
                if w.write(&lines_for(p, p + 10)).0 == 204 {
                    p += 10;
                    acked.store(p as u64, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    // Through a node, by SQL, as on a single node; node 1 is stopped once the backup has
    // taken a part, and the parts it led are taken from the new leaders.
    let before = acked.load(Ordering::SeqCst);
    let running = {
        let (addr, to) = (servers[2].http_addr, dest.clone());
        std::thread::spawn(move || {
            let h = Http::new(addr);
            As { http: &h, auth: basic("admin", ADMIN_PW) }
                .sql(&format!("BACKUP TO '{}'", to.display()))
        })
    };
    until_async(60, "a part taken", || async {
        let (_, b) = admin(&hs[2]).sql(
            "SELECT bytes_done FROM system.backups WHERE state = 'running' AND bytes_done > 0",
        );
        b.contains("bytes_done")
    })
    .await;
    let victim = servers.remove(0);
    victim.shutdown().await.expect("stop node 1");
    let (s, b) = tokio::task::spawn_blocking(move || running.join().expect("backup thread"))
        .await
        .expect("join");
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert_eq!(s, 200, "{b}");
    let rows: serde_json::Value = serde_json::from_str(&b).expect("json");
    let row = &rows[0];
    assert_eq!((row["state"].as_str(), row["kind"].as_str()), (Some("done"), Some("cluster")));
    let id = row["id"].as_str().expect("id");

    let set = set_at(&dest, id).await;
    let shards: Vec<u64> = set.parts.iter().map(|p| p.shard).collect();
    assert_eq!(shards, [1, 2, 3, 4]);
    for p in set.all_parts() {
        let applied = p.applied.expect("a replica's part names its last log entry");
        assert!(applied.index > 0 && applied.term > 0, "{p:?}");
        assert!(p.files.iter().any(|f| f.name == "MANIFEST" || f.name.ends_with(".sst")), "{p:?}");
    }
    assert!(set.meta.is_some(), "the metadata group's part");
    let d = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&d, ebb_backup::Throttle::none()).await.expect("open");
    assert!(store.verify(&set, &ebb_backup::Progress::default()).await.expect("verify").is_empty());
    // Every row acknowledged before the backup started is in some part: the parts hold at least
    // that many rows' worth of data (the exact comparison needs a restore of the cluster).
    assert!(before >= 200 && row["bytes"].as_u64() > Some(0), "{row}");
    assert!(store.journal().await.expect("journal").is_empty());
    // A second backup copies only what is new.
    let (s, b) = admin(&hs[1]).sql(&format!("BACKUP TO '{}'", dest.display()));
    assert_eq!(s, 200, "{b}");
    let second: serde_json::Value = serde_json::from_str(&b).expect("json");
    let (bytes, copied) = (second[0]["bytes"].as_u64(), second[0]["bytes_copied"].as_u64());
    assert!(copied < bytes, "{second}");
    let after = acked.load(Ordering::SeqCst);
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }

    // Restored into a new cluster of two nodes: the first is built from the set, the second
    // joins it and gets replicas by the usual placement.
    let new_dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let first_dir = new_dirs[0].path().join("data");
    let restored =
        restore_with_keys(&dest, id, &first_dir, None).await.expect("restore a cluster's set");
    assert_eq!(restored.set.id, id);
    let first = Server::start(&ebb_node::config::Config { cluster: true, ..config(&first_dir) })
        .await
        .expect("start the restored cluster");
    let joined = Server::start(&ebb_node::config::Config {
        join: vec![first.grpc_addr.to_string()],
        ..config(new_dirs[1].path())
    })
    .await
    .expect("join the restored cluster");
    let hj = Http::new(joined.http_addr);
    let h = admin(&hj);
    let settled = std::time::Instant::now();
    loop {
        let (s, b) = h.sql("SELECT count(*) AS c FROM system.shards WHERE leader IS NOT NULL");
        if s == 200 && b.contains("\"c\":4") {
            break;
        }
        assert!(settled.elapsed().as_secs() < 60, "the restored shards never led: {b}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Every point acknowledged before the backup started is there; nothing that was never
    // written is. (Points written while it ran are in the parts taken after them: shards'
    // parts are taken one after another.)
    let rows: serde_json::Value = serde_json::from_str(
        &h.sql("SELECT count(*) AS c, count(DISTINCT time) AS t, max(usage) AS m FROM cpu").1,
    )
    .expect("json");
    let (c, t) = (rows[0]["c"].as_u64().expect("c"), rows[0]["t"].as_u64().expect("t"));
    assert!(c <= after * 4, "{rows}");
    assert!(
        t >= before && t <= after,
        "{t} points; {before} acknowledged before, {after} by the end"
    );
    let below = format!(
        "SELECT count(*) AS c FROM cpu WHERE time < to_timestamp_nanos({})",
        BASE + before as i64 * 1_000_000_000
    );
    let rows: serde_json::Value = serde_json::from_str(&h.sql(&below).1).expect("json");
    assert_eq!(rows[0]["c"].as_u64(), Some(before * 4), "{rows}");
    // The users came with the metadata.
    let (s, b) = As { http: &hj, auth: basic("auditor", "a-pass") }.sql("SELECT 1");
    assert_eq!(s, 200, "{b}");
    // The restored cluster continues the one backed up: it keeps its backup origin and backs
    // up to the same destination.
    let (s, b) = h.sql(&format!("BACKUP TO '{}'", dest.display()));
    assert_eq!(s, 200, "{b}");
    let next: serde_json::Value = serde_json::from_str(&b).expect("json");
    let next = set_at(&dest, next[0]["id"].as_str().expect("id")).await;
    assert!(set.origin.is_some(), "a cluster's set records its origin");
    assert_eq!(next.origin, set.origin, "the restored cluster's set");
    joined.shutdown().await.expect("shutdown");
    first.shutdown().await.expect("shutdown");
}

/// Lines of `cpu` for points `from..to` of 4 hosts.
fn lines_for(from: i64, to: i64) -> String {
    let mut s = String::new();
    for p in from..to {
        for h in 0..4 {
            s.push_str(&format!("cpu,host=h{h} usage={p}.5 {}\n", BASE + p * 1_000_000_000));
        }
    }
    s
}

/// Waits until each of `shards` shards has a leader and replicas on `replicas` nodes.
async fn placed(admin: &As<'_>, shards: u64, replicas: usize) {
    let commas = replicas - 1;
    let settled = std::time::Instant::now();
    loop {
        let (s, b) = admin.sql(&format!(
            "SELECT count(*) AS c FROM system.shards WHERE leader IS NOT NULL AND NOT moving \
             AND length(replicas) - length(replace(replicas, ',', '')) = {commas}"
        ));
        if s == 200 && b.contains(&format!("\"c\":{shards}")) {
            return;
        }
        assert!(settled.elapsed().as_secs() < 60, "placement never settled: {b}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erase_reaches_a_clusters_sets_and_its_restores() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let dest_dir = tempfile::tempdir().expect("tempdir");
    let dest = dest_dir.path().join("backups");
    let config = |d: &Path| ebb_node::config::Config { shards: 2, replication: 3, ..secured(d) };
    let servers = crate::common::start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    let admin = |i: usize| As { http: &hs[i], auth: basic("admin", ADMIN_PW) };
    placed(&admin(0), 2, 3).await;
    write_users(&admin(0), &["alice", "bob"], 0, 100);
    let first = backup(&admin(1), &dest);
    write_users(&admin(0), &["alice", "bob"], 100, 200);
    let second = backup(&admin(2), &dest);
    let (id1, id2) = (first["id"].as_str().expect("id"), second["id"].as_str().expect("id"));
    let marker = b"secret-alice-";
    assert!(!objects_with(&dest, marker).await.is_empty(), "the check sees the markers");

    // Another backup holds the destination: the journal gets the erasure, no purge runs yet.
    let at = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&at, ebb_backup::Throttle::none()).await.expect("open");
    let other = store.lock(ebb_backup::LockKind::Shared, "elsewhere").await.expect("lock");
    // Issued on a node that ran neither backup: the destination is known cluster-wide.
    let erased: serde_json::Value =
        serde_json::from_str(&admin(0).ok("ERASE WHERE user = 'alice'")).expect("json");
    let erasure = erased[0]["erasure_id"].as_u64().expect("an erasure id");
    until_async(60, "the erasure in the destination's journal, complete", || async {
        let j = store.journal().await.expect("journal");
        j.iter().any(|e| e.id == erasure && e.completed_ms.is_some())
    })
    .await;
    assert_eq!(set_at(&dest, id1).await.generation, 1, "no purge ran under the lock");
    let pending = backup_copies(&admin(1), erasure);
    let sets = [format!("backup {id1}"), format!("backup {id2}")];
    assert_eq!(pending.iter().map(|c| c.0.clone()).collect::<Vec<_>>(), sets, "{pending:?}");
    assert!(pending.iter().all(|(_, s)| s == "pending"), "{pending:?}");

    // The older set restored before its purge: the journal is applied to every shard's part.
    let restored_dir = tempfile::tempdir().expect("tempdir");
    let r1 = restored_dir.path().join("data");
    let restored = restore_with_keys(&dest, id1, &r1, None).await.expect("restore");
    assert_eq!(restored.journal_applied, [erasure]);
    assert_eq!(crate::cluster_erasure::files_with(&r1, marker), Vec::<String>::new());
    let rows = alice_and_bob_in_restored_cluster(config(&r1)).await;
    assert_eq!(rows, (0, 100));

    // Once the destination is free, the metadata leader purges both sets.
    store.unlock(&other).await;
    purged_everywhere(&store, &dest, &[id1, id2], erasure, marker).await;
    let v = admin(1).verify(erasure);
    let scanned: Vec<_> = v.replicas.iter().filter(|r| r.copy.is_some()).collect();
    assert_eq!(scanned.len(), 4, "two sets of two shards: {v:?}");
    for r in &scanned {
        assert!(r.error.is_none() && r.found() == 0 && r.unaccounted.is_empty(), "{r:?}");
    }
    for id in [id1, id2] {
        let copy = format!("backup {id}");
        let held = scanned.iter().filter(|r| r.copy.as_deref() == Some(&copy) && r.holds_request);
        assert!(held.count() > 0, "a part of {id} holds alice's rows: {v:?}");
    }
    let persisted = backup_copies(&admin(2), erasure);
    assert_eq!(persisted.iter().map(|c| c.0.clone()).collect::<Vec<_>>(), sets);
    assert!(persisted.iter().all(|(_, s)| s == "persisted"), "{persisted:?}");
    for id in [id1, id2] {
        let s = set_at(&dest, id).await;
        assert_eq!(s.generation, 2, "{id}");
        assert!(s.meta.is_some(), "the metadata part is kept");
        let bad = store.verify(&s, &ebb_backup::Progress::default()).await.expect("verify");
        assert!(bad.is_empty(), "{bad:?}");
    }
    // A purged set still restores into a cluster holding the rows not erased.
    let r2 = restored_dir.path().join("data2");
    let again = restore_with_keys(&dest, id2, &r2, None).await.expect("restore the purged set");
    assert!(again.journal_applied.is_empty(), "{:?}", again.journal_applied);
    let rows = alice_and_bob_in_restored_cluster(config(&r2)).await;
    assert_eq!(rows, (0, 200));
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

/// Starts the cluster restored into `config`'s data directory (2 shards) and counts the rows of
/// users alice and bob there.
async fn alice_and_bob_in_restored_cluster(config: ebb_node::config::Config) -> (u64, u64) {
    let s = Server::start(&ebb_node::config::Config { cluster: true, ..config })
        .await
        .expect("start the restored cluster");
    let h = Http::new(s.http_addr);
    let a = As { http: &h, auth: basic("admin", ADMIN_PW) };
    placed(&a, 2, 1).await;
    let per_user =
        |u: &str| count(&a, &format!("SELECT count(*) AS c FROM temp WHERE user = '{u}'"));
    let rows = (per_user("alice"), per_user("bob"));
    s.shutdown().await.expect("shutdown");
    rows
}

/// Every object file at the directory destination `dest`.
fn object_files(dest: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fan in std::fs::read_dir(dest.join("objects")).expect("objects") {
        for o in std::fs::read_dir(fan.expect("entry").path()).expect("fan") {
            out.push(o.expect("entry").path());
        }
    }
    out
}

/// Copies the directory `from` to `to`, as someone copying a store by hand would.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).expect("copy");
        }
    }
}

async fn restore_with_keys(
    dest: &Path,
    id: &str,
    into: &Path,
    keys: Option<&Path>,
) -> ebb_node::error::Result<ebb_node::backup::restore::Restored> {
    ebb_node::backup::restore::restore(
        dest.to_str().expect("utf-8"),
        Some(id),
        into,
        None,
        keys,
        &ebb_backup::Progress::default(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_encrypted_set_is_unreadable_once_its_key_is_destroyed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("backups"));
    let keys = data.join("backup").join("keys");
    let server = Server::start(&secured(&data)).await.expect("start");
    let http = Http::new(server.http_addr);
    let admin = As { http: &http, auth: basic("admin", ADMIN_PW) };
    write_users(&admin, &["alice", "bob"], 0, 200);
    let encrypted = |admin: &As| -> serde_json::Value {
        let sql = format!("BACKUP TO '{}' ENCRYPTED", dest.display());
        let rows: serde_json::Value = serde_json::from_str(&admin.ok(&sql)).expect("json");
        assert_eq!(rows[0]["state"], "done", "{rows}");
        rows[0].clone()
    };
    let first = encrypted(&admin);
    let id1 = first["id"].as_str().expect("id").to_string();
    let set1 = set_at(&dest, &id1).await;
    let key1 = set1.encryption.as_ref().expect("an encrypted set").key.clone();
    assert_eq!(ebb_backup::crypto::KeyDir::new(&keys).ids(), std::slice::from_ref(&key1));
    // No object is an SST or holds a value as written; the manifest holds no object key.
    let scratch = tempfile::tempdir().expect("tempdir");
    for (i, o) in object_files(&dest).into_iter().enumerate() {
        let bytes = std::fs::read(&o).expect("read");
        assert!(!bytes.windows(7).any(|w| w == b"secret-"), "{} holds a value", o.display());
        let copy = scratch.path().join(format!("{i}.sst"));
        std::fs::copy(&o, &copy).expect("copy");
        assert!(ebb_storage::audit::plaintext(&copy).is_err(), "{} reads as an SST", o.display());
    }
    // `verify` checks every object without the key.
    let at = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&at, ebb_backup::Throttle::none()).await.expect("open");
    assert!(store
        .verify(&set1, &ebb_backup::Progress::default())
        .await
        .expect("verify")
        .is_empty());

    // A restore needs the server's keys.
    let e = restore_with_keys(&dest, &id1, &tmp.path().join("nokey"), None).await;
    let e = e.expect_err("restored without the key").to_string();
    assert!(e.contains("--key-dir"), "{e}");
    assert!(!tmp.path().join("nokey").exists());
    let r1 = tmp.path().join("r1");
    restore_with_keys(&dest, &id1, &r1, Some(&keys)).await.expect("restore with the keys");
    {
        let s = Server::start(&secured(&r1)).await.expect("start on the restored set");
        let h = Http::new(s.http_addr);
        let a = As { http: &h, auth: basic("admin", ADMIN_PW) };
        assert_eq!(count(&a, "SELECT count(*) AS c FROM temp WHERE user = 'alice'"), 200);
        s.shutdown().await.expect("shutdown");
    }

    // A copy of the store taken by hand, then an erasure: the purge seals the set's next
    // generation with a new key and destroys the old one, so the copy no longer opens.
    let by_hand = tmp.path().join("copied-by-hand");
    copy_dir(&dest, &by_hand);
    let erased: serde_json::Value =
        serde_json::from_str(&admin.ok("ERASE WHERE user = 'alice'")).expect("json");
    let erasure = erased[0]["erasure_id"].as_u64().expect("an erasure id");
    until_async(120, "the set purged", || async { set_at(&dest, &id1).await.purged(erasure) })
        .await;
    let purged = set_at(&dest, &id1).await;
    let key2 = purged.encryption.as_ref().expect("still encrypted").key.clone();
    assert_ne!(key2, key1);
    until_async(30, "the old key destroyed", || async {
        ebb_backup::crypto::KeyDir::new(&keys).ids() == [key2.clone()]
    })
    .await;
    let e = restore_with_keys(&by_hand, &id1, &tmp.path().join("r-hand"), Some(&keys)).await;
    let e = e.expect_err("the copy taken by hand still opened").to_string();
    assert!(e.contains(&key1), "{e}");
    // The purged set restores, without the erased rows.
    let r2 = tmp.path().join("r2");
    restore_with_keys(&dest, &id1, &r2, Some(&keys)).await.expect("restore the purged set");
    assert_eq!(crate::cluster_erasure::files_with(&r2, b"secret-alice-"), Vec::<String>::new());
    // The audit opens the set with its key and finds nothing of the erasure.
    let v = admin.verify(erasure);
    let sets: Vec<_> = v.replicas.iter().filter(|r| r.copy.is_some()).collect();
    assert_eq!(sets.len(), 1, "{v:?}");
    assert!(sets[0].error.is_none() && sets[0].found() == 0, "{v:?}");

    // An incremental encrypted backup reuses the objects it can open; once the first set is
    // pruned (by hand, offline), the server destroys its key.
    write_users(&admin, &["bob"], 200, 210);
    let second = encrypted(&admin);
    let (bytes, copied) = (second["bytes"].as_u64(), second["bytes_copied"].as_u64());
    assert!(copied < bytes, "{second}");
    let id2 = second["id"].as_str().expect("id").to_string();
    let key3 = set_at(&dest, &id2).await.encryption.expect("encrypted").key;
    ebb_backup::prune::prune(&store, 1).await.expect("prune");
    // The purger looks every 30 s; a loaded machine may run it late.
    until_async(150, "the pruned set's key destroyed", || async {
        ebb_backup::crypto::KeyDir::new(&keys).ids() == [key3.clone()]
    })
    .await;
    let r3 = tmp.path().join("r3");
    restore_with_keys(&dest, &id2, &r3, Some(&keys)).await.expect("restore the newest set");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_encrypted_cluster_set_is_sealed_on_each_leader_and_its_keys_shredded_on_every_node() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let dest_dir = tempfile::tempdir().expect("tempdir");
    let dest = dest_dir.path().join("backups");
    let config = |d: &Path| ebb_node::config::Config { shards: 2, replication: 3, ..secured(d) };
    let servers = crate::common::start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    let admin = |i: usize| As { http: &hs[i], auth: basic("admin", ADMIN_PW) };
    let key_dirs: Vec<ebb_backup::crypto::KeyDir> = dirs
        .iter()
        .map(|d| ebb_backup::crypto::KeyDir::new(d.path().join("backup/keys")))
        .collect();
    placed(&admin(0), 2, 3).await;
    write_users(&admin(0), &["alice", "bob"], 0, 100);
    let encrypted = |i: usize| -> serde_json::Value {
        let sql = format!("BACKUP TO '{}' ENCRYPTED", dest.display());
        let rows: serde_json::Value = serde_json::from_str(&admin(i).ok(&sql)).expect("json");
        assert_eq!(rows[0]["state"], "done", "{rows}");
        rows[0].clone()
    };
    let first = encrypted(1);
    let id1 = first["id"].as_str().expect("id").to_string();
    let set1 = set_at(&dest, &id1).await;
    let key1 = set1.encryption.as_ref().expect("an encrypted set").key.clone();
    // Every node keeps the set's key: any of them may lead the metadata group and purge it.
    until_async(30, "the key on every node", || async {
        key_dirs.iter().all(|k| k.ids() == std::slice::from_ref(&key1))
    })
    .await;
    // Each part was sealed where it was taken: no object is an SST or holds a value.
    let scratch = tempfile::tempdir().expect("tempdir");
    for (i, o) in object_files(&dest).into_iter().enumerate() {
        let bytes = std::fs::read(&o).expect("read");
        assert!(!bytes.windows(7).any(|w| w == b"secret-"), "{} holds a value", o.display());
        let copy = scratch.path().join(format!("{i}.sst"));
        std::fs::copy(&o, &copy).expect("copy");
        assert!(ebb_storage::audit::plaintext(&copy).is_err(), "{} reads as an SST", o.display());
    }
    assert_eq!(set1.all_parts().count(), 3, "two shards and the metadata part");
    // A node that lost its copy (it was down when the set was taken) gets it back.
    key_dirs[0].destroy(&key1).expect("destroy a copy");
    until_async(150, "the lost copy fetched again", || async {
        key_dirs[0].ids() == std::slice::from_ref(&key1)
    })
    .await;
    // A later encrypted backup, through another node, reuses the sealed objects it can open.
    write_users(&admin(0), &["bob"], 100, 110);
    let second = encrypted(2);
    let (bytes, copied) = (second["bytes"].as_u64(), second["bytes_copied"].as_u64());
    assert!(copied < bytes, "{second}");
    let id2 = second["id"].as_str().expect("id").to_string();
    let by_hand = dest_dir.path().join("copied-by-hand");
    copy_dir(&dest, &by_hand);

    // An erasure: the metadata leader purges both sets, seals their next generations with new
    // keys and every node destroys its copies of the old ones.
    let erased: serde_json::Value =
        serde_json::from_str(&admin(0).ok("ERASE WHERE user = 'alice'")).expect("json");
    let erasure = erased[0]["erasure_id"].as_u64().expect("an erasure id");
    let at = ebb_backup::Destination::parse(dest.to_str().expect("utf-8")).expect("uri");
    let store =
        ebb_backup::BackupStore::open(&at, ebb_backup::Throttle::none()).await.expect("open");
    until_async(180, "both sets purged", || async {
        set_at(&dest, &id1).await.purged(erasure) && set_at(&dest, &id2).await.purged(erasure)
    })
    .await;
    let mut live: Vec<String> = Vec::new();
    for id in [&id1, &id2] {
        let s = set_at(&dest, id).await;
        live.push(s.encryption.as_ref().expect("still encrypted").key.clone());
        assert!(store.verify(&s, &ebb_backup::Progress::default()).await.expect("v").is_empty());
    }
    live.sort();
    assert!(!live.contains(&key1), "{live:?}");
    // Each node looks every 30 to 60 s and keeps a key it was given for a minute; a loaded
    // machine may run it late.
    until_async(300, "only the live sets' keys on every node", || async {
        key_dirs.iter().all(|k| k.ids() == live)
    })
    .await;
    // A copy of the store taken by hand before the erasure no longer opens with any node's keys.
    let e =
        restore_with_keys(&by_hand, &id1, &dest_dir.path().join("r-hand"), Some(key_dirs[2].dir()))
            .await;
    let e = e.expect_err("the copy taken by hand still opened").to_string();
    assert!(e.contains(&key1), "{e}");
    // The purged set restores into a new cluster with a node's keys, without the erased rows,
    // and the restored node keeps the keys.
    let restored_dir = tempfile::tempdir().expect("tempdir");
    let r = restored_dir.path().join("data");
    let e = restore_with_keys(&dest, &id2, &restored_dir.path().join("nokey"), None).await;
    assert!(e.expect_err("restored without keys").to_string().contains("--key-dir"));
    restore_with_keys(&dest, &id2, &r, Some(key_dirs[2].dir())).await.expect("restore");
    assert_eq!(crate::cluster_erasure::files_with(&r, b"secret-alice-"), Vec::<String>::new());
    assert_eq!(ebb_backup::crypto::KeyDir::new(r.join("backup/keys")).ids(), live);
    let rows = alice_and_bob_in_restored_cluster(config(&r)).await;
    assert_eq!(rows, (0, 110));
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}
