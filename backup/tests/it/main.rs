//! The backup store against a directory destination (and, in `s3`, an S3-compatible server):
//! incremental uploads, verification, downloads that refuse damage, locks and pruning.

mod hostile;
mod s3;

use std::collections::HashSet;
use std::path::Path;

use ebb_backup::transfer::{download_part, upload_part, HashCache, PartSource};
use ebb_backup::{
    BackupError, BackupSet, BackupStore, Destination, LockKind, Progress, SetKind, Throttle,
};

fn write_files(dir: &Path, files: &[(&str, Vec<u8>)]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for (name, body) in files {
        std::fs::write(dir.join(name), body).expect("write");
    }
}

/// A pseudo-random body of `len` bytes from `seed` (so objects differ).
fn body(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn backup(
    store: &BackupStore,
    dir: &Path,
    id: &str,
) -> (BackupSet, ebb_backup::ProgressSnapshot) {
    let lock = store.lock(LockKind::Shared, id).await.expect("lock");
    let mut stored = store.object_sizes().await.expect("list");
    let mut cache = HashCache::default();
    let progress = Progress::default();
    let src = PartSource { shard: 0, dir, seq: 7, applied: None };
    let part = upload_part(store, &lock, src, &mut stored, &mut cache, &progress, None)
        .await
        .expect("upload");
    let set = BackupSet {
        format: ebb_backup::set::FORMAT,
        id: id.to_string(),
        kind: SetKind::Node,
        started_ms: 1,
        finished_ms: 2,
        generation: 1,
        server_version: "test".into(),
        purged: Vec::new(),
        meta: None,
        parts: vec![part],
        encryption: None,
        origin: None,
    };
    store.put_set(&set).await.expect("manifest");
    store.unlock(&lock).await;
    (set, progress.snapshot())
}

fn object_path(root: &Path, hash: &str) -> std::path::PathBuf {
    root.join("objects").join(&hash[..2]).join(hash)
}

#[tokio::test]
async fn a_second_backup_copies_only_new_files_and_both_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    // One large file (uploaded in parts) and small ones.
    write_files(
        &src,
        &[("a.sst", body(1, 40 << 20)), ("b.sst", body(2, 1000)), ("MANIFEST", body(3, 10))],
    );
    let dest = Destination::parse(tmp.path().join("dest").to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let (first, p1) = backup(&store, &src, "20231114T221320.000Z").await;
    assert_eq!(p1.objects_copied, 3);
    assert_eq!(p1.bytes_copied, (40 << 20) + 1010);
    // New files and a changed manifest: only they are copied.
    write_files(&src, &[("c.sst", body(4, 5000)), ("MANIFEST", body(5, 12))]);
    let (second, p2) = backup(&store, &src, "20231114T221321.000Z").await;
    assert_eq!((p2.objects_copied, p2.bytes_copied), (2, 5012), "{p2:?}");
    assert_eq!(p2.bytes_done, (40 << 20) + 1000 + 5012);
    // Both sets are listed, read back and verify.
    let listed = store.list().await.unwrap();
    assert_eq!(
        listed.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        [first.id.as_str(), second.id.as_str()]
    );
    assert_eq!(store.newest().await.unwrap(), second);
    for set in [&first, &second] {
        assert!(store.verify(set, &Progress::default()).await.unwrap().is_empty());
        let out = tmp.path().join(format!("restored-{}", set.id));
        download_part(&store, &set.id, &set.parts[0], &out, &Progress::default(), None)
            .await
            .unwrap();
        for f in &set.parts[0].files {
            let got = std::fs::read(out.join(&f.name)).unwrap();
            assert_eq!(
                ebb_backup::ObjectRef {
                    hash: blake3::hash(&got).to_hex().to_string(),
                    len: got.len() as u64
                },
                f.object
            );
        }
    }
    // The first set restored holds the first MANIFEST, not the second.
    let restored =
        std::fs::read(tmp.path().join(format!("restored-{}", first.id)).join("MANIFEST")).unwrap();
    assert_eq!(restored, body(3, 10));
}

#[tokio::test]
async fn a_flipped_byte_or_a_missing_object_fails_verify_and_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_files(
        &src,
        &[("a.sst", body(1, 20 << 20)), ("b.sst", body(2, 3000)), ("c.sst", body(3, 300))],
    );
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let (set, _) = backup(&store, &src, "20231114T221320.000Z").await;
    let by_name = |n: &str| set.parts[0].files.iter().find(|f| f.name == n).unwrap().object.clone();
    // Flip one byte in the middle of the large object, remove the small one.
    let a = object_path(&root, &by_name("a.sst").hash);
    let mut bytes = std::fs::read(&a).unwrap();
    bytes[10 << 20] ^= 0x40;
    std::fs::write(&a, bytes).unwrap();
    std::fs::remove_file(object_path(&root, &by_name("c.sst").hash)).unwrap();
    let problems = store.verify(&set, &Progress::default()).await.unwrap();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 2, "{text:?}");
    assert!(
        matches!(&problems[0], BackupError::Damaged { file, .. } if file == "a.sst"),
        "{text:?}"
    );
    assert!(
        matches!(&problems[1], BackupError::Missing { file, .. } if file == "c.sst"),
        "{text:?}"
    );
    assert!(text[0].contains(&by_name("a.sst").hash), "the object is named: {}", text[0]);
    // A restore stops at the damaged object and leaves nothing behind.
    let out = tmp.path().join("restored");
    let e = download_part(&store, &set.id, &set.parts[0], &out, &Progress::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, BackupError::Damaged { ref file, .. } if file == "a.sst"), "{e}");
    assert!(!out.exists());
    assert!(!ebb_backup::transfer::sibling(&out, "restore-tmp").exists());
    // A damaged manifest is named too.
    let manifest = root.join(set.manifest_key().as_ref());
    let mut m = std::fs::read(&manifest).unwrap();
    let at = m.len() / 2;
    m[at] ^= 0x01;
    std::fs::write(&manifest, m).unwrap();
    let e = store.set(&set.id).await.unwrap_err().to_string();
    assert!(e.contains("00000001.set") && e.contains("checksum"), "{e}");
}

