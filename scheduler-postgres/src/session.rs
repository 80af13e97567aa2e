//! [`Session`]: how the store's statements reach the server, and the one place that
//! knows whether a transaction pooler sits in between ([`Pooling`]).
//!
//! Every statement the crate runs outside a caller's transaction runs here:
//! [`Session::lease_query`] for the bounded lease statements, [`Session::query`] and
//! [`Session::execute`] for the others; every transaction the crate opens starts in
//! [`Session::begin`].

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{
    ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    QueryResult, RuntimeErr, Statement, TransactionTrait, Value,
};
use sea_query_sqlx::SqlxValues;

use crate::error::{Error, Result};
use crate::options::PostgresOptions;

/// Whether a transaction pooler sits between the store and the server. Read from
/// [`PostgresOptions::transaction_pooling`] (which the URL's `pgbouncer=true` sets)
/// by [`Pooling::of`], once per pool and once per store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// Straight to PostgreSQL (or through a session pooler): a statement is prepared
    /// once per connection and cached.
    Direct,
    /// Behind a pooler in transaction pooling mode (PgBouncer `pool_mode =
    /// transaction`): each transaction may run on another server connection, so a
    /// statement prepared under a name in one is gone, or another client's, in the
    /// next. Statements run unnamed, each in a transaction of its own; transactions
    /// start with `DEALLOCATE ALL`; the pool has no statement cache.
    Transaction,
}

impl Pooling {
    /// The mode `options` ask for.
    pub(crate) fn of(options: &PostgresOptions) -> Self {
        if options.transaction_pooling {
            Pooling::Transaction
        } else {
            Pooling::Direct
        }
    }

    /// Sets up a pool for this mode.
    pub(crate) fn configure(self, connect: &mut ConnectOptions) {
        if self == Pooling::Transaction {
            // sqlx names every statement it prepares; with the cache off each gets a
            // fresh name (never reused on another server connection), and transactions
            // opened by the store start with `DEALLOCATE ALL` so the names of other
            // clients' statements left on a server connection cannot clash.
            connect.map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0));
        }
    }
}

/// The store's pool with its [`Pooling`] mode and the settings every transaction it
/// opens carries.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    db: DatabaseConnection,
    pooling: Pooling,
    /// `SET LOCAL idle_in_transaction_session_timeout = …`, run first in every
    /// transaction the store opens.
    idle_guard: String,
    /// [`PostgresOptions::statement_timeout`].
    statement_timeout: Duration,
}

/// What [`Session::in_own_transaction`] hands back.
#[derive(Debug, Clone, Copy)]
enum Returns {
    Rows,
    Count,
}

impl Session {
    /// The session of a store on `db` with `options`.
    ///
    /// # Errors
    /// [`Error::NotPostgres`] if `db` is not a PostgreSQL connection.
    pub(crate) fn new(db: DatabaseConnection, options: &PostgresOptions) -> Result<Self> {
        let backend = db.get_database_backend();
        if backend != DbBackend::Postgres {
            return Err(Error::NotPostgres {
                backend: format!("{backend:?}"),
            });
        }
        // `SET` takes no parameters; this is an integer, not text.
        // 0 turns the timeout off; PostgreSQL takes at most i32::MAX ms.
        let idle_ms = options
            .idle_transaction_timeout
            .as_millis()
            .min(i32::MAX.unsigned_abs().into());
        Ok(Self {
            db,
            pooling: Pooling::of(options),
            idle_guard: format!("SET LOCAL idle_in_transaction_session_timeout = {idle_ms}"),
            statement_timeout: options.statement_timeout,
        })
    }

