//! [`PostgresStore`]: the lease store for clusters.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::lease::ensure_unique;
use scheduler_core::{
    FencingToken, Held, Holder, Lease, LeaseKey, LeaseName, Release, Renewed, TakeRequest, Taken,
    Tick, Ttl,
};
use scheduler_migrations::TableName;
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, QueryResult, RuntimeErr, Statement, TransactionTrait, Value,
};
use sea_query_sqlx::SqlxValues;

use crate::error::{Error, Result};
use crate::migrate;

/// How a [`PostgresStore`] connects and where it keeps its leases.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The lease table, optionally schema-qualified. Default `scheduler_leases`.
    pub table: TableName,
    /// Run the migrations when the store opens. Default `true`.
    pub migrate: bool,
    /// Pool size when the store opens its own pool ([`PostgresStore::connect`]).
    /// Default 4. Lease operations borrow a connection for one statement, so a pool
    /// of one suffices for the store; the rest is for the app.
    pub max_connections: u32,
    /// How long to wait for a connection: to the server when connecting, from the
    /// pool when running a statement. Default 5 s.
    pub connect_timeout: Duration,
    /// The URL points at a pooler in **transaction pooling** mode (PgBouncer
    /// `pool_mode = transaction`, which before 1.21 has no prepared-statement
    /// support): no statement of the store is prepared under a name. Default `false`;
    /// set by `pgbouncer=true` in the URL ([`PostgresOptions::for_url`]). See
    /// [`PostgresStore`]'s "Behind PgBouncer".
    pub transaction_pooling: bool,
    /// How long a transaction the store opens may sit idle, waiting for its client,
    /// before the server ends the session (`SET LOCAL
    /// idle_in_transaction_session_timeout`). Default 10 s. A client paused (a GC
    /// pause, SIGSTOP, a cut network) inside a [`fenced`](PostgresStore::fenced)
    /// transaction, or between a statement and its `COMMIT` behind PgBouncer, would
    /// otherwise keep its lease row locks and hold up every other instance's takes;
    /// the ended session rolls back, so nothing half-done commits. Keep fenced and
    /// keyed work below it between statements.
    pub idle_transaction_timeout: Duration,
    /// The server-side bound on every lease statement (`SET LOCAL
    /// statement_timeout`, lock waits included), at most a quarter of the lease ttl
    /// for takes and renewals. Default 2 s. A statement held up by a lock (`LOCK
    /// TABLE`, `VACUUM FULL`, a migration) fails after it instead of committing long
    /// after the runtime stopped waiting, and its connection goes back to the pool.
    /// Keep it below the runtime's store call limit (two renewal intervals, 1–30 s).
    pub statement_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            migrate: true,
            max_connections: 4,
            connect_timeout: Duration::from_secs(5),
            transaction_pooling: false,
            idle_transaction_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(2),
        }
    }
}

impl PostgresOptions {
    /// Keeps leases in `table` (`name` or `schema.name`).
    ///
    /// # Errors
    /// [`Error::InvalidTableName`] if it is not a plain identifier.
    pub fn table(mut self, table: &str) -> Result<Self> {
        self.table = TableName::new(table)?;
        Ok(self)
    }

    /// Whether to run the migrations when the store opens.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// The pool size when the store opens its own pool.
    pub fn max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections.max(1);
        self
    }

    /// The connect and pool-acquire timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether the URL points at a pooler in transaction pooling mode (PgBouncer
    /// `pool_mode = transaction`); see [`PostgresOptions::transaction_pooling`].
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// How long a store transaction may wait idle for its client (`Duration::ZERO`
    /// turns the timeout off; at most about 24 days, PostgreSQL's limit); see
    /// [`PostgresOptions::idle_transaction_timeout`].
    pub fn idle_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_transaction_timeout = timeout;
        self
    }

    /// The server-side bound on lease statements; see
    /// [`PostgresOptions::statement_timeout`].
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// The defaults, with [`transaction_pooling`](Self::transaction_pooling) on when
    /// `url` carries `pgbouncer=true` (the convention Prisma uses too).
    pub fn for_url(url: &str) -> Self {
        Self::default().transaction_pooling(pgbouncer_param(url).1)
    }
}

