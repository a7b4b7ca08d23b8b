//! Every byte of every file in an engine's directory is accounted for: referenced by a live
//! structure and verified, or zero (punched by a time-window drop); anything else (stray bytes
//! past a log's last record, a file no version names, an SST region no index reads) is reported
//! with its file and offset.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::io::Write;

use ebb_storage::audit::FileAccount;
use ebb_storage::{Clock, Engine, ManualClock, Options, TileLayout};

use crate::common::START_MS;

fn opts(clock: &ManualClock) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 32 << 10,
        tiles: TileLayout::Fixed(vec![8]),
        memtable_max_age: None,
        clock: Clock::manual(clock),
        ..Options::default()
    }
}

fn key(s: u64, t: u64) -> Vec<u8> {
    let mut k = s.to_be_bytes().to_vec();
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn unaccounted(accounts: &[FileAccount]) -> Vec<(String, u64, u64)> {
    accounts
        .iter()
        .flat_map(|a| a.unaccounted.iter().map(|(o, l)| (a.name.clone(), *o, *l)))
        .collect()
}

#[test]
fn every_byte_is_checked_or_zero_and_stray_bytes_are_found() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = 0;
    for t in 0..40 {
        for s in 0..64 {
            seq += 1;
            e.put(key(s, t), format!("value-{s}-{t}"), seq).unwrap();
        }
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    // A time-window delete drops whole pages and punches them out of the files.
    seq += 1;
    e.delete_time_range(5, 25, "", "", seq).unwrap();
    for s in 0..8 {
        seq += 1;
        e.put(key(s, 50), "in the WAL", seq).unwrap();
    }
    e.wait_for_background().unwrap();
    assert!(e.stats().window_pages_dropped > 0);

    let accounts = e.account().unwrap();
    assert!(unaccounted(&accounts).is_empty(), "{:?}", unaccounted(&accounts));
    for a in &accounts {
        assert_eq!(a.checked + a.zero, a.bytes, "{a:?}");
    }
    let kinds: Vec<&str> = accounts.iter().map(|a| a.kind).collect();
    for k in ["sst", "wal", "manifest", "current", "ledger"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert!(
        accounts.iter().filter(|a| a.kind == "sst").any(|a| a.zero > 0),
        "the dropped pages read as zeros: {accounts:?}"
    );

    // Stray bytes after the WAL's last record, a file nobody names, and an SST no version
    // holds are all reported, with where they are.
    let wal = accounts.iter().find(|a| a.kind == "wal").unwrap().clone();
    let mut f = std::fs::OpenOptions::new().append(true).open(d.path().join(&wal.name)).unwrap();
    f.write_all(b"\x01\x02stale").unwrap();
    drop(f);
    std::fs::write(d.path().join("stray.bin"), b"\0\0secret").unwrap();
    std::fs::write(d.path().join("99999998.sst"), b"old table").unwrap();
    let found = unaccounted(&e.account().unwrap());
    assert!(found.contains(&(wal.name.clone(), wal.bytes, 7)), "{found:?}");
    assert!(found.contains(&("stray.bin".to_string(), 2, 6)), "{found:?}");
    assert!(found.contains(&("99999998.sst".to_string(), 0, 9)), "{found:?}");
    assert_eq!(found.len(), 3, "{found:?}");
    e.close().unwrap();
}
