//! [`PostgresOptions`], the URL's `pgbouncer` parameter, and [`connect_options`].

use std::sync::Arc;
use std::time::Duration;

use scheduler_migrations::TableName;
use sea_orm::sqlx::postgres::PgConnectOptions;
use sea_orm::{ConnectOptions, DbErr, RuntimeErr};

use crate::error::{Error, Result, sqlx_error};
use crate::guard::PoolGuard;
use crate::hosts::{Hosts, SessionAttrs};

/// How a [`PostgresStore`](crate::PostgresStore) connects and where it keeps its
/// leases.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The lease table, optionally schema-qualified. Default `scheduler_leases`.
    pub table: TableName,
    /// Run the migrations when the store opens. Default `true`. Without them, the
    /// store still checks at open that the lease table has every column this
    /// version needs (see [`check_schema`](Self::check_schema)).
    pub migrate: bool,
    /// With [`migrate`](Self::migrate) off, refuse to open on a lease table that
    /// lacks a column this version's statements need (a migration a later deploy
    /// step would apply, say): its renewals would fail, and every long run would lose
    /// its lease. Default `true`; an operator's tool that only reads turns it off.
    pub check_schema: bool,
    /// Let the migrations create the schema of a schema-qualified
    /// [`table`](Self::table) when it does not exist. Default `false`: a missing
    /// schema is [`Error::MissingSchema`], since a typo
    /// in it (`nosuchschema.leases`) would otherwise quietly start a lease table that
    /// no other instance uses — a second cluster running every job again.
    pub create_schema: bool,
    /// Pool size when the store opens its own pool
    /// ([`PostgresStore::connect`](crate::PostgresStore::connect)). Default 4. Lease
    /// operations borrow a connection for one statement, so a pool of one suffices for
    /// the store; the rest is for the app. Between its lease statements and clock
    /// reads the store keeps one connection out of the pool's count, and between keyed
    /// chunks up to a quarter of this (so that none goes back to the pool after each,
    /// where sqlx tests it with a round trip of its own): it may hold that many
    /// connections more than this (6 with the default 4, 11 with 8). One unused for a
    /// minute is closed when the store next needs it, instead of used.
    pub max_connections: u32,
    /// How long to wait for a connection: to the server when connecting, from the
    /// pool when running a statement. Default 5 s.
    pub connect_timeout: Duration,
    /// The URL points at a pooler in **transaction pooling** mode (PgBouncer
    /// `pool_mode = transaction`, which before 1.21 has no prepared-statement
    /// support): no statement of the store is prepared under a name. Default `false`;
    /// set by `pgbouncer=true` in the URL ([`PostgresOptions::for_url`]). See
    /// [`PostgresStore`](crate::PostgresStore)'s "Behind PgBouncer".
    pub transaction_pooling: bool,
    /// How long a transaction the store opens may sit idle, waiting for its client,
    /// before the server ends the session (`SET LOCAL
    /// idle_in_transaction_session_timeout`). Default 10 s. A client paused (a GC
    /// pause, SIGSTOP, a cut network) between a
    /// [`fenced`](crate::PostgresStore::fenced) transaction's last check and its
    /// `COMMIT`, inside a [`Keyed`](crate::Keyed) chunk, or between a statement and
    /// its `COMMIT` behind PgBouncer, would otherwise keep its row or advisory locks
    /// and hold up other instances; the ended session rolls back, so nothing
    /// half-done commits. Keep fenced and keyed work below it between statements.
    pub idle_transaction_timeout: Duration,
    /// The server-side bound on every lease statement (`statement_timeout`, lock
    /// waits included), at most a quarter of the lease ttl for takes and renewals.
    /// Default 2 s. A statement held up by a lock (`LOCK TABLE`, `VACUUM FULL`, a
    /// migration) fails after it instead of committing long after the runtime stopped
    /// waiting, and its connection goes back to the pool. Keep it below the runtime's
    /// store call limit (two renewal intervals, 1–30 s).
    ///
    /// On a pool [`PostgresStore::connect`](crate::PostgresStore::connect) opens
    /// directly on PostgreSQL, it is every connection's `statement_timeout`: a lease
    /// statement bounded by it runs alone, in one round trip (a tighter bound, a quarter
    /// of a short ttl, still gets a transaction of its own that sets it). Other
    /// statements on that pool outside a transaction are bound by it as well; the
    /// transactions of [`PostgresStore::begin`](crate::PostgresStore::begin) are not.
    pub statement_timeout: Duration,
    /// Where the controls listener connects, instead of the store's own URL: a URL
    /// straight to the same PostgreSQL database (or through a pooler in session mode).
    /// Behind a transaction pooler ([`transaction_pooling`](Self::transaction_pooling))
    /// `LISTEN` is not kept between transactions, so without it those instances poll
    /// the controls every `control_poll` (5 s by default); with it they hear each
    /// control as it is made and send nothing between their ticks, like instances
    /// connected directly. It holds one connection per store while a scheduler runs.
    ///
    /// Each connection the listener opens is first verified: a notification the
    /// store sends through its own pool must reach it within 10 s. If it does not (a
    /// URL to another database or server, which would hear nothing), the connection
    /// is dropped with a warning and tried again later, and meanwhile the controls
    /// are polled. Default `None`.
    pub listen_url: Option<String>,
    /// The shortest `every` period a dynamic schedule put to this store may have
    /// ([`Controls::put_schedule`](scheduler_core::Controls::put_schedule) refuses a
    /// shorter one, whoever puts it: the app, the CLI, the dashboard). Default 1 s
    /// ([`DEFAULT_MIN_SCHEDULE_PERIOD`](scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD)):
    /// a shorter one is most often a typo (`every 1ms` for `every 1m`). Lower it for
    /// jobs meant to run more often. Rows already stored run as they are.
    pub min_schedule_period: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            migrate: true,
            check_schema: true,
            create_schema: false,
            max_connections: 4,
            connect_timeout: Duration::from_secs(5),
            transaction_pooling: false,
            idle_transaction_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(2),
            listen_url: None,
            min_schedule_period: scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD,
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

    /// Whether a store opened without migrations checks that every migration it
    /// needs was applied; see [`PostgresOptions::check_schema`].
    pub fn check_schema(mut self, check: bool) -> Self {
        self.check_schema = check;
        self
    }

    /// Whether the migrations may create a missing schema of the lease table; see
    /// [`PostgresOptions::create_schema`].
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = create;
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

    /// Where the controls listener connects; see [`PostgresOptions::listen_url`]. The
    /// URL is checked when the store opens.
    pub fn listen_url(mut self, url: &str) -> Self {
        self.listen_url = Some(url.to_owned());
        self
    }

    /// The shortest `every` period a dynamic schedule put may have (see
    /// [`Self::min_schedule_period`](field@Self::min_schedule_period)).
    pub fn min_schedule_period(mut self, period: Duration) -> Self {
        self.min_schedule_period = period;
        self
    }

    /// The defaults, with [`transaction_pooling`](Self::transaction_pooling) on when
    /// `url` carries `pgbouncer=true` (the convention Prisma uses too).
    pub fn for_url(url: &str) -> Self {
        Self::default().with_url(url).0
    }

    /// Folds `url`'s `pgbouncer` parameter into these options: them with transaction
    /// pooling on as well when it says `true`, and the URL without it. The only place
    /// the URL has a say in the pooling mode, which [`Pooling::of`] then reads.
    pub(crate) fn with_url(mut self, url: &str) -> (Self, String) {
        let (url, pgbouncer) = pgbouncer_param(url);
        self.transaction_pooling |= pgbouncer;
        (self, url)
    }
}

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

    /// The `statement_timeout` every connection of a pool the store creates for
    /// itself carries (a `SET` once per connection, when it is opened): directly on
    /// PostgreSQL only. Behind a transaction pooler a session setting would land on
    /// whichever server connection the pooler handed out, so there it is `None`.
    ///
    /// It is a session setting, not a startup parameter, so that `SET LOCAL
    /// statement_timeout TO DEFAULT` (in [`Session::begin`](crate::session::Session::begin)) gives a transaction the
    /// server's own default back.
    pub(crate) fn bound_connections(self, timeout: Duration) -> Option<Duration> {
        (self == Pooling::Direct).then(|| Duration::from_millis(millis(timeout)))
    }
}