/// The sea-orm pool options [`PostgresStore::connect`] uses for `url`: `options`'
/// pool size and timeouts; with transaction pooling (in `options` or `pgbouncer=true`
/// in the URL) the `pgbouncer` parameter is taken out of the URL and sqlx's statement
/// cache is switched off. Use it to build an app pool to pass to
/// [`PostgresStore::open`] behind PgBouncer.
///
/// # Errors
/// [`Error::InvalidUrl`] if the URL does not parse.
pub fn connect_options(url: &str, options: &PostgresOptions) -> Result<ConnectOptions> {
    let (url, pgbouncer) = pgbouncer_param(url);
    check_url(&url)?;
    let mut connect = ConnectOptions::new(url);
    connect
        .max_connections(options.max_connections)
        .min_connections(0)
        .connect_timeout(options.connect_timeout)
        .acquire_timeout(options.connect_timeout)
        .sqlx_logging(false);
    if pgbouncer || options.transaction_pooling {
        // sqlx names every statement it prepares; with the cache off each gets a
        // fresh name (never reused on another server connection), and transactions
        // opened by the store start with `DEALLOCATE ALL` so the names of other
        // clients' statements left on a server connection cannot clash.
        connect.map_sqlx_postgres_opts(|o| o.statement_cache_capacity(0));
    }
    Ok(connect)
}

/// `url` without its `pgbouncer` query parameter, and whether it was `true`.
fn pgbouncer_param(url: &str) -> (String, bool) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), false);
    };
    let mut on = false;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some(("pgbouncer", value)) => {
                on = value.eq_ignore_ascii_case("true") || value == "1";
                false
            }
            _ => true,
        })
        .collect();
    if rest.is_empty() {
        (base.to_owned(), on)
    } else {
        (format!("{base}?{}", rest.join("&")), on)
    }
}

/// The PostgreSQL lease store.
///
/// Every operation is **one statement** on a connection borrowed from the pool for
/// that statement only: holding any number of leases costs no connection. Takes,
/// renewals and releases are batched over `unnest` arrays, every time comes from the
/// server's `now()`, and losing takes write nothing (held names are filtered out
/// before `ON CONFLICT` is reached, which still decides every race).
///
/// ```no_run
/// use scheduler_postgres::{PostgresOptions, PostgresStore};
///
/// # async fn demo() -> scheduler_postgres::Result<()> {
/// let store = PostgresStore::connect("postgres://app@db/app", PostgresOptions::default()).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Behind PgBouncer
///
/// In PgBouncer's `pool_mode = transaction` (1.18 has no prepared-statement support
/// there) every transaction may run on another server connection, so a statement
/// prepared under a name in one is gone, or another client's, in the next. Add
/// `pgbouncer=true` to the URL (or set [`PostgresOptions::transaction_pooling`]):
///
/// - the lease statements (take, renew, release, the clock read) run as **unnamed**
///   statements, each in a transaction of its own, so parse and execute stay on one
///   server connection;
/// - the transactions the store opens ([`fenced`](Self::fenced), keyed processing,
///   migrations, the run history's table) start with `DEALLOCATE ALL`, and the pool is
///   built with sqlx's statement cache off ([`connect_options`]), so the statements
///   sqlx prepares inside them get fresh names that nothing else uses;
/// - migrations take a transaction-level advisory lock, which PgBouncer does not
///   break (a session lock would be lost between transactions).
///
/// Your own statements on the same pool follow the same rule: run them inside
/// [`begin`](Self::begin) (or [`fenced`](Self::fenced)) — a plain `begin()` of the
/// pool lacks the `DEALLOCATE ALL` — as a statement outside a transaction may be
/// parsed on one server connection and executed on another. To hand
/// [`open`](Self::open) a pool of your own, build it with [`connect_options`] and
/// pass [`PostgresOptions::for_url`] (both read `pgbouncer=true`). PgBouncer must accept
/// the startup parameters sqlx sends: `ignore_startup_parameters =
/// extra_float_digits,options`.
///
/// ```no_run
/// use scheduler_postgres::{PostgresOptions, PostgresStore};
///
/// # async fn demo() -> scheduler_postgres::Result<()> {
/// let url = "postgres://app@pgbouncer:6432/app?pgbouncer=true";
/// let store = PostgresStore::connect(url, PostgresOptions::default()).await?;
/// assert!(store.transaction_pooling());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    db: DatabaseConnection,
    table: TableName,
    sql: Sql,
    transaction_pooling: bool,
    /// `SET LOCAL idle_in_transaction_session_timeout = …`, run first in every
    /// transaction the store opens.
    idle_guard: String,
    /// [`PostgresOptions::statement_timeout`].
    statement_timeout: Duration,
}

