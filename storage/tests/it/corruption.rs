//! Corruption tests: flip bytes in every kind of file the engine writes (SST pages, filter and
//! index blocks, footer; range-index DR-trees; manifest; CURRENT; WAL). The engine must report a
//! typed corruption error naming the file, and never return wrong data or panic. The one
//! exception is the newest WAL, whose unsynced tail a power cut may tear anywhere: a bad record
//! there ends the log, so a flip may lose that record and the ones after it, never more, and
//! never return wrong data.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::path::{Path, PathBuf};

use ebb_storage::{Engine, Error, Options, TileLayout};

fn opts() -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 32 << 10,
        base_level_size: 64 << 10,
        tiles: TileLayout::Fixed(vec![1, 2, 4]),
        memtable_max_age: None,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    let mut k = (i / 16).to_be_bytes().to_vec();
    k.extend_from_slice(&((i % 16) as u64 * 977).to_be_bytes());
    k
}

/// Builds a directory with SSTs on two levels, a manifest, and unflushed writes in the WAL.
fn pristine(dir: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let e = Engine::open(dir, opts()).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    let mut seq = 1;
    for i in 0..1500u32 {
        let v = format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes();
        e.put(key(i), v.clone(), seq).unwrap();
        expected.insert(key(i), v);
        seq += 1;
    }
    e.compact_range(None, None).unwrap();
    for i in (0..1500u32).step_by(3) {
        e.delete(key(i), seq).unwrap();
        expected.remove(&key(i));
        seq += 1;
    }
    for r in 0..30u32 {
        let (lo, hi) = (r * 47, r * 47 + 9);
        e.delete_range(key(lo), key(hi), seq).unwrap();
        expected.retain(|k, _| k < &key(lo) || k >= &key(hi));
        seq += 1;
    }
    e.flush().unwrap();
    for i in 1500..1600u32 {
        e.put(key(i), b"in-wal".to_vec(), seq).unwrap();
        expected.insert(key(i), b"in-wal".to_vec());
        seq += 1;
    }
    drop(e); // leaves the last writes only in the WAL
    expected.into_iter().collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn files(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| pred(p.file_name().unwrap().to_str().unwrap()))
        .collect();
    v.sort();
    v
}

enum Outcome {
    OpenFailed,
    ReadFailed,
    ReadAllCorrect,
    /// The newest WAL ended at the flipped record: the writes from it on are gone.
    LostWalTail,
}

/// Opens a copy with one byte flipped and reads everything. Panics on wrong data or a non-corruption
/// error.
fn trial(
    pristine_dir: &Path,
    work: &Path,
    file: &str,
    offset: usize,
    expected: &[(Vec<u8>, Vec<u8>)],
) -> Outcome {
    let _ = std::fs::remove_dir_all(work);
    copy_dir(pristine_dir, work);
    let path = work.join(file);
    let mut data = std::fs::read(&path).unwrap();
    data[offset] ^= 0x01;
    std::fs::write(&path, &data).unwrap();
    let check = |e: Error, what: &str| {
        assert!(e.is_corruption(), "{what} {file}@{offset}: expected corruption, got {e}");
        if let Error::Corruption { path, .. } = &e {
            assert!(path.starts_with(work), "error names {}", path.display());
        }
    };
    let engine = match Engine::open(work, opts()) {
        Ok(e) => e,
        Err(e) => {
            check(e, "open");
            return Outcome::OpenFailed;
        }
    };
    let scanned: Result<Vec<_>, _> = engine
        .scan::<&[u8]>(.., None)
        .unwrap()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect();
    match scanned {
        Err(e) => {
            check(e, "scan");
            Outcome::ReadFailed
        }
        Ok(got) if got == expected => Outcome::ReadAllCorrect,
        Ok(got) => {
            // Only the WAL's writes (the last 100, keys 1500..1600 in order) may be missing,
            // and only a suffix of them.
            let wal_keys: Vec<Vec<u8>> = (1500..1600u32).map(key).collect();
            let kept: Vec<_> = got.iter().filter(|(k, _)| wal_keys.contains(k)).collect();
            let others: Vec<_> = got.iter().filter(|(k, _)| !wal_keys.contains(k)).collect();
            let want_others: Vec<_> =
                expected.iter().filter(|(k, _)| !wal_keys.contains(k)).collect();
            assert!(file.ends_with(".wal"), "flip in {file}@{offset} returned wrong data");
            assert_eq!(others, want_others, "flip in {file}@{offset} returned wrong data");
            let want_kept: Vec<_> =
                expected.iter().filter(|(k, _)| wal_keys[..kept.len()].contains(k)).collect();
            assert_eq!(kept, want_kept, "flip in {file}@{offset}: not a prefix of the WAL");
            Outcome::LostWalTail
        }
    }
}

