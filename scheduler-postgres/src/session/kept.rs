//! The connections the store keeps out of its own pool between its statements
//! ([`Spare`]), and a connection checked out for a statement or a keyed chunk
//! ([`Checkout`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::postgres::PgQueryResult;
use sea_orm::sqlx::{self, PgConnection, PgPool, Postgres};
use sea_orm::{DbErr, QueryResult, Value};
use sea_query_sqlx::SqlxValues;

use super::{driver, kept_after};

/// Connections the store keeps out of its own pool between its statements, so that a
/// statement is one round trip: a connection handed back to a sqlx pool is tested
/// there with a round trip of its own (a `Sync`, sent from a task of its own every time
/// a connection is returned). A session has two: one connection kept between its
/// statements in autocommit ([`Session::autocommit`](super::Session): lease
/// statements, clock reads, the reads of controls and run history), and up to a
/// quarter of the pool's `max_connections` kept between keyed chunks ([`Checkout`]),
/// so that keyed work never takes the lease statements' connection. A statement or
/// chunk that starts while every kept connection is busy runs on a pool connection,
/// which is kept afterwards if there is room, else goes back to the pool as before.
///
/// Only on a pool the store created, directly on PostgreSQL
/// ([`Pooling::bound_connections`](super::Pooling)): a connection of the app's own pool,
/// or behind a transaction pooler, is never kept. At most its capacity of connections
/// are kept or out at once; they have left the pool's count
/// (`PoolConnection::detach`), so the store may hold that many connections more than
/// [`PostgresOptions::max_connections`](crate::PostgresOptions::max_connections); the
/// pool never waits for them.
///
/// A statement takes a connection out and puts it back when it is done, also when the
/// server refused the statement for a reason that leaves the session as it was
/// ([`kept_after`]: a timeout, a lock or serialization conflict, bad data); a
/// connection that broke, that the server ended (a `FATAL` error: a terminated
/// backend, a restart), that a read-only server refused a write on (a standby: the
/// next connection may reach the new primary), that failed otherwise, or whose
/// statement's future was dropped half-way, is closed, never reused. One idle for the
/// pool's idle timeout, or out of the pool for the pool's connection lifetime, is
/// closed when next looked at, instead of used; until then an idle store keeps it
/// open (the pool's reaper would have closed it). The kept connections are closed by
/// [`PostgresStore::close`](crate::PostgresStore::close), or when the last clone of
/// the store is dropped, not by closing the pool.
///
/// A kept connection is one a statement of the store's just ran on in autocommit, or
/// a keyed chunk just committed or rolled back on: an app that leaves a connection of
/// the store's pool inside a transaction it never ends (a raw `BEGIN`) breaks the
/// store's statements on that connection, kept or not, as it would without it.
#[derive(Debug)]
pub(crate) struct Spare {
    slots: std::sync::Mutex<Slots>,
    /// Told each time a connection out comes back (kept or closed): what
    /// [`Spare::close`] waits on.
    back: tokio::sync::Notify,
    capacity: usize,
    /// The pool's idle timeout and connection lifetime, which bound the kept
    /// connections' as they bound the pool's.
    idle: Option<Duration>,
    lifetime: Option<Duration>,
}

/// What the [`Spare`] holds: the kept connections, the most recently used last, and
/// how many are out running a statement ([`Taken`]).
#[derive(Debug, Default)]
struct Slots {
    kept: Vec<Kept>,
    out: usize,
    /// The store was closed ([`Spare::close`]): nothing is kept any more.
    closed: bool,
}

/// A kept connection, with when it left the pool and when it was last used.
#[derive(Debug)]
struct Kept {
    conn: PgConnection,
    kept_since: Instant,
    idle_since: Instant,
}

