//! An open DR-tree: index pinned in memory, leaves through the page cache.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::{decode_pieces, file_name, DrIndex, DrMeta, NodeEntry, FOOTER_LEN, MAGIC};
use crate::coding::{u32_at, u64_at};
use crate::error::IoContext;
use crate::gloran::piece::{before_end, find_index, Piece, SeqList};
use crate::gloran::Probe;
use crate::sst::page::decode_block;
use crate::{Error, Result};

/// An open, immutable DR-tree file. Deleted from disk when marked obsolete and no longer used.
///
/// Internal levels are pinned when the file is opened; each leaf is pinned, decoded, the first
/// time a probe reads it. The index is small next to the data (at most two pieces per range
/// delete), and a probe must not pay a read and a decode per index level.
#[derive(Debug)]
pub(crate) struct DrTree {
    meta: DrMeta,
    path: PathBuf,
    file: File,
    index: DrIndex,
    leaves: Vec<OnceLock<Arc<Vec<Piece>>>>,
    pinned_bytes: AtomicUsize,
    obsolete: AtomicBool,
}

/// Index of the entry in `entries` whose key extent holds `key`.
fn find(entries: &[NodeEntry], key: &[u8]) -> Option<usize> {
    let i = entries.partition_point(|e| e.lo.as_slice() <= key).checked_sub(1)?;
    before_end(key, &entries[i].hi).then_some(i)
}

impl DrTree {
    /// Opens and validates the file described by `meta`.
    pub fn open(dir: &Path, meta: DrMeta) -> Result<DrTree> {
        let path = dir.join(file_name(meta.id));
        let file = File::open(&path).at(&path)?;
        let size = file.metadata().at(&path)?.len();
        let corrupt = |off: u64, why: &str| Error::corruption(&path, off, why);
        if size != meta.size || size < FOOTER_LEN as u64 {
            return Err(corrupt(0, &format!("file size {size} != recorded size {}", meta.size)));
        }
        let foot_at = size - FOOTER_LEN as u64;
        let mut footer = [0u8; FOOTER_LEN];
        file.read_exact_at(&mut footer, foot_at).at(&path)?;
        if u32_at(&footer, 20) != Some(crc32fast::hash(&footer[..20])) {
            return Err(corrupt(foot_at, "footer checksum mismatch"));
        }
        match u64_at(&footer, 12) {
            Some(MAGIC) => {}
            // The low 16 bits of the magic number are the file's format.
            Some(m) if m >> 16 == MAGIC >> 16 => {
                let found = (m & 0xffff) as u32;
                let ours = (MAGIC & 0xffff) as u32;
                return Err(Error::unsupported_format(&path, "range index", found, ours..=ours));
            }
            _ => return Err(corrupt(foot_at, "bad magic number")),
        }
        let index_off = u64_at(&footer, 0).unwrap_or(u64::MAX);
        let index_len = u32_at(&footer, 8).unwrap_or(0);
        if index_off.checked_add(index_len as u64) != Some(foot_at) {
            return Err(corrupt(foot_at, "index block out of bounds"));
        }
        let mut buf = vec![0u8; index_len as usize];
        file.read_exact_at(&mut buf, index_off).at(&path)?;
        let raw = decode_block(buf).map_err(|why| corrupt(index_off, why))?;
        let index: DrIndex = postcard::from_bytes(&raw)
            .map_err(|e| corrupt(index_off, &format!("index undecodable: {e}")))?;
        validate(&index, index_off, &path)?;
        if index.props != meta.props {
            return Err(corrupt(index_off, "properties differ from the manifest"));
        }
        let leaves = (0..index.levels[0].len()).map(|_| OnceLock::new()).collect();
        Ok(DrTree {
            meta,
            path,
            file,
            index,
            leaves,
            pinned_bytes: AtomicUsize::new(0),
            obsolete: AtomicBool::new(false),
        })
    }

    /// Metadata.
    pub fn meta(&self) -> &DrMeta {
        &self.meta
    }

