//! The shared rules of the instances' heartbeats (`scheduler_store_tests::instances`)
//! against a real SQLite file, two stores (an instance each) on one file.

#![allow(clippy::expect_used)]

mod support;

use std::sync::Arc;

use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_store_tests::SharedStore;
use support::TempDir;

#[tokio::test]
async fn sqlite_keeps_the_rules_of_instances() {
    let dir = TempDir::new("instances");
    let mut stores = Vec::new();
    for _ in 0..2 {
        let store = SqliteStore::open(&dir.join("leases.db"), SqliteOptions::default())
            .await
            .expect("open");
        stores.push(Arc::new(store) as SharedStore);
    }
    scheduler_store_tests::instances::all(&stores).await;
}
