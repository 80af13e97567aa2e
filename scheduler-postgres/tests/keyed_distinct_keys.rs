#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The work is handed each distinct key of a batch once, at its first occurrence, in
//! input order: a set-based insert of its chunk into a table **without** a unique
//! constraint books 5 rows for a batch of 8 items with 5 distinct keys, and when a
//! later chunk fails, `committed()` counts the batch's items done, repeats included.

use std::sync::{Arc, Mutex};

use scheduler_postgres::{KeyedError, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

/// A delivered event: its id is the key; a redelivery may carry another amount.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    id: String,
    amount: i64,
}

impl AsRef<str> for Event {
    fn as_ref(&self) -> &str {
        &self.id
    }
}

fn event(id: &str, amount: i64) -> Event {
    Event {
        id: id.to_owned(),
        amount,
    }
}

async fn setup() -> (PostgresStore, DatabaseConnection) {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default().max_connections(2))
        .await
        .expect("connect");
    let conn = test_postgres::inspect(db.url()).await;
    // No unique constraint: only the batch's deduplication keeps a key from being
    // booked twice by one set-based insert.
    conn.execute_unprepared("CREATE TABLE booked (id text NOT NULL, amount int8 NOT NULL)")
        .await
        .expect("table");
    (store, conn)
}

async fn booked(conn: &DatabaseConnection) -> Vec<(String, i64)> {
    conn.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT id, amount FROM booked ORDER BY id, amount",
    ))
    .await
    .expect("rows")
    .iter()
    .map(|row| Ok((row.try_get("", "id")?, row.try_get("", "amount")?)))
    .collect::<Result<_, DbErr>>()
    .expect("decode")
}

/// Books the chunk's events with one set-based insert; records what it was handed.
fn book<'c>(
    txn: &'c scheduler_postgres::KeyedTransaction,
    chunk: &'c [Event],
    handed: &Arc<Mutex<Vec<Event>>>,
) -> scheduler_postgres::FencedFuture<'c, u64, DbErr> {
    handed.lock().unwrap().extend_from_slice(chunk);
    let ids: Vec<String> = chunk.iter().map(|e| e.id.clone()).collect();
    let amounts: Vec<i64> = chunk.iter().map(|e| e.amount).collect();
    Box::pin(async move {
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO booked (id, amount) SELECT * FROM unnest($1::text[], $2::int8[])",
            [ids.into(), amounts.into()],
        ))
        .await
        .map(|r| r.rows_affected())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_sees_each_distinct_key_once_and_books_5_rows_for_5_keys() {
    let (store, conn) = setup().await;
    // 8 deliveries of 5 events; the redeliveries carry other amounts.
    let batch = vec![
        event("b", 1),
        event("a", 2),
        event("b", 3),
        event("c", 4),
        event("a", 5),
        event("d", 6),
        event("e", 7),
        event("c", 8),
    ];
    let handed = Arc::new(Mutex::new(Vec::new()));
    let done = store
        .keyed(KeyedOptions::default())
        .process(&batch, |txn, chunk| book(txn, chunk, &handed))
        .await
        .expect("process");

    assert_eq!(
        *handed.lock().unwrap(),
        [
            event("b", 1),
            event("a", 2),
            event("c", 4),
            event("d", 6),
            event("e", 7)
        ],
        "each distinct key once, its first occurrence, in input order"
    );
    assert_eq!(done.values, [5], "one transaction, 5 rows inserted");
    assert_eq!(done.locks, 5);
    assert_eq!(
        booked(&conn).await,
        [
            ("a".to_owned(), 2),
            ("b".to_owned(), 1),
            ("c".to_owned(), 4),
            ("d".to_owned(), 6),
            ("e".to_owned(), 7)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_counts_the_batch_items_done_repeats_included() {
    let (store, conn) = setup().await;
    // Distinct keys a, b | c, d in chunks of 2; "c" first occurs at index 3.
    let batch = vec![
        event("a", 1),
        event("b", 2),
        event("a", 3),
        event("c", 4),
        event("b", 5),
        event("d", 6),
    ];
    let handed = Arc::new(Mutex::new(Vec::new()));
    let err = store
        .keyed(KeyedOptions::default().chunk(2))
        .process(&batch, |txn, chunk| {
            if chunk.iter().any(|e| e.id == "c") {
                return Box::pin(async { Err(DbErr::Custom("refused".to_owned())) });
            }
            book(txn, chunk, &handed)
        })
        .await
        .expect_err("the second chunk fails");
    assert!(matches!(err, KeyedError::Work { .. }), "{err:?}");
    assert_eq!(
        err.committed(),
        3,
        "batch[..3] (a, b, and a's repeat) is done; c at index 3 is not"
    );
    assert_eq!(*handed.lock().unwrap(), [event("a", 1), event("b", 2)]);
    assert_eq!(
        booked(&conn).await,
        [("a".to_owned(), 1), ("b".to_owned(), 2)]
    );
}
