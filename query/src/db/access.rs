//! A single node keeps users, grants and tokens in its catalog, under `00000000 'A'`, written
//! through the database's writer like every other catalog record.

use std::sync::Arc;

use async_trait::async_trait;
use ebb_storage::{Engine, WriteBatch};

use super::Database;
use crate::access::{AccessError, AccessOp, AccessState, AccessStore};
use crate::error::{QueryError, Result};
use crate::model::keys::{table_prefix, CATALOG_TABLE};

/// Kind byte of access records in the catalog.
const ACCESS: u8 = b'A';

fn prefixed(key: &[u8]) -> Vec<u8> {
    let mut k = table_prefix(CATALOG_TABLE).to_vec();
    k.push(ACCESS);
    k.extend_from_slice(key);
    k
}

fn corrupt(e: AccessError) -> QueryError {
    QueryError::Corrupt(e.to_string())
}

/// The access records stored in `engine`.
pub(super) fn load_access(engine: &Engine) -> Result<AccessState> {
    let (lo, hi) = (prefixed(&[]), {
        let mut h = table_prefix(CATALOG_TABLE).to_vec();
        h.push(ACCESS + 1);
        h
    });
    let skip = lo.len();
    let mut state = AccessState::default();
    for item in engine.scan(lo..hi, None)? {
        let (k, v) = item?;
        let op = AccessOp::Put { key: k[skip..].to_vec(), value: v.to_vec() };
        state.apply(&op).map_err(corrupt)?;
    }
    Ok(state)
}

#[async_trait]
impl AccessStore for Database {
    fn access(&self) -> Arc<AccessState> {
        self.access.read().clone()
    }

    async fn write_access(&self, ops: Vec<AccessOp>) -> Result<()> {
        if self.replication.is_some() {
            return Err(QueryError::Internal(
                "a shard replica keeps no users; the cluster's metadata group does".into(),
            ));
        }
        let mut batch = WriteBatch::new();
        let mut next = (*self.access()).clone();
        for op in &ops {
            match op {
                AccessOp::Put { key, value } => {
                    batch.put(prefixed(key), value.clone());
                }
                AccessOp::Delete { key } => {
                    batch.delete(prefixed(key));
                }
                AccessOp::DeleteRange { lo, hi } => {
                    batch.delete_range(prefixed(lo), prefixed(hi));
                }
            }
            next.apply(op).map_err(|e| QueryError::Internal(e.to_string()))?;
        }
        let mut w = self.writer.lock();
        self.commit(&mut w, &batch, Default::default())?;
        *self.access.write() = Arc::new(next);
        Ok(())
    }
}
