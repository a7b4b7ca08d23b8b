//! Durable file-system operations, and simulated power cuts that check them.
//!
//! A real file system keeps a file's content only up to its last fsync and a directory's entries
//! only up to the directory's last fsync; anything written since may be lost, kept in part, or
//! kept with holes of zeros where the blocks were allocated but never written. A process that
//! crashes loses nothing (the page cache survives it), so killing a process never tests this.
//!
//! Every fsync of the engine and of the Raft log goes through [`sync_file`], [`sync_dir`] (or
//! [`synced_file`] and [`synced_dir`] after an fsync of their own), and directories are made
//! with [`create_dir_all`], which makes each new directory's entry durable.
//!
//! [`PowerCut::watch`] records, for one directory tree, every such fsync: a file's fsync keeps
//! its content as of then, a directory's fsync its entries. [`PowerCut::cut`] then rewrites the
//! tree to what the disk may hold after a power cut: every directory with the entries of its
//! last fsync, every file with the content of its last fsync, and, under [`Loss::Torn`], a
//! random prefix of what was appended after it, possibly with a hole of zeros (as LazyFS and
//! ALICE do). Recording costs one relaxed atomic load per fsync while nothing is watched. Files
//! are identified by inode; the watch holds every recorded file open so an inode is never
//! reused while its record matters.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::IoContext;
use crate::Result;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static WATCHES: Mutex<Vec<Weak<Watched>>> = Mutex::new(Vec::new());

/// Fsyncs `file` (data and metadata) and records its content for a watching [`PowerCut`].
pub fn sync_file(file: &File, path: &Path) -> Result<()> {
    file.sync_all().at(path)?;
    synced_file(file);
    Ok(())
}

/// Fsyncs directory `dir` and records its entries for a watching [`PowerCut`].
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).at(dir)?;
    synced_dir(dir);
    Ok(())
}

/// Creates `dir` and any missing parents, each new directory's entry durable (its parent
/// fsynced) before this returns. New directories are its owner's alone (mode 0700): what they
/// hold (rows, password hashes and verifiers) is for no other local user to read.
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
    };
    create_dir_all(parent)?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    File::open(parent)?.sync_all()?;
    synced_dir(parent);
    Ok(())
}

/// Records that `file` was just fsynced (for callers that fsync themselves).
pub fn synced_file(file: &File) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    use std::os::fd::AsRawFd;
    let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let Ok(target) = std::fs::read_link(&link) else { return };
    let Some(w) = watch_of(&target) else { return };
    // Read under the lock, so a content read before another thread's later fsync of the same
    // file never replaces that fsync's record.
    let mut st = w.state.lock();
    let read = (|| {
        Ok::<_, std::io::Error>((file.metadata()?, std::fs::read(&link)?, File::open(&link)?))
    })();
    match read {
        Ok((md, content, handle)) => {
            st.files.insert(md.ino(), (handle, content));
        }
        Err(e) => {
            st.unrecorded.get_or_insert_with(|| format!("fsync of {}: {e}", target.display()));
        }
    }
}

/// Records that directory `dir` was just fsynced.
pub fn synced_dir(dir: &Path) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    let Ok(dir) = dir.canonicalize() else { return };
    let Some(w) = watch_of(&dir) else { return };
    // The listing is taken under the lock, so records land in the order they were listed: a
    // listing taken before another thread's later fsync (of a new WAL's entry, say) can never
    // replace that fsync's record, as no real fsync undoes a later one. Other threads may still
    // create and delete entries meanwhile (flushes, compactions): `list` leaves out what
    // vanishes under it, and a failure is kept for `PowerCut::cut` to report (a silently
    // missed fsync would lose the entries it made durable).
    let mut st = w.state.lock();
    let listed = list(&dir).and_then(|l| Ok((l, std::fs::metadata(&dir).at(&dir)?.ino())));
    let (mut listing, dir_ino) = match listed {
        Ok(l) => l,
        Err(e) => {
            st.unrecorded.get_or_insert_with(|| format!("fsync of {}: {e}", dir.display()));
            return;
        }
    };
    // An entry gone (or replaced) before its inode is held is left out, as if removed before
    // the fsync: an inode not held may be reused by a new file.
    listing.retain(|name, (ino, _)| {
        if st.held.contains_key(ino) {
            return true;
        }
        match File::open(dir.join(name)) {
            Ok(f) if f.metadata().is_ok_and(|m| m.ino() == *ino) => {
                st.held.insert(*ino, f);
                true
            }
            _ => false,
        }
    });
    st.dirs.insert(dir_ino, listing);
    st.prune();
}

fn watch_of(path: &Path) -> Option<Arc<Watched>> {
    WATCHES.lock().iter().filter_map(Weak::upgrade).find(|w| path.starts_with(&w.root))
}

/// Entries of a directory: name to (inode, is a directory).
type Listing = BTreeMap<String, (u64, bool)>;

fn list(dir: &Path) -> Result<Listing> {
    let mut out = Listing::new();
    for e in std::fs::read_dir(dir).at(dir)? {
        let e = e.at(dir)?;
        let md = match e.metadata() {
            Ok(md) => md,
            // Removed since `read_dir` returned it (another thread deleting a file).
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err).at(&e.path()),
        };
        out.insert(e.file_name().to_string_lossy().into_owned(), (md.ino(), md.is_dir()));
    }
    Ok(out)
}

