//! Migrations on a database whose transactions default to REPEATABLE READ (or
//! SERIALIZABLE): a migrator that waited for the migration lock sees what the holder
//! applied, applies nothing again and does not fail.
//!
//! Under those levels a transaction's snapshot is taken at its first statement, and a
//! `SELECT pg_advisory_xact_lock(…)` is a statement: a snapshot taken before (or by)
//! the wait predates the holder's commit, so the state read after the lock would be
//! stale. Each test makes the migrator wait behind a holder that applies the
//! migrations while it waits.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use scheduler_migrations::{MIGRATIONS, TableName, postgres as ddl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};
use test_postgres::TestDb;

/// How long a test waits for something that takes a second on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// A fresh database whose new transactions default to `isolation`, and a connection
/// to it (opened after the setting, so it carries it).
async fn database_defaulting_to(isolation: &str) -> (TestDb, DatabaseConnection) {
    let db = TestDb::new().await;
    let admin = Database::connect(db.direct_url()).await.expect("connect");
    admin
        .execute_unprepared(&format!(
            "ALTER DATABASE \"{}\" SET default_transaction_isolation TO '{isolation}'",
            db.name()
        ))
        .await
        .expect("set the default isolation");
    admin.close().await.expect("close");
    let conn = Database::connect(db.direct_url()).await.expect("connect");
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SHOW default_transaction_isolation",
        ))
        .await
        .expect("show")
        .expect("row");
    assert_eq!(
        row.try_get::<String>("", "default_transaction_isolation")
            .expect("setting"),
        isolation,
        "new connections carry the database's default"
    );
    (db, conn)
}

/// Waits until `waiters` sessions of the database wait for an advisory lock.
async fn until_waiting_for_the_lock(conn: &DatabaseConnection, waiters: i64) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let row = conn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ))
            .await
            .expect("pg_locks")
            .expect("row");
        if row.try_get::<i64>("", "n").expect("n") >= waiters {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the migrators never queued on the migration lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The migrations recorded for the default lease table, in order.
async fn recorded(conn: &DatabaseConnection) -> Vec<String> {
    conn.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT version FROM scheduler_leases_migrations ORDER BY version",
    ))
    .await
    .expect("read the bookkeeping table")
    .iter()
    .map(|row| row.try_get::<String>("", "version").expect("version"))
    .collect()
}

fn every_migration() -> Vec<String> {
    MIGRATIONS.iter().map(|m| m.name().to_owned()).collect()
}

/// A first migrator holds the lock; a second (the store) starts and queues on it; the
/// first applies every migration and commits; the second must then find them applied.
async fn a_migrator_that_waited_sees_what_the_holder_applied(isolation: &str) {
    let (db, conn) = database_defaulting_to(isolation).await;
    let table = TableName::default();
    let first = conn.begin().await.expect("begin");
    first
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            ddl::LOCK,
            [ddl::lock_key(&table).into()],
        ))
        .await
        .expect("take the migration lock");

    let url = db.direct_url().to_owned();
    let second =
        tokio::spawn(async move { PostgresStore::connect(&url, PostgresOptions::default()).await });
    until_waiting_for_the_lock(&conn, 1).await;

    // What the runner does, by hand, while the second migrator waits.
    first
        .execute_unprepared(&ddl::create_bookkeeping(&table))
        .await
        .expect("create the bookkeeping table");
    for migration in MIGRATIONS {
        for sql in migration.postgres(&table) {
            first.execute_unprepared(&sql).await.expect("apply");
        }
        first
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "INSERT INTO {} (version) VALUES ($1)",
                    table.migrations_table()
                ),
                [migration.name().into()],
            ))
            .await
            .expect("record");
    }
    // A row the lease table keeps only if no migration runs again.
    first
        .execute_unprepared(&format!(
            "INSERT INTO {} (name, holder, tick, token, expires_at) \
             VALUES ('marker', 'first', now(), 1, now())",
            table.quoted()
        ))
        .await
        .expect("insert a marker row");
    first.commit().await.expect("commit");

    let store = tokio::time::timeout(LIMIT, second)
        .await
        .expect("the second migrator finishes once the lock is free")
        .expect("join");
    if let Err(error) = store {
        panic!(
            "under {isolation}, the migrator that waited for the lock failed (it read the \
             state as it was before the first migrator committed): {error}"
        );
    }
    assert_eq!(
        recorded(&conn).await,
        every_migration(),
        "each migration recorded once"
    );
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM scheduler_leases WHERE name = 'marker'",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(
        row.try_get::<i64>("", "n").expect("n"),
        1,
        "the lease table is the one the first migrator created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrator_that_waited_sees_what_the_holder_applied_under_repeatable_read() {
    a_migrator_that_waited_sees_what_the_holder_applied("repeatable read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrator_that_waited_sees_what_the_holder_applied_under_serializable() {
    a_migrator_that_waited_sees_what_the_holder_applied("serializable").await;
}

