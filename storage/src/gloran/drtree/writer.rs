//! Writes a DR-tree file from key-sorted, key-disjoint pieces.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{encode_piece, DrIndex, DrMeta, DrProps, NodeEntry, MAGIC};
use crate::error::IoContext;
use crate::gloran::piece::{cmp_end, Piece};
use crate::options::Compression;
use crate::sst::page::encode_block;
use crate::{Error, Result};

/// Builds one DR-tree file.
#[derive(Debug)]
pub(crate) struct DrWriter {
    id: u64,
    path: PathBuf,
    file: BufWriter<File>,
    offset: u64,
    page_size: usize,
    fanout: usize,
    raw: Vec<u8>,
    block: Vec<u8>,
    page: Option<NodeEntry>,
    leaves: Vec<NodeEntry>,
    props: DrProps,
    last_hi: Option<Vec<u8>>,
}

impl DrWriter {
    /// Creates file `path` for range-index file `id`.
    pub fn create(id: u64, path: &Path, page_size: usize, fanout: usize) -> Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path).at(path)?;
        Ok(DrWriter {
            id,
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(256 << 10, file),
            offset: 0,
            page_size: page_size.max(256),
            fanout: fanout.max(2),
            raw: Vec::new(),
            block: Vec::new(),
            page: None,
            leaves: Vec::new(),
            props: DrProps { min_seq: u64::MAX, ..Default::default() },
            last_hi: None,
        })
    }

    /// Adds the next piece (in key order, disjoint from the previous one).
    pub fn add(&mut self, p: &Piece) -> Result<()> {
        if let Some(prev) = &self.last_hi {
            if prev.is_empty() || cmp_end(prev, &p.lo).is_gt() {
                return Err(Error::InvalidArgument("DR-tree pieces out of order".into()));
            }
        }
        let (min, max) = (*p.seqs.last().unwrap_or(&0), p.max_seq());
        if self.props.pieces == 0 {
            self.props.smallest = p.lo.to_vec();
        }
        self.props.pieces += 1;
        self.props.min_seq = self.props.min_seq.min(min);
        self.props.max_seq = self.props.max_seq.max(max);
        self.last_hi = Some(p.hi.to_vec());
        encode_piece(p, &mut self.raw);
        let e = self.page.get_or_insert_with(|| NodeEntry {
            lo: p.lo.to_vec(),
            hi: Vec::new(),
            min_seq: u64::MAX,
            max_seq: 0,
            child: 0,
            len: 0,
        });
        e.hi = p.hi.to_vec();
        e.min_seq = e.min_seq.min(min);
        e.max_seq = e.max_seq.max(max);
        if self.raw.len() >= self.page_size {
            self.flush_page()?;
        }
        Ok(())
    }

    fn flush_page(&mut self) -> Result<()> {
        let Some(mut e) = self.page.take() else { return Ok(()) };
        self.block.clear();
        encode_block(&self.raw, Compression::None, &mut self.block);
        self.file.write_all(&self.block).at(&self.path)?;
        e.child = self.offset;
        e.len = self.block.len() as u32;
        self.offset += self.block.len() as u64;
        self.leaves.push(e);
        self.raw.clear();
        Ok(())
    }

    /// Writes the index and footer, fsyncs, and returns the file's metadata.
    pub fn finish(mut self) -> Result<DrMeta> {
        if self.props.pieces == 0 {
            return Err(Error::InvalidArgument("cannot finish an empty DR-tree".into()));
        }
        self.flush_page()?;
        self.props.largest_hi = self.last_hi.clone().unwrap_or_default();
        let mut levels = vec![std::mem::take(&mut self.leaves)];
        while levels.last().is_some_and(|l| l.len() > self.fanout) {
            let below = levels.last().map(Vec::as_slice).unwrap_or_default();
            let above: Vec<NodeEntry> = below
                .chunks(self.fanout)
                .enumerate()
                .map(|(i, c)| NodeEntry {
                    lo: c[0].lo.clone(),
                    hi: c[c.len() - 1].hi.clone(),
                    min_seq: c.iter().map(|x| x.min_seq).min().unwrap_or(0),
                    max_seq: c.iter().map(|x| x.max_seq).max().unwrap_or(0),
                    child: (i * self.fanout) as u64,
                    len: c.len() as u32,
                })
                .collect();
            levels.push(above);
        }
        self.props.height = levels.len() as u32;
        self.props.created_at_ms = crate::sst::writer::now_ms();
        let index = DrIndex { levels, props: self.props.clone() };
        let raw = postcard::to_stdvec(&index)
            .map_err(|e| Error::InvalidArgument(format!("index encoding failed: {e}")))?;
        self.block.clear();
        encode_block(&raw, Compression::Lz4, &mut self.block);
        let index_off = self.offset;
        self.file.write_all(&self.block).at(&self.path)?;
        self.offset += self.block.len() as u64;
        let mut footer = Vec::with_capacity(super::FOOTER_LEN);
        footer.extend_from_slice(&index_off.to_le_bytes());
        footer.extend_from_slice(&(self.block.len() as u32).to_le_bytes());
        footer.extend_from_slice(&MAGIC.to_le_bytes());
        footer.extend_from_slice(&crc32fast::hash(&footer).to_le_bytes());
        self.file.write_all(&footer).at(&self.path)?;
        self.offset += footer.len() as u64;
        self.file.flush().at(&self.path)?;
        crate::fs::sync_file(self.file.get_ref(), &self.path)?;
        Ok(DrMeta { id: self.id, size: self.offset, props: self.props })
    }
}
