//! The rules of a batch put of dynamic schedules (`scheduler_store_tests::batch`)
//! against a real SQLite file: two stores, each with its own pool (an instance
//! each), on one new file per test.

#![allow(clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;

use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::batch as rules;
use support::TempDir;

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

#[tokio::test]
async fn a_batch_is_one_put_seen_by_another_instance() {
    let dir = TempDir::new("batch-one");
    let s = instances(&dir.join("leases.db"), 2).await;
    rules::a_batch_is_one_put(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_bad_row_refuses_the_batch() {
    let dir = TempDir::new("batch-bad");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::a_bad_row_refuses_the_batch(&s[0]).await;
}

#[tokio::test]
async fn a_batch_replaces_existing_rows() {
    let dir = TempDir::new("batch-replace");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::a_batch_replaces_existing_rows(&s[0]).await;
}

#[tokio::test]
async fn an_empty_batch_writes_nothing() {
    let dir = TempDir::new("batch-empty");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::an_empty_batch_writes_nothing(&s[0]).await;
}

#[tokio::test]
async fn every_schedule_is_read_back() {
    let dir = TempDir::new("batch-read-back");
    let s = instances(&dir.join("leases.db"), 1).await;
    rules::every_schedule_is_read_back(&s[0]).await;
}