/// A kept connection while it runs a statement or a chunk: [`Taken::keep`] puts it
/// back; dropped (the statement failed, or its future was dropped half-way) it is
/// closed, and its place freed for the next pool connection.
#[derive(Debug)]
pub(crate) struct Taken {
    spare: Arc<Spare>,
    conn: Option<PgConnection>,
    kept_since: Instant,
}

impl Spare {
    /// No connections yet, for at most `capacity` of `pool`'s.
    pub(super) fn new(pool: &PgPool, capacity: usize) -> Self {
        let options = pool.options();
        Spare {
            slots: std::sync::Mutex::default(),
            back: tokio::sync::Notify::new(),
            capacity,
            idle: options.get_idle_timeout(),
            lifetime: options.get_max_lifetime(),
        }
    }

    /// How many connections of `pool` may be kept out of it between keyed chunks: a
    /// quarter of its `max_connections` (none below 4).
    pub(super) fn keyed_capacity(pool: &PgPool) -> usize {
        usize::try_from(pool.options().get_max_connections()).unwrap_or(usize::MAX) / 4
    }

    /// The most recently used kept connection, if there is one fresh enough; stale
    /// ones are closed.
    pub(super) fn take(self: &Arc<Self>) -> Option<Taken> {
        let past = |since: Instant, limit: Option<Duration>| {
            limit.is_some_and(|limit| since.elapsed() >= limit)
        };
        let is_stale =
            |k: &Kept| past(k.idle_since, self.idle) || past(k.kept_since, self.lifetime);
        let mut slots = self.lock();
        // Split only when something is stale: this runs before every statement.
        let mut stale = Vec::new();
        if slots.kept.iter().any(is_stale) {
            let fresh;
            (stale, fresh) = std::mem::take(&mut slots.kept)
                .into_iter()
                .partition(is_stale);
            slots.kept = fresh;
        }
        let taken = slots.kept.pop().map(|kept| {
            slots.out += 1;
            Taken {
                spare: Arc::clone(self),
                conn: Some(kept.conn),
                kept_since: kept.kept_since,
            }
        });
        drop(slots);
        stale.into_iter().for_each(|k| close(k.conn));
        taken
    }

    /// Keeps `conn`, a pool connection that just ran a statement successfully (or a
    /// chunk that ended), if there is room; else it goes back to the pool.
    pub(super) fn keep_pooled(&self, conn: PoolConnection<Postgres>) {
        let mut slots = self.lock();
        if !slots.closed && slots.kept.len() + slots.out < self.capacity {
            let now = Instant::now();
            slots.kept.push(Kept {
                conn: conn.detach(),
                kept_since: now,
                idle_since: now,
            });
        } else {
            drop(slots);
            drop(conn);
        }
    }

    /// Closes the kept connections and keeps none from now on; waits until those out
    /// running a statement or chunk are done, and closed.
    pub(super) async fn close(&self) {
        use sqlx::Connection;
        let kept = {
            let mut slots = self.lock();
            slots.closed = true;
            std::mem::take(&mut slots.kept)
        };
        for kept in kept {
            let _ = kept.conn.close().await;
        }
        loop {
            // Registered before the count is read, so a return in between still wakes it.
            let back = self.back.notified();
            if self.lock().out == 0 {
                return;
            }
            back.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // Nothing panics while the lock is held; poisoned slots are still whole.
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Taken {
    pub(super) fn conn(&mut self) -> Option<&mut PgConnection> {
        self.conn.as_mut()
    }

    /// Puts the connection back, its statement done.
    pub(super) fn keep(mut self) {
        if let Some(conn) = self.conn.take() {
            let mut slots = self.spare.lock();
            slots.out = slots.out.saturating_sub(1);
            if slots.closed {
                drop(slots);
                // Dropped: its socket closes before `Spare::close` hears of it.
                drop(conn);
            } else {
                slots.kept.push(Kept {
                    conn,
                    kept_since: self.kept_since,
                    idle_since: Instant::now(),
                });
                drop(slots);
            }
            self.spare.back.notify_waiters();
        }
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        for kept in std::mem::take(&mut self.lock().kept) {
            close(kept.conn);
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Not kept: its place is free for the next pool connection. Dropping
            // the connection closes its socket.
            drop(conn);
            let mut slots = self.spare.lock();
            slots.out = slots.out.saturating_sub(1);
            drop(slots);
            self.spare.back.notify_waiters();
        }
    }
}

/// A driver error of a statement run for its effect, as sea-orm's
/// (`DatabaseTransaction::execute_raw` gives the same).
fn exec(e: sqlx::Error) -> DbErr {
    DbErr::Exec(sea_orm::RuntimeErr::SqlxError(Arc::new(e)))
}

/// Closes `conn` politely (a `Terminate`) on a task of its own, when a runtime is at
/// hand; else drops it, which closes the socket.
fn close(conn: PgConnection) {
    use sqlx::Connection;
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = conn.close().await;
        });
    }
}