#[tokio::test]
async fn prune_keeps_the_newest_sets_and_every_object_they_use() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let mut sets = Vec::new();
    for i in 0..4u64 {
        // Each set holds the shared file, and its own.
        write_files(&src, &[("shared.sst", body(100, 1000))]);
        let own = format!("own{i}.sst");
        write_files(&src, &[(own.as_str(), body(i, 100))]);
        if i > 0 {
            std::fs::remove_file(src.join(format!("own{}.sst", i - 1))).unwrap();
        }
        sets.push(backup(&store, &src, &format!("2023111{i}T000000.000Z")).await.0);
    }
    assert_eq!(store.object_sizes().await.unwrap().len(), 5);
    let report = ebb_backup::prune::prune(&store, 2).await.unwrap();
    assert_eq!(report.sets_removed, [sets[0].id.clone(), sets[1].id.clone()]);
    assert_eq!((report.objects_removed, report.bytes_freed), (2, 200));
    let left: HashSet<String> = store.object_sizes().await.unwrap().into_keys().collect();
    for set in &sets[2..] {
        assert!(store.verify(set, &Progress::default()).await.unwrap().is_empty());
        assert!(set.objects().all(|o| left.contains(&o.hash)));
    }
    // While a backup holds its lock, its objects (no manifest names them yet) are not
    // removed: the prune is refused.
    let lock = store.lock(LockKind::Shared, "20991231T000000.000Z").await.unwrap();
    let orphan = tmp.path().join("orphan");
    write_files(&orphan, &[("x.sst", body(9, 10))]);
    let o =
        ebb_backup::transfer::hash_file(&orphan.join("x.sst"), &Throttle::none()).await.unwrap();
    store.put_file(&orphan.join("x.sst"), &o).await.unwrap();
    let e = ebb_backup::prune::prune(&store, 2).await.unwrap_err();
    assert!(matches!(e, BackupError::Busy(_)), "{e}");
    assert!(e.to_string().contains("20991231T000000.000Z"), "the holder is named: {e}");
    assert!(store.object_sizes().await.unwrap().contains_key(&o.hash));
    // Nor may a backup start while a prune holds the destination.
    let pruning = store.lock(LockKind::Exclusive, "prune-test").await;
    assert!(matches!(pruning, Err(BackupError::Busy(_))), "{pruning:?}");
    store.unlock(&lock).await;
    let pruning = store.lock(LockKind::Exclusive, "prune-test").await.unwrap();
    let e = store.lock(LockKind::Shared, "20991231T000001.000Z").await.unwrap_err();
    assert!(e.to_string().contains("prune"), "{e}");
    store.unlock(&pruning).await;
    // The orphan goes once no backup runs.
    let report = ebb_backup::prune::prune(&store, 2).await.unwrap();
    assert_eq!(report.objects_removed, 1);
    // A lock a dead server left (not renewed for longer than STALE_AFTER, by the store's
    // clock) does not block a prune, which removes it.
    let dead = store.lock(LockKind::Shared, "20991231T000002.000Z").await.unwrap();
    let dead_file = root.join("locks/shared/20991231T000002.000Z");
    let old = std::time::SystemTime::now()
        - ebb_backup::lock::STALE_AFTER
        - std::time::Duration::from_secs(60);
    std::fs::File::options().write(true).open(&dead_file).unwrap().set_modified(old).unwrap();
    ebb_backup::prune::prune(&store, 2).await.unwrap();
    assert!(!dead_file.exists(), "the stale lock was removed");
    drop(dead);
}

