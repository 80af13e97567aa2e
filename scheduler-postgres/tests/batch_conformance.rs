//! The rules of a batch put of dynamic schedules (`scheduler_store_tests::batch`)
//! against a real PostgreSQL server: two stores, each with its own pool (an instance
//! each), on one new database per test.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::batch as rules;
use test_postgres::TestDb;

async fn instances(db: &TestDb, n: usize) -> Vec<SharedStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("connect");
        stores.push(Arc::new(store) as SharedStore);
    }
    stores
}

#[tokio::test]
async fn a_batch_is_one_put_seen_by_another_instance() {
    let db = TestDb::new().await;
    let s = instances(&db, 2).await;
    rules::a_batch_is_one_put(&s[0], &s[1]).await;
}

#[tokio::test]
async fn a_bad_row_refuses_the_batch() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::a_bad_row_refuses_the_batch(&s[0]).await;
}

#[tokio::test]
async fn a_batch_replaces_existing_rows() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::a_batch_replaces_existing_rows(&s[0]).await;
}

#[tokio::test]
async fn an_empty_batch_writes_nothing() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::an_empty_batch_writes_nothing(&s[0]).await;
}

/// Read back in pages of 10,000 (one statement for a million rows hit the 2 s
/// statement bound).
#[tokio::test]
async fn every_schedule_is_read_back() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    rules::every_schedule_is_read_back(&s[0]).await;
}

/// A row whose arguments JSON parsers accept but `jsonb` refuses (a `\u0000`
/// escape) refuses the whole batch in the statement: rolled back, nothing written.
#[tokio::test]
async fn arguments_jsonb_refuses_roll_the_batch_back() {
    let db = TestDb::new().await;
    let s = instances(&db, 1).await;
    let c = s[0].controls().expect("controls");
    c.register_handlers("n", &["h".to_owned()])
        .await
        .expect("register");
    let before = c.poll(None).await.expect("poll").expect("state").version;
    let mut rows: Vec<scheduler_core::ScheduleRow> = (0..3)
        .map(|i| scheduler_core::ScheduleRow::new(format!("nul-{i}"), "h", "every 30s"))
        .collect();
    rows[2].args = r#"{"a": "\u0000"}"#.to_owned();
    let err = c.put_schedules(&rows, "ops", "").await.unwrap_err();
    assert!(err.to_string().contains("not JSON"), "{err}");
    assert_eq!(c.poll(Some(before)).await.expect("poll"), None);
    assert!(c.schedules().await.expect("schedules").is_empty());
}
