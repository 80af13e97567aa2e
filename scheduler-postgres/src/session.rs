//! [`Session`]: how the store's statements reach the server, and the one place that
//! knows whether a transaction pooler sits in between ([`Pooling`]).
//!
//! Every statement the crate runs outside a caller's transaction runs here:
//! [`Session::lease_query`] for the bounded lease statements, [`Session::query`] and
//! [`Session::execute`] for the others; every transaction the crate opens starts in
//! [`Session::begin`].
//!
//! A lease statement is one round trip when it can be: on a pool the store created
//! itself, directly on PostgreSQL, every connection carries the lease bound as its
//! `statement_timeout` ([`Pooling::bound_connections`]), so the statement runs alone,
//! in autocommit, already bounded, on the connection the store keeps between such
//! statements ([`Spare`]). Otherwise (a tighter bound, a transaction pooler, a
//! pool the caller handed in) it runs in a transaction of its own whose `BEGIN` sets
//! the bound: three round trips.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{PgPool, Postgres};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, QueryResult,
    RuntimeErr, Statement, TransactionTrait, Value,
};
use sea_query_sqlx::SqlxValues;

use crate::error::{Error, Result};
use crate::guard::PoolGuard;
use crate::hosts::Hosts;
pub(crate) use crate::options::Pooling;
use crate::options::{PostgresOptions, millis};

mod kept;

pub(crate) use kept::Checkout;
use kept::{Held, Spare};

/// The store's pool with its [`Pooling`] mode and the settings every transaction it
/// opens carries.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    db: DatabaseConnection,
    pooling: Pooling,
    /// `SET LOCAL idle_in_transaction_session_timeout = …`, run first in every
    /// transaction the store opens.
    idle_guard: String,
    /// What [`Session::begin`] runs after `BEGIN`, decided once: the idle guard, plus
    /// `DEALLOCATE ALL` behind a transaction pooler, or the server's default
    /// `statement_timeout` back on bounded connections.
    begin_setup: String,
    /// [`PostgresOptions::statement_timeout`].
    statement_timeout: Duration,
    /// The `statement_timeout` every connection of the pool carries, when the store
    /// created the pool and set it ([`Pooling::bound_connections`]).
    bounded_connections: Option<Duration>,
    /// The connection kept between autocommit statements, on a pool the store
    /// created ([`Spare`]); shared by the session's clones.
    spare: Option<Arc<Spare>>,
    /// The connections kept between keyed chunks, likewise ([`Session::checkout`]).
    keyed: Option<Arc<Spare>>,
    /// Whether the store created the pool (else it is the app's, left open by
    /// [`Session::close`]).
    owns_pool: bool,
    /// The hosts of a URL that lists several, when the store created the pool: its
    /// connections are aimed at the one that suits ([`Session::acquire`]).
    hosts: Option<Arc<Hosts>>,
    /// The pool's [`PoolGuard`], when the store created the pool: told of a lease
    /// statement that failed for a lost or read-only server.
    guard: Option<Arc<PoolGuard>>,
}

/// What [`Session::in_own_transaction`] hands back.
#[derive(Debug, Clone, Copy)]
enum Returns {
    Rows,
    Count,
}

impl Session {
    /// The session of a store on `db` with `options`; `bounded_connections` is what
    /// [`Pooling::bound_connections`] returned if the store built `db` itself (`None`
    /// for a pool the caller handed in: nothing is known of its connections).
    ///
    /// # Errors
    /// [`Error::NotPostgres`] if `db` is not a PostgreSQL connection.
    pub(crate) fn new(
        db: DatabaseConnection,
        options: &PostgresOptions,
        bounded_connections: Option<Duration>,
        owns_pool: bool,
    ) -> Result<Self> {
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
        let idle_guard = format!("SET LOCAL idle_in_transaction_session_timeout = {idle_ms}");
        let pooling = Pooling::of(options);
        let begin_setup = match (pooling, bounded_connections) {
            (Pooling::Direct, None) => idle_guard.clone(),
            (Pooling::Direct, Some(_)) => {
                format!("{idle_guard}; SET LOCAL statement_timeout TO DEFAULT")
            }
            (Pooling::Transaction, _) => format!("DEALLOCATE ALL; {idle_guard}"),
        };
        let pool = db.get_postgres_connection_pool();
        let spare = bounded_connections.map(|_| Arc::new(Spare::new(pool, 1)));
        let keyed = bounded_connections
            .map(|_| Spare::keyed_capacity(pool))
            .filter(|&capacity| capacity > 0)
            .map(|capacity| Arc::new(Spare::new(pool, capacity)));
        Ok(Self {
            db,
            pooling,
            idle_guard,
            begin_setup,
            statement_timeout: options.statement_timeout,
            spare,
            keyed,
            owns_pool,
            bounded_connections,
            hosts: None,
            guard: None,
        })
    }

