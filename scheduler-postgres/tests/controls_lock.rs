//! A lock of the controls table (`LOCK TABLE`, as an `ALTER TABLE`, a `VACUUM FULL`
//! or a `pg_repack` takes it) holds up no take of a job nobody paused, and a paused
//! job is still refused meanwhile: the store knows the pauses as of the control
//! version, and a take reads only the version row while it has not moved.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{ControlRequest, LeaseName, Store, TakeRequest, Taken, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, TransactionTrait,
};
use test_postgres::TestDb;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(8)).expect("ttl")
}

async fn tick(store: &PostgresStore, offset: i64) -> Tick {
    Tick::new(store.now().await.expect("now") + TimeDelta::seconds(offset))
}

async fn take(store: &PostgresStore, job: &str, tick: Tick) -> scheduler_core::Result<Taken> {
    let request =
        TakeRequest::new(LeaseName::new(job).expect("name"), tick).controlled_by(job, "a");
    store.take(&[request], ttl()).await
}

/// Takes `job` for three ticks, 200 ms apart: the store learns the pauses (on a task
/// of its own, after its first take).
async fn warm_up(store: &PostgresStore, job: &str) {
    for offset in 1..=3 {
        take(store, job, tick(store, offset).await)
            .await
            .expect("take");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Another session's transaction holding the controls table locked, as `ALTER
/// TABLE` would (with the connection it runs on).
async fn lock_controls(db: &TestDb) -> (DatabaseConnection, DatabaseTransaction) {
    lock(db, "scheduler_leases_controls").await
}

/// Another session's transaction holding `table` locked (with its connection).
async fn lock(db: &TestDb, table: &str) -> (DatabaseConnection, DatabaseTransaction) {
    let admin = Database::connect(test_postgres::direct_url(db.url()))
        .await
        .expect("admin");
    let lock = admin.begin().await.expect("begin");
    lock.execute_unprepared(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .await
        .expect("lock");
    (admin, lock)
}

#[tokio::test]
async fn a_locked_controls_table_holds_up_no_unpaused_job() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let controls = store.controls().expect("controls");
    controls
        .pause(&ControlRequest::new("paused", "alice"))
        .await
        .expect("pause");
    warm_up(&store, "warm-up").await;
    // Another session holds the controls table locked, as `ALTER TABLE` would.
    let (_admin, lock) = lock_controls(&db).await;
    // Unpaused jobs are taken at once, tick after tick; the paused one is refused.
    for offset in 10..13 {
        let t = tick(&store, offset).await;
        let job = format!("free-{offset}");
        let taken = take(&store, &job, t).await.expect("an unpaused take");
        assert_eq!(taken.won.len(), 1, "{taken:?}");
        let taken = take(&store, "paused", t).await.expect("a paused take");
        assert!(taken.won.is_empty(), "a paused job won: {taken:?}");
        assert_eq!(taken.paused.len(), 1, "{taken:?}");
    }
    lock.rollback().await.expect("rollback");
}

#[tokio::test]
async fn a_pause_the_store_has_not_read_yet_is_never_skipped() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    warm_up(&store, "job").await;
    // A pause lands, and the table is locked before the store could read it again:
    // the take must not trust what it knew.
    store
        .controls()
        .expect("controls")
        .pause(&ControlRequest::new("job", "alice"))
        .await
        .expect("pause");
    let (_admin, lock) = lock_controls(&db).await;
    let t = tick(&store, 10).await;
    match take(&store, "job", t).await {
        Ok(taken) => assert!(taken.won.is_empty(), "a paused job won: {taken:?}"),
        Err(err) => println!("refused while the table is locked: {err}"),
    }
    lock.rollback().await.expect("rollback");
    let taken = take(&store, "job", t).await.expect("take");
    assert!(taken.won.is_empty(), "{taken:?}");
    assert_eq!(taken.paused.len(), 1, "{taken:?}");
}

/// Nor does a lock of the triggers table (every take asks whether a triggered run
/// keeps its tick's completion): the store knows those runs as of the version too.
#[tokio::test]
async fn a_locked_triggers_table_holds_up_no_take() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    warm_up(&store, "warm-up").await;
    let (_admin, lock) = lock(&db, "scheduler_leases_triggers").await;
    for offset in 10..13 {
        let job = format!("free-{offset}");
        let taken = take(&store, &job, tick(&store, offset).await)
            .await
            .expect("a take while the triggers table is locked");
        assert_eq!(taken.won.len(), 1, "{taken:?}");
    }
    lock.rollback().await.expect("rollback");
}
