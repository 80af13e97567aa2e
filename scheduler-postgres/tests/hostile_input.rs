//! Bad and hostile input: names that look like SQL, quotes, Unicode and names at and
//! over the length limit, through the whole runtime; a database user without the
//! rights to migrate; a read-only server (a real hot standby, and a database whose
//! transactions are read-only by default); a lease table altered by hand. Each gets a
//! clear error naming what to do, never a panic. And a scan of the store's source
//! showing that SQL only ever has identifiers spliced in, values being bound.
//!
//! `pgbouncer.rs` runs these tests again through PgBouncer in transaction pooling
//! mode: the stores under test connect to `db.url()`, while the tests' own set-up and
//! inspection statements go to the server directly (`admin`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::DateTime;
use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseKey, LeaseName, Outcome, Release, Schedule, Scheduler,
    Scope, Store, TakeRequest, Tick, Ttl,
};
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use test_postgres::{TestDb, TestServer};
use tokio::sync::oneshot;
use tracing::instrument::WithSubscriber;

/// The one migration there is, as its errors name it.
const CREATE_LEASES: &str = "m20261130_000001_create_leases";

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresStore, Error> {
    PostgresStore::connect(url, options.connect_timeout(Duration::from_secs(10))).await
}

async fn store(url: &str) -> PostgresStore {
    store_with(url, PostgresOptions::default()).await
}

async fn store_with(url: &str, options: PostgresOptions) -> PostgresStore {
    connect(url, options).await.expect("connect and migrate")
}

/// A connection for the test's own set-up and inspection statements, as the server's
/// superuser: to the server itself, never through PgBouncer (`direct_url` maps a
/// PgBouncer URL of this process back to the server's, and leaves others alone).
/// sea-orm prepares named statements, which transaction pooling breaks; the store's
/// own connection would also hide what the store does from what the test does.
async fn admin(url: &str) -> DatabaseConnection {
    let mut options = ConnectOptions::new(test_postgres::direct_url(url));
    options.max_connections(2).sqlx_logging(false);
    Database::connect(options).await.expect("admin connection")
}

/// Runs `sql` (several statements allowed) on `conn`.
async fn exec(conn: &DatabaseConnection, sql: &str) {
    conn.execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The rows of a one-column text query.
async fn strings(conn: &DatabaseConnection, sql: &str) -> Vec<Option<String>> {
    conn.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.try_get_by_index::<Option<String>>(0).expect("text"))
        .collect()
}

