//! The limits of controls (`scheduler_store_tests::limits`) against a real SQLite
//! file: several stores, each with its own pool (an instance each), on one new file
//! per test.

#![allow(clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::limits as rules;
use support::TempDir;

async fn instances(path: &Path, n: usize, options: SqliteOptions) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = SqliteStore::open(path, options.clone())
            .await
            .expect("open");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test]
async fn oversized_texts_are_refused_and_nothing_recorded() {
    let dir = TempDir::new("limit-texts");
    let s = instances(&dir.join("leases.db"), 1, SqliteOptions::default()).await;
    rules::oversized_texts_are_refused(&s[0]).await;
}

#[tokio::test]
async fn the_minimum_period_is_1s_by_default() {
    let dir = TempDir::new("limit-period");
    let s = instances(&dir.join("leases.db"), 1, SqliteOptions::default()).await;
    rules::every_period_keeps_the_minimum(&s[0], Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_app_may_lower_the_minimum_period() {
    let dir = TempDir::new("limit-period-lowered");
    let options = SqliteOptions::default().min_schedule_period(Duration::from_millis(100));
    let s = instances(&dir.join("leases.db"), 1, options).await;
    rules::every_period_keeps_the_minimum(&s[0], Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_zone_with_every_is_refused() {
    let dir = TempDir::new("limit-zone");
    let s = instances(&dir.join("leases.db"), 1, SqliteOptions::default()).await;
    rules::a_zone_with_every_is_refused(&s[0]).await;
}

#[tokio::test]
async fn a_paused_trigger_is_an_explicit_choice() {
    let dir = TempDir::new("limit-paused-trigger");
    let s = instances(&dir.join("leases.db"), 1, SqliteOptions::default()).await;
    rules::a_paused_trigger_is_an_explicit_choice(&s[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_racing_a_trigger_makes_no_silent_trigger() {
    let dir = TempDir::new("limit-race");
    let s = instances(&dir.join("leases.db"), 2, SqliteOptions::default()).await;
    rules::a_pause_racing_a_trigger_makes_no_silent_trigger(&s[0], &s[1], 50).await;
}
