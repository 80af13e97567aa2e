#![allow(clippy::expect_used)]
//! On a pool the store opens itself, directly on PostgreSQL, every connection carries
//! the lease bound as its `statement_timeout`: a lease statement is one round trip,
//! already bounded, and one held up by a lock still fails at the bound without
//! writing. The store's own transactions get the server's default back; a pool the
//! app hands in is left alone. Connections are not pinged before use: one the server
//! closed costs one failed call, and the next gets a fresh connection.

use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use test_postgres::TestDb;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

async fn show(conn: &impl ConnectionTrait) -> String {
    conn.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT current_setting('statement_timeout') AS v",
    ))
    .await
    .expect("show")
    .expect("row")
    .try_get("", "v")
    .expect("value")
}

#[tokio::test]
async fn the_lease_bound_is_the_connections_and_not_the_transactions() {
    let db = TestDb::new().await;
    let direct = test_postgres::direct_url(db.url());
    // The server's default for this database, which transactions must get back.
    let mut admin = PgConnection::connect(&direct).await.expect("connect");
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut admin)
        .await
        .expect("database");
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE \"{database}\" SET statement_timeout = '45s'"
        )))
        .await
        .expect("database default");

    let options = PostgresOptions::default().statement_timeout(Duration::from_millis(1500));
    let store = PostgresStore::connect(&direct, options.clone())
        .await
        .expect("connect");
    assert_eq!(show(store.connection()).await, "1500ms");
    let txn = store.begin().await.expect("begin");
    assert_eq!(show(&txn).await, "45s");
    txn.commit().await.expect("commit");

    // A pool of the app's: untouched.
    let app = Database::connect(direct.as_str()).await.expect("connect");
    let store = PostgresStore::open(app, options).await.expect("open");
    assert_eq!(show(store.connection()).await, "45s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_held_up_by_a_locked_row_fails_at_the_bound_and_writes_nothing() {
    let db = TestDb::new().await;
    // ttl 60 s: a quarter is 15 s, so the 2 s statement timeout is the bound, and
    // the connection's own: the renewal runs alone, in autocommit.
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let tick = Tick::new(store.now().await.expect("clock"));
    let requests = [TakeRequest::new(
        LeaseName::new("locked").expect("name"),
        tick,
    )];
    let won = store.take(&requests, ttl).await.expect("take").won;
    assert_eq!(won.len(), 1);
    let keys = [won[0].key()];

    let mut locker = PgConnection::connect(&test_postgres::direct_url(db.url()))
        .await
        .expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    lock.execute("SELECT 1 FROM scheduler_leases WHERE name = 'locked' FOR UPDATE")
        .await
        .expect("lock");
    let started = tokio::time::Instant::now();
    let renewed = tokio::time::timeout(LIMIT, store.renew(&keys, ttl))
        .await
        .expect("the renewal never ended: nothing bounded it");
    let waited = started.elapsed();
    let error = renewed.expect_err("the renewal went through a locked row");
    assert!(
        error.to_string().contains("statement timeout"),
        "not the statement timeout: {error}"
    );
    assert!(
        waited >= Duration::from_millis(1900),
        "it failed before the bound: {waited:?}"
    );
    // Once the row is free, nothing of the failed renewal is there: the expiry is
    // the take's.
    lock.rollback().await.expect("rollback");
    let expires: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT expires_at FROM scheduler_leases WHERE name = 'locked'")
            .fetch_one(&mut locker)
            .await
            .expect("expiry");
    assert_eq!(expires, won[0].expires_at);
}

#[tokio::test]
async fn a_connection_the_server_closed_costs_one_failed_call() {
    let db = TestDb::new().await;
    let options = PostgresOptions::default().max_connections(1);
    let store = PostgresStore::connect(&test_postgres::direct_url(db.url()), options)
        .await
        .expect("connect");
    let pid: i32 = store
        .connection()
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_backend_pid() AS pid",
        ))
        .await
        .expect("pid")
        .expect("row")
        .try_get("", "pid")
        .expect("pid");
    let mut admin = PgConnection::connect(&test_postgres::direct_url(db.url()))
        .await
        .expect("connect");
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 10000)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(ended);
    // Not pinged before use, the closed connection is handed out once and fails…
    assert!(
        store.now().await.is_err(),
        "the closed connection was pinged"
    );
    // …and is gone: the next call gets a new one.
    store.now().await.expect("a fresh connection");
}