/// The statements, with the table name spliced in once.
#[derive(Debug, Clone)]
struct Sql {
    take: String,
    renew: String,
    release: String,
}

impl Sql {
    fn new(table: &TableName) -> Self {
        let t = table.quoted();
        // A lease is free for a tick when it has expired and was taken for an earlier
        // tick, or for this tick but never released as completed.
        let free = |l: &str, tick: &str| {
            format!(
                "{l}.expires_at <= now() AND ({l}.tick < {tick} \
                 OR ({l}.tick = {tick} AND {l}.released_at IS NULL))"
            )
        };
        // The held rows are read from the statement's snapshot (before the insert):
        // they tell the runtime when a retry could succeed, never who owns what —
        // except a row this very holder took for this tick (an earlier take whose
        // answer was lost), which is reported as won: holders are fresh per tick.
        let take = format!(
            "WITH req AS ( \
               SELECT r.name, r.tick, r.holder \
               FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS r(name, tick, holder) \
             ), won AS ( \
             INSERT INTO {t} AS l (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT req.name, req.holder, req.tick, 1, now(), \
                    now() + $4::bigint * interval '1 millisecond', NULL \
             FROM req \
             WHERE NOT EXISTS ( \
               SELECT 1 FROM {t} h WHERE h.name = req.name AND NOT ({pre}) \
             ) \
             ORDER BY req.name \
             ON CONFLICT (name) DO UPDATE \
               SET holder = excluded.holder, tick = excluded.tick, token = l.token + 1, \
                   taken_at = excluded.taken_at, expires_at = excluded.expires_at, \
                   released_at = NULL \
               WHERE {decide} \
             RETURNING l.name, l.holder, l.tick, l.token, l.expires_at \
             ) \
             SELECT true AS won, name, holder, tick, token, expires_at, false AS completed FROM won \
             UNION ALL \
             SELECT h.holder = req.holder AND h.tick = req.tick AND h.released_at IS NULL, \
                    h.name, h.holder, h.tick, h.token, h.expires_at, h.released_at IS NOT NULL \
             FROM {t} h JOIN req ON h.name = req.name \
             WHERE NOT EXISTS (SELECT 1 FROM won WHERE won.name = h.name)",
            pre = free("h", "req.tick"),
            decide = free("l", "excluded.tick"),
        );
        // Renew and release lock their rows in name order, as take does, so batches of
        // different instances never wait on each other in a cycle.
        let mine = format!(
            "WITH req AS (SELECT * FROM unnest($1::text[], $2::text[]) AS r(name, holder)), \
             mine AS ( \
               SELECT l.name FROM {t} l JOIN req ON l.name = req.name AND l.holder = req.holder \
               WHERE l.released_at IS NULL ORDER BY l.name FOR UPDATE OF l \
             )"
        );
        let renew = format!(
            "{mine} UPDATE {t} l SET expires_at = now() + $3::bigint * interval '1 millisecond' \
             FROM mine WHERE l.name = mine.name RETURNING l.name, l.expires_at"
        );
        let release = format!(
            "{mine} UPDATE {t} l SET expires_at = LEAST(l.expires_at, now()), \
               released_at = CASE WHEN $3::boolean THEN now() END \
             FROM mine WHERE l.name = mine.name RETURNING l.name"
        );
        Self {
            take,
            renew,
            release,
        }
    }
}