/// A bound in whole milliseconds as PostgreSQL's timeouts take it: at least 1 (0 would
/// turn the bound off), at most `i32::MAX`.
pub(crate) fn millis(bound: Duration) -> u64 {
    let ms = bound.as_millis().clamp(1, i32::MAX.unsigned_abs().into());
    u64::try_from(ms).unwrap_or(i32::MAX.unsigned_abs().into())
}

/// The sea-orm pool options [`PostgresStore::connect`](crate::PostgresStore::connect)
/// uses for `url`: `options`' pool size and timeouts; with transaction pooling (in
/// `options` or `pgbouncer=true` in the URL) the `pgbouncer` parameter is taken out of
/// the URL and sqlx's statement cache is switched off. Use it to build an app pool to
/// pass to [`PostgresStore::open`](crate::PostgresStore::open) behind PgBouncer.
/// (`connect` also gives its connections the lease bound as their
/// `statement_timeout`, directly on PostgreSQL; these options do not.)
///
/// A connection is not pinged before it is handed out (sea-orm's default would add a
/// round trip to every statement): a statement on a connection the server or a
/// network device closed fails instead, the driver drops that connection, and the
/// runtime asks again, as it does after any failed call. Connections idle for a
/// minute are closed, so few are left to go stale behind a load balancer or firewall
/// that cuts idle connections, and sqlx replaces each after 30 minutes.
///
/// A URL may list several hosts, as libpq reads it (`postgres://u@h1:p1,h2:p2/db`, or
/// `?host=h1,h2&port=p1,p2`), with `target_session_attrs=any|read-write|primary`,
/// `load_balance_hosts=random` and `connect_timeout` (seconds, per host). The pool
/// opens on the first host listed, without trying it
/// ([`PostgresStore::connect`](crate::PostgresStore::connect) tries each in turn and
/// opens on the first that suits, and aims its pool at another when its host goes
/// down). With `read-write` or `primary`, each new connection is checked by one
/// statement, and one to a server that does not suit is replaced by one to the first
/// host that does.
///
/// # Errors
/// [`Error::InvalidUrl`] if the URL does not parse, or lists hosts it cannot pair
/// with its ports, or asks for another `target_session_attrs`.
pub fn connect_options(url: &str, options: &PostgresOptions) -> Result<ConnectOptions> {
    let (options, url) = options.clone().with_url(url);
    let hosts = parse_url(&url, &options)?;
    Ok(pool_options(
        &url,
        &options,
        hosts.map(Arc::new),
        0,
        None,
        None,
    ))
}

