//! What each WAL sync mode keeps through a power cut (see `ebb_storage::durable`): under
//! `Always` every write that returned; under `Interval` and `None` a prefix of the writes, never
//! a write without the ones before it; and group commit shares fsyncs among concurrent writers.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::sync::Arc;
use std::time::Duration;

use ebb_storage::durable::{Loss, PowerCut};
use ebb_storage::{Engine, Options, SyncMode};

fn opts(sync: SyncMode) -> Options {
    Options {
        sync,
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 16 << 10,
        memtable_max_age: None,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    let mut k = b"k".to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Writes `n` keys (key i at sequence number i + 1), cuts the power with `loss`, reopens, and
/// returns how many writes survived, checking that they are exactly the first ones.
fn survivors(sync: SyncMode, n: u64, loss: Loss) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let power = PowerCut::watch(dir.path()).unwrap();
    let path = dir.path().join("db");
    let e = Engine::open(&path, opts(sync)).unwrap();
    for i in 0..n {
        e.put(key(i), format!("v{i}"), i + 1).unwrap();
        if i == n / 2 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    drop(e);
    power.cut(loss).unwrap();
    let e = Engine::open(&path, opts(sync)).unwrap();
    let kept = e.last_seq();
    for i in 0..n {
        let got = e.get(&key(i), None).unwrap();
        if i < kept {
            assert_eq!(got.as_deref(), Some(format!("v{i}").as_bytes()), "{sync:?}: key {i}");
        } else {
            assert_eq!(got, None, "{sync:?}: key {i} survived without key {kept}");
        }
    }
    e.close().unwrap();
    kept
}

#[test]
fn always_keeps_every_returned_write() {
    for seed in 0..6u64 {
        let loss = if seed.is_multiple_of(2) { Loss::Unsynced } else { Loss::Torn(seed) };
        assert_eq!(survivors(SyncMode::Always, 600, loss), 600, "{loss:?}");
    }
}

#[test]
fn interval_and_none_keep_a_prefix() {
    let mut lost_some = false;
    for seed in 0..6u64 {
        let loss = if seed.is_multiple_of(2) { Loss::Unsynced } else { Loss::Torn(seed) };
        for sync in [SyncMode::Interval(Duration::from_millis(10)), SyncMode::None] {
            let kept = survivors(sync, 600, loss);
            lost_some |= kept < 600;
        }
    }
    // Without fsyncs on the write path the unsynced tail is lost (the simulated disk keeps
    // nothing unsynced), which shows the cut is real.
    assert!(lost_some, "no mode ever lost an unsynced write");
}

#[test]
fn interval_syncs_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let power = PowerCut::watch(dir.path()).unwrap();
    let path = dir.path().join("db");
    let e = Engine::open(&path, opts(SyncMode::Interval(Duration::from_millis(5)))).unwrap();
    for i in 0..50 {
        e.put(key(i), "v", i + 1).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(e.stats().wal_syncs > 0);
    drop(e);
    power.cut(Loss::Unsynced).unwrap();
    let e = Engine::open(&path, opts(SyncMode::None)).unwrap();
    assert_eq!(e.last_seq(), 50, "writes older than the interval survive");
}

#[test]
fn group_commit_shares_fsyncs_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let power = PowerCut::watch(dir.path()).unwrap();
    let path = dir.path().join("db");
    let e = Arc::new(Engine::open(&path, opts(SyncMode::Always)).unwrap());
    let seq = Arc::new(parking_lot::Mutex::new(0u64));
    let (threads, per) = (8u64, 150u64);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (e, seq) = (e.clone(), seq.clone());
            std::thread::spawn(move || {
                for i in 0..per {
                    let k = t * per + i;
                    // Numbered and staged under one lock, made durable outside it.
                    let mut b = ebb_storage::WriteBatch::new();
                    b.put(key(k), format!("v{k}"));
                    let staged = {
                        let mut g = seq.lock();
                        *g += 1;
                        e.stage(&b, *g).unwrap()
                    };
                    staged.durable().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = e.stats();
    assert_eq!(stats.wal_writes, threads * per);
    assert!(
        stats.wal_syncs < stats.wal_writes,
        "{} fsyncs for {} writes: no group commit",
        stats.wal_syncs,
        stats.wal_writes
    );
    println!("group commit: {} writes, {} fsyncs", stats.wal_writes, stats.wal_syncs);
    drop(Arc::try_unwrap(e).unwrap());
    power.cut(Loss::Torn(7)).unwrap();
    let e = Engine::open(&path, opts(SyncMode::Always)).unwrap();
    for k in 0..threads * per {
        assert_eq!(e.get(&key(k), None).unwrap().as_deref(), Some(format!("v{k}").as_bytes()));
    }
}