impl PostgresStore {
    /// Connects to `url` with a pool of its own and, unless told not to, runs the
    /// migrations.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] if the URL does not parse, [`Error::Connect`] if the
    /// server cannot be reached, [`Error::Migrate`] if a migration fails.
    pub async fn connect(url: &str, mut options: PostgresOptions) -> Result<Self> {
        options.transaction_pooling |= pgbouncer_param(url).1;
        let db = Database::connect(connect_options(url, &options)?)
            .await
            .map_err(|source| Error::Connect { source })?;
        Self::open(db, options).await
    }

    /// Uses the app's own pool. Runs the migrations unless `options` says not to.
    ///
    /// # Errors
    /// [`Error::Migrate`] if a migration fails.
    pub async fn open(db: DatabaseConnection, options: PostgresOptions) -> Result<Self> {
        let backend = db.get_database_backend();
        if backend != DbBackend::Postgres {
            return Err(Error::NotPostgres {
                backend: format!("{backend:?}"),
            });
        }
        let store = Self {
            sql: Sql::new(&options.table),
            table: options.table,
            db,
            transaction_pooling: options.transaction_pooling,
            statement_timeout: options.statement_timeout,
            idle_guard: {
                // `SET` takes no parameters; this is an integer, not text.
                // 0 turns the timeout off; PostgreSQL takes at most i32::MAX ms.
                let idle_ms = options
                    .idle_transaction_timeout
                    .as_millis()
                    .min(i32::MAX.unsigned_abs().into());
                format!("SET LOCAL idle_in_transaction_session_timeout = {idle_ms}")
            },
        };
        if options.migrate {
            migrate::run(&store).await?;
        }
        Ok(store)
    }

    /// The pool the store borrows connections from.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The lease table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// Whether the store runs behind a transaction pooler
    /// ([`PostgresOptions::transaction_pooling`]).
    pub fn transaction_pooling(&self) -> bool {
        self.transaction_pooling
    }

