//! [`PostgresStore`]: the lease store for clusters, and its [`Store`] implementation.
//!
//! How its statements run (directly or behind a transaction pooler) is decided once,
//! when it opens, by the crate's private session; their text is built once per table.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scheduler_core::lease::ensure_unique;
use scheduler_core::{
    Controls, LeaseKey, LeaseName, Release, Renewed, Store, TakeRequest, Taken, Tick, Ttl,
};
use scheduler_migrations::TableName;
use sea_orm::{Database, DatabaseConnection, DatabaseTransaction, DbErr, QueryResult, Value};

use crate::controls_sql::ControlSql;
use crate::error::{Error, Result};
use crate::guard::PoolGuard;
use crate::migrate;
use crate::options::{PostgresOptions, connect_failed, listen_options, parse_url, pool_options};
use crate::pauses::Pauses;
use crate::row::{get, name_from_row, taken_from_rows, time};
use crate::session::{Pooling, Session};
use crate::sql::{self, Sql};
use crate::watch::Watcher;

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
///   built with sqlx's statement cache off ([`connect_options`](crate::connect_options)), so the statements
///   sqlx prepares inside them get fresh names that nothing else uses;
/// - migrations take a transaction-level advisory lock, which PgBouncer does not
///   break (a session lock would be lost between transactions);
/// - `LISTEN` is not kept between transactions, so the controls are polled on the
///   scheduler's timer, unless [`PostgresOptions::listen_url`] gives the listener a
///   URL straight to PostgreSQL.
///
/// Your own statements on the same pool follow the same rule: run them inside
/// [`begin`](Self::begin) (or [`fenced`](Self::fenced)) — a plain `begin()` of the
/// pool lacks the `DEALLOCATE ALL` — as a statement outside a transaction may be
/// parsed on one server connection and executed on another. To hand
/// [`open`](Self::open) a pool of your own, build it with [`connect_options`](crate::connect_options) and
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
    session: Session,
    table: TableName,
    sql: Sql,
    controls: Arc<ControlSql>,
    /// The pauses a take honours, as known to the store ([`Pauses`]).
    pauses: Arc<Pauses>,
    /// The listener of announced control changes, shared by the clones.
    pub(crate) watch: Arc<Watcher>,
    /// [`PostgresOptions::min_schedule_period`].
    min_schedule_period: Duration,
}

impl PostgresStore {
    /// Connects to `url` with a pool of its own and, unless told not to, runs the
    /// migrations.
    ///
    /// Directly on PostgreSQL (not behind a transaction pooler), every connection of
    /// that pool carries [`PostgresOptions::statement_timeout`] as its
    /// `statement_timeout`, so that a lease statement is one round trip, already
    /// bounded. Your own statements on [`connection`](Self::connection) outside a
    /// transaction are bound by it too; [`begin`](Self::begin) gives its transaction
    /// the server's default back. For statements that may run longer, use `begin`, or
    /// a pool of your own with [`open`](Self::open).
    ///
    /// When the URL lists several hosts (see [`connect_options`](crate::connect_options)),
    /// they are tried in order, each within its `connect_timeout`, and the pool opens on
    /// the first that accepts a connection and suits `target_session_attrs`. When the
    /// pool later cannot connect (that host went down), the first host that suits then
    /// is found in the background, and the pool's next connections go there.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] if the URL does not parse, [`Error::Connect`] if the
    /// server cannot be reached (or none of the hosts listed suits, naming each), [`Error::Migrate`] if a migration fails — or if the
    /// server is still a hot standby at the end of
    /// [`PostgresOptions::connect_timeout`] (it is asked again until then: a standby
    /// may be being promoted).
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self> {
        let (options, plain_url) = options.with_url(url);
        let hosts = parse_url(&plain_url, &options)?;
        // Several hosts: the pool opens on the first that suits.
        let start = match &hosts {
            Some(hosts) => hosts.pick().await?,
            None => 0,
        };
        let bounded = Pooling::of(&options).bound_connections(options.statement_timeout);
        let first = hosts.as_ref().map(|h| h.base_url.clone());
        let hosts = hosts.map(Arc::new);
        let guard = Arc::new(PoolGuard::new(options.max_connections));
        let connect = pool_options(
            &plain_url,
            &options,
            hosts.clone(),
            start,
            bounded,
            Some(guard.clone()),
        );
        let mut db = match Database::connect(connect).await {
            Ok(db) => db,
            Err(cause) => {
                let url = first.as_deref().unwrap_or(&plain_url);
                return Err(connect_failed(url, options.connect_timeout, cause).await);
            }
        };
        // Every statement on the pool that fails, the app's included, has the next
        // connections handed out checked ([`PoolGuard`]).
        let failed = guard.clone();
        db.set_metric_callback(move |info| {
            if info.failed {
                failed.failed();
            }
        });
        let session = Session::new(db, &options, bounded, true)?
            .with_hosts(hosts)
            .with_guard(guard);
        Self::start(session, options).await
    }

