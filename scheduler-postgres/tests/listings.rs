//! The shared rules of the lists that scale (`scheduler_store_tests::listing`)
//! against a real PostgreSQL server: pages of leases and schedules both ways, their
//! filters and totals, the run history filtered and the failing jobs.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::listing as rules;
use test_postgres::TestDb;

async fn connect(db: &TestDb) -> PostgresStore {
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect")
}

#[tokio::test]
async fn leases_are_listed_by_page_and_filter() {
    let db = TestDb::new().await;
    let store: SharedStore = Arc::new(connect(&db).await);
    rules::leases_listing_pages_and_filters(&store).await;
}

#[tokio::test]
async fn schedules_are_listed_by_page_and_filter() {
    let db = TestDb::new().await;
    let store: SharedStore = Arc::new(connect(&db).await);
    rules::schedules_listing_pages_and_filters(&store).await;
}

#[tokio::test]
async fn runs_are_filtered_and_failing_jobs_found() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let store: SharedStore = Arc::new(store);
    rules::runs_where_and_failing_jobs(&store, &history).await;
}

#[tokio::test]
async fn without_a_history_no_run_is_listed() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let c = scheduler_core::Store::controls(&store).expect("controls");
    let runs = c
        .runs_where(&scheduler_core::RunQuery::default().failed())
        .await
        .expect("runs where");
    assert!(runs.is_empty());
    assert!(c.failing_jobs().await.expect("failing jobs").is_empty());
}
