#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A chunk waits for its keys as long as another transaction holds one, even far
//! longer than the store's lease-statement bound (`PostgresOptions::statement_timeout`,
//! which the connections the store opens carry as their own `statement_timeout`).

use std::time::{Duration, Instant};

use scheduler_postgres::{KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, TransactionTrait};
use test_postgres::TestDb;

/// The store's lease-statement bound in this test.
const BOUND: Duration = Duration::from_millis(300);

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_waits_for_a_key_held_longer_than_the_statement_bound() {
    let db = TestDb::new().await;
    let options = PostgresOptions::default()
        .max_connections(2)
        .statement_timeout(BOUND);
    let store = PostgresStore::connect(db.url(), options)
        .await
        .expect("connect");
    let conn = test_postgres::inspect(db.url()).await;

    // Another session holds the lock of the key "held".
    let blocker = conn.begin().await.expect("begin");
    blocker
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            ["held".into()],
        ))
        .await
        .expect("blocker lock");

    let keyed = store.keyed(KeyedOptions::default());
    let worker = tokio::spawn(async move {
        let keys = ["free-1", "held", "free-2"];
        keyed
            .process(&keys, |_txn, chunk| {
                let n = chunk.len();
                Box::pin(async move { Ok::<_, DbErr>(n) })
            })
            .await
    });

    // Once the worker waits for the key, hold it for three bounds more.
    let deadline = Instant::now() + LIMIT;
    loop {
        let waiting: i64 = conn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            ))
            .await
            .expect("pg_locks")
            .expect("row")
            .try_get("", "n")
            .expect("n");
        if waiting > 0 {
            break;
        }
        assert!(!worker.is_finished(), "the worker finished without waiting");
        assert!(Instant::now() < deadline, "the worker never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held_until = Instant::now() + 3 * BOUND;
    while Instant::now() < held_until {
        if worker.is_finished() {
            let result = worker.await.expect("join");
            panic!("the worker gave up waiting for the held key: {result:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    blocker.commit().await.expect("release the key");

    let done = tokio::time::timeout(LIMIT, worker)
        .await
        .expect("the worker finishes once the key is free")
        .expect("join")
        .expect("process");
    assert_eq!(done.values, [3]);
    assert_eq!(done.locks, 3);
}