    /// Uses the app's own pool. Runs the migrations unless `options` says not to.
    ///
    /// Nothing is known of that pool's connections, so each lease statement runs in
    /// a short transaction of its own whose `BEGIN` sets its bound.
    ///
    /// # Errors
    /// [`Error::NotPostgres`] if `db` is not a PostgreSQL pool, [`Error::Migrate`] if
    /// a migration fails.
    pub async fn open(db: DatabaseConnection, options: PostgresOptions) -> Result<Self> {
        Self::start(Session::new(db, &options, None, false)?, options).await
    }

    /// The store on `session`, migrated unless `options` says not to.
    async fn start(session: Session, options: PostgresOptions) -> Result<Self> {
        let controls = ControlSql::new(&options.table);
        let pool = session.connection().get_postgres_connection_pool();
        let pool_options = pool.connect_options();
        // `LISTEN` is kept per server connection: not behind a transaction pooler,
        // unless the listener is given a URL of its own (verified by a probe the
        // store's session sends, since nothing else would show it leads elsewhere).
        let listen = match listen_options(&options, &pool_options)? {
            Some(listen) => Some((Arc::new(listen), Some(session.clone()))),
            None => (session.pooling() == Pooling::Direct).then_some((pool_options, None)),
        };
        let store = Self {
            watch: Arc::new(Watcher::new(listen, controls.channel.clone())),
            session,
            sql: Sql::new(&options.table),
            pauses: Arc::new(Pauses::new(
                &options.table.with_suffix("_version"),
                &options.table.with_suffix("_controls"),
                &options.table.with_suffix("_triggers"),
            )),
            controls: Arc::new(controls),
            min_schedule_period: options.min_schedule_period,
            table: options.table,
        };
        if options.migrate {
            // A hot standby may be mid-promotion (a failover): it is asked again until
            // the connect timeout, then refused.
            let deadline = tokio::time::Instant::now() + options.connect_timeout;
            let mut wait = Duration::from_millis(100);
            loop {
                match migrate::run(&store.session, &store.table, options.create_schema).await {
                    Err(err)
                        if migrate::in_recovery(&err)
                            && tokio::time::Instant::now() + wait < deadline =>
                    {
                        tracing::warn!(error = %err, retry_in = ?wait,
                            "the database is a hot standby; asking again in case it is being promoted");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(1));
                    }
                    done => break done?,
                }
            }
        } else if options.check_schema {
            migrate::check(&store.session, &store.table).await?;
        }
        Ok(store)
    }

    /// [`PostgresStore::begin`] at `READ COMMITTED` (the migrations).
    pub(crate) async fn begin_read_committed(&self) -> Result<DatabaseTransaction, DbErr> {
        self.session.begin_read_committed().await
    }

    /// The pool the store borrows connections from.
    pub fn connection(&self) -> &DatabaseConnection {
        self.session.connection()
    }

    /// The lease table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// Whether the store runs behind a transaction pooler
    /// ([`PostgresOptions::transaction_pooling`]).
    pub fn transaction_pooling(&self) -> bool {
        self.session.pooling() == Pooling::Transaction
    }

    /// The take, renew and release statements' text, in that order, then the take
    /// when the pauses are known: for tests and benches that look at their plans or
    /// send them raw. Not part of the API.
    #[doc(hidden)]
    pub fn lease_sql(&self) -> [&str; 4] {
        [
            &self.sql.take,
            &self.sql.renew,
            &self.sql.release,
            &self.sql.take_known,
        ]
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
        self.session.begin().await
    }

    /// Closes the store's connections, for every clone of the store, waiting for each
    /// to close: those it keeps out of its pool between statements (one still running
    /// a statement or keyed chunk is waited for, and closed when done), then the pool,
    /// if the store opened it ([`PostgresStore::connect`]; see
    /// [`DatabaseConnection::close_by_ref`]). An app's own pool, handed to
    /// [`PostgresStore::open`], is left open: the app closes it. Statements that start
    /// after it fail on a pool the store opened. Without it, the kept connections close
    /// when the store's last clone is dropped (closing the pool alone does not close
    /// them). The controls listener, when a scheduler watches, keeps a connection of its
    /// own until the schedulers on the store stop.
    ///
    /// # Errors
    /// The driver's error if the pool could not be closed.
    pub async fn close(&self) -> Result<(), DbErr> {
        self.session.close().await
    }

    /// The session its statements run through.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// The controls' statements.
    pub(crate) fn control_sql(&self) -> &ControlSql {
        &self.controls
    }

    /// [`PostgresOptions::min_schedule_period`], as the store was opened with.
    pub(crate) fn min_schedule_period(&self) -> Duration {
        self.min_schedule_period
    }

    /// Runs one statement outside any transaction of the caller's and returns its
    /// rows ([`Session::query`]).
    pub(crate) async fn query(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>> {
        self.session.query(operation, sql, values).await
    }

    /// Runs one statement outside any transaction of the caller's and returns how
    /// many rows it affected ([`Session::execute`]).
    pub(crate) async fn execute(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<u64> {
        self.session.execute(operation, sql, values).await
    }
}

/// The names and holders of `leases`, as the two array parameters renew and release
/// take.
fn keys_to_values(leases: &[LeaseKey]) -> (Value, Value) {
    let names: Vec<String> = leases.iter().map(|k| k.name.as_str().to_owned()).collect();
    let holders: Vec<String> = leases
        .iter()
        .map(|k| k.holder.as_str().to_owned())
        .collect();
    (names.into(), holders.into())
}

/// The names, ticks and holders of `requests`, as a take's first three arrays.
fn request_arrays(requests: &[TakeRequest]) -> (Vec<String>, Vec<DateTime<Utc>>, Vec<String>) {
    let names = requests
        .iter()
        .map(|r| r.name.as_str().to_owned())
        .collect();
    let ticks = requests.iter().map(|r| r.tick.at()).collect();
    let holders = requests
        .iter()
        .map(|r| r.holder.as_str().to_owned())
        .collect();
    (names, ticks, holders)
}

#[async_trait]
impl Store for PostgresStore {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        ensure_unique(requests.iter().map(|r| &r.name))?;
        if requests.is_empty() {
            return Ok(Taken::default());
        }
        // The instance's own traffic: the listener checks its connection now if due.
        self.watch.took();
        if let Some(known) = self.pauses.known() {
            let (names, ticks, holders) = request_arrays(requests);
            // The pauses decided here, as of the version the statement checks.
            let paused: Vec<bool> = requests
                .iter()
                .map(|r| (r.control.as_ref()).is_some_and(|k| known.paused(k, r.tick.at())))
                .collect();
            let values = vec![
                names.into(),
                ticks.into(),
                holders.into(),
                ttl.as_millis().into(),
                paused.into(),
                known.version.into(),
                known.claims.0.clone().into(),
                known.claims.1.clone().into(),
            ];
            let rows = self
                .session
                .lease_query("take leases", &self.sql.take_known, values, ttl.get() / 4)
                .await?;
            let received = std::time::Instant::now();
            let Some((last, rows)) = rows.split_last() else {
                return Err(Error::BadRow {
                    operation: "take leases",
                    cause: DbErr::Custom("no version row".to_owned()),
                }
                .into());
            };
            let seen: i64 = get(last, "version", "take leases")?;
            if seen == known.version {
                return taken_from_rows(rows, Some(last), received);
            }
            // A control since: nothing was taken; ask again with the probe.
            self.pauses.stale(&self.session, Some(seen));
        } else {
            self.pauses.stale(&self.session, None);
        }
        // Built again (rare: nothing known yet, or a control since the last read).
        let (names, ticks, holders) = request_arrays(requests);
        // `''` where no pause applies: no pause names the job `''`.
        let mut caught_up = Vec::with_capacity(requests.len());
        let (jobs, nodes): (Vec<String>, Vec<String>) = requests
            .iter()
            .map(|r| {
                caught_up.push(r.control.as_ref().is_some_and(|k| k.caught_up_on_resume));
                match &r.control {
                    Some(key) => (key.job.to_string(), key.node.to_string()),
                    None => (String::new(), String::new()),
                }
            })
            .unzip();
        let values = vec![
            names.into(),
            ticks.into(),
            holders.into(),
            ttl.as_millis().into(),
            jobs.into(),
            nodes.into(),
            caught_up.into(),
        ];
        let rows = self
            .session
            .lease_query("take leases", &self.sql.take, values, ttl.get() / 4)
            .await?;
        let received = std::time::Instant::now();
        taken_from_rows(&rows, rows.last(), received)
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> scheduler_core::Result<Vec<Renewed>> {
        ensure_unique(leases.iter().map(|k| &k.name))?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (names, holders) = keys_to_values(leases);
        let values = vec![names, holders, ttl.as_millis().into()];
        let rows = self
            .session
            .lease_query("renew leases", &self.sql.renew, values, ttl.get() / 4)
            .await?;
        let renewed = rows
            .iter()
            .map(|row| {
                Ok(Renewed {
                    name: name_from_row(row, "renew leases")?,
                    expires_at: time(row, "expires_at", "renew leases")?,
                    cancel_requested: get(row, "cancel_requested", "renew leases")?,
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
            .session
            .lease_query("release leases", &self.sql.release, values, Duration::MAX)
            .await?;
        let released = rows
            .iter()
            .map(|row| name_from_row(row, "release leases"))
            .collect::<Result<_>>()?;
        Ok(released)
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> scheduler_core::Result<bool> {
        let values = vec![name.as_str().to_owned().into(), newer.at().into()];
        let rows = self
            .session
            .lease_query(
                "ask a run to stop",
                &self.sql.request_cancel,
                values,
                Duration::MAX,
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn create_missing(&self, names: &[LeaseName]) -> scheduler_core::Result<Vec<LeaseName>> {
        ensure_unique(names.iter())?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = names.iter().map(|n| n.as_str().to_owned()).collect();
        let rows = self
            .session
            .lease_query(
                "record new leases",
                &self.sql.create_missing,
                vec![names.into()],
                Duration::MAX,
            )
            .await?;
        let created = rows
            .iter()
            .map(|row| name_from_row(row, "record new leases"))
            .collect::<Result<_>>()?;
        Ok(created)
    }

    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        let rows = self
            .session
            .query("read the database clock", sql::NOW, Vec::new())
            .await?;
        let row = rows.first().ok_or_else(|| Error::BadRow {
            operation: "read the database clock",
            cause: DbErr::Custom("no row returned".to_owned()),
        })?;
        Ok(time(row, "now", "read the database clock")?)
    }

    fn controls(&self) -> Option<&dyn Controls> {
        Some(self)
    }
}
