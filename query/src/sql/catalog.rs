//! DataFusion catalog over the EbbDB catalog: catalog `ebb`, one schema per database plus
//! `system`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;

use super::shard::{LocalShards, Shards};
use super::system::{SystemTable, SYSTEM_SCHEMA};
use super::table::ShardTable;
use crate::access::{access_table, AccessStore, ACCESS_TABLES};
use crate::db::Database;

/// Which databases a session's principal may see listed (`information_schema`, Flight SQL
/// metadata): true for a database it may read.
pub type Visible = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The `ebb` catalog.
#[derive(Clone)]
pub struct EbbCatalog {
    db: Arc<Database>,
    /// The shards its tables are read from and written to.
    shards: Arc<dyn Shards>,
    /// Rollups read as their stored partials (what a shard answers a cluster coordinator,
    /// which merges them across shards) rather than merged.
    raw_rollups: bool,
    /// The databases listed (`None`: all).
    visible: Option<Visible>,
}

impl std::fmt::Debug for EbbCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbbCatalog").field("raw_rollups", &self.raw_rollups).finish_non_exhaustive()
    }
}

impl EbbCatalog {
    /// The catalog of `db`.
    pub fn new(db: Arc<Database>) -> Self {
        let shards = Arc::new(LocalShards::new(db.clone()));
        EbbCatalog { db, shards, raw_rollups: false, visible: None }
    }

    /// The catalog with rollups read as their stored partials.
    pub fn with_raw_rollups(self) -> Self {
        EbbCatalog { raw_rollups: true, ..self }
    }

    /// The catalog listing only the databases `visible` admits.
    pub fn visible_to(self, visible: Visible) -> Self {
        EbbCatalog { visible: Some(visible), ..self }
    }

    /// The catalog whose tables read only the series whose hash `hashes` holds.
    pub fn with_hashes(self, hashes: crate::model::hashspace::HashFilter) -> Self {
        let shards = Arc::new(LocalShards::new(self.db.clone()).with_hashes(Some(hashes)));
        EbbCatalog { shards, ..self }
    }
}

impl CatalogProvider for EbbCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.db.catalog().databases();
        if !names.iter().any(|n| n == crate::DEFAULT_DATABASE) {
            names.push(crate::DEFAULT_DATABASE.to_string());
        }
        names.push(SYSTEM_SCHEMA.to_string());
        names.sort();
        // A database named like the system schema (written before such names were reserved)
        // is listed once.
        names.dedup();
        if let Some(visible) = &self.visible {
            names.retain(|n| visible(n));
        }
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == SYSTEM_SCHEMA {
            return Some(Arc::new(SystemSchema { db: self.db.clone() }));
        }
        // Every name resolves, so a query on a database that has no table yet says which table
        // is missing rather than that the schema is.
        Some(Arc::new(DatabaseSchema {
            db: self.db.clone(),
            shards: self.shards.clone(),
            name: name.to_string(),
            raw_rollups: self.raw_rollups,
        }))
    }
}

/// The tables of one database.
#[derive(Debug)]
struct DatabaseSchema {
    db: Arc<Database>,
    shards: Arc<dyn Shards>,
    name: String,
    raw_rollups: bool,
}

#[async_trait]
impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .db
            .catalog()
            .tables()
            .iter()
            .filter(|t| t.database == self.name)
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let loaded = ShardTable::load(self.shards.clone(), &self.name, name).await;
        let Some(table) = loaded.map_err(super::table::df_err)? else { return Ok(None) };
        let rollup = table.def().rollup.clone().filter(|_| !self.raw_rollups);
        let table = Arc::new(table) as Arc<dyn TableProvider>;
        match rollup {
            Some(r) => super::rollup::rollup_view(name, &r, table).map(Some),
            None => Ok(Some(table)),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.catalog().table(&self.name, name).is_some()
    }
}

/// `system.deletions`, `system.tables`, `system.compactions`..., and the access tables
/// (`system.users`, `system.grants`, `system.tokens`).
#[derive(Debug)]
struct SystemSchema {
    db: Arc<Database>,
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = SystemTable::NAMES.iter().map(|s| s.to_string()).collect();
        names.extend(ACCESS_TABLES.iter().map(|s| s.to_string()));
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if ACCESS_TABLES.contains(&name) {
            return access_table(&self.db.access(), name);
        }
        Ok(SystemTable::new(self.db.clone(), name).map(|t| Arc::new(t) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        SystemTable::NAMES.contains(&name) || ACCESS_TABLES.contains(&name)
    }
}
