#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A caller whose work fails, or panics, leaves nothing behind: its chunk is rolled
//! back, its backend holds no advisory lock afterwards, and another worker (another
//! instance, with a pool of its own) then processes the same keys.

use std::time::Duration;

use scheduler_postgres::{
    KeyedError, KeyedOptions, KeyedTransaction, PostgresOptions, PostgresStore,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};
use test_postgres::TestDb;
use tokio::sync::mpsc;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// A store whose transactions the server never ends for idling (an hour, far beyond
/// [`LIMIT`]): a transaction left open on a connection handed back to the pool would
/// keep its locks past every wait here. With a pool of 2 no connection is kept out of
/// the pool between chunks: each chunk runs on a pool connection.
async fn instance(url: &str) -> PostgresStore {
    let options = PostgresOptions::default()
        .max_connections(2)
        .idle_transaction_timeout(Duration::from_secs(3600));
    PostgresStore::connect(url, options).await.expect("connect")
}

async fn setup() -> (TestDb, PostgresStore) {
    let db = TestDb::new().await;
    let store = instance(db.url()).await;
    store
        .connection()
        .execute_unprepared("CREATE TABLE events (id text PRIMARY KEY)")
        .await
        .expect("table");
    (db, store)
}

fn keys(prefix: &str) -> Vec<String> {
    (0..50).map(|i| format!("{prefix}-{i}")).collect()
}

/// Inserts the chunk's keys and returns the transaction's backend pid.
async fn insert_and_pid(txn: &KeyedTransaction, ids: Vec<String>) -> Result<i32, DbErr> {
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO events (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING",
        [ids.into()],
    ))
    .await?;
    txn.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT pg_backend_pid() AS pid",
    ))
    .await?
    .ok_or_else(|| DbErr::Custom("no pid".to_owned()))?
    .try_get("", "pid")
}

async fn advisory_locks_of(conn: &DatabaseConnection, pid: i32) -> i64 {
    conn.query_one_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1",
        [pid.into()],
    ))
    .await
    .expect("pg_locks")
    .expect("row")
    .try_get("", "n")
    .expect("n")
}

async fn events(conn: &DatabaseConnection) -> i64 {
    conn.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT count(*) AS n FROM events",
    ))
    .await
    .expect("count")
    .expect("row")
    .try_get("", "n")
    .expect("n")
}

