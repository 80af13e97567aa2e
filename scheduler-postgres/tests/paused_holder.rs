#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A holder paused inside its fenced transaction (a GC pause, SIGSTOP, a cut network)
//! keeps its lease row locked; the server ends its idle transaction after the store's
//! `idle_transaction_timeout`, so other instances' takes are held up for that long at
//! most (not until the holder wakes), and the paused write never commits.

use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use test_postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_fenced_transaction_holds_up_takes_only_until_its_idle_timeout() {
    let db = TestDb::new().await;
    let options = || {
        PostgresOptions::default()
            .max_connections(2)
            .idle_transaction_timeout(Duration::from_secs(1))
    };
    let a = PostgresStore::connect(db.url(), options())
        .await
        .expect("a");
    let b = PostgresStore::connect(db.url(), options())
        .await
        .expect("b");
    let admin = Database::connect(db.direct_url()).await.expect("admin");
    admin
        .execute_unprepared("CREATE TABLE payouts (token bigint NOT NULL)")
        .await
        .expect("table");

    let (x, y) = (LeaseName::new("x").unwrap(), LeaseName::new("y").unwrap());
    let now = a.now().await.expect("now");
    let ttl = Ttl::new(Duration::from_millis(500)).unwrap();
    let held = a
        .take(&[TakeRequest::new(x.clone(), Tick::new(now))], ttl)
        .await
        .expect("take")
        .won;
    assert_eq!(held.len(), 1);
    let fence = Fence {
        name: x.clone(),
        holder: held[0].holder.clone(),
        token: held[0].token,
    };

    // A enters its fenced transaction (the lease row is now locked) and "pauses" for
    // 8 s between statements.
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let paused = tokio::spawn(async move {
        a.fenced(&fence, |txn| {
            Box::pin(async move {
                let _ = entered_tx.send(());
                tokio::time::sleep(Duration::from_secs(8)).await;
                txn.execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "INSERT INTO payouts (token) VALUES ($1)",
                    [1i64.into()],
                ))
                .await
                .map(drop)
            })
        })
        .await
    });
    entered.await.expect("in the fenced transaction");

    // Meanwhile A's lease expires and B asks for x (and y) at a later tick, in one
    // batch. The row lock holds the batch up until the server ends A's idle
    // transaction, after about a second: far less than A's pause.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = Tick::new(b.now().await.expect("now"));
    let began = tokio::time::Instant::now();
    let taken = tokio::time::timeout(
        Duration::from_secs(6),
        b.take(
            &[
                TakeRequest::new(x.clone(), later),
                TakeRequest::new(y.clone(), later),
            ],
            ttl,
        ),
    )
    .await
    .expect("the take was not held up until the paused holder woke")
    .expect("take");
    eprintln!(
        "take waited {:?} for the paused holder's row lock",
        began.elapsed()
    );
    assert_eq!(taken.won.len(), 2, "{taken:?}");

    // When A wakes, its transaction is gone: the write is refused, nothing committed.
    let result = paused.await.expect("join");
    assert!(result.is_err(), "{result:?}");
    let row = admin
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM payouts",
        ))
        .await
        .expect("count")
        .expect("row");
    assert_eq!(row.try_get::<i64>("", "n").expect("n"), 0);
}