/// Whether `table` exists, as `to_regclass` sees it.
async fn exists(conn: &DatabaseConnection, table: &str) -> bool {
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

/// `url` with its user (and password) replaced.
fn as_user(url: &str, user: &str, password: &str) -> String {
    let start = url.find("://").expect("scheme") + 3;
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let host = match url[start..end].rfind('@') {
        Some(at) => &url[start + at + 1..end],
        None => &url[start..end],
    };
    format!("{}{user}:{password}@{host}{}", &url[..start], &url[end..])
}

/// The database name at the end of a URL.
fn database_of(url: &str) -> &str {
    let path = url.rsplit('/').next().expect("path");
    path.split('?').next().expect("name")
}

/// The store error inside a `scheduler_core::Error` (what the `Store` trait returns).
fn pg(err: &scheduler_core::Error) -> &Error {
    match err {
        scheduler_core::Error::Store { source } => source
            .downcast_ref::<Error>()
            .unwrap_or_else(|| panic!("not a scheduler_postgres::Error: {source}")),
        other => panic!("not a store error: {other}"),
    }
}

fn name(text: &str) -> LeaseName {
    LeaseName::new(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).expect("ttl")
}

/// A whole second of the store's clock, `offset` seconds from now.
async fn tick(store: &PostgresStore, offset: i64) -> Tick {
    let now = store.now().await.expect("now");
    let second = DateTime::from_timestamp(now.timestamp() + offset, 0).expect("in range");
    Tick::new(second)
}

async fn take(
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

/// Waits until `probe` holds, polling, for at most `limit`.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !probe().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a logged failure is a store call the loop gave up waiting for (the runtime's
/// call limit), rather than an error the store answered with.
fn abandoned(line: &str) -> bool {
    line.contains("did not answer") || line.contains("has not answered")
}

/// Polls the readiness probe until `ready` holds for its report, for at most `limit`;
/// returns that report.
async fn probe_until(
    health: &scheduler_core::Health,
    limit: Duration,
    what: &str,
    ready: impl Fn(&scheduler_core::HealthReport) -> bool,
) -> scheduler_core::HealthReport {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let report = health.check(limit).await;
        if ready(&report) {
            return report;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A job that records the lease name each of its runs was handed.
struct Named {
    name: String,
    scope: Scope,
    work: Duration,
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl Named {
    fn new(name: &str, seen: &Arc<Mutex<BTreeSet<String>>>) -> Self {
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
struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn find(&self, needle: &str) -> Option<String> {
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

// ---------------------------------------------------------------------------------
// 1. Names
// ---------------------------------------------------------------------------------

/// Names a careless store would splice into SQL, or mangle.
fn hostile_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "it's",
        "say \"hi\"",
        "back\\slash\\",
        "'; DROP TABLE scheduler_leases; --",
        "\"; DROP TABLE scheduler_leases; --",
        "$1",
        "$1::text); DELETE FROM scheduler_leases; --",
        "%s %d {} {0} ?",
        "/* comment */ -- comment",
        " ",
        "  ",
        "🦀 job 👨‍👩‍👧 (ZWJ family)",
        "مرحبا שלום (right to left)",
        "\u{202e}override right to left",
        // The same letter, composed and decomposed: two distinct names.
        "caf\u{e9}",
        "cafe\u{301}",
        "z\u{335}\u{30d}\u{34e}a\u{336}\u{33f}l\u{337}\u{352}go",
        "\u{feff}zero width no-break space\u{200b}",
    ]
    .map(str::to_owned)
    .to_vec();
    // Exactly 200 bytes: ASCII, two-byte and four-byte characters.
    names.push("x".repeat(200));
    names.push("ä".repeat(100));
    names.push("🦀".repeat(50));
    names.push(format!("'{}'", "\"".repeat(198)));
    for n in &names {
        assert!(n.len() <= LeaseName::MAX_LEN, "{n:?}");
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_job_names_run_and_are_stored_byte_for_byte() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let names = hostile_names();
    let node = "node '\"; DROP TABLE scheduler_leases; --";
    let per_node = "per-node job 'quoted'";
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut builder = Scheduler::builder(store.clone())
        .node_id(node)
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(500));
    for n in &names {
        builder = builder.job(Named::new(n, &seen));
    }
    builder = builder.job(Named {
        scope: Scope::Node,
        ..Named::new(per_node, &seen)
    });
    let scheduler = builder.build().expect("hostile but valid names build");
    let stats = scheduler.stats();
    let logs = Logs::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(
        scheduler
            .run_until(async move {
                let _ = stopped.await;
            })
            .with_subscriber(logs.clone()),
    );
    let mut jobs = names.clone();
    jobs.push(per_node.to_owned());
    wait_for(Duration::from_secs(60), "every job to run twice", || {
        let done = jobs.iter().all(|j| stats.count(j, Outcome::Ran) >= 2);
        async move { done }
    })
    .await;
    stop.send(()).expect("scheduler running");
    run.await.expect("the scheduler does not panic");
    // No statement failed. (A store call abandoned because the store did not answer
    // in time says nothing about the names: a loaded machine makes those.)
    let failures: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("failed") && !abandoned(l))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");

    // The runs were handed, and the table holds, exactly these names, byte for byte.
    // (A lease name is the job's name, `job:node` for a node job, with `:` and `\\`
    // escaped: `LeaseName::for_job`.)
    let lease = |job: &str, scope| {
        LeaseName::for_job(job, scope, node)
            .expect("valid lease")
            .as_str()
            .to_owned()
    };
    let mut expected: BTreeSet<String> = names.iter().map(|n| lease(n, Scope::Cluster)).collect();
    expected.insert(lease(per_node, Scope::Node));
    assert_eq!(*seen.lock().unwrap(), expected);
    let conn = &admin(db.url()).await;
    let stored: BTreeSet<String> = strings(conn, "SELECT name FROM scheduler_leases")
        .await
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(stored, expected);
    // Each row was released as completed (its statement found it by the exact name).
    let open = strings(
        conn,
        "SELECT name FROM scheduler_leases WHERE released_at IS NULL",
    )
    .await;
    assert!(open.is_empty(), "unreleased: {open:?}");
    assert!(exists(conn, "scheduler_leases").await);
    assert!(exists(conn, "scheduler_leases_migrations").await);
}

#[tokio::test]
async fn hostile_names_take_renew_and_release_through_the_store() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let names = hostile_names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let t = tick(&store, 0).await;
    let keys = take(&store, &refs, t).await.expect("take");
    assert_eq!(keys.len(), names.len());
    let renewed = store.renew(&keys, ttl()).await.expect("renew");
    let renewed: BTreeSet<&str> = renewed.iter().map(|r| r.name.as_str()).collect();
    let released = store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
    let released: BTreeSet<&str> = released.iter().map(LeaseName::as_str).collect();
    let expected: BTreeSet<&str> = refs.iter().copied().collect();
    assert_eq!(renewed, expected);
    assert_eq!(released, expected);
    // Byte lengths as PostgreSQL counts them: nothing was escaped or normalised.
    let admin = admin(db.url()).await;
    for n in &names {
        let row = admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT octet_length(name) AS len FROM scheduler_leases WHERE name = $1",
                [n.as_str().into()],
            ))
            .await
            .expect("query")
            .unwrap_or_else(|| panic!("no row for {n:?}"));
        assert_eq!(
            row.try_get::<i32>("", "len").expect("len") as usize,
            n.len(),
            "{n:?}"
        );
    }
}

#[tokio::test]
async fn names_over_the_limit_or_with_control_characters_are_refused_by_build() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let too_long = "a name must be at most 200 bytes long";
    let control = "a name must not contain control characters (NUL, newline, tab, …)";
    let cases = [
        ("x".repeat(201), too_long),
        // 199 ASCII bytes and a two-byte character: 201 bytes, 200 characters.
        (format!("{}é", "x".repeat(199)), too_long),
        ("🦀".repeat(51), too_long),
        (String::new(), "a name must not be empty"),
        ("nul\0byte".to_owned(), control),
        ("new\nline".to_owned(), control),
        ("tab\there".to_owned(), control),
        ("escape \u{1b}[31m red".to_owned(), control),
        ("delete \u{7f}".to_owned(), control),
        ("next line \u{85}".to_owned(), control),
    ];
    for (job, reason) in &cases {
        let err = Scheduler::builder(store.clone())
            .node_id("node-a")
            .job(Named::new(job, &seen))
            .build()
            .err();
        let Some(err @ scheduler_core::Error::InvalidName { .. }) = err else {
            panic!("{job:?} was not refused: {err:?}");
        };
        let shown: String = job.chars().take(64).collect();
        assert_eq!(err.to_string(), format!("invalid name {shown:?}: {reason}"));
        let err = LeaseName::new(job.clone()).expect_err("refused as a lease name too");
        assert_eq!(err.to_string(), format!("invalid name {shown:?}: {reason}"));
    }
    // A node job's lease is `job:node`: a name that fits alone can be too long with it.
    let err = Scheduler::builder(store.clone())
        .node_id("node-a")
        .job(Named {
            scope: Scope::Node,
            ..Named::new(&"n".repeat(195), &seen)
        })
        .build()
        .expect_err("refused");
    assert!(err.to_string().ends_with(too_long), "{err}");
    // And a node id is checked like a name.
    let err = Scheduler::builder(store.clone())
        .node_id("node\0a")
        .job(Named::new("fine", &seen))
        .build()
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!("invalid name \"node\\0a\": {control}")
    );
    // Nothing reached the database.
    assert!(
        strings(&admin(db.url()).await, "SELECT name FROM scheduler_leases")
            .await
            .is_empty()
    );
}

