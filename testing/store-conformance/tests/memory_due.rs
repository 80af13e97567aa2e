//! The rules of the dynamic schedules' bounds (`scheduler_store_tests::due`)
//! against the memory store.

use std::sync::Arc;

use scheduler_core::MemoryStore;
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::due as rules;

#[tokio::test]
async fn memory_store_keeps_bounds() {
    let store: SharedStore = Arc::new(MemoryStore::new());
    rules::all(&store).await;
}
