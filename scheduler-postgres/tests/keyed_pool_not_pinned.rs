#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Keyed processing pins no connection: a pool of two serves a worker in the middle
//! of its batch (transaction open, locks held) and the app's own query at the same
//! time; once the batch commits, no advisory lock is left in the database.

use std::sync::Arc;
use std::time::Duration;

use scheduler_postgres::{KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DbBackend, DbErr, Statement};
use test_postgres::TestDb;
use tokio::sync::Notify;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// Advisory locks held in the test's database, read on a connection of the test's
/// own (on the server itself, never through PgBouncer).
async fn advisory_locks(db: &TestDb) -> i64 {
    Database::connect(db.direct_url())
        .await
        .expect("connect to inspect")
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ))
        .await
        .expect("pg_locks")
        .expect("row")
        .try_get("", "n")
        .expect("n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_two_serves_a_worker_mid_batch_and_the_app() {
    let db = TestDb::new().await;
    // The connect timeout is also the pool's acquire timeout: generous, as only a
    // pinned pool should make the app's write wait for good.
    let options = PostgresOptions::default()
        .max_connections(2)
        .connect_timeout(LIMIT);
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");
    store
        .connection()
        .execute_unprepared(
            "CREATE TABLE events (id text PRIMARY KEY); \
             CREATE TABLE readiness (id serial PRIMARY KEY)",
        )
        .await
        .expect("tables");

    let in_transaction = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let keys: Vec<String> = (0..100).map(|i| format!("event-{i}")).collect();
    let worker = {
        let keyed = store.keyed(KeyedOptions::default());
        let (in_transaction, finish) = (in_transaction.clone(), finish.clone());
        tokio::spawn(async move {
            keyed
                .process(&keys, |txn, chunk| {
                    let ids = chunk.to_vec();
                    let (in_transaction, finish) = (in_transaction.clone(), finish.clone());
                    Box::pin(async move {
                        let inserted = txn
                            .execute_raw(Statement::from_sql_and_values(
                                DbBackend::Postgres,
                                "INSERT INTO events (id) SELECT unnest($1::text[]) \
                                 ON CONFLICT (id) DO NOTHING",
                                [ids.into()],
                            ))
                            .await?
                            .rows_affected();
                        in_transaction.notify_one();
                        finish.notified().await;
                        Ok::<_, DbErr>(inserted)
                    })
                })
                .await
        })
    };

    // The worker is mid-batch: its transaction is open and holds the keys' locks.
    in_transaction.notified().await;
    assert_eq!(advisory_locks(&db).await, 100);
    // The app's write commits on the pool's other connection meanwhile (the worker
    // holds its own until told to finish: a pinned pool would never serve the write).
    let write = tokio::time::timeout(
        LIMIT,
        store
            .connection()
            .execute_unprepared("INSERT INTO readiness DEFAULT VALUES"),
    )
    .await;
    assert!(
        matches!(write, Ok(Ok(_))),
        "the app's write did not commit while a worker was mid-batch: {write:?}"
    );
    assert!(
        !worker.is_finished(),
        "the worker's transaction was open all along"
    );

    finish.notify_one();
    let done = worker.await.expect("join").expect("process");
    assert_eq!(done.values, vec![100]);
    assert_eq!(
        advisory_locks(&db).await,
        0,
        "the locks went with the commit"
    );
}