#[test]
fn hostile_table_names_are_refused_before_any_sql() {
    let cases = [
        (
            "x\"; drop",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "leases; DROP TABLE x",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "Leases",
            "a name part must start with a lowercase letter or `_`",
        ),
        (
            "lease's",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "ünïcode",
            "a name part must start with a lowercase letter or `_`",
        ),
        (
            "a.b.c",
            "use `table` or `schema.table`, with at most one dot",
        ),
        ("", "a name part must not be empty"),
        ("public.", "a name part must not be empty"),
        (
            "x\0",
            "a name part may only use lowercase letters, digits and `_`",
        ),
    ];
    for (table, reason) in cases {
        let err = PostgresOptions::default().table(table).err();
        let Some(err @ Error::InvalidTableName(_)) = err else {
            panic!("{table:?} was accepted: {err:?}");
        };
        assert_eq!(
            err.to_string(),
            format!("invalid table name {table:?}: {reason}")
        );
    }
    let long = "a".repeat(53);
    let err = PostgresOptions::default()
        .table(&long)
        .expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("the table part must be at most 52 characters long")
    );
}

// ---------------------------------------------------------------------------------
// 2. Rights
// ---------------------------------------------------------------------------------

const WEAK_PASSWORD: &str = "weak-password";

/// A role that may only log in and connect to `db` (PostgreSQL 15 no longer lets
/// PUBLIC create in schema `public`; older servers are made to match).
async fn weak_role(admin: &DatabaseConnection, db: &TestDb) -> (String, String) {
    let role = format!("weak_{}", db.name());
    let database = db.name();
    exec(
        admin,
        &format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{WEAK_PASSWORD}';
             REVOKE ALL ON DATABASE {database} FROM PUBLIC;
             GRANT CONNECT ON DATABASE {database} TO {role};
             REVOKE CREATE ON SCHEMA public FROM PUBLIC"
        ),
    )
    .await;
    let url = as_user(db.url(), &role, WEAK_PASSWORD);
    (role, url)
}

#[tokio::test]
async fn a_user_without_create_rights_is_told_which_grant_each_migration_needs() {
    let db = TestDb::new().await;
    let admin = admin(db.url()).await;
    let (role, weak) = weak_role(&admin, &db).await;
    let database = db.name();

    // A fresh database: the migration needs CREATE on schema public.
    let err = connect(&weak, PostgresOptions::default()).await.err();
    let Some(Error::Migrate { migration, .. }) = &err else {
        panic!("expected a migration error: {err:?}");
    };
    assert_eq!(migration, CREATE_LEASES);
    let msg = err.as_ref().unwrap().to_string();
    assert!(
        msg.starts_with(&format!("migration {CREATE_LEASES} failed: ")),
        "{msg}"
    );
    assert!(msg.contains("permission denied for schema public"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema public: GRANT CREATE ON SCHEMA public TO {role}; \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on public: {msg}");
    // Nothing was left behind (one transaction).
    assert!(!exists(&admin, "scheduler_leases_migrations").await);
    assert!(!exists(&admin, "scheduler_leases").await);

    // A schema-qualified table whose schema does not exist: CREATE on the database, to create it.
    let options = PostgresOptions::default()
        .table("weak_app.leases")
        .expect("name");
    let err = connect(&weak, options).await.expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == CREATE_LEASES),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("permission denied for database {database}")),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema weak_app (GRANT CREATE ON SCHEMA weak_app TO {role}) \
             or, while schema weak_app does not exist, CREATE on database {database} to create it \
             (GRANT CREATE ON DATABASE {database} TO {role}); \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on the database: {msg}");

    // A privileged user migrates and grants only what the lease statements need.
    drop(store(db.url()).await);
    exec(
        &admin,
        &format!("GRANT SELECT, INSERT, UPDATE ON scheduler_leases TO {role}"),
    )
    .await;
    let weak_store = connect(&weak, PostgresOptions::default().migrate(false))
        .await
        .expect("opens without migrating");
    let t = tick(&weak_store, 0).await;
    let keys = take(&weak_store, &["weak job"], t).await.expect("take");
    assert_eq!(keys.len(), 1);
    assert_eq!(
        weak_store.renew(&keys, ttl()).await.expect("renew").len(),
        1
    );
    assert_eq!(
        weak_store
            .release(&keys, Release::Completed)
            .await
            .expect("release")
            .len(),
        1
    );

    // Opening with migrate(true) when nothing is pending needs no CREATE, only to
    // read the bookkeeping table.
    let err = connect(&weak, PostgresOptions::default())
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == "setup"),
        "{msg}"
    );
    assert!(
        msg.contains("permission denied for table scheduler_leases_migrations"),
        "{msg}"
    );
    assert!(
        msg.ends_with(&format!(
            "; finding the pending migrations needs SELECT on scheduler_leases_migrations: \
             GRANT SELECT ON scheduler_leases_migrations TO {role}; or open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no SELECT on the bookkeeping table: {msg}");
    exec(
        &admin,
        &format!("GRANT SELECT ON scheduler_leases_migrations TO {role}"),
    )
    .await;
    let migrated = connect(&weak, PostgresOptions::default())
        .await
        .expect("a fully migrated database needs no CREATE right");
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT has_schema_privilege($1, 'public', 'CREATE') AS can_create",
            [role.clone().into()],
        ))
        .await
        .expect("query")
        .expect("row");
    assert!(!row.try_get::<bool>("", "can_create").expect("bool"));

    // Without UPDATE a take (an upsert) fails, saying which rights the store needs.
    exec(
        &admin,
        &format!("REVOKE UPDATE ON scheduler_leases FROM {role}"),
    )
    .await;
    let t = tick(&migrated, 1).await;
    let err = take(&migrated, &["weak job"], t)
        .await
        .expect_err("no UPDATE");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "take leases",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("permission denied for table scheduler_leases"),
        "{msg}"
    );
    assert!(
        msg.ends_with(
            "; the database user lacks a right: it needs SELECT, INSERT and UPDATE on the lease table (and USAGE on its schema)"
        ),
        "{msg}"
    );
    println!("no UPDATE on the lease table: {msg}");

    // A table in a schema the user may not even look into.
    let locked = PostgresOptions::default()
        .table("locked.leases")
        .expect("name");
    drop(store_with(db.url(), locked.clone()).await);
    exec(
        &admin,
        &format!("GRANT SELECT, INSERT, UPDATE ON locked.leases TO {role}"),
    )
    .await;
    let err = connect(&weak, locked.clone()).await.expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("permission denied for schema locked"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; the user needs USAGE on schema locked: GRANT USAGE ON SCHEMA locked TO {role}"
        )),
        "{msg}"
    );
    println!("no USAGE on the schema: {msg}");
    let weak_locked = connect(&weak, locked.migrate(false))
        .await
        .expect("opens without migrating");
    let t = tick(&weak_locked, 0).await;
    let err = take(&weak_locked, &["job"], t).await.expect_err("no USAGE");
    let msg = err.to_string();
    assert!(msg.contains("permission denied for schema locked"), "{msg}");
    assert!(msg.ends_with("(and USAGE on its schema)"), "{msg}");
}