/// One connection for a keyed chunk's transaction ([`Session::checkout`]
/// (super::Session::checkout)) or a statement in autocommit: a kept connection
/// ([`Spare`]) when there is one, else one of the pool's.
///
/// [`Checkout::end`] ends the transaction and [`Checkout::release`] hands the
/// connection back: kept, or to the pool, unless a statement on it failed in a way
/// that may have left the session unfit ([`kept_after`]), in which case it is closed.
/// Dropped before that (the statement's or chunk's future was dropped, the chunk's
/// work panicked) it is closed whatever it came from: the server rolls an open
/// transaction back, and its locks vanish, when it sees the connection go; a
/// connection inside a transaction, or half-way through a statement, never goes back
/// to a pool.
#[derive(Debug)]
pub(crate) struct Checkout {
    held: Option<Held>,
    /// Whether a named prepared statement may be used (and cached) on the connection:
    /// directly on PostgreSQL, not behind a transaction pooler.
    persistent: bool,
    /// Whether the connection may serve again once the transaction ends.
    reusable: bool,
    /// The error of the last statement, if it failed on the server: the transaction
    /// is then aborted (PostgreSQL refuses every statement but a rollback, and a
    /// `COMMIT` rolls back), until a statement succeeds again (only `ROLLBACK TO
    /// SAVEPOINT` can).
    aborted: Option<DbErr>,
}

#[derive(Debug)]
pub(super) enum Held {
    Kept(Taken),
    /// A pool connection, and where it may be kept afterwards.
    Pooled(PoolConnection<Postgres>, Option<Arc<Spare>>),
}

impl Checkout {
    pub(super) fn new(held: Held, persistent: bool) -> Self {
        Checkout {
            held: Some(held),
            persistent,
            reusable: true,
            aborted: None,
        }
    }

    /// Its statements unnamed, each planned for its own values (no cached plan).
    pub(super) fn unnamed(mut self) -> Self {
        self.persistent = false;
        self
    }

    fn conn(&mut self) -> Result<&mut PgConnection, DbErr> {
        let conn = match self.held.as_mut() {
            Some(Held::Kept(taken)) => taken.conn(),
            Some(Held::Pooled(conn, _)) => Some(&mut **conn),
            None => None,
        };
        conn.ok_or_else(|| DbErr::Custom("the connection was handed back".to_owned()))
    }

    /// Notes a statement's outcome: [`Checkout::aborted`] and, if it failed in a way
    /// that may leave the session unfit ([`kept_after`]), that the connection is to
    /// be closed once the transaction ends; its driver error made a [`DbErr`] by `or`.
    fn outcome<T>(
        &mut self,
        done: Result<T, sqlx::Error>,
        or: fn(sqlx::Error) -> DbErr,
    ) -> Result<T, DbErr> {
        match done {
            Ok(done) => {
                self.aborted = None;
                Ok(done)
            }
            Err(e) => {
                self.reusable &= kept_after(&e);
                let server = matches!(e, sqlx::Error::Database(_));
                let e = or(e);
                if server {
                    self.aborted = Some(e.clone());
                }
                Err(e)
            }
        }
    }

