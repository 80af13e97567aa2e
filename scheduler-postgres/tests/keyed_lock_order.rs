#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The advisory locks of a chunk are taken in ascending hash order, whatever the
//! input order: a worker blocked on one key (held by another session) holds exactly
//! the locks of the keys with smaller hashes, and none of the larger ones.

use std::collections::BTreeSet;
use std::time::Duration;

use scheduler_postgres::{KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, TransactionTrait};
use test_postgres::TestDb;

const KEYS: usize = 64;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_taken_in_ascending_hash_order() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(4))
        .await
        .expect("connect");
    let conn = test_postgres::inspect(db.url()).await;

    // The keys in a scrambled order, and their lock ids as the server computes them.
    let keys: Vec<String> = (0..KEYS)
        .map(|i| format!("order-{:02}", (i * 37) % KEYS))
        .collect();
    let ids: Vec<i64> = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT hashtextextended(k, 0) AS id FROM unnest($1::text[]) AS k ORDER BY id",
            [keys.clone().into()],
        ))
        .await
        .expect("hashes")
        .iter()
        .map(|row| row.try_get::<i64>("", "id"))
        .collect::<Result<_, DbErr>>()
        .expect("ids");
    assert_eq!(ids.len(), KEYS);
    let middle = ids[KEYS / 2];

    // Another session holds the middle key's lock.
    let blocker = conn.begin().await.expect("begin");
    blocker
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock($1)",
            [middle.into()],
        ))
        .await
        .expect("blocker lock");

    let keyed = store.keyed(KeyedOptions::default());
    let worker = tokio::spawn(async move {
        keyed
            .process(&keys, |_txn, chunk| {
                let n = chunk.len();
                Box::pin(async move { Ok::<_, DbErr>(n) })
            })
            .await
    });

    // Wait until the worker is blocked on a lock, then read what it holds.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let waiter: i32 = loop {
        let row = conn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ))
            .await
            .expect("pg_locks");
        if let Some(row) = row {
            break row.try_get("", "pid").expect("pid");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never blocked on the held lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let held: BTreeSet<i64> = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            // A bigint advisory lock shows as classid (high 32 bits), objid (low 32 bits).
            "SELECT (classid::int8 << 32) | objid::int8 AS id FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = $1",
            [waiter.into()],
        ))
        .await
        .expect("held locks")
        .iter()
        .map(|row| row.try_get::<i64>("", "id"))
        .collect::<Result<_, DbErr>>()
        .expect("ids");
    let smaller: BTreeSet<i64> = ids[..KEYS / 2].iter().copied().collect();
    assert_eq!(
        held, smaller,
        "blocked on the middle hash, the worker holds exactly the smaller ones"
    );

    blocker.commit().await.expect("release the middle key");
    let done = tokio::time::timeout(LIMIT, worker)
        .await
        .expect("the worker finishes once the key is free")
        .expect("join")
        .expect("process");
    assert_eq!(done.values, vec![KEYS]);
    assert_eq!(done.locks, KEYS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripes_are_locked_in_ascending_order_too() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(4))
        .await
        .expect("connect");
    let conn = test_postgres::inspect(db.url()).await;
    let keys: Vec<String> = (0..500).rev().map(|i| format!("stripe-{i}")).collect();
    let stripes = 16u32;

    // Hold stripe 7 from another session.
    let blocker = conn.begin().await.expect("begin");
    blocker
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock($1, 7)",
            [scheduler_postgres::keyed::STRIPE_LOCK_CLASS.into()],
        ))
        .await
        .expect("blocker lock");
    let keyed = store.keyed(KeyedOptions::default().stripes(stripes));
    let worker = tokio::spawn(async move {
        keyed
            .process(&keys, |_txn, chunk| {
                let n = chunk.len();
                Box::pin(async move { Ok::<_, DbErr>(n) })
            })
            .await
    });
    let deadline = tokio::time::Instant::now() + LIMIT;
    let waiter: i32 = loop {
        let row = conn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ))
            .await
            .expect("pg_locks");
        if let Some(row) = row {
            break row.try_get("", "pid").expect("pid");
        }
        assert!(tokio::time::Instant::now() < deadline, "never blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let held: BTreeSet<i64> = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            // The two-int4 form shows as classid (first key), objid (second key).
            "SELECT objid::int8 AS stripe FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND pid = $1",
            [waiter.into()],
        ))
        .await
        .expect("held locks")
        .iter()
        .map(|row| row.try_get::<i64>("", "stripe"))
        .collect::<Result<_, DbErr>>()
        .expect("stripes");
    assert_eq!(held, (0..7).collect::<BTreeSet<i64>>());

    blocker.commit().await.expect("release stripe 7");
    let done = tokio::time::timeout(LIMIT, worker)
        .await
        .expect("finishes")
        .expect("join")
        .expect("process");
    assert_eq!(
        done.values,
        vec![500],
        "one transaction for the whole batch"
    );
    assert_eq!(
        done.locks,
        u64::from(stripes),
        "500 keys fill all 16 stripes"
    );
}