/// Whether `role` holds a right, as the `has_*_privilege($1, …)` call `check` says.
async fn holds(admin: &DatabaseConnection, check: &str, role: &str) -> bool {
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("SELECT {check} AS holds"),
            [role.into()],
        ))
        .await
        .expect("query")
        .expect("row");
    row.try_get("", "holds").expect("bool")
}

#[tokio::test]
async fn a_user_with_create_on_an_existing_schema_needs_no_create_on_the_database() {
    let db = TestDb::new().await;
    let admin = admin(db.url()).await;
    let (role, weak) = weak_role(&admin, &db).await;
    let database = db.name();
    exec(
        &admin,
        &format!("CREATE SCHEMA app_b; GRANT USAGE ON SCHEMA app_b TO {role}"),
    )
    .await;
    let on_database = "has_database_privilege($1, current_database(), 'CREATE')";
    let on_schema = "has_schema_privilege($1, 'app_b', 'CREATE')";
    assert!(!holds(&admin, on_database, &role).await);
    assert!(!holds(&admin, on_schema, &role).await);
    let options = PostgresOptions::default()
        .table("app_b.leases")
        .expect("name");

    // USAGE alone: the lease table cannot be created in the schema.
    let err = connect(&weak, options.clone()).await.expect_err("refused");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Migrate { migration, .. } if migration == CREATE_LEASES),
        "{msg}"
    );
    assert!(msg.contains("permission denied for schema app_b"), "{msg}");
    assert!(
        msg.ends_with(&format!(
            "; migration {CREATE_LEASES} needs CREATE on schema app_b (GRANT CREATE ON SCHEMA app_b TO {role}) \
             or, while schema app_b does not exist, CREATE on database {database} to create it \
             (GRANT CREATE ON DATABASE {database} TO {role}); \
             or run the migrations once as a user that has it and open the store with migrate(false)"
        )),
        "{msg}"
    );
    println!("no CREATE on an existing schema: {msg}");

    // With CREATE on the schema, and still none on the database, it migrates: the
    // schema exists, so nothing asks to create it.
    exec(&admin, &format!("GRANT CREATE ON SCHEMA app_b TO {role}")).await;
    assert!(holds(&admin, on_schema, &role).await);
    let migrated = connect(&weak, options)
        .await
        .expect("migrates with CREATE on the schema alone");
    assert!(!holds(&admin, on_database, &role).await);
    assert!(exists(&admin, "app_b.leases").await);
    assert!(exists(&admin, "app_b.leases_migrations").await);
    let t = tick(&migrated, 0).await;
    let keys = take(&migrated, &["weak job"], t).await.expect("take");
    assert_eq!(keys.len(), 1);
    let owner = strings(
        &admin,
        "SELECT tableowner::text FROM pg_tables WHERE schemaname = 'app_b' AND tablename = 'leases'",
    )
    .await;
    assert_eq!(owner, [Some(role.clone())]);
}

// ---------------------------------------------------------------------------------
// 3. Read-only servers
// ---------------------------------------------------------------------------------

