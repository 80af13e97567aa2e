//! The shared lease invariants against a real PostgreSQL server: several stores,
//! each with its own pool (an instance each), on one database.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use test_postgres::TestDb;

/// The stores' lease-statement bound. These tests check what a statement does, not how
/// soon it answers; with the default bound (2 s) a take on a freshly created database
/// timed out (57014) once in CI, while the binary's other tests created and migrated
/// their databases at once on 2 cores and the first commits waited on their WAL.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

async fn instances(db: &TestDb, n: usize) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let options = PostgresOptions::default().statement_timeout(STATEMENT_TIMEOUT);
        let store = PostgresStore::connect(db.url(), options)
            .await
            .expect("connect");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_holder_under_contention() {
    let db = TestDb::new().await;
    let stores = instances(&db, 4).await;
    scheduler_store_tests::one_holder_under_contention(&stores, 50).await;
}

#[tokio::test]
async fn expired_lease_is_taken_over_and_renewed_one_is_not() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::expired_lease_is_taken_over(&s[0], &s[1]).await;
}

#[tokio::test]
async fn former_holder_cannot_touch_new_lease() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::former_holder_cannot_touch_new_lease(&s[0], &s[1]).await;
}

#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::fencing_tokens_increase(&s[0], &s[1]).await;
}

#[tokio::test]
async fn released_tick_is_done_and_crashed_tick_is_retried() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::released_tick_is_done(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_retried_take_of_the_same_holder_wins() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::retried_take_of_the_same_holder_wins(&s[0], &s[1]).await;
}

#[tokio::test]
async fn cancel_requests_reach_the_holder() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::cancel_requests_reach_the_holder(&s[0], &s[1]).await;
}

#[tokio::test]
async fn node_clocks_do_not_matter() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::node_clock_does_not_matter(&s[0], &s[1], TimeDelta::hours(1)).await;
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::node_clock_does_not_matter(&s[0], &s[1], TimeDelta::seconds(-45)).await;
}

#[tokio::test]
async fn awkward_names_are_bound_not_spliced() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    scheduler_store_tests::awkward_names_round_trip(&s[0]).await;
}

#[tokio::test]
async fn two_apps_share_one_database_through_their_own_tables() {
    let db = TestDb::new().await;
    let app_a = PostgresStore::connect(
        db.url(),
        PostgresOptions::default()
            .table("app_a.leases")
            .expect("name")
            .create_schema(true),
    )
    .await
    .expect("connect a");
    let app_b = PostgresStore::connect(
        db.url(),
        PostgresOptions::default()
            .table("app_b_leases")
            .expect("name"),
    )
    .await
    .expect("connect b");
    let (a, b): (SharedStore, SharedStore) = (Arc::new(app_a), Arc::new(app_b));
    // The same lease name is free in each app's table.
    scheduler_store_tests::batch_returns_exactly_the_free(&a, &a, 10).await;
    scheduler_store_tests::batch_returns_exactly_the_free(&b, &b, 10).await;
}

#[tokio::test]
async fn missing_rows_are_created_once() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    scheduler_store_tests::missing_rows_are_created_once(&s[0], &s[1]).await;
}
