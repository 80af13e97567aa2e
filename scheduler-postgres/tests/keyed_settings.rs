#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A keyed transaction runs with the settings of the store's own transactions, set
//! locally (`SET LOCAL`), whichever way it begins: the store's
//! `idle_transaction_timeout` as its `idle_in_transaction_session_timeout`, and the
//! server's default `statement_timeout`, not the lease-statement bound the store's
//! connections carry; nothing of it is left on the session afterwards.

use std::time::Duration;

use scheduler_postgres::{Keyed, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

/// `idle_in_transaction_session_timeout` and `statement_timeout` where `conn` runs.
async fn settings(conn: &impl ConnectionTrait) -> Result<(String, String), DbErr> {
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_setting('idle_in_transaction_session_timeout') AS idle, \
                    current_setting('statement_timeout') AS bound",
        ))
        .await?
        .ok_or_else(|| DbErr::Custom("no row".to_owned()))?;
    Ok((row.try_get("", "idle")?, row.try_get("", "bound")?))
}

async fn settings_in_work(keyed: Keyed) -> Vec<(String, String)> {
    let keys: Vec<String> = (0..10).map(|i| format!("set-{i}")).collect();
    keyed
        .process(&keys, |txn, _chunk| Box::pin(settings(txn)))
        .await
        .expect("process")
        .values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_transactions_run_with_the_stores_transaction_settings() {
    let db = TestDb::new().await;
    // One connection: the statements after the batches run on the same session.
    let options = PostgresOptions::default()
        .max_connections(1)
        .idle_transaction_timeout(Duration::from_millis(7_250))
        .statement_timeout(Duration::from_millis(1_500));
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");
    let expected = ("7250ms".to_owned(), "0".to_owned());

    let store_txn = settings(&store.begin().await.expect("begin"))
        .await
        .expect("read");
    assert_eq!(store_txn, expected, "the store's own transactions");
    for options in [KeyedOptions::default(), KeyedOptions::default().stripes(4)] {
        let in_work = settings_in_work(store.keyed(options.clone())).await;
        assert_eq!(in_work.len(), 1);
        assert_eq!(in_work[0], expected, "{options:?}");
    }
    if !store.transaction_pooling() {
        // Local to the transactions: the session keeps the server's idle default and
        // the lease bound the store gave its connections.
        let session = settings(store.connection()).await.expect("read");
        assert_eq!(session, ("0".to_owned(), "1500ms".to_owned()));
    }
}