/// Asserts that take, renew and release all fail as statements on a read-only
/// server, and that the clock still reads.
async fn assert_writes_refused(store: &PostgresStore, keys: &[LeaseKey]) {
    let t = tick(store, 2).await;
    let read_only_hint = "; the server is read-only (a hot standby or a read-only replica): point the URL at the primary";
    let err = take(store, &["read-only job"], t)
        .await
        .expect_err("take refused");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "take leases",
                ..
            }
        ),
        "{msg}"
    );
    // (PostgreSQL names the statement's top level: the take is a SELECT over an INSERT.)
    assert!(
        msg.contains("cannot execute SELECT in a read-only transaction"),
        "{msg}"
    );
    assert!(msg.ends_with(read_only_hint), "{msg}");
    println!("take on a read-only server: {msg}");
    let err = store.renew(keys, ttl()).await.expect_err("renew refused");
    let msg = err.to_string();
    assert!(
        matches!(
            pg(&err),
            Error::Statement {
                operation: "renew leases",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("in a read-only transaction"), "{msg}");
    assert!(msg.ends_with(read_only_hint), "{msg}");
    let err = store
        .release(keys, Release::Completed)
        .await
        .expect_err("release refused");
    assert!(err.to_string().ends_with(read_only_hint), "{err}");
    store
        .now()
        .await
        .expect("the clock reads on a read-only server");
}

/// A hot standby of a [`TestServer`]: `pg_basebackup -R` of the primary into a
/// directory of its own, started on another port. Like test-postgres' servers it
/// runs under a small shell that stops it and removes its directory when our end of
/// its stdin closes, however this process ends.
struct Standby {
    shell: Child,
    stdin: Option<ChildStdin>,
    dir: PathBuf,
    port: u16,
}

const STANDBY: &str = r#"
set -u
dir=$1 primary=$2 port=$3 postgres=$4 basebackup=$5
pg=
cleanup() {
    if [ -n "$pg" ]; then kill -INT "$pg" 2>/dev/null; wait "$pg"; fi
    rm -rf "$dir"
    exit 0
}
trap cleanup HUP INT TERM
if "$basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir/data" -R -X stream -c fast \
    </dev/null >>"$dir/log" 2>&1
then
    "$postgres" -D "$dir/data" -p "$port" </dev/null >>"$dir/log" 2>&1 &
    pg=$!
    echo started
else
    echo failed
fi
while read -r _; do :; done
cleanup
"#;

impl Standby {
    fn start(primary: &TestServer) -> io::Result<Standby> {
        let root = Command::new("id").arg("-u").output()?.stdout == b"0\n";
        let owner = if root {
            let id = |flag: &str| -> io::Result<u32> {
                let out = Command::new("id").args([flag, "postgres"]).output()?;
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .map_err(io::Error::other)
            };
            Some((id("-u")?, id("-g")?))
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "hostile-standby-{}-{}",
            std::process::id(),
            primary.port()
        ));
        std::fs::create_dir(&dir)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let (postgres, basebackup) = binaries()?;
        let mut command = Command::new("sh");
        command
            .args(["-c", STANDBY, "hostile-standby"])
            .arg(&dir)
            .arg(primary.port().to_string())
            .arg(port.to_string())
            .arg(postgres)
            .arg(basebackup)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = owner {
            command.uid(uid).gid(gid);
        }
        let mut shell = command.spawn()?;
        let stdin = shell.stdin.take();
        let mut reply = String::new();
        BufReader::new(shell.stdout.take().expect("stdout")).read_line(&mut reply)?;
        let standby = Standby {
            shell,
            stdin,
            dir,
            port,
        };
        if reply.trim() == "started" {
            Ok(standby)
        } else {
            Err(io::Error::other(format!(
                "pg_basebackup failed ({}):\n{}",
                reply.trim(),
                standby.log()
            )))
        }
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Waits until the standby accepts connections (it has replayed to a consistent
    /// state) and checks that it is one.
    async fn ready(&self, database: &str) -> DatabaseConnection {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let mut options = ConnectOptions::new(self.url(database));
            options
                .max_connections(1)
                .connect_timeout(Duration::from_secs(5))
                .sqlx_logging(false);
            if let Ok(conn) = Database::connect(options).await
                && conn.execute_unprepared("SELECT 1").await.is_ok()
            {
                let row = conn
                    .query_one_raw(Statement::from_string(
                        DbBackend::Postgres,
                        "SELECT pg_is_in_recovery() AS standby",
                    ))
                    .await
                    .expect("query")
                    .expect("row");
                assert!(row.try_get::<bool>("", "standby").expect("bool"));
                return conn;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the standby did not accept connections; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.shell.wait();
    }
}

/// `postgres` as test-postgres finds it (the first on PATH next to `initdb`, else
/// the newest `/usr/lib/postgresql/*/bin`), and a `pg_basebackup` of the same install
/// if there is one.
fn binaries() -> io::Result<(PathBuf, PathBuf)> {
    let has = |dir: &Path, bin: &str| dir.join(bin).is_file();
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut installs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    installs.sort();
    let installs: Vec<PathBuf> = installs.into_iter().rev().map(|(_, d)| d).collect();
    let postgres = path
        .iter()
        .chain(&installs)
        .find(|d| has(d, "initdb") && has(d, "postgres"))
        .map(|d| d.join("postgres"));
    let basebackup = postgres
        .as_deref()
        .and_then(Path::parent)
        .into_iter()
        .chain(installs.iter().map(PathBuf::as_path))
        .chain(path.iter().map(PathBuf::as_path))
        .find(|d| has(d, "pg_basebackup"))
        .map(|d| d.join("pg_basebackup"));
    match (postgres, basebackup) {
        (Some(p), Some(b)) => Ok((p, b)),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "postgres and pg_basebackup not found on PATH nor in /usr/lib/postgresql/*/bin",
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_standby_is_refused_at_open_and_its_writes_name_the_primary() {
    let primary = tokio::task::spawn_blocking(TestServer::start)
        .await
        .expect("join")
        .expect("primary");
    // One database migrated on the primary (the usual case), one not.
    let migrated_url = primary.create_database().await;
    let fresh_url = primary.create_database().await;
    let on_primary = store(&migrated_url).await;
    let t = tick(&on_primary, 0).await;
    let keys = take(&on_primary, &["replicated job"], t)
        .await
        .expect("take");
    let standby = tokio::task::spawn_blocking(move || {
        let standby = Standby::start(&primary);
        (primary, standby)
    })
    .await
    .expect("join");
    let (_primary, standby) = (standby.0, standby.1.expect("standby"));
    let migrated = database_of(&migrated_url);
    let conn = standby.ready(migrated).await;
    assert!(exists(&conn, "scheduler_leases").await, "replicated");

    let hint = "; point the URL at the primary: the store writes a lease row for every tick";
    for database in [migrated, database_of(&fresh_url)] {
        let err = connect(&standby.url(database), PostgresOptions::default())
            .await
            .expect_err("refused");
        let msg = err.to_string();
        assert!(
            matches!(&err, Error::Migrate { migration, .. } if migration == "setup"),
            "{msg}"
        );
        assert_eq!(
            msg,
            format!(
                "migration setup failed: Custom Error: the server is read-only: it is a hot standby (pg_is_in_recovery() is true){hint}"
            )
        );
        println!("open on a hot standby: {msg}");
    }
    // Without migrations it opens (nothing is written), and every write says why it fails.
    let replica = connect(
        &standby.url(migrated),
        PostgresOptions::default().migrate(false),
    )
    .await
    .expect("opens without migrating");
    assert_writes_refused(&replica, &keys).await;
}

#[tokio::test]
async fn a_database_read_only_by_default_is_refused_at_open_and_its_writes_name_the_primary() {
    let db = TestDb::new().await;
    // The default applies to sessions that start after the ALTER. Behind PgBouncer,
    // the server sessions it opened for a store would stay writable: so the lease is
    // set up on the server directly, and nothing reaches this database through
    // `db.url()` before it is read-only by default.
    let writable = store(db.direct_url()).await;
    let t = tick(&writable, 0).await;
    let keys = take(&writable, &["job"], t).await.expect("take");
    exec(
        &admin(db.url()).await,
        &format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            db.name()
        ),
    )
    .await;
    let err = connect(db.url(), PostgresOptions::default())
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "migration setup failed: Custom Error: the server is read-only: transactions are read-only by default \
         (default_transaction_read_only is on); point the URL at the primary, or turn default_transaction_read_only \
         off for this database and user"
    );
    println!("open on a read-only database: {err}");
    let read_only = connect(db.url(), PostgresOptions::default().migrate(false))
        .await
        .expect("opens without migrating");
    assert_writes_refused(&read_only, &keys).await;
}

// ---------------------------------------------------------------------------------
// 4. A lease table altered by hand
// ---------------------------------------------------------------------------------

const SHAPE_HINT: &str = "; the lease table does not have the shape the store expects: was it altered by hand? \
                          restore the columns, types and primary key the migrations create";

/// A migrated database with one lease `a` taken and one `b` released, then `alter`
/// run by hand; returns a store opened afterwards (no cached statements), the key
/// of `a`, and the tick `a` was taken for.
async fn altered(alter: &str) -> (TestDb, PostgresStore, Vec<LeaseKey>, Tick) {
    let db = TestDb::new().await;
    let before = store(db.url()).await;
    let t = tick(&before, 0).await;
    let a = take(&before, &["a"], t).await.expect("take a");
    let b = take(&before, &["b"], t).await.expect("take b");
    before
        .release(&b, Release::Completed)
        .await
        .expect("release b");
    exec(&admin(db.url()).await, alter).await;
    let after = connect(db.url(), PostgresOptions::default().migrate(false))
        .await
        .expect("open");
    (db, after, a, t)
}

fn assert_statement(err: &scheduler_core::Error, operation: &str, cause: &str, hint: &str) {
    let msg = err.to_string();
    let Error::Statement { operation: op, .. } = pg(err) else {
        panic!("expected a statement error: {msg}");
    };
    assert_eq!(*op, operation, "{msg}");
    assert!(msg.contains(cause), "{msg}");
    assert!(msg.ends_with(hint), "{msg}");
    println!("{msg}");
}

fn assert_bad_row(err: &scheduler_core::Error, operation: &str, cause: &str) {
    let msg = err.to_string();
    let Error::BadRow { operation: op, .. } = pg(err) else {
        panic!("expected a bad row error: {msg}");
    };
    assert_eq!(*op, operation, "{msg}");
    assert!(msg.contains(cause), "{msg}");
    assert!(msg.ends_with("; was the table altered by hand?"), "{msg}");
    println!("{msg}");
}

#[tokio::test]
async fn a_dropped_column_is_a_clear_statement_error() {
    let (_db, store, a, t) = altered("ALTER TABLE scheduler_leases DROP COLUMN token").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "column \"token\" of relation \"scheduler_leases\" does not exist",
        SHAPE_HINT,
    );
    // Renewal and release do not touch the token: they still work.
    assert_eq!(store.renew(&a, ttl()).await.expect("renew").len(), 1);
    assert_eq!(
        store
            .release(&a, Release::Completed)
            .await
            .expect("release")
            .len(),
        1
    );
    store.now().await.expect("now");
    // The runtime's view: a take is a statement error, however the lease stood.
    let err = take(&store, &["a"], t).await.expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "column \"token\" of relation \"scheduler_leases\" does not exist",
        SHAPE_HINT,
    );
}

#[tokio::test]
async fn a_changed_column_type_is_a_clear_error() {
    let (_db, store, a, _) = altered("ALTER TABLE scheduler_leases ALTER tick TYPE text").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "operator does not exist: text < timestamp with time zone",
        SHAPE_HINT,
    );
    assert_eq!(store.renew(&a, ttl()).await.expect("renew").len(), 1);

    let (_db, store, a, _) =
        altered("ALTER TABLE scheduler_leases ALTER expires_at TYPE text").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "operator does not exist: text <= timestamp with time zone",
        SHAPE_HINT,
    );
    // The renewal's assignment casts to text; reading the expiry back does not decode.
    let err = store.renew(&a, ttl()).await.expect_err("renew");
    assert_bad_row(&err, "renew leases", "expires_at");
    let err = store
        .release(&a, Release::Completed)
        .await
        .expect_err("release");
    assert_statement(
        &err,
        "release leases",
        "LEAST types text and timestamp with time zone cannot be matched",
        SHAPE_HINT,
    );

    // Altered under an open store, whose renewal is a cached prepared statement: its
    // result type changed, which PostgreSQL refuses to replan silently. (One
    // connection, so the renewal after the change runs where the one before cached it.)
    let db = TestDb::new().await;
    let open = store_with(db.url(), PostgresOptions::default().max_connections(1)).await;
    let a = take(&open, &["a"], tick(&open, 0).await)
        .await
        .expect("take");
    open.renew(&a, ttl()).await.expect("renew before");
    exec(
        &admin(db.url()).await,
        "ALTER TABLE scheduler_leases ALTER expires_at TYPE text",
    )
    .await;
    let err = open.renew(&a, ttl()).await.expect_err("renew after");
    if open.transaction_pooling() {
        // Behind PgBouncer the store's statements are unnamed: none is cached, so the
        // renewal is planned afresh and fails where the store reads the expiry back,
        // as it does for a store opened after the change (above).
        assert_bad_row(
            &err,
            "renew leases",
            "error occurred while decoding column \"expires_at\": mismatched types",
        );
    } else {
        assert_statement(
            &err,
            "renew leases",
            "cached plan must not change result type",
            SHAPE_HINT,
        );
    }
}

