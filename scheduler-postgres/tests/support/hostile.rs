//! What the hostile-input tests (`hostile_names.rs`, `missing_grants.rs`,
//! `read_only_server.rs`, `altered_lease_table.rs`) share: a store opened or called
//! one statement at a time, the tests' own connection for set-up and inspection (to
//! the server itself, never through PgBouncer), a job that records the lease names
//! it is handed, and a subscriber that keeps the warnings and errors logged.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::DateTime;
use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseKey, LeaseName, Schedule, Scope, Store, TakeRequest,
    Tick, Ttl,
};
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};

/// The one migration there is, as its errors name it.
pub const CREATE_LEASES: &str = "m20261130_000001_create_leases";

pub async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresStore, Error> {
    PostgresStore::connect(url, options.connect_timeout(Duration::from_secs(10))).await
}

pub async fn store(url: &str) -> PostgresStore {
    store_with(url, PostgresOptions::default()).await
}

pub async fn store_with(url: &str, options: PostgresOptions) -> PostgresStore {
    connect(url, options).await.expect("connect and migrate")
}

/// A connection for the test's own set-up and inspection statements, as the server's
/// superuser: to the server itself, never through PgBouncer (`direct_url` maps a
/// PgBouncer URL of this process back to the server's, and leaves others alone).
/// sea-orm prepares named statements, which transaction pooling breaks; the store's
/// own connection would also hide what the store does from what the test does.
pub async fn admin(url: &str) -> DatabaseConnection {
    let mut options = ConnectOptions::new(test_postgres::direct_url(url));
    options.max_connections(2).sqlx_logging(false);
    Database::connect(options).await.expect("admin connection")
}

/// Runs `sql` (several statements allowed) on `conn`.
pub async fn exec(conn: &DatabaseConnection, sql: &str) {
    conn.execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The rows of a one-column text query.
pub async fn strings(conn: &DatabaseConnection, sql: &str) -> Vec<Option<String>> {
    conn.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.try_get_by_index::<Option<String>>(0).expect("text"))
        .collect()
}

/// Whether `table` exists, as `to_regclass` sees it.
pub async fn exists(conn: &DatabaseConnection, table: &str) -> bool {
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT to_regclass($1) IS NOT NULL AS present",
            [table.into()],
        ))
        .await
        .expect("to_regclass")
        .expect("row");
    row.try_get("", "present").expect("present")
}

/// The store error inside a `scheduler_core::Error` (what the `Store` trait returns).
pub fn pg(err: &scheduler_core::Error) -> &Error {
    match err {
        scheduler_core::Error::Store { cause, .. } => cause
            .downcast_ref::<Error>()
            .unwrap_or_else(|| panic!("not a scheduler_postgres::Error: {cause}")),
        other => panic!("not a store error: {other}"),
    }
}

pub fn name(text: &str) -> LeaseName {
    LeaseName::new(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

pub fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).expect("ttl")
}

/// A whole second of the store's clock, `offset` seconds from now.
pub async fn tick(store: &PostgresStore, offset: i64) -> Tick {
    let now = store.now().await.expect("now");
    let second = DateTime::from_timestamp(now.timestamp() + offset, 0).expect("in range");
    Tick::new(second)
}

pub async fn take(
    store: &PostgresStore,
    names: &[&str],
    tick: Tick,
) -> scheduler_core::Result<Vec<LeaseKey>> {
    let requests: Vec<_> = names
        .iter()
        .map(|n| TakeRequest::new(name(n), tick))
        .collect();
    let taken = store.take(&requests, ttl()).await?;
    Ok(taken.won.iter().map(|l| l.key()).collect())
}

/// A job that records the lease name each of its runs was handed.
pub struct Named {
    pub name: String,
    pub scope: Scope,
    pub work: Duration,
    pub seen: Arc<Mutex<BTreeSet<String>>>,
}

impl Named {
    pub fn new(name: &str, seen: &Arc<Mutex<BTreeSet<String>>>) -> Self {
        Self {
            name: name.to_owned(),
            scope: Scope::Cluster,
            work: Duration::from_millis(700),
            seen: seen.clone(),
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Named {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        self.seen.lock().unwrap().insert(ctx.lease().to_string());
        // Long enough for the lease to be renewed (every ttl/4) while it runs.
        tokio::time::sleep(self.work).await;
        Ok(())
    }
}

/// A tracing subscriber that keeps every warning and error, as `field=value` text.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn find(&self, needle: &str) -> Option<String> {
        self.lines().into_iter().find(|l| l.contains(needle))
    }
}

struct Line<'a>(&'a mut String);

impl tracing::field::Visit for Line<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Logs {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} ", event.metadata().level());
        event.record(&mut Line(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
