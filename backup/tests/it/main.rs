//! The backup store against a directory destination: incremental uploads, verification,
//! downloads that refuse damage, and pruning.

use std::collections::HashSet;
use std::path::Path;

use ebb_backup::transfer::{download_part, upload_part, HashCache, PartSource};
use ebb_backup::{BackupError, BackupSet, BackupStore, Destination, Progress, SetKind, Throttle};

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
    let mut stored = store.object_hashes().await.expect("list");
    let mut cache = HashCache::default();
    let progress = Progress::default();
    let src = PartSource { shard: 0, dir, seq: 7, applied: None };
    let part = upload_part(store, src, &mut stored, &mut cache, &progress).await.expect("upload");
    let set = BackupSet {
        format: ebb_backup::set::FORMAT,
        id: id.to_string(),
        kind: SetKind::Node,
        started_ms: 1,
        finished_ms: 2,
        generation: 1,
        server_version: "test".into(),
        parts: vec![part],
    };
    store.put_set(&set).await.expect("manifest");
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
        download_part(&store, &set.id, &set.parts[0], &out, &Progress::default()).await.unwrap();
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
    let e = download_part(&store, &set.id, &set.parts[0], &out, &Progress::default())
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
    let dest = Destination::parse(tmp.path().join("dest").to_str().unwrap()).unwrap();
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
    assert_eq!(store.object_hashes().await.unwrap().len(), 5);
    let report = ebb_backup::prune::prune(&store, 2, None).await.unwrap();
    assert_eq!(report.sets_removed, [sets[0].id.clone(), sets[1].id.clone()]);
    assert_eq!((report.objects_removed, report.bytes_freed), (2, 200));
    let left: HashSet<String> = store.object_hashes().await.unwrap();
    for set in &sets[2..] {
        assert!(store.verify(set, &Progress::default()).await.unwrap().is_empty());
        assert!(set.objects().all(|o| left.contains(&o.hash)));
    }
    // An object written after a backup began is kept although no set names it yet.
    let orphan = tmp.path().join("orphan");
    write_files(&orphan, &[("x.sst", body(9, 10))]);
    let o = ebb_backup::transfer::hash_file(&orphan.join("x.sst")).await.unwrap();
    let since = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    store.put_file(&orphan.join("x.sst"), &o).await.unwrap();
    let report = ebb_backup::prune::prune(&store, 2, Some(since)).await.unwrap();
    assert_eq!(report.objects_removed, 0);
    assert!(store.object_hashes().await.unwrap().contains(&o.hash));
    // So is one written while a backup holds a lease.
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64;
    let lease = store.lease("20991231T000000.000Z", now_ms).await.unwrap();
    let report = ebb_backup::prune::prune(&store, 2, None).await.unwrap();
    assert_eq!(report.objects_removed, 0);
    store.release(&lease).await;
    let report = ebb_backup::prune::prune(&store, 2, None).await.unwrap();
    assert_eq!(report.objects_removed, 1);
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
