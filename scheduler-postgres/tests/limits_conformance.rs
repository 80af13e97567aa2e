//! The limits of controls (`scheduler_store_tests::limits`) against a real
//! PostgreSQL server: several stores, each with its own pool (an instance each), on
//! one new database per test.

#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::limits as rules;
use test_postgres::TestDb;

async fn instances(db: &TestDb, n: usize, options: PostgresOptions) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = PostgresStore::connect(db.url(), options.clone())
            .await
            .expect("connect");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test]
async fn oversized_texts_are_refused_and_nothing_recorded() {
    let db = TestDb::new().await;
    let s = instances(&db, 1, PostgresOptions::default()).await;
    rules::oversized_texts_are_refused(&s[0]).await;
}

#[tokio::test]
async fn the_minimum_period_is_1s_by_default() {
    let db = TestDb::new().await;
    let s = instances(&db, 1, PostgresOptions::default()).await;
    rules::every_period_keeps_the_minimum(&s[0], Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_app_may_lower_the_minimum_period() {
    let db = TestDb::new().await;
    let options = PostgresOptions::default().min_schedule_period(Duration::from_millis(100));
    let s = instances(&db, 1, options).await;
    rules::every_period_keeps_the_minimum(&s[0], Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_zone_with_every_is_refused() {
    let db = TestDb::new().await;
    let s = instances(&db, 1, PostgresOptions::default()).await;
    rules::a_zone_with_every_is_refused(&s[0]).await;
}

#[tokio::test]
async fn a_paused_trigger_is_an_explicit_choice() {
    let db = TestDb::new().await;
    let s = instances(&db, 1, PostgresOptions::default()).await;
    rules::a_paused_trigger_is_an_explicit_choice(&s[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_racing_a_trigger_makes_no_silent_trigger() {
    let db = TestDb::new().await;
    let s = instances(&db, 2, PostgresOptions::default()).await;
    rules::a_pause_racing_a_trigger_makes_no_silent_trigger(&s[0], &s[1], 50).await;
}
