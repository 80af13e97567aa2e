//! Migrations of several lease tables in one schema that does not exist yet, all at
//! once: every one succeeds, and the schema is created once.
//!
//! `CREATE SCHEMA IF NOT EXISTS` is not race-free: of two transactions creating the
//! same schema, the second waits on the first's uncommitted catalog row and then fails
//! with a unique violation (SQLSTATE 23505). Each lease table has its own migration
//! lock, so the table lock alone does not keep two tables' migrators apart.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use scheduler_migrations::{MIGRATIONS, TableName, postgres as ddl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};
use test_postgres::TestDb;

/// How long a test waits for something that takes a second on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// Migrators per round.
const MIGRATORS: usize = 8;

/// Distinct tables per round: the first `MIGRATORS - TABLES` tables are migrated
/// twice, so the same table started twice is covered too.
const TABLES: usize = 6;

/// Rounds, each in a fresh schema.
const ROUNDS: usize = 3;

/// The table migrator `i` of a round opens in `schema`.
fn table(schema: &str, i: usize) -> String {
    format!("{schema}.leases_{}", i % TABLES)
}

/// Starts a store per table name, each with a pool of two connections; returns every
/// failure's message.
async fn migrate_all(url: &str, tables: Vec<String>, together: bool) -> Vec<String> {
    let barrier = Arc::new(tokio::sync::Barrier::new(tables.len()));
    let mut starts = tokio::task::JoinSet::new();
    for table in tables {
        let url = url.to_owned();
        let barrier = Arc::clone(&barrier);
        starts.spawn(async move {
            let options = PostgresOptions::default()
                .table(&table)
                .expect("a valid table name")
                .create_schema(true)
                .max_connections(2);
            if together {
                barrier.wait().await;
            }
            PostgresStore::connect(&url, options)
                .await
                .map_err(|e| format!("{table}: {e}"))
        });
    }
    tokio::time::timeout(LIMIT, starts.join_all())
        .await
        .expect("every migrator finishes")
        .into_iter()
        .filter_map(Result::err)
        .collect()
}

/// Checks that every table of `schema` exists with each migration recorded once, and
/// that no advisory lock outlives the migrations.
async fn check_migrated(conn: &DatabaseConnection, schema: &str) {
    let every: Vec<String> = MIGRATIONS.iter().map(|m| m.name().to_owned()).collect();
    for i in 0..TABLES {
        let table = TableName::new(&table(schema, i)).expect("table name");
        let versions: Vec<String> = conn
            .query_all_raw(Statement::from_string(
                DbBackend::Postgres,
                format!(
                    "SELECT version FROM {} ORDER BY version",
                    table.migrations_table()
                ),
            ))
            .await
            .expect("read the bookkeeping table")
            .iter()
            .map(|row| row.try_get::<String>("", "version").expect("version"))
            .collect();
        assert_eq!(versions, every, "{table}: each migration recorded once");
        let row = conn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT to_regclass($1) IS NOT NULL AS exists",
                [table.quoted().into()],
            ))
            .await
            .expect("query")
            .expect("row");
        assert!(
            row.try_get::<bool>("", "exists").expect("exists"),
            "{table} exists"
        );
    }
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(
        row.try_get::<i64>("", "n").expect("n"),
        0,
        "no advisory lock outlives the migrations"
    );
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
            "the migrators never queued on their migration locks"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every migrator queues on its table's migration lock, which a gate holds; the gate
/// lets go of all of them at once, so they all find the schema missing together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tables_released_together_into_a_new_schema_all_migrate() {
    let db = TestDb::new().await;
    let conn = Database::connect(db.direct_url()).await.expect("connect");
    for round in 0..ROUNDS {
        let schema = format!("gated_{round}");
        let tables: Vec<String> = (0..MIGRATORS).map(|i| table(&schema, i)).collect();
        let gate = conn.begin().await.expect("begin");
        for i in 0..TABLES {
            let table = TableName::new(&table(&schema, i)).expect("table name");
            gate.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                ddl::LOCK,
                [ddl::lock_key(&table).into()],
            ))
            .await
            .expect("take the table's migration lock");
        }
        let url = db.direct_url().to_owned();
        let migrators = tokio::spawn(async move { migrate_all(&url, tables, false).await });
        until_waiting_for_the_lock(&conn, MIGRATORS as i64).await;
        gate.rollback().await.expect("let the migrators go");
        let failures = migrators.await.expect("join");
        assert!(
            failures.is_empty(),
            "round {round}: {} of {MIGRATORS} migrators failed: {failures:#?}",
            failures.len()
        );
        check_migrated(&conn, &schema).await;
    }
}

/// Every migrator starts at once (behind a barrier), nothing else in the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tables_started_together_in_a_new_schema_all_migrate() {
    let db = TestDb::new().await;
    let conn = Database::connect(db.direct_url()).await.expect("connect");
    for round in 0..ROUNDS {
        let schema = format!("together_{round}");
        let tables: Vec<String> = (0..MIGRATORS).map(|i| table(&schema, i)).collect();
        let failures = migrate_all(db.direct_url(), tables, true).await;
        assert!(
            failures.is_empty(),
            "round {round}: {} of {MIGRATORS} migrators failed: {failures:#?}",
            failures.len()
        );
        check_migrated(&conn, &schema).await;
    }
}

/// A schema the store was not asked to create is a typo until said otherwise:
/// refused with its name, and nothing is created.
#[tokio::test]
async fn a_missing_schema_is_refused_unless_asked_for() {
    let db = TestDb::new().await;
    let conn = Database::connect(db.direct_url()).await.expect("connect");
    let options = PostgresOptions::default()
        .table("nosuchschema.leases")
        .expect("a valid table name");
    let err = PostgresStore::connect(db.url(), options.clone())
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, scheduler_postgres::Error::MissingSchema { schema, .. } if schema == "nosuchschema"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "schema \"nosuchschema\" of the lease table nosuchschema.leases does not exist: check the \
         table name for a typo (every instance of a cluster must name the same table), create the \
         schema, or let the store create it with PostgresOptions::create_schema(true)"
    );
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_namespace WHERE nspname = 'nosuchschema'",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 0, "no schema made");

    PostgresStore::connect(db.url(), options.create_schema(true))
        .await
        .expect("asked for, the schema is created");
}