    /// This session on a pool over `hosts`, which it aims at the host that suits.
    pub(crate) fn with_hosts(mut self, hosts: Option<Arc<Hosts>>) -> Self {
        self.hosts = hosts;
        self
    }

    /// The session with the pool's [`PoolGuard`].
    pub(crate) fn with_guard(mut self, guard: Arc<PoolGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// A connection of the pool. Over several hosts, the pool is aimed at the host a
    /// new connection moved to, or, when it could not connect, at the first that
    /// suits, found in the background for the next call.
    async fn acquire(&self, pool: &PgPool) -> Result<PoolConnection<Postgres>, DbErr> {
        let acquired = pool.acquire().await;
        if let Some(hosts) = &self.hosts {
            match &acquired {
                Ok(_) => hosts.follow(pool),
                Err(_) => hosts.repoint(pool),
            }
        }
        acquired.map_err(acquire)
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
    /// not sit idle longer than [`PostgresOptions::idle_transaction_timeout`]. On
    /// connections that carry the lease bound as their `statement_timeout`, the
    /// transaction gets the server's default back. See
    /// [`PostgresStore::begin`](crate::PostgresStore::begin).
    pub(crate) async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        self.begin_with("").await
    }

    /// [`Session::begin`] at `READ COMMITTED`, whatever the database's default: each
    /// statement sees what was committed before it started (the migrations read
    /// their state after waiting for their lock). The level is set first, before
    /// anything can take the transaction's snapshot (behind a pooler, `DEALLOCATE
    /// ALL` does).
    pub(crate) async fn begin_read_committed(&self) -> Result<DatabaseTransaction, DbErr> {
        self.begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; ")
            .await
    }

    /// [`Session::begin`] at `REPEATABLE READ`, read only: every statement reads one
    /// snapshot (the control state a poll returns).
    pub(crate) async fn begin_repeatable_read(&self) -> Result<DatabaseTransaction, DbErr> {
        self.begin_with("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; ")
            .await
    }

    /// Closes the kept connections, then the pool if the store created it
    /// ([`PostgresStore::close`](crate::PostgresStore::close)).
    pub(crate) async fn close(&self) -> Result<(), DbErr> {
        for spare in [&self.spare, &self.keyed].into_iter().flatten() {
            spare.close().await;
        }
        if self.owns_pool {
            self.db.close_by_ref().await?;
        }
        Ok(())
    }

    /// What begins a transaction as [`Session::begin`] does, as one simple-protocol
    /// statement, for a [`Checkout`].
    pub(crate) fn begin_sql(&self) -> String {
        format!("BEGIN; {}", self.begin_setup)
    }

    /// A connection for a keyed chunk's transaction: a kept one ([`Spare`]) when there
    /// is one, else one of the pool's, which is kept afterwards when there is room.
    pub(crate) async fn checkout(&self) -> Result<Checkout, DbErr> {
        self.take(self.keyed.as_ref()).await
    }

    /// A connection of `spare`'s when it has one, else one of the pool's, to be kept
    /// by `spare` afterwards when there is room.
    async fn take(&self, spare: Option<&Arc<Spare>>) -> Result<Checkout, DbErr> {
        let persistent = self.pooling == Pooling::Direct;
        if let Some(taken) = spare.and_then(Spare::take) {
            return Ok(Checkout::new(Held::Kept(taken), persistent));
        }
        let pool = self.db.get_postgres_connection_pool();
        let conn = self.acquire(pool).await?;
        Ok(Checkout::new(
            Held::Pooled(conn, spare.cloned()),
            persistent,
        ))
    }

    async fn begin_with(&self, first: &str) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.db.begin().await?;
        // One simple-protocol round trip: no prepared statement involved.
        txn.execute_unprepared(&[first, &self.begin_setup].concat())
            .await?;
        Ok(txn)
    }