/// Another instance processes `keys`; it would wait forever on a leaked lock.
async fn another_worker_processes(url: &str, keys: &[String]) {
    let other = instance(url).await;
    let done = tokio::time::timeout(
        LIMIT,
        other
            .keyed(KeyedOptions::default())
            .process(keys, |txn, chunk| {
                let ids = chunk.to_vec();
                Box::pin(async move { insert_and_pid(txn, ids).await })
            }),
    )
    .await
    .expect("the keys' locks were released")
    .expect("process");
    assert_eq!(done.transactions(), 1);
    assert_eq!(
        events(&test_postgres::inspect(url).await).await,
        keys.len() as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_caller_rolls_back_and_releases_its_locks() {
    let (db, store) = setup().await;
    let keys = keys("failing");
    let keyed = store.keyed(KeyedOptions::default());
    let result = keyed
        .process(&keys, |txn, chunk| {
            let ids = chunk.to_vec();
            Box::pin(async move {
                let pid = insert_and_pid(txn, ids).await.map_err(|e| e.to_string())?;
                Err::<(), _>(format!("refused by backend {pid}"))
            })
        })
        .await;
    let (error, committed) = match result {
        Err(KeyedError::Work { error, committed }) => (error, committed),
        other => panic!("expected the work's error, got {other:?}"),
    };
    assert_eq!(committed, 0);
    let pid: i32 = error
        .strip_prefix("refused by backend ")
        .and_then(|pid| pid.parse().ok())
        .expect("the pid");

    // The rollback was awaited: the locks are gone at once, and so are the rows.
    let conn = test_postgres::inspect(db.url()).await;
    assert_eq!(advisory_locks_of(&conn, pid).await, 0);
    assert_eq!(events(&conn).await, 0);
    another_worker_processes(db.url(), &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_caller_rolls_back_and_releases_its_locks() {
    let (db, store) = setup().await;
    let keys = keys("panicking");
    let keyed = store.keyed(KeyedOptions::default());
    let (pids, mut pid) = mpsc::unbounded_channel();
    let task = {
        let keys = keys.clone();
        tokio::spawn(async move {
            keyed
                .process(&keys, |txn, chunk| {
                    let ids = chunk.to_vec();
                    let pids = pids.clone();
                    Box::pin(async move {
                        let pid = insert_and_pid(txn, ids).await?;
                        pids.send(pid).expect("send the pid");
                        if pid > 0 {
                            panic!("a bug in the caller's work");
                        }
                        Ok::<_, DbErr>(())
                    })
                })
                .await
        })
    };
    let joined = task.await.expect_err("the task panicked");
    assert!(joined.is_panic());
    let pid = pid.recv().await.expect("the pid of the panicking chunk");

    // The dropped transaction's connection is closed, never handed back to the pool
    // inside the transaction; the server rolls back as it sees it go: wait for that,
    // bounded.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let conn = test_postgres::inspect(db.url()).await;
    while advisory_locks_of(&conn, pid).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "backend {pid} still holds advisory locks {LIMIT:?} after the panic"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(events(&conn).await, 0, "the chunk was rolled back");
    another_worker_processes(db.url(), &keys).await;
}

/// Inserts `ids` without `ON CONFLICT`: fails on a key already stored.
fn strict_insert(ids: Vec<String>) -> Statement {
    Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO events (id) SELECT unnest($1::text[])",
        [ids.into()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_swallows_a_failed_statement_is_not_counted_committed() {
    let (db, store) = setup().await;
    let keyed = store.keyed(KeyedOptions::default());
    let stored = keys("stored");
    keyed
        .process(&stored, |txn, chunk| {
            let ids = chunk.to_vec();
            Box::pin(async move { txn.execute_raw(strict_insert(ids)).await.map(drop) })
        })
        .await
        .expect("the first keys");
    // The work inserts new keys, then one already stored (a duplicate key error,
    // which aborts the transaction), ignores that error and returns Ok: PostgreSQL
    // turns the COMMIT into a rollback, so nothing of the chunk is written.
    let fresh = keys("fresh");
    let result = keyed
        .process(&fresh, |txn, chunk| {
            let (ids, again) = (chunk.to_vec(), vec!["stored-0".to_owned()]);
            Box::pin(async move {
                txn.execute_raw(strict_insert(ids)).await?;
                let refused = txn.execute_raw(strict_insert(again)).await;
                assert!(refused.is_err(), "the duplicate is refused");
                Ok::<_, DbErr>(())
            })
        })
        .await;
    match result {
        Err(KeyedError::Aborted { cause, committed }) => {
            assert_eq!(committed, 0);
            assert!(cause.to_string().contains("duplicate key"), "{cause}");
        }
        other => panic!("expected the aborted chunk's error, got {other:?}"),
    }
    let conn = test_postgres::inspect(db.url()).await;
    assert_eq!(
        events(&conn).await,
        stored.len() as i64,
        "nothing of it written"
    );

    // A work that recovers with a savepoint commits what it kept.
    let done = keyed
        .process(&fresh, |txn, chunk| {
            let (ids, again) = (chunk.to_vec(), vec!["stored-0".to_owned()]);
            Box::pin(async move {
                txn.execute_raw(strict_insert(ids)).await?;
                txn.execute_unprepared("SAVEPOINT again").await?;
                if txn.execute_raw(strict_insert(again)).await.is_err() {
                    txn.execute_unprepared("ROLLBACK TO SAVEPOINT again")
                        .await?;
                }
                Ok::<_, DbErr>(())
            })
        })
        .await
        .expect("a recovered chunk commits");
    assert_eq!(done.transactions(), 1);
    assert_eq!(
        events(&conn).await,
        (stored.len() + fresh.len()) as i64,
        "the recovered chunk's rows are written"
    );
}
