#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A chunk forced above what the server's shared lock table holds fails with the
//! typed error that names `max_locks_per_transaction` and the chunk size; nothing is
//! written, no lock is left, and the same keys then go through in default chunks.
//!
//! (Alone in its binary: while the big chunk fills the lock table, any other test on
//! the same server could run out of lock slots too.)

use scheduler_postgres::{KeyedError, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

/// Far above the lock table of the test server (`max_locks_per_transaction = 64`,
/// `max_connections = 200`: 12,800 nominal slots; about 23,000 locks fit in practice,
/// as PostgreSQL sizes the table for its auxiliary processes too and lets it grow into
/// spare shared memory).
const CHUNK: usize = 60_000;

/// Inserts the chunk's keys; returns how many were new.
fn insert<'c>(
    txn: &'c scheduler_postgres::KeyedTransaction,
    chunk: &'c [String],
) -> scheduler_postgres::FencedFuture<'c, u64, DbErr> {
    let ids = chunk.to_vec();
    Box::pin(async move {
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO events (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING",
            [ids.into()],
        ))
        .await
        .map(|r| r.rows_affected())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_too_large_for_the_lock_table_names_the_setting() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(2))
        .await
        .expect("connect");
    let conn = store.connection().clone();
    conn.execute_unprepared("CREATE TABLE events (id text PRIMARY KEY)")
        .await
        .expect("table");
    let keys: Vec<String> = (0..CHUNK).map(|i| format!("big-{i:06}")).collect();

    let forced = store.keyed(KeyedOptions::default().chunk(CHUNK));
    let err = forced
        .process(&keys, insert)
        .await
        .expect_err("the server cannot hold 60,000 locks in one transaction");
    assert!(err.is_out_of_lock_slots(), "{err}");
    assert_eq!(err.committed(), 0);
    match &err {
        KeyedError::OutOfLockSlots {
            chunk,
            max_locks_per_transaction,
            slots,
            ..
        } => {
            assert_eq!(*chunk, CHUNK);
            assert_eq!(*max_locks_per_transaction, 64);
            assert_eq!(*slots, 64 * 200);
        }
        other => panic!("expected OutOfLockSlots, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("max_locks_per_transaction") && message.contains("60000"),
        "the message names the setting and the chunk size: {message}"
    );
    println!("{message}");

    // Nothing written, no advisory lock left anywhere.
    let row = store
        .begin() // safe behind PgBouncer too; dropped, it rolls back
        .await
        .expect("begin")
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT (SELECT count(*) FROM events) AS events, \
                    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS locks",
        ))
        .await
        .expect("counts")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "events").unwrap(), 0);
    assert_eq!(row.try_get::<i64>("", "locks").unwrap(), 0);

    // The same keys in default chunks go through.
    let done = store
        .keyed(KeyedOptions::default())
        .process(&keys, insert)
        .await
        .expect("default chunks fit");
    assert!(done.transactions() > 1);
    assert_eq!(done.values.iter().sum::<u64>(), CHUNK as u64);
}
