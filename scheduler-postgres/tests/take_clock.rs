#![allow(clippy::expect_used)]
//! A take's clock sample ([`Taken::now`]) is the database's clock near the end of the
//! statement, not at its start: the runtime takes the sample as read when the answer
//! arrives, so a sample read at the start of a long take (a few hundred milliseconds
//! for 10,000 names) put the runtime's idea of the database's clock that far behind,
//! and every run of the next tick started that much late.
//!
//! The test holds a take up on a locked row; the server and the test share the
//! machine's clock.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{Connection, Executor, PgConnection};
use test_postgres::TestDb;

/// How long the take is held up.
const HELD: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_held_up_samples_the_clock_when_it_ends() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let name = LeaseName::new("held-up").expect("name");
    let first = Tick::new(store.now().await.expect("clock") - TimeDelta::seconds(10));
    let won = store
        .take(&[TakeRequest::new(name.clone(), first)], ttl)
        .await
        .expect("take")
        .won;
    assert_eq!(won.len(), 1);
    store
        .release(&[won[0].key()], Release::Completed)
        .await
        .expect("release");

    // Another session locks the row: the next take waits for it.
    let mut locker = PgConnection::connect(&test_postgres::direct_url(db.url()))
        .await
        .expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    lock.execute("SELECT 1 FROM scheduler_leases WHERE name = 'held-up' FOR UPDATE")
        .await
        .expect("lock");

    let next = Tick::new(store.now().await.expect("clock"));
    let sent = Utc::now();
    let take = {
        let store = store.clone();
        let request = [TakeRequest::new(name.clone(), next)];
        tokio::spawn(async move { store.take(&request, ttl).await })
    };
    tokio::time::sleep(HELD).await;
    lock.commit().await.expect("unlock");
    let taken = take.await.expect("join").expect("take");
    let answered = Utc::now();
    assert_eq!(taken.won.len(), 1, "{taken:?}");

    let now = taken.now.expect("the take reports the database's clock");
    // Read after the wait (at the statement's start it would be about `sent`), and
    // before the answer arrived (never later: the runtime's estimate must not run
    // ahead of the database's clock).
    assert!(
        now - sent >= TimeDelta::from_std(HELD).expect("delta") - TimeDelta::milliseconds(50),
        "the sample was read {} ms after the take was sent; the take waited {} ms",
        (now - sent).num_milliseconds(),
        HELD.as_millis()
    );
    assert!(
        now <= answered,
        "{now} is after the answer arrived ({answered})"
    );
}
