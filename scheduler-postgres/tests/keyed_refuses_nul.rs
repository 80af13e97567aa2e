#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A key that is not valid PostgreSQL text (it holds a NUL byte) refuses the whole
//! batch before its first transaction begins, naming the key's position: nothing is
//! committed, not even the chunks before it, and the work never runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use scheduler_postgres::{KeyedError, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holding_nul_refuses_the_batch_before_begin() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(2))
        .await
        .expect("connect");
    let conn = test_postgres::inspect(db.url()).await;
    conn.execute_unprepared("CREATE TABLE events (id text PRIMARY KEY)")
        .await
        .expect("table");

    let keys: Vec<String> = vec![
        "fine-0".into(),
        "fine-1".into(),
        "bad\0key".into(),
        "fine-3".into(),
        "\0".into(),
    ];
    let runs = Arc::new(AtomicUsize::new(0));
    // One key per transaction: a check made only when the key's chunk is reached
    // would have committed the first two.
    let err = store
        .keyed(KeyedOptions::default().chunk(1))
        .process(&keys, |txn, chunk| {
            runs.fetch_add(1, Ordering::SeqCst);
            let ids = chunk.to_vec();
            Box::pin(async move {
                txn.execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "INSERT INTO events (id) SELECT unnest($1::text[])",
                    [ids.into()],
                ))
                .await
                .map(|r| r.rows_affected())
            })
        })
        .await
        .expect_err("a NUL byte is not PostgreSQL text");

    let message = err.to_string();
    assert_eq!(err.committed(), 0, "{message}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the work never ran");
    let events: i64 = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM events",
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get("", "n")
        .expect("n");
    assert_eq!(events, 0, "nothing committed");
    assert!(
        message.contains("key 2 ") && message.contains("NUL"),
        "the message names the first bad key's position and the byte: {message}"
    );
    assert!(
        matches!(err, KeyedError::NulInKey { index: 2 }),
        "a typed error: {err:?}"
    );

    // Without the bad keys the batch goes through.
    let good: Vec<String> = keys.into_iter().filter(|k| !k.contains('\0')).collect();
    let done = store
        .keyed(KeyedOptions::default())
        .process(&good, |_txn, chunk| {
            let n = chunk.len();
            Box::pin(async move { Ok::<_, DbErr>(n) })
        })
        .await
        .expect("valid keys");
    assert_eq!(done.values, [3]);
}