    /// Runs one statement outside any transaction of the caller's and returns its rows.
    ///
    /// Directly on PostgreSQL this is a prepared statement, cached, in autocommit. Behind a
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
        self.query_named(operation, sql, values, true).await
    }

    /// [`Session::query`], the statement planned for its values on every run (an
    /// unnamed statement, never a cached generic plan): for a statement whose best
    /// plan depends on them, as a search by part of a name does (a rare part reads
    /// the trigram index, a common one walks the names in order).
    pub(crate) async fn query_planned(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        self.query_named(operation, sql, values, false).await
    }

    /// [`Session::query`], prepared and cached (`named`) or not.
    async fn query_named(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
        named: bool,
    ) -> Result<Vec<QueryResult>> {
        let rows = match self.pooling {
            Pooling::Direct => self.autocommit(sql, values, named).await,
            // Unnamed already.
            Pooling::Transaction => self
                .in_own_transaction(sql, values, Returns::Rows, None)
                .await
                .map(|(rows, _)| rows),
        };
        rows.map_err(|source| self.failed(operation, source))
    }

    /// A statement of `operation` failed with `source`: its error, and, for a lost or
    /// read-only server, the pool's next connections checked ([`PoolGuard::failed`]).
    fn failed(&self, operation: &'static str, source: DbErr) -> Error {
        let err = Error::statement(operation, source);
        if let Some(guard) = &self.guard
            && err.failure() != scheduler_core::StoreFailure::Other
        {
            guard.failed();
        }
        err
    }

    /// Runs one statement like [`query`](Self::query), but never on a connection the
    /// store keeps between its own statements: for reads made on a task of their own
    /// (a lock may hold them up, and the lease statements must not wait for their
    /// connection), on a connection of the pool, checked by its guard before use.
    ///
    /// # Errors
    /// [`Error::Statement`] for `operation`, with a hint by SQLSTATE.
    pub(crate) async fn query_pooled(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        match self.pooling {
            Pooling::Direct => {
                let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
                self.db
                    .query_all_raw(stmt)
                    .await
                    .map_err(|source| Error::statement(operation, source))
            }
            Pooling::Transaction => self.query(operation, sql, values).await,
        }
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

    /// Runs one lease statement, bounded server-side by `bound` (at most
    /// [`PostgresOptions::statement_timeout`]), lock waits included, so a statement
    /// held up by a lock fails there instead of committing after the caller gave up.
    ///
    /// When the pool's connections carry that bound already
    /// ([`Pooling::bound_connections`]: a pool the store created, directly on
    /// PostgreSQL) and `bound` is no tighter, the statement runs alone, in autocommit,
    /// prepared and cached: one round trip. Otherwise it runs in a transaction of its
    /// own whose `BEGIN` (one round trip with its settings) sets `statement_timeout`
    /// to `bound`: prepared and cached directly, unnamed behind a transaction pooler.
    ///
    /// The pool does not ping a connection before handing it out (see
    /// [`connect_options`](crate::connect_options)), nor is the connection handed back
    /// to the pool afterwards, where sqlx would ([`Spare`]): a statement on a
    /// connection the server closed fails, and the runtime asks again.
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
        let rows = match self.bounded_connections {
            Some(connections) if bound >= connections => self.autocommit(sql, values, true).await,
            _ => self
                .in_own_transaction(sql, values, Returns::Rows, Some(bound))
                .await
                .map(|(rows, _)| rows),
        };
        rows.map_err(|source| self.failed(operation, source))
    }

    /// Runs `sql` alone on a connection of the pool, in autocommit: its rows. On a
    /// pool the store created, the connection is the [`Spare`]'s when it has one free,
    /// and is kept afterwards when there is room. One whose statement failed in a way
    /// that may leave the session unfit ([`kept_after`]) is closed, kept or pooled.
    async fn autocommit(
        &self,
        sql: &str,
        values: Vec<Value>,
        named: bool,
    ) -> Result<Vec<QueryResult>, DbErr> {
        let conn = self.take(self.spare.as_ref()).await?;
        let mut conn = if named { conn } else { conn.unnamed() };
        let rows = conn.fetch(sql, values).await;
        conn.release();
        rows
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
        // `SET` takes no parameters; these are integers, not text.
        let begin = match bound {
            Some(bound) => {
                let bound_ms = millis(bound);
                format!(
                    "BEGIN; {}; SET LOCAL statement_timeout = {bound_ms}",
                    self.idle_guard
                )
            }
            None => format!("BEGIN; {}", self.idle_guard),
        };
        let pool = self.db.get_postgres_connection_pool();
        let mut conn = self.acquire(pool).await?;
        let query = sqlx::query_with(
            sqlx::AssertSqlSafe(sql),
            SqlxValues(sea_orm::sea_query::Values(values)),
        )
        .persistent(self.pooling == Pooling::Direct);
        let done = async {
            use sqlx::Connection;
            let mut txn = conn.begin_with(sqlx::AssertSqlSafe(begin)).await?;
            let done = match returns {
                Returns::Rows => {
                    let rows = query.fetch_all(&mut *txn).await?;
                    (rows.into_iter().map(QueryResult::from).collect(), 0)
                }
                Returns::Count => {
                    let done = query.execute(&mut *txn).await?;
                    (Vec::new(), done.rows_affected())
                }
            };
            txn.commit().await?;
            Ok(done)
        }
        .await
        .inspect_err(|e| {
            if !kept_after(e) {
                conn.close_on_drop();
            }
        })
        .map_err(driver)?;
        Ok(done)
    }
}

