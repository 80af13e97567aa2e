//! A batch take of 1,000 names is one statement and returns exactly the free ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use scheduler_postgres::{PostgresOptions, PostgresStore, connect_options};
use scheduler_store_tests::SharedStore;
use sea_orm::Database;
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
    // The app's own pool, built as the store would build it (behind PgBouncer: no
    // statement cache).
    let options = PostgresOptions::for_url(db.url());
    let pool = connect_options(db.url(), &options).expect("url");
    let mut conn = Database::connect(pool).await.expect("connect");
    let counter = statements.clone();
    conn.set_metric_callback(move |info| {
        if info.statement.sql.contains("unnest") {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let counted: SharedStore = Arc::new(
        PostgresStore::open(conn, options.clone())
            .await
            .expect("open"),
    );

    // `holder` holds every third name (one statement from it, not counted); `counted`
    // then asks for all 1,000.
    let before = statements.load(Ordering::SeqCst);
    scheduler_store_tests::batch_returns_exactly_the_free(&holder, &counted, 1000).await;
    // Lease statements run through sqlx in a short transaction of their own (its
    // `BEGIN` sets the server-side statement_timeout), bypassing sea-orm, so its
    // metric callback sees none of them: the batch is one `lease_query` call in the
    // store, and nothing here goes through sea-orm one name at a time.
    assert_eq!(
        statements.load(Ordering::SeqCst) - before,
        0,
        "no per-name statements through sea-orm"
    );
}