#[derive(Debug)]
struct Watched {
    root: PathBuf,
    state: Mutex<Durable>,
}

/// What the disk holds for certain.
#[derive(Debug, Default)]
struct Durable {
    /// Directory inode to its entries as of its last fsync.
    dirs: HashMap<u64, Listing>,
    /// File inode to a handle (holding the inode) and its content as of its last fsync.
    files: HashMap<u64, (File, Vec<u8>)>,
    /// Handles holding the inodes named by recorded directory entries.
    held: HashMap<u64, File>,
    /// Why an fsync could not be recorded, if one could not: the image would be wrong.
    unrecorded: Option<String>,
}

impl Durable {
    /// Forgets inodes no recorded directory names and no directory links any more.
    fn prune(&mut self) {
        let named: std::collections::HashSet<u64> =
            self.dirs.values().flat_map(|l| l.values().map(|(ino, _)| *ino)).collect();
        let gone = |ino: &u64, f: &File| {
            !named.contains(ino) && f.metadata().is_ok_and(|m| m.nlink() == 0)
        };
        self.files.retain(|ino, (f, _)| !gone(ino, f));
        self.held.retain(|ino, f| !gone(ino, f));
    }
}

/// What a power cut keeps of data written since the last fsync.
#[derive(Debug, Clone, Copy)]
pub enum Loss {
    /// Nothing: every file as of its last fsync, every directory as of its last fsync.
    Unsynced,
    /// A random prefix of each file's unsynced appended bytes survives, sometimes with a hole of
    /// zeros (blocks allocated, never written); the seed makes it reproducible.
    Torn(u64),
}

/// Watches a directory tree and can cut its power. Dropping it stops the watch.
#[derive(Debug)]
pub struct PowerCut {
    watched: Arc<Watched>,
}

impl PowerCut {
    /// Starts watching `root` (which must exist); everything in it now counts as synced.
    pub fn watch(root: &Path) -> Result<PowerCut> {
        let root = root.canonicalize().at(root)?;
        let watched = Arc::new(Watched { root, state: Mutex::new(Durable::default()) });
        {
            let mut all = WATCHES.lock();
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&watched));
            ACTIVE.store(true, Ordering::Relaxed);
        }
        let cut = PowerCut { watched };
        cut.record_all()?;
        Ok(cut)
    }

    /// Records the whole tree as it is now as synced.
    fn record_all(&self) -> Result<()> {
        let mut st = Durable::default();
        let mut todo = vec![self.watched.root.clone()];
        while let Some(dir) = todo.pop() {
            let listing = list(&dir)?;
            for (name, (ino, is_dir)) in &listing {
                let path = dir.join(name);
                if *is_dir {
                    todo.push(path);
                } else if !st.files.contains_key(ino) {
                    let content = std::fs::read(&path).at(&path)?;
                    st.files.insert(*ino, (File::open(&path).at(&path)?, content));
                }
            }
            st.dirs.insert(std::fs::metadata(&dir).at(&dir)?.ino(), listing);
        }
        *self.watched.state.lock() = st;
        Ok(())
    }

    /// Cuts the power: rewrites the tree to what survives, then counts the result as synced.
    /// Whatever uses the tree must be stopped (dropped) first.
    pub fn cut(&self, loss: Loss) -> Result<()> {
        let root = &self.watched.root;
        if let Some(why) = self.watched.state.lock().unrecorded.clone() {
            return Err(crate::Error::io(
                root,
                std::io::Error::other(format!("an fsync was not recorded: {why}")),
            ));
        }
        let mut rng = match loss {
            Loss::Unsynced => None,
            Loss::Torn(seed) => Some(SplitMix(seed)),
        };
        // Current content by inode, for the unsynced tails a torn cut keeps.
        let mut current: HashMap<u64, PathBuf> = HashMap::new();
        let mut todo = vec![root.clone()];
        while let Some(dir) = todo.pop() {
            for (name, (ino, is_dir)) in list(&dir)? {
                let path = dir.join(name);
                if is_dir {
                    todo.push(path);
                } else {
                    current.insert(ino, path);
                }
            }
        }
        let image = {
            let st = self.watched.state.lock();
            let root_ino = std::fs::metadata(root).at(root)?.ino();
            let mut image: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
            let mut todo = vec![(PathBuf::new(), root_ino)];
            while let Some((rel, ino)) = todo.pop() {
                let Some(listing) = st.dirs.get(&ino) else { continue };
                for (name, (ino, is_dir)) in listing {
                    let rel = rel.join(name);
                    if *is_dir {
                        image.push((rel.clone(), None));
                        todo.push((rel, *ino));
                        continue;
                    }
                    let mut content = st.files.get(ino).map(|(_, c)| c.clone()).unwrap_or_default();
                    if let (Some(rng), Some(path)) = (rng.as_mut(), current.get(ino)) {
                        let now = std::fs::read(path).at(path)?;
                        if now.len() > content.len() && now.starts_with(&content) {
                            content = torn(&now, content.len(), rng);
                        }
                    }
                    image.push((rel, Some(content)));
                }
            }
            image
        };
        for e in std::fs::read_dir(root).at(root)? {
            let path = e.at(root)?.path();
            let res = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            res.at(&path)?;
        }
        // Parents come before their entries: directories are pushed before being descended.
        for (rel, content) in &image {
            let path = root.join(rel);
            match content {
                None => std::fs::create_dir_all(&path).at(&path)?,
                Some(c) => {
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent).at(parent)?;
                    }
                    std::fs::write(&path, c).at(&path)?;
                }
            }
        }
        self.record_all()
    }
}

