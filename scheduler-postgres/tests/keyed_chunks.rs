#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A batch of 100,000 keys on a server with default lock settings: chunked under the
//! shared lock table, it succeeds, every key once; processed again, nothing is new.
//! Folded into lock stripes, the same batch is one transaction.

use scheduler_postgres::{KeyedOptions, LockTable, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

const BATCH: usize = 100_000;

async fn store() -> PostgresStore {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(2))
        .await
        .expect("connect");
    store
        .connection()
        .execute_unprepared("CREATE TABLE events (id text PRIMARY KEY)")
        .await
        .expect("table");
    store
}

fn keys(prefix: &str) -> Vec<String> {
    (0..BATCH).map(|i| format!("{prefix}-{i:06}")).collect()
}

/// Inserts the chunk's keys; returns how many were new.
fn insert<'c>(
    txn: &'c scheduler_postgres::KeyedTransaction,
    chunk: &'c [String],
) -> scheduler_postgres::FencedFuture<'c, u64, DbErr> {
    let ids = chunk.to_vec();
    Box::pin(async move {
        let result = txn
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "INSERT INTO events (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING",
                [ids.into()],
            ))
            .await?;
        Ok(result.rows_affected())
    })
}

async fn count(store: &PostgresStore) -> i64 {
    store
        .begin() // safe behind PgBouncer too; dropped, it rolls back
        .await
        .expect("begin")
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM events",
        ))
        .await
        .expect("count")
        .expect("row")
        .try_get("", "n")
        .expect("n")
}

async fn setting(store: &PostgresStore, name: &str) -> u32 {
    let row = store
        .begin() // safe behind PgBouncer too; dropped, it rolls back
        .await
        .expect("begin")
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SHOW {name}"),
        ))
        .await
        .expect("show")
        .expect("row");
    let value: String = row.try_get("", name).expect("value");
    value.parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_100_000_keys_is_chunked_under_the_lock_table() {
    let store = store().await;
    let keyed = store.keyed(KeyedOptions::default());

    // The default chunk comes from the server's settings.
    let table = keyed.lock_table().await.expect("lock table");
    assert_eq!(
        table,
        LockTable {
            max_locks_per_transaction: setting(&store, "max_locks_per_transaction").await,
            max_connections: setting(&store, "max_connections").await,
            max_prepared_transactions: setting(&store, "max_prepared_transactions").await,
        }
    );
    let chunk = keyed.chunk().await.expect("chunk");
    assert_eq!(chunk, table.default_chunk());
    assert!(
        (chunk as u64) * 8 <= table.slots(),
        "the default chunk ({chunk}) stays well below the lock table ({} slots)",
        table.slots()
    );

    let keys = keys("event");
    let done = keyed.process(&keys, insert).await.expect("process");
    assert_eq!(done.transactions(), BATCH.div_ceil(chunk));
    assert_eq!(done.values.iter().sum::<u64>(), BATCH as u64);
    assert_eq!(done.locks, BATCH as u64, "one lock per distinct key");
    assert_eq!(count(&store).await, BATCH as i64);

    // Again: every key is already there, nothing is written.
    let again = keyed.process(&keys, insert).await.expect("process again");
    assert_eq!(again.values.iter().sum::<u64>(), 0);
    assert_eq!(count(&store).await, BATCH as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripes_process_a_batch_of_100_000_keys_in_one_transaction() {
    let store = store().await;
    let keyed = store.keyed(KeyedOptions::default().stripes(256));
    let keys = keys("striped");
    let done = keyed.process(&keys, insert).await.expect("process");
    assert_eq!(done.transactions(), 1, "the batch is atomic");
    assert_eq!(done.locks, 256, "at most one lock per stripe");
    assert_eq!(count(&store).await, BATCH as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_stripes_than_a_chunk_fall_back_to_chunks() {
    let store = store().await;
    let keyed = store.keyed(KeyedOptions::default().chunk(1_000).stripes(5_000));
    let keys: Vec<String> = keys("wide").into_iter().take(2_500).collect();
    let done = keyed.process(&keys, insert).await.expect("process");
    assert_eq!(done.transactions(), 3, "2,500 keys in chunks of 1,000");
    assert_eq!(count(&store).await, 2_500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_batch_runs_nothing() {
    let store = store().await;
    let keyed = store.keyed(KeyedOptions::default());
    let done = keyed
        .process(&Vec::<String>::new(), insert)
        .await
        .expect("process");
    assert_eq!(done.transactions(), 0);
    assert_eq!(done.locks, 0);
}
