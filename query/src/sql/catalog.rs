//! DataFusion catalog over the shards: catalog `ebb`, one schema per database plus `system`,
//! single node and cluster alike. Tables are resolved on the shards when a statement names
//! them; the listing (`information_schema`, `SHOW TABLES`) is the one the session took from
//! the shards before planning the statement that reads it ([`EbbCatalog::refresh`]).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;
use parking_lot::RwLock;

use super::shard::{Listing, Shards};
use super::system::{SystemSchema, SYSTEM_SCHEMA};
use super::table::ShardTable;
use crate::access::AccessStore;
use crate::error::Result;

/// Which databases a session's principal may see listed (`information_schema`, Flight SQL
/// metadata): true for a database it may read.
pub type Visible = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The `ebb` catalog.
#[derive(Clone)]
pub struct EbbCatalog {
    /// The shards its tables are read from and written to.
    shards: Arc<dyn Shards>,
    /// Where users are kept (the access tables of `system`).
    access: Arc<dyn AccessStore>,
    /// The databases and tables listed, as last taken from the shards.
    listing: Arc<RwLock<Listing>>,
    /// The databases listed (`None`: all).
    visible: Option<Visible>,
    /// The session's `pg_catalog`, made at its first use, for the session's database.
    pg: Arc<PgSchema>,
}

/// A session's `pg_catalog` schema: its database and user, and the schema once made.
#[derive(Default)]
struct PgSchema {
    database: String,
    user: Option<String>,
    made: std::sync::OnceLock<Arc<dyn SchemaProvider>>,
}

impl PgSchema {
    /// The same session's, not made yet.
    fn unmade(&self) -> Arc<PgSchema> {
        Arc::new(PgSchema {
            database: self.database.clone(),
            user: self.user.clone(),
            made: Default::default(),
        })
    }
}

impl std::fmt::Debug for EbbCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbbCatalog").field("shards", &self.shards).finish_non_exhaustive()
    }
}

impl EbbCatalog {
    /// The catalog of `shards`, whose users `access` keeps.
    pub fn new(shards: Arc<dyn Shards>, access: Arc<dyn AccessStore>) -> Self {
        EbbCatalog { shards, access, listing: Arc::default(), visible: None, pg: Arc::default() }
    }

    /// The catalog listing only the databases `visible` admits.
    pub fn visible_to(self, visible: Visible) -> Self {
        EbbCatalog { visible: Some(visible), pg: self.pg.unmade(), ..self }
    }

    /// The catalog of `user`'s session on `database`, whose `pg_catalog` describes that
    /// database to that user.
    pub fn for_session(self, database: &str, user: Option<&str>) -> Self {
        let pg = PgSchema {
            database: database.to_string(),
            user: user.map(String::from),
            made: Default::default(),
        };
        EbbCatalog { pg: Arc::new(pg), ..self }
    }

    /// The session's `pg_catalog`: it lists the databases and tables through a copy of this
    /// catalog that does not hold the schema (which would hold itself).
    fn pg_catalog(&self) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(made) = self.pg.made.get() {
            return Some(made.clone());
        }
        let lister = EbbCatalog { pg: Arc::default(), ..self.clone() };
        let (access, database, user) = (self.access.clone(), &self.pg.database, &self.pg.user);
        match super::pg_catalog::schema(Arc::new(lister), access, database, user.as_deref()) {
            Ok(schema) => Some(self.pg.made.get_or_init(|| schema).clone()),
            Err(e) => {
                tracing::warn!("pg_catalog: {e}");
                None
            }
        }
    }

    /// Where the users are kept.
    pub fn access(&self) -> &Arc<dyn AccessStore> {
        &self.access
    }

    /// Takes the listing from the shards again.
    pub async fn refresh(&self) -> Result<()> {
        let listing = self.shards.listing().await?;
        *self.listing.write() = listing;
        Ok(())
    }
}

impl CatalogProvider for EbbCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.listing.read().keys().cloned().collect();
        names.push(crate::DEFAULT_DATABASE.to_string());
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
            return Some(Arc::new(SystemSchema::new(self.shards.clone(), self.access.clone())));
        }
        if name == super::pg_catalog::PG_CATALOG {
            return self.pg_catalog();
        }
        // Every name resolves, so a query on a database that has no table yet says which table
        // is missing rather than that the schema is.
        Some(Arc::new(DatabaseSchema {
            shards: self.shards.clone(),
            listing: self.listing.clone(),
            name: name.to_string(),
        }))
    }
}

/// The tables of one database.
#[derive(Debug)]
struct DatabaseSchema {
    shards: Arc<dyn Shards>,
    listing: Arc<RwLock<Listing>>,
    name: String,
}

#[async_trait]
impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        let listing = self.listing.read();
        listing.get(&self.name).map(|t| t.iter().cloned().collect()).unwrap_or_default()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let loaded = ShardTable::load(self.shards.clone(), &self.name, name).await;
        let Some(table) = loaded.map_err(super::table::df_err)? else { return Ok(None) };
        let rollup = table.def().rollup.clone();
        let table = Arc::new(table) as Arc<dyn TableProvider>;
        match rollup {
            Some(r) => super::rollup::rollup_view(name, &r, table).map(Some),
            None => Ok(Some(table)),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.listing.read().get(&self.name).is_some_and(|t| t.contains(name))
    }
}

/// The catalog a change every shard applies (a `DELETE`) is planned in: tables as the shards
/// that answer now define them ([`Shards::table_now`]), rollups as their raw tables (a delete
/// of one is refused).
#[derive(Debug)]
pub(crate) struct ChangeCatalog {
    pub(crate) shards: Arc<dyn Shards>,
}

impl CatalogProvider for ChangeCatalog {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(ChangeSchema { shards: self.shards.clone(), database: name.to_string() }))
    }
}

#[derive(Debug)]
struct ChangeSchema {
    shards: Arc<dyn Shards>,
    database: String,
}

#[async_trait]
impl SchemaProvider for ChangeSchema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let loaded = ShardTable::load_now(self.shards.clone(), &self.database, name).await;
        let table = loaded.map_err(super::table::df_err)?;
        Ok(table.map(|t| Arc::new(t) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, _name: &str) -> bool {
        true
    }
}
