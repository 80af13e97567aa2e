//! The limits of controls (`scheduler_store_tests::limits`) against the memory store.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::MemoryStore;
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::limits as rules;

#[tokio::test]
async fn memory_store_keeps_the_limits_of_controls() {
    let store: SharedStore = Arc::new(MemoryStore::new());
    rules::all(&[store.clone(), store]).await;
}

#[tokio::test]
async fn the_app_may_lower_the_memory_stores_minimum_period() {
    let memory = MemoryStore::new();
    memory.set_min_schedule_period(Duration::from_millis(100));
    let store: SharedStore = Arc::new(memory);
    rules::every_period_keeps_the_minimum(&store, Duration::from_millis(100)).await;
}
