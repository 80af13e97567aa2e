#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A keyed transaction carries the store's `idle_transaction_timeout` as its own
//! (`SET LOCAL`) `idle_in_transaction_session_timeout`, whichever way it begins, and
//! the setting ends with the transaction.

use std::time::Duration;

use scheduler_postgres::{KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

async fn idle_timeout(conn: &impl ConnectionTrait) -> Result<String, DbErr> {
    conn.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT current_setting('idle_in_transaction_session_timeout') AS v",
    ))
    .await?
    .ok_or_else(|| DbErr::Custom("no row".to_owned()))?
    .try_get("", "v")
}

async fn guard_in_work(keyed: scheduler_postgres::Keyed) -> Vec<String> {
    let keys: Vec<String> = (0..10).map(|i| format!("guarded-{i}")).collect();
    keyed
        .process(&keys, |txn, _chunk| Box::pin(idle_timeout(txn)))
        .await
        .expect("process")
        .values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_transactions_carry_the_stores_idle_timeout() {
    let db = TestDb::new().await;
    // One connection: the statement after the batch runs on the same session.
    let options = PostgresOptions::default()
        .max_connections(1)
        .idle_transaction_timeout(Duration::from_millis(7_250));
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");

    assert_eq!(
        guard_in_work(store.keyed(KeyedOptions::default())).await,
        ["7250ms"]
    );
    assert_eq!(
        guard_in_work(store.keyed(KeyedOptions::default().stripes(4))).await,
        ["7250ms"],
        "with lock stripes too"
    );
    // Local to the transaction: the session is back to the server's default.
    let after = idle_timeout(&store.begin().await.expect("begin"))
        .await
        .expect("read");
    assert_eq!(
        after, "7250ms",
        "the store's own transactions set it as well"
    );
    if !store.transaction_pooling() {
        let session = idle_timeout(store.connection()).await.expect("read");
        assert_eq!(session, "0", "SET LOCAL: nothing left on the session");
    }
}
