//! A batch take of 1,000 names is one statement and returns exactly the free ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use sea_orm::{ConnectOptions, Database};
use test_postgres::TestDb;

#[tokio::test]
async fn batch_take_of_1000_is_one_statement_and_returns_the_free_ones() {
    let db = TestDb::new().await;
    let holder: SharedStore = Arc::new(
        PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .expect("connect"),
    );

    let statements = Arc::new(AtomicUsize::new(0));
    let mut options = ConnectOptions::new(db.url().to_owned());
    options.sqlx_logging(false);
    let mut conn = Database::connect(options).await.expect("connect");
    let counter = statements.clone();
    conn.set_metric_callback(move |info| {
        if info.statement.sql.contains("unnest") {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let counted: SharedStore = Arc::new(
        PostgresStore::open(conn, PostgresOptions::default())
            .await
            .expect("open"),
    );

    // `holder` holds every third name (one statement from it, not counted); `counted`
    // then asks for all 1,000.
    let before = statements.load(Ordering::SeqCst);
    scheduler_store_tests::batch_returns_exactly_the_free(&holder, &counted, 1000).await;
    assert_eq!(
        statements.load(Ordering::SeqCst) - before,
        1,
        "one statement for the whole batch"
    );
}