/// The hosts `url` lists ([`Hosts`]), or `None` for a URL of one server that sqlx
/// reads as it is; checked either way.
pub(crate) fn parse_url(url: &str, options: &PostgresOptions) -> Result<Option<Hosts>> {
    check_scheme(url)?;
    let hosts = Hosts::parse(url, options.connect_timeout)?;
    if hosts.is_none() {
        check_url(url)?;
    }
    Ok(hosts)
}

/// [`connect_options`] of a checked `url`: on `hosts`' host `start` when it lists
/// several, each new connection checked when `target_session_attrs` asks; with
/// `bound`, each given it as its `statement_timeout`; with `guard`, each checked by
/// it before it is handed out ([`PoolGuard::before_acquire`]).
pub(crate) fn pool_options(
    url: &str,
    options: &PostgresOptions,
    hosts: Option<Arc<Hosts>>,
    start: usize,
    bound: Option<Duration>,
    guard: Option<Arc<PoolGuard>>,
) -> ConnectOptions {
    let mut connect = ConnectOptions::new(hosts.as_ref().map_or(url, |h| &h.base_url));
    connect
        .max_connections(options.max_connections)
        .min_connections(0)
        .connect_timeout(options.connect_timeout)
        .acquire_timeout(options.connect_timeout)
        .test_before_acquire(false)
        .idle_timeout(IDLE_TIMEOUT)
        .sqlx_logging(false);
    // sea-orm keeps one function of each kind: each is installed once, doing it all.
    let no_cache = Pooling::of(options) == Pooling::Transaction;
    if no_cache || hosts.is_some() {
        let hosts = hosts.clone();
        connect.map_sqlx_postgres_opts(move |o| {
            // sqlx names every statement it prepares; with the cache off each gets a
            // fresh name (never reused on another server connection), and transactions
            // opened by the store start with `DEALLOCATE ALL` so the names of other
            // clients' statements left on a server connection cannot clash.
            let o = if no_cache {
                o.statement_cache_capacity(0)
            } else {
                o
            };
            match &hosts {
                Some(hosts) => hosts.aim(start, o),
                None => o,
            }
        });
    }
    let check = hosts.filter(|h| h.attrs != SessionAttrs::Any);
    // `SET` takes no parameters; this is an integer, not text.
    let set = bound.map(|bound| {
        let bound_ms = millis(bound);
        format!("SET statement_timeout = {bound_ms}")
    });
    if check.is_some() || set.is_some() || guard.is_some() {
        connect.map_sqlx_postgres_pool_opts(move |pool| {
            let pool = match guard.clone() {
                Some(guard) => pool.before_acquire(move |conn, meta| {
                    let guard = guard.clone();
                    Box::pin(async move { guard.before_acquire(conn, meta).await })
                }),
                None => pool,
            };
            let (check, set) = (check.clone(), set.clone());
            pool.after_connect(move |conn, _| {
                let (check, set) = (check.clone(), set.clone());
                Box::pin(async move {
                    use sea_orm::sqlx::Executor;
                    if let Some(hosts) = check {
                        hosts.after_connect(conn).await?;
                    }
                    if let Some(set) = set {
                        let set = sea_orm::sqlx::AssertSqlSafe(set);
                        conn.execute(sea_orm::sqlx::raw_sql(set)).await?;
                    }
                    Ok(())
                })
            })
        });
    }
    connect
}

