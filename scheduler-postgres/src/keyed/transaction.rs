//! [`KeyedTransaction`]: the transaction a keyed chunk's work runs on.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, ExecResult, QueryResult, Statement};
use tokio::sync::Mutex;

use crate::session::Checkout;

/// The transaction a chunk's work runs on, holding the chunk's advisory locks: a
/// [`ConnectionTrait`], so sea-orm's queries and raw statements run on it as on a
/// `DatabaseTransaction` (`txn.execute_raw(…)`, `Entity::find().all(txn)`,
/// `model.insert(txn)`). [`Keyed::process`](super::Keyed::process) begins it, and
/// commits it once the work returns `Ok` (or rolls it back).
///
/// It is not a sea-orm `DatabaseTransaction` because that one hands its connection
/// back to the pool when it ends, and sqlx tests every connection handed back with a
/// round trip of its own: on a pool the store created, a chunk's connection is kept
/// out of the pool between chunks instead (see
/// [`PostgresOptions::max_connections`](crate::PostgresOptions::max_connections)).
/// Nested transactions (`TransactionTrait::begin`) are not offered; a savepoint is
/// `txn.execute_unprepared("SAVEPOINT name")`.
///
/// Its statements are prepared and cached on the connection directly on PostgreSQL,
/// and unnamed behind a transaction pooler, as the store's own.
#[derive(Debug)]
pub struct KeyedTransaction {
    conn: Mutex<Checkout>,
}

impl KeyedTransaction {
    pub(super) fn new(conn: Checkout) -> Self {
        KeyedTransaction {
            conn: Mutex::new(conn),
        }
    }

    pub(super) fn into_inner(self) -> Checkout {
        self.conn.into_inner()
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for KeyedTransaction {
    fn get_database_backend(&self) -> DbBackend {
        DbBackend::Postgres
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        let values = stmt.values.map(|v| v.0).unwrap_or_default();
        let done = self.conn.lock().await.execute(&stmt.sql, values).await?;
        Ok(done.into())
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        Ok(self.conn.lock().await.simple(sql).await?.into())
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        let values = stmt.values.map(|v| v.0).unwrap_or_default();
        self.conn.lock().await.fetch_one(&stmt.sql, values).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        let values = stmt.values.map(|v| v.0).unwrap_or_default();
        self.conn.lock().await.fetch(&stmt.sql, values).await
    }
}
