//! A destination others can write to: manifests and journal entries with a valid checksum but
//! hostile content (names outside a part, hashes outside the store, sizes beyond any file, two
//! parts of one shard, ...) and bytes mutated at random. Listing, reading, verifying,
//! restoring and pruning must refuse them with an error, never panic, allocate by them, or
//! write outside the restore's directory. Cases are generated from a printed seed
//! (`EBB_FUZZ_SEED` repeats a run), `EBB_FUZZ_CASES` of them (default 200).

use std::path::Path;

use ebb_backup::set::{FileEntry, ObjectRef, Part};
use ebb_backup::transfer::download_part;
use ebb_backup::{BackupStore, Destination, Progress, SetKind, Throttle};

/// xorshift64*: enough for generating cases, repeatable from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[(self.next() % xs.len() as u64) as usize]
    }
}

fn hostile_file(rng: &mut Rng, real: &FileEntry) -> FileEntry {
    let long = "x".repeat(10_000);
    let names = ["../escape", "", ".hidden", "a/b", "x\0y", long.as_str(), "ok.sst", "CURRENT"];
    let hashes = ["", "ab", "../../../escape", "ZZ", "0000", real.object.hash.as_str()];
    let lens = [0, 1, real.object.len, u64::MAX, 1 << 41, real.object.len + 1];
    FileEntry {
        name: rng.pick(&names).to_string(),
        object: ObjectRef { hash: rng.pick(&hashes).to_string(), len: *rng.pick(&lens) },
    }
}

async fn exercise(store: &BackupStore, root: &Path, id: &str, work: &Path) {
    let _ = store.list().await;
    if let Ok(set) = store.set(id).await {
        let _ = store.verify(&set, &Progress::default()).await;
        for (i, part) in set.all_parts().enumerate() {
            let out = work.join(format!("restored-{i}"));
            let _ = download_part(store, &set.id, part, &out, &Progress::default(), None).await;
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    // Keeps every set: the sweep reads them all (and removes nothing if one is unreadable).
    let _ = ebb_backup::prune::prune(store, 1_000).await;
    assert!(!work.join("escape").exists() && !root.join("escape").exists(), "a write escaped");
}

#[tokio::test]
async fn hostile_manifests_are_refused_without_panics() {
    let seed =
        std::env::var("EBB_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
                | 1
        });
    let cases: usize =
        std::env::var("EBB_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    println!("hostile manifests: seed {seed} (EBB_FUZZ_SEED), {cases} cases");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("1.sst"), b"table one").unwrap();
    let root = tmp.path().join("dest");
    let dest = Destination::parse(root.to_str().unwrap()).unwrap();
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();
    let (good, _) = crate::backup(&store, &src, "20231114T221320.000Z").await;
    let real = good.parts[0].files[0].clone();
    let mut refused = 0;
    for case in 0..cases {
        let id = format!("20231115T{:06}.000Z", case % 1_000_000);
        let mut set = good.clone();
        set.id = id.clone();
        match rng.next() % 6 {
            0 => set.parts[0].files.push(hostile_file(&mut rng, &real)),
            1 => set.parts[0].files[0] = hostile_file(&mut rng, &real),
            2 => set.parts.push(set.parts[0].clone()),
            3 => set.generation = *rng.pick(&[0, u64::MAX]),
            4 => {
                set.meta = Some(Part {
                    shard: u64::MAX,
                    seq: u64::MAX,
                    applied: None,
                    files: vec![hostile_file(&mut rng, &real)],
                })
            }
            _ => set.kind = *rng.pick(&[SetKind::Cluster, SetKind::Node]),
        }
        store.put_set(&set).await.unwrap();
        // Or its bytes mutated after sealing.
        if rng.next().is_multiple_of(4) {
            let path = root.join(set.manifest_key().as_ref());
            let mut b = std::fs::read(&path).unwrap();
            let at = (rng.next() % b.len() as u64) as usize;
            match rng.next() % 3 {
                0 => b[at] ^= 1 << (rng.next() % 8),
                1 => b.truncate(at),
                _ => b
                    .splice(at..at, b"{\"len\":18446744073709551615}".iter().copied())
                    .for_each(drop),
            }
            std::fs::write(&path, b).unwrap();
        }
        if store.set(&id).await.is_err() {
            refused += 1;
        }
        exercise(&store, &root, &id, tmp.path()).await;
        let _ = store.remove_set(&id).await;
    }
    println!("{refused} of {cases} hostile manifests refused when read");
    assert!(refused > cases / 2, "most cases are refused as they are read: {refused}");
    // The good set is still whole.
    let s = store.set(&good.id).await.unwrap();
    assert!(store.verify(&s, &Progress::default()).await.unwrap().is_empty());
}