    /// File id.
    pub fn id(&self) -> u64 {
        self.meta.id
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the file for deletion when the last reference drops.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Leaf page count.
    pub fn leaves(&self) -> usize {
        self.index.levels[0].len()
    }

    /// Memory pinned: internal levels and the leaves read so far.
    pub fn memory_bytes(&self) -> usize {
        let internal: usize =
            self.index.levels.iter().flatten().map(|e| e.lo.len() + e.hi.len() + 80).sum();
        internal + self.pinned_bytes.load(Ordering::Relaxed)
    }

    fn leaf(&self, i: usize) -> Result<Arc<Vec<Piece>>> {
        if let Some(p) = self.leaves[i].get() {
            return Ok(p.clone());
        }
        let e = &self.index.levels[0][i];
        let mut buf = vec![0u8; e.len as usize];
        self.file.read_exact_at(&mut buf, e.child).at(&self.path)?;
        let corrupt =
            |why: &str| Error::corruption(&self.path, e.child, format!("leaf {i}: {why}"));
        let raw = decode_block(buf).map_err(corrupt)?;
        let pieces = decode_pieces(&raw).ok_or_else(|| corrupt("malformed pieces"))?;
        let inside = pieces.iter().all(|p| {
            p.lo.as_ref() >= e.lo.as_slice()
                && crate::gloran::piece::cmp_end(&p.hi, &e.hi).is_le()
                && before_end(&p.lo, &p.hi)
        });
        if pieces.is_empty() || !inside {
            return Err(corrupt("pieces outside the leaf's extent"));
        }
        let pieces = Arc::new(pieces);
        if self.leaves[i].set(pieces.clone()).is_ok() {
            let bytes = raw.len() + pieces.len() * std::mem::size_of::<Piece>();
            self.pinned_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(pieces)
    }

    /// The leaf page that may hold `key`, found top-down one node per level; `None` if no piece
    /// of this tree contains `key`, `Err(Probe::Live)`-style early answers via `stop`.
    fn descend(&self, key: &[u8], stop_at_or_above: Option<u64>) -> Result<Descent> {
        let levels = &self.index.levels;
        let (mut a, mut b) = (0usize, levels[levels.len() - 1].len());
        for l in (0..levels.len()).rev() {
            let entries = &levels[l][a..b];
            let Some(i) = find(entries, key) else { return Ok(Descent::Absent) };
            let e = &entries[i];
            if stop_at_or_above.is_some_and(|seq| seq >= e.max_seq) {
                return Ok(Descent::OlderThan);
            }
            if l == 0 {
                return Ok(Descent::Leaf(a + i));
            }
            (a, b) = (e.child as usize, e.child as usize + e.len as usize);
        }
        Ok(Descent::Absent)
    }

    fn piece_in_leaf(&self, leaf: usize, key: &[u8]) -> Result<Option<(Arc<Vec<Piece>>, usize)>> {
        let pieces = self.leaf(leaf)?;
        Ok(find_index(&pieces, key).map(|j| (pieces, j)))
    }

    /// Whether the entry `(key, seq)` read at `t` is deleted by a range delete in this tree.
    pub fn probe(&self, key: &[u8], seq: u64, t: u64) -> Result<Probe> {
        match self.descend(key, Some(seq))? {
            Descent::Absent => Ok(Probe::Unknown),
            // Every delete below is older than the entry (and older trees are older still).
            Descent::OlderThan => Ok(Probe::Live),
            Descent::Leaf(leaf) => Ok(match self.piece_in_leaf(leaf, key)? {
                None => Probe::Unknown,
                Some((pieces, j)) => match pieces[j].visible(t) {
                    Some(s) if s > seq => Probe::Deleted,
                    Some(_) => Probe::Live,
                    None => Probe::Unknown,
                },
            }),
        }
    }

    /// Every covering sequence number of `key`, newest first.
    pub fn covering(&self, key: &[u8]) -> Result<SeqList> {
        Ok(match self.descend(key, None)? {
            Descent::Leaf(leaf) => match self.piece_in_leaf(leaf, key)? {
                Some((pieces, j)) => pieces[j].seqs.clone(),
                None => SeqList::new(),
            },
            _ => SeqList::new(),
        })
    }

    /// All pieces, in key order.
    pub fn pieces(&self) -> Result<Vec<Piece>> {
        let mut out = Vec::with_capacity(self.meta.props.pieces as usize);
        for i in 0..self.leaves() {
            out.extend(self.leaf(i)?.iter().cloned());
        }
        Ok(out)
    }
}

enum Descent {
    Absent,
    OlderThan,
    Leaf(usize),
}

impl Drop for DrTree {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "removing obsolete DR-tree");
            }
        }
    }
}

/// Structural checks of a decoded index: a failed one is a corruption of `path` at
/// `data_end`, the index block's offset.
fn validate(ix: &DrIndex, data_end: u64, path: &Path) -> Result<()> {
    let bad =
        |why: std::fmt::Arguments<'_>| Err(Error::corruption(path, data_end, why.to_string()));
    let Some(leaves) = ix.levels.first() else { return bad(format_args!("no leaf level")) };
    let mut next = 0u64;
    for (i, e) in leaves.iter().enumerate() {
        if e.child != next || e.len == 0 {
            return bad(format_args!("leaf {i} not contiguous"));
        }
        next += e.len as u64;
    }
    if next != data_end || leaves.is_empty() {
        return bad(format_args!("leaves do not end at the index block"));
    }
    for l in 1..ix.levels.len() {
        let (below, level) = (&ix.levels[l - 1], &ix.levels[l]);
        let mut child = 0u64;
        for e in level {
            if e.child != child || e.len == 0 {
                return bad(format_args!("level {l} children not contiguous"));
            }
            child += e.len as u64;
        }
        if child as usize != below.len() {
            return bad(format_args!("level {l} does not cover the level below"));
        }
    }
    for level in &ix.levels {
        for w in level.windows(2) {
            if w[0].hi.is_empty() || w[0].hi > w[1].lo {
                return bad(format_args!("sibling extents overlap"));
            }
        }
    }
    Ok(())
}