/// The connect options of [`PostgresOptions::listen_url`], if set: named after the
/// store pool's `application_name` when the URL gives none.
///
/// # Errors
/// [`Error::InvalidUrl`] if the URL does not parse, or says `pgbouncer=true` (a
/// transaction pooler cannot keep a `LISTEN`).
pub(crate) fn listen_options(
    options: &PostgresOptions,
    pool: &PgConnectOptions,
) -> Result<Option<PgConnectOptions>> {
    use std::str::FromStr;
    let Some(url) = &options.listen_url else {
        return Ok(None);
    };
    let invalid = |reason: String| Error::InvalidUrl {
        reason: format!("listen_url: {reason}"),
    };
    let (url, pgbouncer) = pgbouncer_param(url);
    if pgbouncer {
        return Err(invalid(
            "it says pgbouncer=true, but a transaction pooler does not keep a LISTEN \
             between transactions: give a URL straight to PostgreSQL"
                .to_owned(),
        ));
    }
    check_url(&url).map_err(|e| match e {
        Error::InvalidUrl { reason } => invalid(reason),
        other => other,
    })?;
    let listen = PgConnectOptions::from_str(&url).map_err(|e| invalid(e.to_string()))?;
    Ok(Some(
        match (listen.get_application_name(), pool.get_application_name()) {
            (None, Some(app)) => {
                let app = app.to_owned();
                listen.application_name(&app)
            }
            _ => listen,
        },
    ))
}

/// The error of a pool that could not connect to `url`, saying why.
///
/// sqlx's pool retries a refused or unreachable server until its timeout, then
/// reports only `pool timed out while waiting for an open connection`; the cause
/// (connection refused, an unknown host, a wrong password) is lost. When that is
/// all the pool says, one direct connection is tried, within `timeout`, and its
/// error is reported instead.
pub(crate) async fn connect_failed(url: &str, timeout: Duration, cause: DbErr) -> Error {
    use std::str::FromStr;

    use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection};
    use sea_orm::sqlx::{Connection, Error as SqlxError};

    let Ok(target) = PgConnectOptions::from_str(url) else {
        return Error::connect(cause);
    };
    let server = Some(format!("{}:{}", target.get_host(), target.get_port()));
    let timed_out = matches!(sqlx_error(&cause), Some(SqlxError::PoolTimedOut));
    if !timed_out {
        return Error::Connect { server, cause };
    }
    let cause = match tokio::time::timeout(timeout, PgConnection::connect_with(&target)).await {
        Ok(Err(real)) => DbErr::Conn(RuntimeErr::SqlxError(std::sync::Arc::new(real))),
        Err(_) => DbErr::Custom(format!("no answer within {timeout:?}")),
        // Up again by now: what the pool met stays the answer.
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            cause
        }
    };
    Error::Connect { server, cause }
}

/// How long a connection of a pool built with [`connect_options`] may sit idle before
/// the pool closes it: well below the idle cut of common load balancers (4–10
/// minutes), and longer than the runtime's renewal interval at the default ttl, so
/// the connection the leases use stays open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Rejects a URL of another scheme.
fn check_scheme(url: &str) -> Result<()> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(())
    } else {
        Err(Error::InvalidUrl {
            reason: "it must start with postgres:// or postgresql://".to_owned(),
        })
    }
}

/// Rejects what does not parse as a PostgreSQL URL, or names no database, before any
/// connection is tried.
fn check_url(url: &str) -> Result<()> {
    use std::str::FromStr;
    check_scheme(url)?;
    let options = sea_orm::sqlx::postgres::PgConnectOptions::from_str(url).map_err(|e| {
        Error::InvalidUrl {
            reason: e.to_string(),
        }
    })?;
    crate::hosts::check_database(&options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pgbouncer_parameter_is_read_and_taken_out() {
        let plain = "postgres://app@db/app";
        assert_eq!(pgbouncer_param(plain), (plain.to_owned(), false));
        assert_eq!(
            pgbouncer_param("postgres://app@db/app?pgbouncer=true"),
            (plain.to_owned(), true)
        );
        assert_eq!(
            pgbouncer_param("postgres://app@db/app?sslmode=disable&pgbouncer=1"),
            ("postgres://app@db/app?sslmode=disable".to_owned(), true)
        );
        assert_eq!(
            pgbouncer_param("postgres://app@db/app?pgbouncer=false&application_name=x"),
            ("postgres://app@db/app?application_name=x".to_owned(), false)
        );
        assert!(PostgresOptions::for_url("postgres://h/d?pgbouncer=TRUE").transaction_pooling);
        assert!(!PostgresOptions::for_url(plain).transaction_pooling);
        // The options' own setting stays on whatever the URL says.
        let (options, _) = PostgresOptions::default()
            .transaction_pooling(true)
            .with_url(plain);
        assert!(options.transaction_pooling);
    }
}