    /// The error that aborted the transaction, if the last statement failed on the
    /// server: a `COMMIT` would roll it back.
    pub(crate) fn aborted(&self) -> Option<&DbErr> {
        self.aborted.as_ref()
    }

    /// Runs `sql` with the simple protocol (no parameters, several statements allowed).
    pub(crate) async fn simple(&mut self, sql: &str) -> Result<PgQueryResult, DbErr> {
        self.simple_or(sql, exec).await
    }

    /// [`Checkout::simple`], its driver error made a [`DbErr`] by `or`.
    async fn simple_or(
        &mut self,
        sql: &str,
        or: fn(sqlx::Error) -> DbErr,
    ) -> Result<PgQueryResult, DbErr> {
        use sqlx::Executor;
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        let done = self.conn()?.execute(sqlx::raw_sql(sql)).await;
        self.outcome(done, or)
    }

    /// `sql` with `values` bound: prepared and cached directly on PostgreSQL, unnamed
    /// behind a transaction pooler.
    fn query(
        &self,
        sql: &str,
        values: Vec<Value>,
    ) -> sqlx::query::Query<'static, Postgres, SqlxValues> {
        sqlx::query_with(
            sqlx::AssertSqlSafe(sql.to_owned()),
            SqlxValues(sea_orm::sea_query::Values(values)),
        )
        .persistent(self.persistent)
    }

    /// Runs `sql` with `values` bound ([`Checkout::query`]): its rows.
    pub(crate) async fn fetch(
        &mut self,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>, DbErr> {
        let query = self.query(sql, values);
        let rows = query.fetch_all(self.conn()?).await;
        let rows = self.outcome(rows, driver)?;
        Ok(rows.into_iter().map(QueryResult::from).collect())
    }

    /// Runs `sql` with `values` bound ([`Checkout::query`]): its first row, if any.
    pub(crate) async fn fetch_one(
        &mut self,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Option<QueryResult>, DbErr> {
        let query = self.query(sql, values);
        let row = query.fetch_optional(self.conn()?).await;
        let row = self.outcome(row, driver)?;
        Ok(row.map(QueryResult::from))
    }

    /// Runs `sql` with `values` bound ([`Checkout::query`]): how many rows it affected.
    pub(crate) async fn execute(
        &mut self,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<PgQueryResult, DbErr> {
        let query = self.query(sql, values);
        let done = query.execute(self.conn()?).await;
        self.outcome(done, exec)
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`) and hands the
    /// connection back ([`Checkout::release`]); if that fails, the connection is
    /// closed. Its error is a query's, as sea-orm's `commit` gives.
    pub(crate) async fn end(mut self, sql: &str) -> Result<(), DbErr> {
        self.simple_or(sql, driver).await?;
        self.release();
        Ok(())
    }

    /// Hands the connection back, outside any transaction: kept, or to the pool; closed
    /// instead if a statement on it failed in a way that may have left the session
    /// unfit ([`kept_after`]).
    pub(crate) fn release(mut self) {
        match (self.held.take(), self.reusable) {
            (Some(Held::Kept(taken)), true) => taken.keep(),
            (Some(Held::Pooled(conn, Some(spare))), true) => spare.keep_pooled(conn),
            (Some(Held::Pooled(conn, None)), true) => drop(conn),
            (Some(Held::Pooled(mut conn, _)), false) => conn.close_on_drop(),
            // Dropped, which closes it.
            (Some(Held::Kept(_)) | None, _) => {}
        }
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        // Not ended: the transaction may still be open. A kept connection closes as
        // it is dropped; a pool connection must not go back to the pool.
        if let Some(Held::Pooled(conn, _)) = &mut self.held {
            conn.close_on_drop();
        }
    }
}
