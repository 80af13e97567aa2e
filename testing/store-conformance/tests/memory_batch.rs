//! The rules of a batch put of dynamic schedules (`scheduler_store_tests::batch`)
//! against the memory store.

use std::sync::Arc;

use scheduler_core::MemoryStore;
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::batch as rules;

#[tokio::test]
async fn memory_store_puts_a_batch_all_or_nothing() {
    let store: SharedStore = Arc::new(MemoryStore::new());
    rules::all(&[store.clone(), store]).await;
}