#[tokio::test]
async fn a_dropped_primary_key_is_a_clear_error() {
    let (_db, store, _, _) =
        altered("ALTER TABLE scheduler_leases DROP CONSTRAINT scheduler_leases_pkey").await;
    let err = take(&store, &["c"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        SHAPE_HINT,
    );
}

#[tokio::test]
async fn a_table_dropped_under_an_open_store_is_a_clear_error() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let t = tick(&store, 0).await;
    let a = take(&store, &["a"], t).await.expect("take");
    let admin = admin(db.url()).await;
    exec(&admin, "DROP TABLE scheduler_leases").await;
    let hint = "; the table does not exist: run the migrations (open the store with migrate(true)) \
                or check the table name and the search_path";
    let missing = "relation \"scheduler_leases\" does not exist";
    let err = take(&store, &["a"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(&err, "take leases", missing, hint);
    let err = store.renew(&a, ttl()).await.expect_err("renew");
    assert_statement(&err, "renew leases", missing, hint);
    let err = store
        .release(&a, Release::Completed)
        .await
        .expect_err("release");
    assert_statement(&err, "release leases", missing, hint);
    store
        .now()
        .await
        .expect("the clock does not need the table");

    // The bookkeeping table still says the migration was applied: opening says so.
    let err = connect(db.url(), PostgresOptions::default())
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "migration setup failed: Custom Error: the bookkeeping table scheduler_leases_migrations records \
             {CREATE_LEASES} as applied, but the lease table scheduler_leases does not exist; was it dropped by hand? \
             delete the rows of scheduler_leases_migrations (DELETE FROM scheduler_leases_migrations) to have the \
             migrations create it again"
        )
    );
    println!("{err}");
    // Doing what it says repairs it.
    exec(&admin, "DELETE FROM scheduler_leases_migrations").await;
    let repaired = connect(db.url(), PostgresOptions::default())
        .await
        .expect("migrates again");
    take(&repaired, &["a"], tick(&repaired, 2).await)
        .await
        .expect("take");
}