    /// Begins a transaction on the store's pool, for the app's own statements too.
    ///
    /// Behind a transaction pooler ([`PostgresOptions::transaction_pooling`]) it first
    /// drops every prepared statement on the server connection it was given, so that
    /// the statements sqlx prepares inside (under names fresh for this client: the
    /// pool's statement cache is off) cannot clash with names another client left
    /// there. Either way the transaction may not sit idle, waiting for its client,
    /// longer than [`PostgresOptions::idle_transaction_timeout`].
    ///
    /// # Errors
    /// The driver's error if no connection could be had or the server failed.
    pub async fn begin(&self) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.db.begin().await?;
        // One simple-protocol round trip: no prepared statement involved.
        let setup = if self.transaction_pooling {
            format!("DEALLOCATE ALL; {}", self.idle_guard)
        } else {
            self.idle_guard.clone()
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
    pub(crate) async fn query(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        let rows = if self.transaction_pooling {
            self.in_own_transaction(sql, values, Returns::Rows, None)
                .await
                .map(|(rows, _)| rows)
        } else {
            let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
            self.db.query_all_raw(stmt).await
        };
        rows.map_err(|source| Error::statement(operation, source))
    }

    /// Runs one statement like [`query`](Self::query) and returns how many rows it
    /// affected.
    pub(crate) async fn execute(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<u64> {
        if self.transaction_pooling {
            return self
                .in_own_transaction(sql, values, Returns::Count, None)
                .await
                .map(|(_, affected)| affected)
                .map_err(|source| Error::statement(operation, source));
        }
        let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
        self.db
            .execute_raw(stmt)
            .await
            .map(|done| done.rows_affected())
            .map_err(|source| Error::statement(operation, source))
    }

    /// Runs one lease statement, bounded server-side: in a transaction of its own
    /// whose `BEGIN` (one round trip with its settings) sets `statement_timeout` to
    /// `bound` (at most [`PostgresOptions::statement_timeout`]), so a statement held
    /// up by a lock fails there instead of committing after the caller gave up.
    /// Prepared and cached directly; unnamed behind a transaction pooler.
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
        .persistent(!self.transaction_pooling);
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

/// What [`PostgresStore::in_own_transaction`] hands back.
#[derive(Debug, Clone, Copy)]
enum Returns {
    Rows,
    Count,
}

/// Rejects what does not parse as a PostgreSQL URL before any connection is tried.
fn check_url(url: &str) -> Result<()> {
    use std::str::FromStr;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::InvalidUrl {
            reason: "it must start with postgres:// or postgresql://".to_owned(),
        });
    }
    sea_orm::sqlx::postgres::PgConnectOptions::from_str(url)
        .map(drop)
        .map_err(|e| Error::InvalidUrl {
            reason: e.to_string(),
        })
}

fn get<T: sea_orm::TryGetable>(row: &QueryResult, col: &str, operation: &'static str) -> Result<T> {
    row.try_get::<T>("", col)
        .map_err(|source| Error::BadRow { operation, source })
}

/// Reads a `timestamptz` column, checking its range first
/// ([`timestamp_out_of_range`]): a value set by hand must not panic.
fn time(row: &QueryResult, col: &str, operation: &'static str) -> Result<DateTime<Utc>> {
    time_or_clamp(row, col, operation, false)
}

/// [`time`], but a held row of another job's (read to tell the runtime when to ask
/// again, never to decide ownership) set out of range by hand reads as the end (or
/// start) of time instead of failing the whole batch it came with.
fn held_time(row: &QueryResult, col: &str) -> Result<DateTime<Utc>> {
    time_or_clamp(row, col, "take leases", true)
}

fn time_or_clamp(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
    clamp: bool,
) -> Result<DateTime<Utc>> {
    match timestamp_out_of_range(row, col) {
        Some(beyond) if clamp => Ok(match beyond {
            OutOfRange::Infinity | OutOfRange::Future => DateTime::<Utc>::MAX_UTC,
            OutOfRange::MinusInfinity | OutOfRange::Past => DateTime::<Utc>::MIN_UTC,
        }),
        Some(_) => Err(Error::BadRow {
            operation,
            source: DbErr::Custom(format!(
                "column \"{col}\" holds a timestamp out of range (infinity?)"
            )),
        }),
        None => get(row, col, operation),
    }
}

/// A `timestamptz` value beyond chrono's range (years −262143 … 262142).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRange {
    /// `'infinity'`.
    Infinity,
    /// `'-infinity'`.
    MinusInfinity,
    /// A finite time after chrono's last (or a value that does not decode).
    Future,
    /// A finite time before chrono's first.
    Past,
}

/// Whether `row`'s `timestamptz` column `col` holds a value chrono cannot: sqlx
/// decodes a timestamp by adding its microseconds to 2000-01-01 with chrono's
/// panicking `+`, so such a value (set by hand) would panic when read. `None` for a
/// value in range, a NULL, or a column that is not a binary `timestamptz`.
pub fn timestamp_out_of_range(row: &QueryResult, col: &str) -> Option<OutOfRange> {
    use sea_orm::sqlx::postgres::{PgValueFormat, Postgres};
    use sea_orm::sqlx::{Row, Type, ValueRef};
    /// 2000-01-01, PostgreSQL's epoch, in microseconds since 1970-01-01.
    const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
    let raw = row.try_as_pg_row()?.try_get_raw(col).ok()?;
    if raw.is_null()
        || raw.format() != PgValueFormat::Binary
        || !<DateTime<Utc> as Type<Postgres>>::compatible(&raw.type_info())
    {
        return None;
    }
    let micros = raw
        .as_bytes()
        .ok()
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(i64::from_be_bytes);
    let in_range = micros
        .and_then(|us| us.checked_add(PG_EPOCH_MICROS))
        .and_then(DateTime::from_timestamp_micros)
        .is_some();
    if in_range {
        return None;
    }
    // PostgreSQL stores the infinities as the extreme values.
    Some(match micros {
        Some(i64::MAX) => OutOfRange::Infinity,
        Some(i64::MIN) => OutOfRange::MinusInfinity,
        Some(us) if us < 0 => OutOfRange::Past,
        _ => OutOfRange::Future,
    })
}

