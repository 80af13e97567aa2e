#![allow(clippy::expect_used, clippy::unwrap_used)]
//! A holder paused inside its fenced transaction (a GC pause, SIGSTOP, a cut network)
//! keeps its lease row locked; the server ends its idle transaction after the store's
//! `idle_transaction_timeout`, so other instances' takes are held up for that long at
//! most (not until the holder wakes), and the paused write never commits.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use test_postgres::TestDb;
use tokio::sync::Notify;

/// How long a test waits for something that takes moments on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

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

    // A enters its fenced transaction (the lease row is now locked) and "pauses"
    // between statements until the test wakes it.
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let wake = Arc::new(Notify::new());
    let woken = wake.clone();
    let paused = tokio::spawn(async move {
        a.fenced(&fence, |txn| {
            Box::pin(async move {
                let _ = entered_tx.send(());
                woken.notified().await;
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
    // transaction, after about a second; A stays paused until the take is done.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let later = loop {
        let now = b.now().await.expect("now");
        if now > held[0].expires_at {
            break Tick::new(now);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's clock never passed the lease's expiry"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A take held up by the row lock past the store's bound on a lease statement
    // (a quarter of the ttl) fails with a statement timeout, as the runtime's would,
    // and is asked again, until A's transaction is gone.
    let began = tokio::time::Instant::now();
    let deadline = began + LIMIT;
    let mut timed_out = 0;
    let taken = loop {
        let requests = [
            TakeRequest::new(x.clone(), later),
            TakeRequest::new(y.clone(), later),
        ];
        match b.take(&requests, ttl).await {
            Ok(taken) => break taken,
            Err(e) if e.to_string().contains("statement timeout") => timed_out += 1,
            Err(e) => panic!("take: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the take was held up by the paused holder for {LIMIT:?}: its idle transaction was never ended"
        );
    };
    eprintln!(
        "take waited {:?} for the paused holder's row lock ({timed_out} statement timeouts)",
        began.elapsed()
    );
    assert_eq!(taken.won.len(), 2, "{taken:?}");
    assert!(
        !paused.is_finished(),
        "A was still paused when B's take went through"
    );

    // When A wakes, its transaction is gone: the write is refused, nothing committed.
    wake.notify_one();
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
