//! A pooled connection that lands on a read-only server (an old primary back as a
//! standby behind the same address, after a failover) is closed when a write is
//! refused on it, not handed out again (nor kept by the store between its
//! statements): the next call reconnects and reaches the writable server. Both on a
//! pool the store opened (where the refused connection is the one it keeps) and on
//! the app's own pool.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_core::{Store, StoreFailure, Tick};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectOptions, ConnectionTrait, Database};
use support::hostile::{admin, exec, store_with, take};
use test_postgres::TestDb;

#[tokio::test]
async fn a_connection_refused_as_read_only_is_not_reused() {
    let db = TestDb::new().await;
    let store = store_with(db.url(), PostgresOptions::default().max_connections(1)).await;
    let admin = admin(db.direct_url()).await;
    // The store's connections are closed, and those it opens now are read-only, as
    // connections to a standby are.
    exec(
        &admin,
        &format!(
            "ALTER DATABASE \"{}\" SET default_transaction_read_only = on",
            db.name()
        ),
    )
    .await;
    exec(
        &admin,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND backend_type = 'client backend'",
    )
    .await;
    // A read succeeds on a read-only connection, which the store then keeps for its
    // next statement (calls on the closed ones fail first).
    let mut failed = 0;
    let t = loop {
        match store.now().await {
            Ok(now) => break Tick::new(now),
            Err(_) => failed += 1,
        }
        assert!(failed < 10, "the clock never read again");
    };
    let err = take(&store, &["job"], t).await.expect_err("refused");
    assert_eq!(err.store_failure(), Some(StoreFailure::ReadOnly), "{err}");
    // The server is writable again. The refused connection was closed: the next take
    // gets a fresh, writable one.
    exec(
        &admin,
        &format!(
            // (The admin's own new connections are read-only too.)
            "BEGIN READ WRITE; ALTER DATABASE \"{}\" RESET default_transaction_read_only; COMMIT",
            db.name()
        ),
    )
    .await;
    take(&store, &["job"], t)
        .await
        .expect("the next take runs on a new connection");
}

#[tokio::test]
async fn a_pooled_connection_refused_as_read_only_is_not_reused() {
    let db = TestDb::new().await;
    // The app's own pool of one connection: the store keeps nothing out of it, so
    // whatever the store runs, it runs on that connection.
    let mut options = ConnectOptions::new(db.url().to_owned());
    options.max_connections(1).sqlx_logging(false);
    let pool = Database::connect(options).await.expect("app pool");
    let store = PostgresStore::open(pool.clone(), PostgresOptions::default())
        .await
        .expect("open");
    // That session turns read-only, as a connection to a standby is.
    pool.execute_unprepared("SET default_transaction_read_only = on")
        .await
        .expect("set");
    let t = Tick::new(store.now().await.expect("clock"));
    let err = take(&store, &["job"], t).await.expect_err("refused");
    assert_eq!(err.store_failure(), Some(StoreFailure::ReadOnly), "{err}");
    // The refused connection was closed: the next take gets a fresh, writable one.
    take(&store, &["job"], t)
        .await
        .expect("the next take runs on a new connection");
}
