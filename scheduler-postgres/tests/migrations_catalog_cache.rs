//! A migrator whose connection looked its tables up before they existed, and that
//! then waited for the migration lock while another migrator created them, finds
//! them.
//!
//! A PostgreSQL server process caches catalog look-ups, "no such table" included,
//! and applies other sessions' catalog changes to that cache when its transaction
//! starts or locks a relation, not when it was waiting for an advisory lock. So
//! `to_regclass` after the wait, in a statement the connection has prepared before,
//! can answer from the cache as if the other migrator had created nothing. Here the
//! connection prepared the migrations' look-up when a first store opened on it, for
//! another lease table.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use scheduler_migrations::{MIGRATIONS, TableName, postgres as ddl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait,
};
use test_postgres::TestDb;

/// How long a test waits for something that takes a second on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// Waits until a session of the database waits for an advisory lock.
async fn until_waiting_for_the_lock(conn: &DatabaseConnection) {
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
        if row.try_get::<i64>("", "n").expect("n") >= 1 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the migrator never queued on the migration lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrator_whose_connection_cached_missing_tables_sees_them_created() {
    let db = TestDb::new().await;
    let table = TableName::new("leases_b").expect("table name");
    // The stores' pool: one connection, which looks the second table up while it is
    // missing, then opens a first store (for another table) so that the migrations'
    // statements are prepared on it.
    let pool = Database::connect(
        ConnectOptions::new(db.direct_url())
            .min_connections(1)
            .max_connections(1)
            .to_owned(),
    )
    .await
    .expect("connect");
    let row = pool
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT to_regclass($1) IS NULL AND to_regclass($2) IS NULL AS missing",
            [table.quoted().into(), table.migrations_table().into()],
        ))
        .await
        .expect("look the tables up")
        .expect("row");
    assert!(row.try_get::<bool>("", "missing").expect("missing"));
    let options = |table: &str| PostgresOptions::default().table(table).expect("table");
    PostgresStore::open(pool.clone(), options("leases_a"))
        .await
        .expect("the first store opens");

    let conn = Database::connect(db.direct_url()).await.expect("connect");
    let first = conn.begin().await.expect("begin");
    first
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            ddl::LOCK,
            [ddl::lock_key(&table).into()],
        ))
        .await
        .expect("take the migration lock");
    let second = tokio::spawn(async move { PostgresStore::open(pool, options("leases_b")).await });
    until_waiting_for_the_lock(&conn).await;

    // What the runner does, by hand, while the store waits.
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
    first.commit().await.expect("commit");

    let store = tokio::time::timeout(LIMIT, second)
        .await
        .expect("the store opens once the lock is free")
        .expect("join");
    if let Err(error) = store {
        panic!("the migrator that waited did not see the tables created meanwhile: {error}");
    }
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM leases_b_migrations",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(
        row.try_get::<i64>("", "n").expect("n"),
        i64::try_from(MIGRATIONS.len()).expect("a few migrations"),
        "each migration recorded once"
    );
}
