//! [`PostgresStore`]: the lease store for clusters.

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
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, QueryResult,
    Statement, Value,
};

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
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            migrate: true,
            max_connections: 4,
            connect_timeout: Duration::from_secs(5),
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
#[derive(Debug, Clone)]
pub struct PostgresStore {
    db: DatabaseConnection,
    table: TableName,
    sql: Sql,
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
        // they tell the runtime when a retry could succeed, never who owns what.
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
             SELECT false, h.name, h.holder, h.tick, h.token, h.expires_at, h.released_at IS NOT NULL \
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
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self> {
        check_url(url)?;
        let mut connect = ConnectOptions::new(url.to_owned());
        connect
            .max_connections(options.max_connections)
            .min_connections(0)
            .connect_timeout(options.connect_timeout)
            .acquire_timeout(options.connect_timeout)
            .sqlx_logging(false);
        let db = Database::connect(connect)
            .await
            .map_err(|source| Error::Connect { source })?;
        Self::open(db, options).await
    }

    /// Uses the app's own pool. Runs the migrations unless `options` says not to.
    ///
    /// # Errors
    /// [`Error::Migrate`] if a migration fails.
    pub async fn open(db: DatabaseConnection, options: PostgresOptions) -> Result<Self> {
        if options.migrate {
            migrate::run(&db, &options.table).await?;
        }
        Ok(Self {
            sql: Sql::new(&options.table),
            table: options.table,
            db,
        })
    }

    /// The pool the store borrows connections from.
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// The lease table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    async fn query(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        let stmt = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
        self.db
            .query_all_raw(stmt)
            .await
            .map_err(|source| Error::Statement { operation, source })
    }
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

fn lease_from_row(row: &QueryResult) -> Result<Lease> {
    const OP: &str = "take leases";
    Ok(Lease {
        name: name_from_row(row, OP)?,
        holder: Holder::from_stored(get(row, "holder", OP)?),
        tick: Tick::new(get::<DateTime<Utc>>(row, "tick", OP)?),
        token: FencingToken::new(get(row, "token", OP)?),
        expires_at: get(row, "expires_at", OP)?,
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
        let rows = self.query("take leases", &self.sql.take, values).await?;
        let mut taken = Taken::default();
        for row in &rows {
            if get::<bool>(row, "won", "take leases")? {
                taken.won.push(lease_from_row(row)?);
            } else {
                taken.held.push(Held {
                    name: name_from_row(row, "take leases")?,
                    tick: Tick::new(get(row, "tick", "take leases")?),
                    expires_at: get(row, "expires_at", "take leases")?,
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
        let rows = self.query("renew leases", &self.sql.renew, values).await?;
        let renewed = rows
            .iter()
            .map(|row| {
                Ok(Renewed {
                    name: name_from_row(row, "renew leases")?,
                    expires_at: get(row, "expires_at", "renew leases")?,
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
            .query("release leases", &self.sql.release, values)
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
        Ok(get(row, "now", "read the database clock")?)
    }
}
