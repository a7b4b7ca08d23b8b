//! What PostgreSQL connections run statements on: a session on the single node's database,
//! or a session over the whole cluster.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::prelude::SessionContext;
use ebb_query::{Database, QueryError, QueryOutput, SqlSession};

use crate::cluster::{ClusterSql, ClusterSqlError, Router};

/// A connection's SQL session.
#[async_trait]
pub trait SqlBackend: Send + Sync {
    /// Runs one statement.
    async fn execute(&self, sql: &str) -> Result<QueryOutput, QueryError>;

    /// The DataFusion context statements plan in (for Describe).
    fn context(&self) -> &SessionContext;
}

#[async_trait]
impl SqlBackend for SqlSession {
    async fn execute(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        SqlSession::execute(self, sql).await
    }

    fn context(&self) -> &SessionContext {
        SqlSession::context(self)
    }
}

#[async_trait]
impl SqlBackend for ClusterSql {
    async fn execute(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        ClusterSql::execute(self, sql).await.map_err(|e| match e {
            ClusterSqlError::Invalid(m) => QueryError::invalid(m),
            ClusterSqlError::Unavailable(m) => QueryError::Replication(m),
        })
    }

    fn context(&self) -> &SessionContext {
        ClusterSql::context(self)
    }
}

/// Where the server's PostgreSQL connections run their statements.
#[derive(Clone)]
pub enum SqlTarget {
    /// The single node's database.
    Local(Arc<Database>),
    /// The cluster this node belongs to.
    Cluster(Arc<Router>),
}

impl std::fmt::Debug for SqlTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SqlTarget::Local(_) => "Local",
            SqlTarget::Cluster(_) => "Cluster",
        })
    }
}

impl SqlTarget {
    /// A session with `database` as its default database.
    pub fn open(&self, database: &str) -> Arc<dyn SqlBackend> {
        match self {
            SqlTarget::Local(db) => Arc::new(SqlSession::new(db.clone(), database)),
            SqlTarget::Cluster(router) => Arc::new(ClusterSql::new(router.clone(), database)),
        }
    }
}

/// A connection's session, as kept in its pgwire session extensions.
pub(super) struct ConnSession(pub Arc<dyn SqlBackend>);