/// Four stores start while a gate holds the migration lock, so all of them queue on
/// it, then the gate lets go: the first to get the lock applies every migration, the
/// others must find them applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_queued_on_the_lock_under_repeatable_read_all_start() {
    let (db, conn) = database_defaulting_to("repeatable read").await;
    queued_stores_all_start(&conn, db.direct_url(), PostgresOptions::default()).await;
}

/// Behind a transaction pooler too (its `BEGIN` sets the level before `DEALLOCATE
/// ALL` could take a snapshot), a store starting alone opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_a_store_alone_migrates_under_repeatable_read() {
    let db = TestDb::through_pgbouncer().await;
    let admin = Database::connect(db.direct_url()).await.expect("connect");
    admin
        .execute_unprepared(&format!(
            "ALTER DATABASE \"{}\" SET default_transaction_isolation TO 'repeatable read'",
            db.name()
        ))
        .await
        .expect("set the default isolation");
    let store = PostgresStore::connect(db.url(), PostgresOptions::for_url(db.url())).await;
    if let Err(error) = store {
        panic!("the store did not open behind PgBouncer under repeatable read: {error}");
    }
    assert_eq!(
        recorded(&admin).await,
        every_migration(),
        "each migration recorded once"
    );
}

/// Behind a transaction pooler, four stores queued on the lock all start: the
/// migration transaction is `READ COMMITTED` there too. (Before the level was set
/// first, the server refused it after `DEALLOCATE ALL`, the migrations ran at the
/// default level, and the migrators that waited failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_pgbouncer_stores_queued_on_the_lock_under_repeatable_read_all_start() {
    let db = TestDb::through_pgbouncer().await;
    let conn = Database::connect(db.direct_url()).await.expect("connect");
    conn.execute_unprepared(&format!(
        "ALTER DATABASE \"{}\" SET default_transaction_isolation TO 'repeatable read'",
        db.name()
    ))
    .await
    .expect("set the default isolation");
    queued_stores_all_start(&conn, db.url(), PostgresOptions::for_url(db.url())).await;
}

/// Starts four stores on `url` with `options` while a gate (on `conn`) holds the
/// migration lock, so all of them queue on it, then lets go: every store must start,
/// and each migration be recorded once.
async fn queued_stores_all_start(conn: &DatabaseConnection, url: &str, options: PostgresOptions) {
    const STORES: usize = 4;
    let gate = conn.begin().await.expect("begin");
    gate.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        ddl::LOCK,
        [ddl::lock_key(&TableName::default()).into()],
    ))
    .await
    .expect("take the migration lock");

    let mut starts = tokio::task::JoinSet::new();
    for _ in 0..STORES {
        let (url, options) = (url.to_owned(), options.clone());
        starts.spawn(async move { PostgresStore::connect(&url, options).await });
    }
    until_waiting_for_the_lock(conn, STORES as i64).await;
    gate.rollback().await.expect("let the migrators go");

    let results = tokio::time::timeout(LIMIT, starts.join_all())
        .await
        .expect("every migrator finishes");
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {STORES} stores failed to migrate: {failures:#?}",
        failures.len()
    );
    assert_eq!(
        recorded(conn).await,
        every_migration(),
        "each migration recorded once"
    );
}
