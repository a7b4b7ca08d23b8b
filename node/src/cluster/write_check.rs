//! A line-protocol request split between shards is checked whole before any shard writes its
//! part, and each shard validates and commits its part in one call. The receiving node checks
//! the request against itself (a field given two types, a name used as tag and field:
//! [`ebb_query::lp::shape`]), then each table's shape against the definition of that table
//! each shard it goes to has ([`ebb_query::lp::shape::Shape::check_against`]: tag and field
//! names, field types, column limit, retention, rollups). The definitions come from the
//! shards' leaders (the `Table` call) and are kept here for [`FRESH`], or until a shard
//! refuses a part of a table; one that lacks a column the request writes (or a table the
//! request creates) is read again first, since a shard's write adds columns. A stream of
//! writes of the same shapes thus costs one call per shard, as a single shard's would. Only
//! when every table passes do the shards write.
//! A shard can still refuse its part then (a definition changed within [`FRESH`] by a
//! concurrent request, a full disk, no leader within the write timeout): the README says what
//! a client sees then.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_query::model::schema::TableDef;
use parking_lot::Mutex;

/// How long a shard's definition of a table is trusted without asking again.
pub const FRESH: Duration = Duration::from_secs(30);

/// Most definitions kept (more are forgotten all at once).
const MAX_KEPT: usize = 65_536;

/// Which table of which shard: `(shard, database, table)`.
type Key = (u64, String, String);

/// Shards' definitions of the tables written through this node lately, with when each was
/// read.
#[derive(Debug, Default)]
pub struct KnownTables {
    kept: Mutex<HashMap<Key, (Instant, Arc<TableDef>)>>,
}

impl KnownTables {
    /// `shard`'s definition of table `name` of `database` if read within [`FRESH`].
    pub fn get(&self, shard: u64, database: &str, name: &str) -> Option<Arc<TableDef>> {
        let kept = self.kept.lock();
        let key = (shard, database.to_string(), name.to_string());
        kept.get(&key).filter(|(at, _)| at.elapsed() < FRESH).map(|(_, def)| def.clone())
    }

    /// Keeps `shard`'s definition of table `name` of `database`, just read.
    pub fn keep(&self, shard: u64, database: &str, name: &str, def: Arc<TableDef>) {
        let mut kept = self.kept.lock();
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert((shard, database.to_string(), name.to_string()), (Instant::now(), def));
    }

    /// Forgets `shard`'s definitions of `names` (it refused a write to them).
    pub fn forget<'a>(&self, shard: u64, database: &str, names: impl Iterator<Item = &'a str>) {
        let mut kept = self.kept.lock();
        for name in names {
            kept.remove(&(shard, database.to_string(), name.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_kept_per_shard_and_table_until_forgotten() {
        let k = KnownTables::default();
        assert_eq!(k.get(1, "db", "cpu"), None);
        let def = Arc::new(TableDef {
            id: 3,
            database: "db".into(),
            name: "cpu".into(),
            tags: vec!["host".into()],
            fields: Vec::new(),
            retention_ns: None,
            rollup: None,
        });
        let mem = Arc::new(TableDef { name: "mem".into(), ..(*def).clone() });
        k.keep(1, "db", "cpu", def.clone());
        k.keep(1, "db", "mem", mem.clone());
        assert_eq!(k.get(1, "db", "cpu"), Some(def));
        assert_eq!(k.get(2, "db", "cpu"), None, "another shard");
        assert_eq!(k.get(1, "other", "cpu"), None, "another database");
        k.forget(1, "db", ["cpu"].into_iter());
        assert_eq!(k.get(1, "db", "cpu"), None);
        assert_eq!(k.get(1, "db", "mem"), Some(mem));
    }
}
