//! The shared lease invariants against a real SQLite file: several stores, each with
//! its own pool (an instance each), on one file.

#![allow(clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta};
use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::{TempDir, integrity};

async fn instances(path: &Path, n: usize) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = SqliteStore::open(path, SqliteOptions::default())
            .await
            .expect("open");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_holder_under_contention() {
    let dir = TempDir::new("contention");
    let stores = instances(&dir.join("leases.db"), 4).await;
    scheduler_store_tests::one_holder_under_contention(&stores, 50).await;
}

#[tokio::test]
async fn expired_lease_is_taken_over_and_renewed_one_is_not() {
    let dir = TempDir::new("takeover");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::expired_lease_is_taken_over(&s[0], &s[1]).await;
}

#[tokio::test]
async fn former_holder_cannot_touch_new_lease() {
    let dir = TempDir::new("former-holder");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::former_holder_cannot_touch_new_lease(&s[0], &s[1]).await;
}

#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let dir = TempDir::new("tokens");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::fencing_tokens_increase(&s[0], &s[1]).await;
}

#[tokio::test]
async fn released_tick_is_done_and_crashed_tick_is_retried() {
    let dir = TempDir::new("ticks");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::released_tick_is_done(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_retried_take_of_the_same_holder_wins() {
    let dir = TempDir::new("retried");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::retried_take_of_the_same_holder_wins(&s[0], &s[1]).await;
}

#[tokio::test]
async fn cancel_requests_reach_the_holder() {
    let dir = TempDir::new("cancel");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::cancel_requests_reach_the_holder(&s[0], &s[1]).await;
}

#[tokio::test]
async fn node_clocks_do_not_matter() {
    let dir = TempDir::new("node-clock");
    let s = instances(&dir.join("ahead.db"), 2).await;
    scheduler_store_tests::node_clock_does_not_matter(&s[0], &s[1], TimeDelta::hours(1)).await;
    let s = instances(&dir.join("behind.db"), 2).await;
    scheduler_store_tests::node_clock_does_not_matter(&s[0], &s[1], TimeDelta::seconds(-45)).await;
}

#[tokio::test]
async fn batch_of_1000_returns_exactly_the_free() {
    let dir = TempDir::new("batch");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::batch_returns_exactly_the_free(&s[0], &s[1], 1000).await;
}

#[tokio::test]
async fn awkward_names_are_bound_not_spliced() {
    let dir = TempDir::new("awkward");
    let s = instances(&dir.join("leases.db"), 1).await;
    scheduler_store_tests::awkward_names_round_trip(&s[0]).await;
}

#[tokio::test]
async fn two_apps_share_one_file_through_their_own_tables() {
    let dir = TempDir::new("two-apps");
    let path = dir.join("leases.db");
    let app_a = SqliteStore::open(
        &path,
        SqliteOptions::default()
            .table("app_a_leases")
            .expect("name"),
    )
    .await
    .expect("open a");
    let app_b = SqliteStore::open(
        &path,
        SqliteOptions::default()
            .table("app_b_leases")
            .expect("name"),
    )
    .await
    .expect("open b");
    let (a, b): (SharedStore, SharedStore) = (Arc::new(app_a), Arc::new(app_b));
    // The same lease name is free in each app's table.
    scheduler_store_tests::batch_returns_exactly_the_free(&a, &a, 10).await;
    scheduler_store_tests::batch_returns_exactly_the_free(&b, &b, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_stores_open_one_new_file_at_once() {
    let dir = TempDir::new("open-race");
    let path = dir.join("leases.db");
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let path = path.clone();
        opening.spawn(async move { SqliteStore::open(&path, SqliteOptions::default()).await });
    }
    let stores: Vec<SqliteStore> = opening
        .join_all()
        .await
        .into_iter()
        .map(|opened| opened.expect("every store opens"))
        .collect();
    // The schema was created once, and every store sees the same leases.
    let applied = stores[0]
        .connection()
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT version FROM scheduler_leases_migrations",
        ))
        .await
        .expect("bookkeeping");
    assert_eq!(applied.len(), scheduler_migrations::MIGRATIONS.len());
    let tick = Tick::new(stores[0].now().await.expect("clock"));
    let name = LeaseName::new("shared").expect("name");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let mut won = 0;
    for store in &stores {
        won += store
            .take(&[TakeRequest::new(name.clone(), tick)], ttl)
            .await
            .expect("take")
            .won
            .len();
    }
    assert_eq!(won, 1);
    assert_eq!(integrity(&stores[0]).await, "ok");
}

#[tokio::test]
async fn ticks_and_expiries_round_trip_to_the_microsecond() {
    let dir = TempDir::new("micros");
    let s = instances(&dir.join("leases.db"), 1).await;
    let store = &s[0];
    let now = store.now().await.expect("clock");
    // A tick with every microsecond digit set, a little in the past.
    let at = DateTime::from_timestamp(now.timestamp() - 1, 123_456_000).expect("in range");
    let tick = Tick::new(at);
    let name = LeaseName::new("precise").expect("name");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let lease = store
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    assert_eq!(lease.tick, tick);
    let later = store.now().await.expect("clock");
    assert!(lease.expires_at > now && lease.expires_at <= later + TimeDelta::seconds(60));
    // The same tick is held, and reported with its exact tick and expiry.
    let lost = store
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await
        .expect("take");
    assert!(lost.won.is_empty());
    assert_eq!(lost.held.len(), 1);
    assert_eq!(
        (lost.held[0].tick, lost.held[0].expires_at),
        (tick, lease.expires_at)
    );
    // One microsecond later is a later tick, but still held.
    let next = Tick::new(at + TimeDelta::microseconds(1));
    assert!(
        store
            .take(&[TakeRequest::new(name, next)], ttl)
            .await
            .expect("take")
            .won
            .is_empty()
    );
}

#[tokio::test]
async fn leases_survive_reopening_and_the_schema_is_applied_once() {
    let dir = TempDir::new("reopen");
    let path = dir.join("leases.db");
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let name = LeaseName::new("durable").expect("name");
    let first = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("open");
    let tick = Tick::new(first.now().await.expect("clock"));
    let lease = first
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await
        .expect("take")
        .won
        .pop()
        .expect("free");
    first
        .release(&[lease.key()], Release::Completed)
        .await
        .expect("release");
    first.close().await.expect("close");

    let again = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .expect("reopen");
    let lost = again
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await
        .expect("take");
    assert!(lost.won.is_empty(), "the completed tick was forgotten");
    assert!(lost.held[0].completed);
    let next = Tick::new(tick.at() + TimeDelta::seconds(1));
    let won = again
        .take(&[TakeRequest::new(name, next)], ttl)
        .await
        .expect("take")
        .won;
    assert_eq!(won.len(), 1);
    assert_eq!(
        won[0].token.get(),
        2,
        "the fencing token kept growing across the reopen"
    );
    let rows = again
        .connection()
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT version FROM scheduler_leases_migrations",
        ))
        .await
        .expect("bookkeeping");
    assert_eq!(rows.len(), scheduler_migrations::MIGRATIONS.len());
    let mode = again
        .connection()
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA journal_mode",
        ))
        .await
        .expect("pragma")
        .expect("row")
        .try_get_by_index::<String>(0)
        .expect("text");
    assert_eq!(mode, "wal");
    let synchronous = again
        .connection()
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA synchronous",
        ))
        .await
        .expect("pragma")
        .expect("row")
        .try_get_by_index::<i64>(0)
        .expect("int");
    assert_eq!(synchronous, 2, "synchronous = FULL");
}

#[tokio::test]
async fn missing_rows_are_created_once() {
    let dir = TempDir::new("created");
    let s = instances(&dir.join("leases.db"), 2).await;
    scheduler_store_tests::missing_rows_are_created_once(&s[0], &s[1]).await;
}
