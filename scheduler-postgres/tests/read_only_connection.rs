//! A pooled connection that lands on a read-only server (an old primary back as a
//! standby behind the same address, after a failover) is closed when a write is
//! refused on it, not handed out again: the next call reconnects and reaches the
//! writable server.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_core::StoreFailure;
use scheduler_postgres::PostgresOptions;
use sea_orm::ConnectionTrait;
use support::hostile::{store_with, take, tick};
use test_postgres::TestDb;

#[tokio::test]
async fn a_connection_refused_as_read_only_is_not_reused() {
    let db = TestDb::new().await;
    // One connection: whatever the store runs, it runs on it.
    let store = store_with(db.url(), PostgresOptions::default().max_connections(1)).await;
    // That session turns read-only, as a connection to a standby is.
    store
        .connection()
        .execute_unprepared("SET default_transaction_read_only = on")
        .await
        .expect("set");
    let t = tick(&store, 0).await;
    let err = take(&store, &["job"], t).await.expect_err("refused");
    assert_eq!(err.store_failure(), Some(StoreFailure::ReadOnly), "{err}");
    // The refused connection was closed: the next take gets a fresh, writable one.
    take(&store, &["job"], t)
        .await
        .expect("the next take runs on a new connection");
}