/// A prefix of `now` at least `synced` long, with perhaps a zeroed hole past `synced`.
fn torn(now: &[u8], synced: usize, rng: &mut SplitMix) -> Vec<u8> {
    let extra = now.len() - synced;
    let keep = synced + (rng.next() % (extra as u64 + 1)) as usize;
    let mut out = now[..keep].to_vec();
    if keep > synced && rng.next().is_multiple_of(3) {
        let start = synced + (rng.next() % (keep - synced) as u64) as usize;
        let len = 1 + (rng.next() % 4096) as usize;
        let end = (start + len).min(keep);
        out[start..end].fill(0);
    }
    out
}

/// A small deterministic generator (SplitMix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn unsynced_files_entries_and_tails_are_lost() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cut = PowerCut::watch(root).unwrap();
        // Synced content, synced entry.
        let mut a = File::create(root.join("a")).unwrap();
        a.write_all(b"kept").unwrap();
        sync_file(&a, &root.join("a")).unwrap();
        sync_dir(root).unwrap();
        a.write_all(b" lost").unwrap();
        // Synced content, entry never synced.
        let b = File::create(root.join("b")).unwrap();
        sync_file(&b, &root.join("b")).unwrap();
        // A rename not synced: the old name stays.
        std::fs::rename(root.join("a"), root.join("c")).unwrap();
        drop((a, b));
        cut.cut(Loss::Unsynced).unwrap();
        assert_eq!(std::fs::read(root.join("a")).unwrap(), b"kept");
        assert!(!root.join("b").exists());
        assert!(!root.join("c").exists());
    }

    #[test]
    fn a_torn_cut_keeps_a_prefix_of_the_unsynced_tail() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cut = PowerCut::watch(root).unwrap();
        let path = root.join("log");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"synced|").unwrap();
        sync_file(&f, &path).unwrap();
        sync_dir(root).unwrap();
        f.write_all(&[7u8; 10_000]).unwrap();
        drop(f);
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            let len = std::fs::metadata(&path).unwrap().len() as usize;
            f.write_all(&vec![7u8; 10_007 - len]).unwrap();
            drop(f);
            cut.cut(Loss::Torn(seed)).unwrap();
            let got = std::fs::read(&path).unwrap();
            assert!(got.starts_with(b"synced|"), "seed {seed}");
            assert!(got[7..].iter().all(|&b| b == 7 || b == 0));
            lengths.insert(got.len());
            // Everything now counts as synced: put the synced state back for the next round.
            std::fs::write(&path, b"synced|").unwrap();
            let f = File::open(&path).unwrap();
            sync_file(&f, &path).unwrap();
        }
        assert!(lengths.len() > 5, "prefix lengths vary: {lengths:?}");
    }

    #[test]
    fn directories_created_but_not_synced_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cut = PowerCut::watch(root).unwrap();
        std::fs::create_dir(root.join("kept")).unwrap();
        sync_dir(root).unwrap();
        std::fs::write(root.join("kept/file"), b"x").unwrap();
        std::fs::create_dir(root.join("gone")).unwrap();
        cut.cut(Loss::Unsynced).unwrap();
        assert!(root.join("kept").is_dir());
        assert!(!root.join("kept/file").exists());
        assert!(!root.join("gone").exists());
    }

    #[test]
    fn a_directory_fsync_is_recorded_while_other_threads_add_and_remove_entries() {
        // Background flushes and compactions create and delete files while a writer fsyncs the
        // directory after creating a file: the fsync must be recorded all the same.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let cut = PowerCut::watch(root).unwrap();
        let mut missing = Vec::new();
        for n in 0..100 {
            let stop = Arc::new(AtomicBool::new(false));
            let churn = {
                let (root, stop) = (root.to_path_buf(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let p = root.join(format!("churn-{}", i % 32));
                        if std::fs::remove_file(&p).is_err() {
                            let _ = std::fs::write(&p, b"x");
                        }
                        i += 1;
                    }
                })
            };
            let path = root.join(format!("kept-{n}"));
            let f = File::create(&path).unwrap();
            sync_file(&f, &path).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
            sync_dir(root).unwrap();
            stop.store(true, Ordering::Relaxed);
            churn.join().unwrap();
            drop(f);
            cut.cut(Loss::Unsynced).unwrap();
            if !path.exists() {
                missing.push(n);
            }
        }
        assert!(missing.is_empty(), "fsynced entries lost in rounds {missing:?}");
    }
}