#[tokio::test]
async fn an_object_of_the_wrong_size_is_uploaded_again() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_files(&src, &[("a.sst", body(1, 5000))]);
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let (first, _) = backup(&store, &src, "20231114T221320.000Z").await;
    // The object is cut short (as a store that does not write atomically could leave it).
    let a = object_path(&root, &first.parts[0].files[0].object.hash);
    std::fs::write(&a, &body(1, 5000)[..100]).unwrap();
    let (second, p) = backup(&store, &src, "20231114T221321.000Z").await;
    assert_eq!(p.objects_copied, 1, "{p:?}");
    assert!(store.verify(&second, &Progress::default()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_directory_that_holds_no_backups_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::parse(tmp.path().to_str().unwrap()).unwrap();
    let e = BackupStore::open(&dest, Throttle::none()).await.unwrap_err().to_string();
    assert!(e.contains("holds no EbbDB backups"), "{e}");
    let missing = Destination::parse(tmp.path().join("nope").to_str().unwrap()).unwrap();
    let e = BackupStore::open(&missing, Throttle::none()).await.unwrap_err().to_string();
    assert!(e.contains("no such directory"), "{e}");
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    assert!(matches!(store.newest().await, Err(BackupError::Empty)));
}

#[tokio::test]
async fn a_destination_holds_one_origins_sets_and_entries_reach_only_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    assert_eq!(store.origin().await.unwrap(), None, "no origin before a claim");
    store.claim("aaaa").await.unwrap();
    store.claim("aaaa").await.expect("the same origin claims again");
    assert_eq!(store.origin().await.unwrap().as_deref(), Some("aaaa"));
    let e = store.claim("bbbb").await.unwrap_err();
    assert!(
        matches!(&e, BackupError::OtherOrigin { origin, .. } if origin == "aaaa"),
        "another origin is refused: {e}"
    );
    assert!(e.to_string().contains("another server or cluster"), "{e}");
    // Another handle on the destination sees the claim.
    let again = BackupStore::open(&dest, Throttle::none()).await.unwrap();
    assert!(again.claim("bbbb").await.is_err());

    // An entry reaches only the sets of its origin (and sets from before origins).
    let src = tmp.path().join("src");
    write_files(&src, &[("a.sst", body(1, 100))]);
    let (mut set, _) = backup(&store, &src, "20231114T221320.000Z").await;
    let entry = ebb_backup::journal::JournalEntry {
        format: ebb_backup::journal::ENTRY_FORMAT,
        id: 7,
        kind: "erase".into(),
        issued_at_ms: 10,
        deadline_ms: None,
        completed_ms: None,
        request: serde_json::json!({}),
        origin: Some("aaaa".into()),
    };
    assert!(entry.missing_from(&set), "a set of no recorded origin");
    set.origin = Some("aaaa".into());
    assert!(entry.missing_from(&set), "a set of its origin");
    set.origin = Some("bbbb".into());
    assert!(!entry.missing_from(&set), "another origin's set never held its data");
}

