//! The log's small durable state: the vote and the last purged log id.
//!
//! Stored in `meta` as `crc32 u32 LE | postcard(Meta)`, replaced atomically (write a temporary
//! file, fsync, rename, fsync the directory).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use openraft::{LogId, Vote};
use serde::{Deserialize, Serialize};

use crate::error::LogError;
use crate::types::NodeId;

pub(super) const FILE: &str = "meta";
const TMP: &str = "meta.tmp";

/// The log's durable state besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub vote: Option<Vote<NodeId>>,
    pub purged: Option<LogId<NodeId>>,
}

impl Meta {
    /// Reads the state of `dir` (the default if there is none yet).
    pub fn load(dir: &Path) -> Result<Meta, LogError> {
        let path = dir.join(FILE);
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Meta::default()),
            Err(e) => return Err(LogError::Io { path, source: e }),
        };
        let bad = || LogError::Corrupt(format!("{} fails its checksum", path.display()));
        let crc = u32::from_le_bytes(data.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        if crc32fast::hash(&data[4..]) != crc {
            return Err(bad());
        }
        ebb_storage::decode_exact(&data[4..])
            .map_err(|e| LogError::Corrupt(format!("{}: {e}", path.display())))
    }

    /// Makes this the durable state of `dir`.
    pub fn store(&self, dir: &Path) -> Result<(), LogError> {
        let body = postcard::to_stdvec(self).map_err(|e| LogError::Corrupt(format!("{e}")))?;
        let tmp = dir.join(TMP);
        let mut f = File::create(&tmp).map_err(LogError::io(&tmp))?;
        f.write_all(&crc32fast::hash(&body).to_le_bytes()).map_err(LogError::io(&tmp))?;
        f.write_all(&body).map_err(LogError::io(&tmp))?;
        f.sync_all().map_err(LogError::io(&tmp))?;
        ebb_storage::durable::synced_file(&f);
        std::fs::rename(&tmp, dir.join(FILE)).map_err(LogError::io(dir))?;
        sync_dir(dir)
    }
}

/// Fsyncs a directory, making created, renamed and removed entries durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(LogError::io(dir))?;
    ebb_storage::durable::synced_dir(dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    #[test]
    fn meta_round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(Meta::load(dir.path()).expect("empty"), Meta::default());
        let m = Meta {
            vote: Some(Vote::new(3, 2)),
            purged: Some(LogId::new(CommittedLeaderId::new(2, 1), 40)),
        };
        m.store(dir.path()).expect("store");
        assert_eq!(Meta::load(dir.path()).expect("load"), m);
        let path = dir.path().join(FILE);
        let mut data = std::fs::read(&path).expect("read");
        let last = data.len() - 1;
        data[last] ^= 0x40;
        std::fs::write(&path, data).expect("write");
        assert!(matches!(Meta::load(dir.path()), Err(LogError::Corrupt(_))));
    }
}