/// Whether a connection may serve again after its statement failed with `err`: only
/// when the server refused the statement, at severity `ERROR`, for a reason that
/// leaves the session as it was: a timeout or cancel (57014), a lock not available
/// (55P03), a serialization failure or deadlock (40001, 40P01), bad data (class 22)
/// or a violated constraint (class 23). Anything else closes it, kept or pooled, so
/// that the next statement runs on a new connection: a broken connection, a `FATAL`
/// error (the server ended the session: a terminated backend, a shutdown), a write
/// refused as read-only (25006: a standby, or an old primary back as one after a
/// failover behind the same address, where a new connection may reach the new
/// primary; a database read-only by default costs a reconnect per refused call, and
/// the runtime backs off between them), and errors that may repeat on every
/// statement of that session (a cached plan gone stale, an aborted transaction).
fn kept_after(err: &sea_orm::sqlx::Error) -> bool {
    use sea_orm::sqlx::postgres::{PgDatabaseError, PgSeverity};
    let sea_orm::sqlx::Error::Database(db) = err else {
        return false;
    };
    let refused = db
        .try_downcast_ref::<PgDatabaseError>()
        .is_some_and(|pg| matches!(pg.severity(), PgSeverity::Error));
    let harmless = db.code().is_some_and(|code| {
        matches!(&*code, "57014" | "55P03" | "40001" | "40P01")
            || code.starts_with("22")
            || code.starts_with("23")
    });
    refused && harmless
}

/// A failure to get a connection from the pool as sea-orm's (a timeout or a closed
/// pool as `ConnectionAcquire`, else `Conn`).
fn acquire(e: sea_orm::sqlx::Error) -> DbErr {
    use sea_orm::sqlx::Error;
    match e {
        Error::PoolTimedOut => DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::Timeout),
        Error::PoolClosed => DbErr::ConnectionAcquire(sea_orm::ConnAcquireErr::ConnectionClosed),
        e => DbErr::Conn(RuntimeErr::SqlxError(Arc::new(e))),
    }
}

/// A driver error as sea-orm's.
fn driver(e: sea_orm::sqlx::Error) -> DbErr {
    DbErr::Query(RuntimeErr::SqlxError(Arc::new(e)))
}
