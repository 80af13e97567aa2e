//! The shared rules of the instances' heartbeats (`scheduler_store_tests::instances`)
//! against a real PostgreSQL server, two stores (an instance each) on one new
//! database.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use test_postgres::TestDb;

#[tokio::test]
async fn postgres_keeps_the_rules_of_instances() {
    let db = TestDb::new().await;
    let mut stores = Vec::new();
    for _ in 0..2 {
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("connect");
        stores.push(Arc::new(store) as SharedStore);
    }
    scheduler_store_tests::instances::all(&stores).await;
}