#[tokio::test]
async fn null_and_out_of_range_values_set_by_hand_are_bad_rows_not_panics() {
    // `a` is held (taken, not released): a take of `a` reads its row back.
    let (_db, store, _, t) = altered(
        "ALTER TABLE scheduler_leases ALTER expires_at DROP NOT NULL;
         UPDATE scheduler_leases SET expires_at = NULL WHERE name = 'a'",
    )
    .await;
    let err = take(&store, &["a"], t).await.expect_err("take");
    assert_bad_row(&err, "take leases", "expires_at");

    // PostgreSQL's timestamps reach further than chrono's (and 'infinity' further
    // still): decoding them must not overflow. A held row is only read to tell the
    // runtime when to ask again, so one set out of range by hand ("parked") reads as
    // the end or start of time and does not fail the batch it came with: the other
    // job of the batch is still taken.
    let cases = [
        ("expires_at", "infinity"),
        ("expires_at", "294000-01-01 00:00:00+00"),
        ("tick", "infinity"),
        ("tick", "-infinity"),
        ("tick", "294000-01-01 00:00:00+00"),
    ];
    for (column, value) in cases {
        let (_db, store, _, t) = altered(&format!(
            "UPDATE scheduler_leases SET {column} = '{value}' WHERE name = 'a'"
        ))
        .await;
        let won = take(&store, &["a", "fresh"], t)
            .await
            .unwrap_or_else(|e| panic!("{column} = {value}: {e}"));
        assert_eq!(won.len(), 1, "{column} = {value}: only fresh is free");
    }
    // An expiry of '-infinity' is simply expired: the take wins the lease.
    let (_db, store, _, t) =
        altered("UPDATE scheduler_leases SET expires_at = '-infinity' WHERE name = 'a'").await;
    assert_eq!(take(&store, &["a"], t).await.expect("take").len(), 1);
}

#[tokio::test]
async fn names_the_store_cannot_hold_are_bad_rows_not_panics() {
    // Rows are only ever read back by a requested (valid) name, so a bad name put in
    // by hand is never read: it sits there, and everything else keeps working.
    let long = "x".repeat(300);
    let (db, store, _, _) = altered(&format!(
        "INSERT INTO scheduler_leases (name, holder, tick, token, expires_at)
         VALUES ('{long}', 'by hand', now(), 1, now() + interval '1 hour'),
                (E'new\\nline', 'by hand', now(), 1, now() + interval '1 hour')"
    ))
    .await;
    let t = tick(&store, 1).await;
    let keys = take(&store, &["c", &"x".repeat(200)], t)
        .await
        .expect("take");
    assert_eq!(keys.len(), 2);
    let lens = strings(
        &admin(db.url()).await,
        "SELECT octet_length(name)::text FROM scheduler_leases WHERE holder = 'by hand' ORDER BY 1",
    )
    .await;
    assert_eq!(lens, [Some("300".to_owned()), Some("8".to_owned())]);

    // Unless the column's type changes what comes back: `char(210)` pads every name
    // to 210 bytes, longer than a lease name may be.
    let (_db, store, _, _) =
        altered("ALTER TABLE scheduler_leases ALTER name TYPE char(210)").await;
    let err = take(&store, &["c"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_bad_row(&err, "take leases", "a name must be at most 200 bytes long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_logs_a_broken_table_retries_and_recovers_once_it_is_fixed() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let admin = admin(db.url()).await;
    exec(&admin, "ALTER TABLE scheduler_leases DROP COLUMN token").await;
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .job(Named {
            work: Duration::from_millis(10),
            ..Named::new("broken table job", &seen)
        })
        .build()
        .expect("build");
    let (stats, health) = (scheduler.stats(), scheduler.health());
    let logs = Logs::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(
        scheduler
            .run_until(async move {
                let _ = stopped.await;
            })
            .with_subscriber(logs.clone()),
    );
    let job = "broken table job";
    wait_for(Duration::from_secs(60), "two ticks missed", || {
        let missed = stats.count(job, Outcome::Missed);
        async move { missed >= 2 }
    })
    .await;
    assert!(!run.is_finished(), "the scheduler keeps running");
    assert_eq!(stats.count(job, Outcome::Ran), 0);
    let line = logs
        .find("taking due leases failed")
        .expect("the failure is logged");
    assert!(
        line.contains("lease store failed: take leases failed: ")
            && line.contains("column \"token\" of relation \"scheduler_leases\" does not exist")
            && line.contains(SHAPE_HINT)
            && line.contains("retry_in="),
        "{line}"
    );
    println!("logged: {line}");
    // The loop keeps turning; the readiness probe's database check only reads the
    // clock, which needs no table, and it says how long the takes have been failing.
    // (The probe's view of the loop is of its last turn: on a loaded machine a probe
    // may come just after a stall, so it is asked until it sees a recent turn.)
    probe_until(
        &health,
        Duration::from_secs(60),
        "the probe to see the loop turning and its takes failing",
        |r| r.scheduler && r.database && r.store_failing_for.is_some(),
    )
    .await;

    exec(
        &admin,
        "ALTER TABLE scheduler_leases ADD COLUMN token bigint NOT NULL DEFAULT 1",
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "a run once the table is fixed",
        || {
            let ran = stats.count(job, Outcome::Ran);
            async move { ran >= 1 }
        },
    )
    .await;
    let report = probe_until(
        &health,
        Duration::from_secs(60),
        "the probe to see the takes succeed",
        |r| r.store_failing_for.is_none(),
    )
    .await;
    assert!(report.database, "recovered: {report:?}");
    stop.send(()).expect("scheduler running");
    run.await.expect("the scheduler does not panic");
}

// ---------------------------------------------------------------------------------
// 5. Values are bound, never spliced
// ---------------------------------------------------------------------------------

/// What may be interpolated into SQL built with `format!` in the store's source, and
/// why it is not a value. The names are trusted: what the scan proves is that no
/// other variable (a lease name, a holder, a key, a tick…) is ever formatted into SQL
/// text, so values can only reach SQL as bound parameters.
const SQL_INTERPOLATIONS: &[(&str, &str)] = &[
    (
        "t",
        "TableName::quoted() / HistoryTable::quoted(): validated identifiers",
    ),
    (
        "book",
        "TableName::migrations_table(): a validated identifier",
    ),
    (
        "schema",
        "TableName::schema(), or in a hint current_schema() quoted by ident()",
    ),
    ("table", "a TableName / HistoryTable: validated identifiers"),
    ("by_job", "HistoryTable::index(): a validated identifier"),
    ("by_time", "HistoryTable::index(): a validated identifier"),
    (
        "pre",
        "store.rs: a SQL fragment built from literals and `{l}`/`{tick}`",
    ),
    (
        "decide",
        "store.rs: a SQL fragment built from literals and `{l}`/`{tick}`",
    ),
    ("l", "store.rs: a table alias literal (\"h\", \"l\")"),
    (
        "tick",
        "store.rs: a column reference literal (\"req.tick\", \"excluded.tick\")",
    ),
    ("mine", "store.rs: the shared CTE, built from `{t}` only"),
    ("STRIPE_LOCK_CLASS", "keyed.rs: an integer constant"),
    (
        "idle_ms",
        "store.rs: an integer of milliseconds from PostgresOptions' Duration",
    ),
    (
        "self.idle_guard",
        "store.rs: the SET LOCAL statement built from `{idle_ms}` only",
    ),
    (
        "bound_ms",
        "store.rs: an integer of milliseconds from a Duration (statement_timeout)",
    ),
    ("self.table().quoted()", "fenced.rs: TableName::quoted()"),
    // Hints: text shown to a person, naming the grant to run; never executed.
    ("user", "migrate.rs hint: current_user, quoted by ident()"),
    (
        "database",
        "migrate.rs hint: current_database(), quoted by ident()",
    ),
    ("migration", "migrate.rs hint: a migration's name"),
    ("instead", "migrate.rs hint: a literal"),
    (
        "server.book",
        "migrate.rs hint: `{table}_migrations`, a validated identifier",
    ),
];

/// SQL words whose presence marks a format string as SQL.
const SQL_WORDS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "CREATE",
    "ALTER",
    "DROP",
    "GRANT",
    "FROM",
    "WHERE",
    "VALUES",
    "WITH",
    "RETURNING",
    "SET",
];

/// Every `format!` call in `source`: its format string and its arguments.
fn format_calls(source: &str) -> Vec<(String, Vec<String>)> {
    let mut calls = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("format!(") {
        rest = &rest[at + "format!(".len()..];
        let body = balanced(rest);
        let body = body.trim_start();
        let Some(literal) = body.strip_prefix('"') else {
            continue;
        };
        let end = literal_end(literal);
        let (text, args) = (&literal[..end], &literal[end + 1..]);
        let args = split_args(args);
        calls.push((text.to_owned(), args));
    }
    calls
}

/// The text up to the parenthesis closing the one just opened.
fn balanced(text: &str) -> &str {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' => in_str = !in_str,
            '(' if !in_str => depth += 1,
            ')' if !in_str && depth == 0 => return &text[..i],
            ')' if !in_str => depth -= 1,
            _ => {}
        }
    }
    text
}