#[tokio::test]
async fn a_server_that_backed_up_before_copies_new_files_in_one_pass_and_skips_known_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_files(&src, &[("a.sst", body(1, 3 << 20)), ("MANIFEST", body(3, 10))]);
    let dest = Destination::parse(tmp.path().join("dest").to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let cache_file = tmp.path().join("hash-cache");
    let run = |id: &'static str| {
        let (store, src, cache_file) = (&store, &src, &cache_file);
        async move {
            let lock = store.lock(LockKind::Shared, id).await.unwrap();
            let mut stored = store.object_sizes().await.unwrap();
            let mut cache = HashCache::load(cache_file);
            let progress = Progress::default();
            let part = upload_part(
                store,
                &lock,
                PartSource { shard: 0, dir: src, seq: 1, applied: None },
                &mut stored,
                &mut cache,
                &progress,
                None,
            )
            .await
            .unwrap();
            cache.save(cache_file).unwrap();
            store.unlock(&lock).await;
            (part, progress.snapshot())
        }
    };
    let (_, p1) = run("20231114T221320.000Z").await;
    assert_eq!(p1.objects_copied, 2);
    write_files(&src, &[("b.sst", body(4, 5000)), ("MANIFEST", body(5, 12))]);
    let (part, p2) = run("20231114T221321.000Z").await;
    assert_eq!((p2.objects_copied, p2.bytes_copied), (2, 5012), "{p2:?}");
    for f in &part.files {
        let stored = std::fs::read(object_path(tmp.path().join("dest").as_path(), &f.object.hash));
        assert_eq!(stored.unwrap(), std::fs::read(src.join(&f.name)).unwrap(), "{}", f.name);
    }
    // Nothing is left half-copied.
    let incoming = tmp.path().join("dest").join("incoming");
    assert_eq!(std::fs::read_dir(incoming).unwrap().count(), 0);
}

#[tokio::test]
async fn a_copy_cut_off_midway_leaves_nothing_at_the_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_files(&src, &[("a.sst", body(1, 3 << 20))]);
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    // The first chunk goes through; the throttle then holds the copy for minutes.
    let store = BackupStore::create(&dest, Throttle::new(Some(1024))).await.unwrap();
    let file = src.join("a.sst");
    let copy = store.copy_in(&file, None);
    let cut = tokio::time::timeout(std::time::Duration::from_millis(300), copy).await;
    assert!(cut.is_err(), "the copy finished: {cut:?}");
    let incoming: Vec<_> = std::fs::read_dir(root.join("incoming")).unwrap().collect();
    assert!(incoming.is_empty(), "{incoming:?}");
    assert!(!root.join("objects").exists() || object_files_in(&root).is_empty());
}

fn object_files_in(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for fan in std::fs::read_dir(root.join("objects")).expect("objects") {
        for o in std::fs::read_dir(fan.expect("entry").path()).expect("fan") {
            out.push(o.expect("entry").path());
        }
    }
    out
}
