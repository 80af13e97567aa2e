//! Migrations: eight instances starting at once all succeed and the schema is
//! applied once.

use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use test_postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_instances_migrate_at_once() {
    let db = TestDb::new().await;
    let mut starts = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = db.url().to_owned();
        starts.spawn(async move { PostgresStore::connect(&url, PostgresOptions::default()).await });
    }
    let stores: Vec<_> = starts
        .join_all()
        .await
        .into_iter()
        .map(|r| r.expect("every instance starts"))
        .collect();
    assert_eq!(stores.len(), 8);
    let conn = &Database::connect(db.direct_url()).await.expect("connect");
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n, min(version) AS v FROM scheduler_leases_migrations",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(
        row.try_get::<i64>("", "n").expect("n"),
        i64::try_from(scheduler_migrations::MIGRATIONS.len()).expect("a few migrations"),
        "each migration recorded once"
    );
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT reloptions::text AS o FROM pg_class WHERE relname = 'scheduler_leases'",
        ))
        .await
        .expect("query")
        .expect("the lease table exists");
    assert_eq!(
        row.try_get::<String>("", "o").expect("o"),
        "{fillfactor=50}"
    );
    // No advisory lock outlives the migration.
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ))
        .await
        .expect("query")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 0);
}

/// A store opened without migrations on a schedules table from before the bounds
/// (no `next_tick`: every put would fail) is refused at open, naming the migration.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_schedules_table_without_bounds() {
    let db = TestDb::new().await;
    drop(
        PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("migrated"),
    );
    let conn = &Database::connect(db.direct_url()).await.expect("connect");
    conn.execute_unprepared(
        "ALTER TABLE scheduler_leases_schedules DROP COLUMN next_tick; \
         DELETE FROM scheduler_leases_migrations WHERE version = 'm20261205_000007_next_tick'",
    )
    .await
    .expect("back to the migration before");
    let options = PostgresOptions::default().migrate(false);
    let err = PostgresStore::connect(db.url(), options.clone())
        .await
        .expect_err("refused");
    let text = err.to_string();
    assert!(
        text.starts_with("migration m20261205_000007_next_tick failed")
            && text.contains("lacking column(s) next_tick"),
        "{text}"
    );
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("migrates");
    PostgresStore::connect(db.url(), options)
        .await
        .expect("then opens without migrating");
}

/// A store opened without migrations on a lease table that lacks one this version
/// needs is refused at open, naming it: its renewals would fail (they read
/// `cancel_tick`) while its takes work, and every long run would lose its lease.
#[tokio::test]
async fn a_store_without_migrations_refuses_a_table_missing_one() {
    let db = TestDb::new().await;
    // The table as the first migration left it, recorded as such.
    drop(
        PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("migrated"),
    );
    let conn = &Database::connect(db.direct_url()).await.expect("connect");
    conn.execute_unprepared(
        "ALTER TABLE scheduler_leases DROP COLUMN cancel_tick; \
         DELETE FROM scheduler_leases_migrations WHERE version = 'm20261201_000002_cancel_requests'",
    )
    .await
    .expect("back to the first migration");
    let options = PostgresOptions::default().migrate(false);
    let err = PostgresStore::connect(db.url(), options.clone())
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "migration m20261201_000002_cancel_requests failed: the lease table scheduler_leases lacks \
         column(s) cancel_tick that this version needs, and the store was \
         opened with migrate(false); run the migrations once (a store opened with migrate(true), as \
         a database user that may alter the lease table), then start again"
    );
    // A reading tool may still open it; migrating brings it up to date.
    PostgresStore::connect(db.url(), options.clone().check_schema(false))
        .await
        .expect("opens unchecked");
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("migrates");
    PostgresStore::connect(db.url(), options)
        .await
        .expect("up to date");
}