/// Where a string literal (after its opening quote) ends.
fn literal_end(text: &str) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return i,
            _ => {}
        }
    }
    text.len()
}

/// The comma-separated arguments after the format string, at nesting depth 0.
fn split_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                args.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    args.push(current);
    args.into_iter()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

/// The names interpolated by a format string (`{name}`, `{name:?}`; `{}` takes the
/// next positional argument).
fn interpolations(text: &str, args: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let mut positional = args.iter().filter(|a| !a.contains('='));
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.peek().is_some_and(|&(_, c)| c == '{') {
            chars.next();
            continue;
        }
        let end = text[i..].find('}').map_or(text.len(), |e| i + e);
        let inner = text[i + 1..end].split(':').next().unwrap_or_default();
        if inner.is_empty() {
            names.push(positional.next().cloned().unwrap_or_default());
        } else {
            // Inline (`{t}`) or named (`{pre}`, with `pre = …` among the arguments):
            // the allow-list vouches for the name.
            names.push(inner.to_owned());
        }
    }
    names
}

#[test]
fn sql_is_only_ever_formatted_with_identifiers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .expect("src")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    for file in files {
        let source = std::fs::read_to_string(&file).expect("read");
        // Only the library: doc examples and unit tests do not run in production.
        let source = source.split("#[cfg(test)]").next().unwrap_or_default();
        let code: String = source
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (text, args) in format_calls(&code) {
            let is_sql = text
                .split(|c: char| !c.is_ascii_alphabetic())
                .any(|word| SQL_WORDS.contains(&word));
            if !is_sql {
                continue;
            }
            checked += 1;
            for name in interpolations(&text, &args) {
                assert!(
                    SQL_INTERPOLATIONS
                        .iter()
                        .any(|(allowed, _)| *allowed == name),
                    "{}: `{name}` is formatted into SQL text: {text:?}\n\
                     bind values as parameters ($1, $2, …); only identifiers may be spliced",
                    file.display()
                );
            }
        }
        // Nothing else builds SQL text piecewise.
        assert!(
            !code.contains("push_str("),
            "{}: push_str builds text",
            file.display()
        );
    }
    // The statements of store.rs, fenced.rs, keyed.rs, history.rs and migrate.rs.
    assert!(
        checked >= 12,
        "only {checked} SQL format strings found: is the scan broken?"
    );
}

#[test]
fn the_source_scan_catches_a_spliced_value() {
    let source = r#"let sql = format!("SELECT * FROM {t} WHERE name = '{name}'", t = table.quoted());
                    let ok = format!("UPDATE {} SET x = $1", self.table().quoted());"#;
    let calls = format_calls(source);
    assert_eq!(calls.len(), 2);
    assert_eq!(interpolations(&calls[0].0, &calls[0].1), ["t", "name"]);
    assert_eq!(
        interpolations(&calls[1].0, &calls[1].1),
        ["self.table().quoted()"]
    );
}
