//! The shared lease invariants, against the in-memory store.

use std::sync::Arc;

use chrono::TimeDelta;
use scheduler_core::MemoryStore;
use scheduler_store_tests::SharedStore;

fn one_store() -> Vec<SharedStore> {
    // Instances of one process share one memory store.
    let store: SharedStore = Arc::new(MemoryStore::new());
    vec![store.clone(), store]
}

#[tokio::test]
async fn memory_store_keeps_the_lease_invariants() {
    scheduler_store_tests::all(&one_store()).await;
}

#[tokio::test]
async fn memory_store_ignores_node_clocks() {
    let stores = one_store();
    scheduler_store_tests::node_clock_does_not_matter(&stores[0], &stores[1], TimeDelta::hours(1))
        .await;
}

#[tokio::test]
async fn memory_store_batch_of_1000() {
    let stores = one_store();
    scheduler_store_tests::batch_returns_exactly_the_free(&stores[0], &stores[1], 1000).await;
}

#[tokio::test]
async fn memory_store_keeps_the_rules_of_controls() {
    scheduler_store_tests::controls::all(&one_store()).await;
}

#[tokio::test]
async fn memory_store_keeps_the_rules_of_listings() {
    scheduler_store_tests::listing::all(&one_store()[0]).await;
}

#[tokio::test]
async fn memory_store_keeps_the_rules_of_instances() {
    scheduler_store_tests::instances::all(&one_store()).await;
}