    /// The pool.
    pub(crate) fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The pooling mode, decided when the store opened.
    pub(crate) fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Begins a transaction: behind a transaction pooler it first drops every
    /// prepared statement on the server connection it was given; either way it may
    /// not sit idle longer than [`PostgresOptions::idle_transaction_timeout`]. See
    /// [`PostgresStore::begin`](crate::PostgresStore::begin).
    pub(crate) async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.db.begin().await?;
        // One simple-protocol round trip: no prepared statement involved.
        let setup = match self.pooling {
            Pooling::Direct => self.idle_guard.clone(),
            Pooling::Transaction => format!("DEALLOCATE ALL; {}", self.idle_guard),
        };
        txn.execute_unprepared(&setup).await?;
        Ok(txn)
    }

    /// Runs one statement outside any transaction of the caller's and returns its rows.
    ///
    /// Directly on PostgreSQL this is sea-orm's cached prepared statement. Behind a
    /// transaction pooler a prepared statement may not outlive a transaction (the
    /// next one can run on another server connection), and sqlx's parse and execute
    /// steps are two round trips with a sync between them where the pooler may
    /// switch connections: so the statement runs **unnamed** inside a transaction
    /// of its own.
    ///
    /// # Errors
    /// [`Error::Statement`] for `operation`, with a hint by SQLSTATE.
    pub(crate) async fn query(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        let rows = match self.pooling {
            Pooling::Direct => {
                let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
                self.db.query_all_raw(stmt).await
            }
            Pooling::Transaction => self
                .in_own_transaction(sql, values, Returns::Rows, None)
                .await
                .map(|(rows, _)| rows),
        };
        rows.map_err(|source| Error::statement(operation, source))
    }

    /// Runs one statement like [`query`](Self::query) and returns how many rows it
    /// affected.
    ///
    /// # Errors
    /// [`Error::Statement`] for `operation`, with a hint by SQLSTATE.
    pub(crate) async fn execute(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<u64> {
        let affected = match self.pooling {
            Pooling::Direct => {
                let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
                self.db
                    .execute_raw(stmt)
                    .await
                    .map(|done| done.rows_affected())
            }
            Pooling::Transaction => self
                .in_own_transaction(sql, values, Returns::Count, None)
                .await
                .map(|(_, affected)| affected),
        };
        affected.map_err(|source| Error::statement(operation, source))
    }

    /// Runs one lease statement, bounded server-side: in a transaction of its own
    /// whose `BEGIN` (one round trip with its settings) sets `statement_timeout` to
    /// `bound` (at most [`PostgresOptions::statement_timeout`]), so a statement held
    /// up by a lock fails there instead of committing after the caller gave up.
    /// Prepared and cached directly; unnamed behind a transaction pooler.
    ///
    /// # Errors
    /// [`Error::Statement`] for `operation`, with a hint by SQLSTATE.
    pub(crate) async fn lease_query(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
        bound: Duration,
    ) -> Result<Vec<QueryResult>> {
        let bound = bound.min(self.statement_timeout);
        self.in_own_transaction(sql, values, Returns::Rows, Some(bound))
            .await
            .map(|(rows, _)| rows)
            .map_err(|source| Error::statement(operation, source))
    }

    /// Runs `sql` in a transaction of its own (unnamed behind a transaction pooler),
    /// with `statement_timeout` set to `bound` if given: its rows, or how many rows it
    /// affected.
    async fn in_own_transaction(
        &self,
        sql: &str,
        values: Vec<Value>,
        returns: Returns,
        bound: Option<Duration>,
    ) -> Result<(Vec<QueryResult>, u64), DbErr> {
        use sea_orm::sqlx;
        let driver = |e: sqlx::Error| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e)));
        // `SET` takes no parameters; these are integers, not text.
        let begin = match bound {
            // At least 1 ms: 0 would turn the bound off.
            Some(bound) => {
                let bound_ms = bound.as_millis().clamp(1, i32::MAX.unsigned_abs().into());
                format!(
                    "BEGIN; {}; SET LOCAL statement_timeout = {bound_ms}",
                    self.idle_guard
                )
            }
            None => format!("BEGIN; {}", self.idle_guard),
        };
        let mut txn = self
            .db
            .get_postgres_connection_pool()
            .begin_with(sqlx::AssertSqlSafe(begin))
            .await
            .map_err(driver)?;
        let query = sqlx::query_with(
            sqlx::AssertSqlSafe(sql),
            SqlxValues(sea_orm::sea_query::Values(values)),
        )
        .persistent(self.pooling == Pooling::Direct);
        let done = match returns {
            Returns::Rows => {
                let rows = query.fetch_all(&mut *txn).await.map_err(driver)?;
                (rows.into_iter().map(QueryResult::from).collect(), 0)
            }
            Returns::Count => {
                let done = query.execute(&mut *txn).await.map_err(driver)?;
                (Vec::new(), done.rows_affected())
            }
        };
        txn.commit().await.map_err(driver)?;
        Ok(done)
    }
}