fn run_kind(name_pred: impl Fn(&str) -> bool, stride: usize, must_fail: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (clean, work) = (tmp.path().join("clean"), tmp.path().join("work"));
    let expected = pristine(&clean);
    let targets = files(&clean, &name_pred);
    assert!(!targets.is_empty(), "no files of this kind were written");
    let mut trials = 0;
    for f in targets {
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        let len = std::fs::metadata(&f).unwrap().len() as usize;
        let mut offsets: Vec<usize> = (0..len).step_by(stride).collect();
        offsets.extend(len.saturating_sub(64)..len); // footer and trailers
        for off in offsets {
            let outcome = trial(&clean, &work, &name, off, &expected);
            if must_fail {
                assert!(
                    !matches!(outcome, Outcome::ReadAllCorrect),
                    "flip in {name}@{off} went unnoticed"
                );
            }
            trials += 1;
        }
    }
    assert!(trials > 0);
}

#[test]
fn sst_flips_are_detected_on_open_or_read() {
    // Every byte of an SST is under a checksum (page, filter block, index block, footer), and a
    // full scan reads every page, so every flip must surface.
    run_kind(|n| n.ends_with(".sst"), 97, true);
}

#[test]
fn range_index_flips_are_detected_or_harmless() {
    // Index and footer flips fail the open; leaf flips surface when a lookup reads the leaf. A
    // leaf no lookup needs may stay unread, but no flip may change what reads return.
    run_kind(|n| n.ends_with(".rdi"), 7, false);
}

#[test]
fn manifest_flips_fail_open() {
    run_kind(|n| n.starts_with("MANIFEST-"), 3, true);
}

#[test]
fn current_flips_fail_open() {
    run_kind(|n| n == "CURRENT", 1, true);
}

#[test]
fn wal_flips_fail_open_or_end_the_newest_wal() {
    run_kind(|n| n.ends_with(".wal"), 41, false);
}

#[test]
fn missing_current_with_tables_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    pristine(tmp.path());
    std::fs::remove_file(tmp.path().join("CURRENT")).unwrap();
    let err = Engine::open(tmp.path(), opts()).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(!files(tmp.path(), |n| n.ends_with(".sst")).is_empty(), "tables must not be deleted");
}

/// A manifest in a format a newer build wrote is refused, naming `CURRENT` and both formats.
#[test]
fn a_newer_manifest_format_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    pristine(tmp.path());
    let current = tmp.path().join("CURRENT");
    let name = std::fs::read_to_string(&current).unwrap();
    std::fs::write(&current, format!("{} v2\n", name.trim_end())).unwrap();
    let err = Engine::open(tmp.path(), opts()).unwrap_err();
    assert!(matches!(&err, Error::UnsupportedFormat { found: 2, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("CURRENT: manifest format 2;"), "{text}");
    assert!(text.ends_with("reads manifest formats 1-1"), "{text}");
    // The format this build writes is read as before.
    std::fs::write(&current, format!("{} v1\n", name.trim_end())).unwrap();
    Engine::open(tmp.path(), opts()).unwrap();
}

#[test]
fn truncated_sst_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    pristine(tmp.path());
    let sst = files(tmp.path(), |n| n.ends_with(".sst")).remove(0);
    let len = std::fs::metadata(&sst).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&sst).unwrap().set_len(len - 10).unwrap();
    let err = Engine::open(tmp.path(), opts()).unwrap_err();
    assert!(matches!(&err, Error::Corruption { path, .. } if path == &sst), "{err}");
}
