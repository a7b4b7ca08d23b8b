//! A file system that runs out of space: the engine on a small tmpfs (mounted in a user and
//! mount namespace of its own, so no privileges are needed) is written to until the disk is
//! full. Writes then fail with a disk-full error, flushes and compactions that hit it are
//! postponed, and nothing poisons the engine: once space is freed, writes resume without a
//! reopen, and every acknowledged write is there, then and after reopening.
//!
//! The test runs itself again inside the namespace (`unshare -Urm`), where it mounts the
//! tmpfs; the outer run only checks the inner one passed.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::path::Path;
use std::time::{Duration, Instant};

use ebb_storage::{Engine, Options, SyncMode};

const INNER: &str = "EBB_DISK_FULL_INNER";

fn key(i: u64) -> Vec<u8> {
    format!("k{i:010}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let mut v = format!("v{i}-").into_bytes();
    v.resize(1000, b'x' + (i % 7) as u8);
    v
}

fn opts() -> Options {
    Options {
        sync: SyncMode::Always,
        write_buffer_size: 256 << 10,
        target_file_size: 256 << 10,
        base_level_size: 1 << 20,
        memtable_max_age: None,
        compression: ebb_storage::Compression::None,
        ..Options::default()
    }
}

/// The body, run inside the namespace on a tmpfs mounted at `vol`.
fn fill_and_recover(vol: &Path) {
    let ballast = vol.join("ballast");
    std::fs::write(&ballast, vec![1u8; 6 << 20]).unwrap();
    let dir = vol.join("db");
    let e = Engine::open(&dir, opts()).unwrap();
    let mut acked = 0u64;
    let mut refusals = 0;
    let start = Instant::now();
    while refusals < 20 && start.elapsed() < Duration::from_secs(60) {
        match e.put(key(acked), value(acked), acked + 1) {
            Ok(()) => acked += 1,
            Err(err) => {
                assert!(err.is_disk_full(), "a full disk must say so, got: {err}");
                refusals += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    assert!(refusals >= 20, "the disk never filled ({acked} writes)");
    println!("disk full after {acked} acknowledged writes");
    // Still readable, and not poisoned: every acknowledged write is there.
    for i in (0..acked).step_by(97) {
        assert_eq!(e.get(&key(i), None).unwrap(), Some(value(i).into()), "key {i}");
    }
    // Space comes back: writes resume without a reopen (postponed flushes and compactions
    // run again; while one still holds its inputs and outputs at once, a write may yet find
    // the disk full, and is retried).
    std::fs::remove_file(&ballast).unwrap();
    let start = Instant::now();
    for _ in 0..200 {
        loop {
            match e.put(key(acked), value(acked), acked + 1) {
                Ok(()) => break,
                Err(err) if err.is_disk_full() && start.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => panic!("after space was freed: {err}"),
            }
        }
        acked += 1;
    }
    e.flush().unwrap();
    e.close().unwrap();
    let e = Engine::open(&dir, opts()).unwrap();
    assert_eq!(e.last_seq(), acked);
    for i in 0..acked {
        assert_eq!(e.get(&key(i), None).unwrap(), Some(value(i).into()), "key {i} after reopen");
    }
    e.close().unwrap();
}

#[test]
fn a_full_disk_fails_writes_until_space_is_freed_and_poisons_nothing() {
    if let Ok(vol) = std::env::var(INNER) {
        fill_and_recover(Path::new(&vol));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args([
            "-Urm",
            "sh",
            "-c",
            "mount -t tmpfs -o size=16m tmpfs \"$1\" && shift && exec \"$@\"",
        ])
        .arg("sh")
        .arg(&vol)
        .arg(&exe)
        .args([
            "--exact",
            "disk_full::a_full_disk_fails_writes_until_space_is_freed_and_poisons_nothing",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env(INNER, &vol)
        .output()
        .expect("unshare (util-linux) must be installed to run this test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the run in a user and mount namespace failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("disk full after"), "the inner test did not fill the disk");
}
