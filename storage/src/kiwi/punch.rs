//! Freeing the regions of an SST that no version reads any more after a page drop.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::IoContext;
use crate::Result;

/// The gaps of `[0, size)` not covered by `regions` (sorted `(offset, len)`).
pub(crate) fn gaps(regions: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(off, len) in regions {
        if off > at {
            out.push((at, off - at));
        }
        at = at.max(off + len);
    }
    if size > at {
        out.push((at, size - at));
    }
    out
}

/// Deallocates `regions` of the file at `path` (reads of them return zeros) and fsyncs it. Where
/// the file system cannot punch holes the regions are overwritten with zeros instead, so the
/// bytes are gone either way.
pub(crate) fn punch(path: &Path, regions: &[(u64, u64)]) -> Result<()> {
    if regions.is_empty() {
        return Ok(());
    }
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        // Deleted since (compacted away): nothing left to free.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::Error::io(path, e)),
    };
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    for &(off, len) in regions {
        if len == 0 {
            continue;
        }
        if rustix::fs::fallocate(&file, flags, off, len).is_err() {
            let zeros = vec![0u8; len.min(1 << 20) as usize];
            let mut done = 0;
            while done < len {
                let n = (len - done).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], off + done).at(path)?;
                done += n as u64;
            }
        }
    }
    crate::fs::sync_file(&file, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn gaps_are_the_complement() {
        assert_eq!(gaps(&[(0, 10), (10, 5)], 15), vec![]);
        assert_eq!(gaps(&[(5, 5), (20, 5)], 30), vec![(0, 5), (10, 10), (25, 5)]);
        assert_eq!(gaps(&[], 7), vec![(0, 7)]);
    }

    #[test]
    fn punched_regions_read_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![0xAB; 20_000]).unwrap();
        punch(&path, &[(4096, 8192), (19_000, 1000)]).unwrap();
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len(), 20_000);
        assert!(data[..4096].iter().all(|&b| b == 0xAB));
        assert!(data[4096..12_288].iter().all(|&b| b == 0));
        assert!(data[12_288..19_000].iter().all(|&b| b == 0xAB));
        assert!(data[19_000..].iter().all(|&b| b == 0));
    }
}