fn lease_from_row(row: &QueryResult) -> Result<Lease> {
    const OP: &str = "take leases";
    Ok(Lease {
        name: name_from_row(row, OP)?,
        holder: Holder::from_stored(get(row, "holder", OP)?),
        tick: Tick::new(time(row, "tick", OP)?),
        token: FencingToken::new(get(row, "token", OP)?),
        expires_at: time(row, "expires_at", OP)?,
    })
}

fn name_from_row(row: &QueryResult, operation: &'static str) -> Result<LeaseName> {
    let name: String = get(row, "name", operation)?;
    LeaseName::new(name).map_err(|e| Error::BadRow {
        operation,
        source: DbErr::Custom(e.to_string()),
    })
}

fn keys_to_values(leases: &[LeaseKey]) -> (Value, Value) {
    let names: Vec<String> = leases.iter().map(|k| k.name.as_str().to_owned()).collect();
    let holders: Vec<String> = leases
        .iter()
        .map(|k| k.holder.as_str().to_owned())
        .collect();
    (names.into(), holders.into())
}

#[async_trait]
impl scheduler_core::Store for PostgresStore {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        ensure_unique(requests.iter().map(|r| &r.name))?;
        if requests.is_empty() {
            return Ok(Taken::default());
        }
        let names: Vec<String> = requests
            .iter()
            .map(|r| r.name.as_str().to_owned())
            .collect();
        let ticks: Vec<DateTime<Utc>> = requests.iter().map(|r| r.tick.at()).collect();
        let holders: Vec<String> = requests
            .iter()
            .map(|r| r.holder.as_str().to_owned())
            .collect();
        let values = vec![
            names.into(),
            ticks.into(),
            holders.into(),
            ttl.as_millis().into(),
        ];
        let rows = self
            .lease_query("take leases", &self.sql.take, values, ttl.get() / 4)
            .await?;
        let mut taken = Taken::default();
        for row in &rows {
            if get::<bool>(row, "won", "take leases")? {
                taken.won.push(lease_from_row(row)?);
            } else {
                taken.held.push(Held {
                    name: name_from_row(row, "take leases")?,
                    tick: Tick::new(held_time(row, "tick")?),
                    expires_at: held_time(row, "expires_at")?,
                    completed: get(row, "completed", "take leases")?,
                });
            }
        }
        Ok(taken)
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> scheduler_core::Result<Vec<Renewed>> {
        ensure_unique(leases.iter().map(|k| &k.name))?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (names, holders) = keys_to_values(leases);
        let values = vec![names, holders, ttl.as_millis().into()];
        let rows = self
            .lease_query("renew leases", &self.sql.renew, values, ttl.get() / 4)
            .await?;
        let renewed = rows
            .iter()
            .map(|row| {
                Ok(Renewed {
                    name: name_from_row(row, "renew leases")?,
                    expires_at: time(row, "expires_at", "renew leases")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(renewed)
    }

    async fn release(
        &self,
        leases: &[LeaseKey],
        how: Release,
    ) -> scheduler_core::Result<Vec<LeaseName>> {
        ensure_unique(leases.iter().map(|k| &k.name))?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (names, holders) = keys_to_values(leases);
        let values = vec![names, holders, (how == Release::Completed).into()];
        let rows = self
            .lease_query("release leases", &self.sql.release, values, Duration::MAX)
            .await?;
        let released = rows
            .iter()
            .map(|row| name_from_row(row, "release leases"))
            .collect::<Result<_>>()?;
        Ok(released)
    }

    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        let rows = self
            .query(
                "read the database clock",
                "SELECT clock_timestamp() AS now",
                Vec::new(),
            )
            .await?;
        let row = rows.first().ok_or_else(|| Error::BadRow {
            operation: "read the database clock",
            source: DbErr::Custom("no row returned".to_owned()),
        })?;
        Ok(time(row, "now", "read the database clock")?)
    }
}
