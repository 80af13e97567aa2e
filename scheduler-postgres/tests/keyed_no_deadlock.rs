#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Two workers process overlapping key sets given in opposite orders, round after
//! round: no `deadlock detected` (both take their locks in hash order, whatever the
//! input order), and every key is processed exactly once, by a check-then-insert into
//! a table with no unique constraint, so exactly-once rests on the locks alone.

use std::sync::Arc;

use scheduler_postgres::{Keyed, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use test_postgres::TestDb;
use tokio::sync::Barrier;

const ROUNDS: usize = 30;
const KEYS: usize = 6_000;

/// Processes `keys` as `worker`: inserts those not yet processed, in two statements
/// (look up, then insert) so that without the locks two workers could both find a
/// key new.
async fn worker(keyed: Keyed, keys: Vec<String>, worker: &'static str, start: Arc<Barrier>) -> u64 {
    start.wait().await;
    let done = keyed
        .process(&keys, |txn, chunk| {
            let keys: Vec<String> = chunk.to_vec();
            Box::pin(async move {
                let seen = txn
                    .query_all_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "SELECT key FROM processed WHERE key = ANY($1::text[])",
                        [keys.clone().into()],
                    ))
                    .await?
                    .iter()
                    .map(|row| row.try_get::<String>("", "key"))
                    .collect::<Result<Vec<_>, DbErr>>()?;
                let new: Vec<String> = keys.into_iter().filter(|k| !seen.contains(k)).collect();
                let inserted = txn
                    .execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "INSERT INTO processed (key, worker) SELECT unnest($1::text[]), $2",
                        [new.into(), worker.into()],
                    ))
                    .await?
                    .rows_affected();
                Ok::<_, DbErr>(inserted)
            })
        })
        .await
        .unwrap_or_else(|e| panic!("worker {worker}: {e}"));
    done.values.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_in_opposite_orders_never_deadlock() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(4))
        .await
        .expect("connect");
    store
        .connection()
        .execute_unprepared(
            "CREATE TABLE processed (key text NOT NULL, worker text NOT NULL); \
             CREATE INDEX ON processed (key)",
        )
        .await
        .expect("table");
    // Each worker locks its whole batch in one statement, so the two lock statements
    // run at the same time over the shared third of the keys: taken in input order,
    // they would meet in the middle and deadlock.
    let keyed = store.keyed(KeyedOptions::default().chunk(KEYS));

    for round in 0..ROUNDS {
        let keys: Vec<String> = (0..KEYS)
            .map(|i| format!("round-{round}-key-{i}"))
            .collect();
        // a: the first two thirds, ascending; b: the last two thirds, descending.
        let a = keys[..KEYS * 2 / 3].to_vec();
        let b: Vec<String> = keys[KEYS / 3..].iter().rev().cloned().collect();
        let start = Arc::new(Barrier::new(2));
        let a = tokio::spawn(worker(keyed.clone(), a, "a", start.clone()));
        let b = tokio::spawn(worker(keyed.clone(), b, "b", start));
        let (a, b) = (a.await.expect("worker a"), b.await.expect("worker b"));
        assert_eq!(
            a + b,
            KEYS as u64,
            "round {round}: each key inserted once (a {a}, b {b})"
        );
    }

    let row = store
        .begin() // safe behind PgBouncer too; dropped, it rolls back
        .await
        .expect("begin")
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n, count(DISTINCT key) AS distinct_keys FROM processed",
        ))
        .await
        .expect("count")
        .expect("row");
    let n: i64 = row.try_get("", "n").unwrap();
    let distinct: i64 = row.try_get("", "distinct_keys").unwrap();
    assert_eq!(distinct, (ROUNDS * KEYS) as i64, "every key processed");
    assert_eq!(n, distinct, "no key processed twice");
}
