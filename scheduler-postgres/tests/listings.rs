//! The shared rules of the lists that scale (`scheduler_store_tests::listing`)
//! against a real PostgreSQL server: pages of leases and schedules both ways, their
//! filters and totals, the run history filtered and the failing jobs.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::listing as rules;
use test_postgres::TestDb;

async fn connect(db: &TestDb) -> PostgresStore {
    PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect")
}

#[tokio::test]
async fn leases_are_listed_by_page_and_filter() {
    let db = TestDb::new().await;
    let store: SharedStore = Arc::new(connect(&db).await);
    rules::leases_listing_pages_and_filters(&store).await;
}

#[tokio::test]
async fn schedules_are_listed_by_page_and_filter() {
    let db = TestDb::new().await;
    let store: SharedStore = Arc::new(connect(&db).await);
    rules::schedules_listing_pages_and_filters(&store).await;
}

#[tokio::test]
async fn runs_are_filtered_and_failing_jobs_found() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let store: SharedStore = Arc::new(store);
    rules::runs_where_and_failing_jobs(&store, &history).await;
}

#[tokio::test]
async fn without_a_history_no_run_is_listed() {
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let c = scheduler_core::Store::controls(&store).expect("controls");
    let runs = c
        .runs_where(&scheduler_core::RunQuery::default().failed())
        .await
        .expect("runs where");
    assert!(runs.is_empty());
    assert!(c.failing_jobs().await.expect("failing jobs").is_empty());
}

/// A run history created before its indexes on `(job, id)` and on the failed runs
/// gets them when it is opened again.
#[tokio::test]
async fn an_older_history_gets_its_new_indexes() {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    let db = TestDb::new().await;
    let store = connect(&db).await;
    RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    let conn = test_postgres::inspect(db.url()).await;
    let indexes = async || -> Vec<String> {
        conn.query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT indexname FROM pg_indexes WHERE tablename = 'scheduler_leases_runs' \
             ORDER BY indexname",
        ))
        .await
        .expect("indexes")
        .iter()
        .map(|r| r.try_get::<String>("", "indexname").expect("name"))
        .collect()
    };
    let all = indexes().await;
    assert!(all.iter().any(|i| i.ends_with("_jobid")), "{all:?}");
    conn.execute_unprepared(
        "DROP INDEX scheduler_leases_runs_jobid; DROP INDEX scheduler_leases_runs_fail",
    )
    .await
    .expect("drop the new indexes");
    RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history again");
    assert_eq!(indexes().await, all);
}

/// The plan of `sql` (`EXPLAIN`, its lines joined).
async fn plan(conn: &sea_orm::DatabaseConnection, sql: &str) -> String {
    use sea_orm::{ConnectionTrait, DbBackend, Statement};
    conn.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        format!("EXPLAIN {sql}"),
    ))
    .await
    .expect("explain")
    .iter()
    .map(|r| r.try_get_by_index::<String>(0).expect("plan line"))
    .collect::<Vec<_>>()
    .join("\n")
}

/// The dynamic schedules are indexed for the dashboard's search by part of a name
/// (trigrams of the folded name, `pg_trgm` being there) and for its handler filter:
/// with 20,000 schedules, a search for a rare part reads the index, not the table;
/// and the search still finds what it found before.
#[tokio::test]
async fn the_search_by_part_of_a_name_reads_the_trigram_index() {
    use scheduler_core::ListQuery;
    use sea_orm::ConnectionTrait;
    let db = TestDb::new().await;
    let store = connect(&db).await;
    let conn = test_postgres::inspect(db.url()).await;
    conn.execute_unprepared(
        "INSERT INTO scheduler_leases_schedules (name, handler, schedule, zone, scope, policy, \
         args, enabled, removed, version, updated_at, actor) \
         SELECT 'Tenant-' || lpad(n::text, 6, '0'), CASE WHEN n % 100 = 0 THEN 'rare' ELSE \
         'report' END, 'every 1h', NULL, 'cluster', '', '{}', true, n % 7 = 0, 1, now(), 't' \
         FROM generate_series(0, 19999) AS g(n); ANALYZE scheduler_leases_schedules",
    )
    .await
    .expect("fill");
    let search = plan(
        &conn,
        "SELECT name FROM scheduler_leases_schedules \
         WHERE NOT removed AND lower(name COLLATE \"C\") LIKE '%tenant-01234%' ESCAPE '\\'",
    )
    .await;
    assert!(
        search.contains("scheduler_leases_schedules_search"),
        "{search}"
    );
    let handler = plan(
        &conn,
        "SELECT name FROM scheduler_leases_schedules WHERE NOT removed AND handler = 'rare' \
         ORDER BY name LIMIT 51",
    )
    .await;
    assert!(
        handler.contains("scheduler_leases_schedules_handler"),
        "{handler}"
    );
    // Found through the store, case folded: 012340 … 012349, less the removed ones.
    let c = scheduler_core::Store::controls(&store).expect("controls");
    let found = c
        .schedules_listing(&ListQuery::new(50).search("TENANT-01234"))
        .await
        .expect("search");
    let names: Vec<&str> = found.rows.iter().map(|r| r.name.as_str()).collect();
    let expected: Vec<String> = (12340..12350)
        .filter(|n| n % 7 != 0)
        .map(|n| format!("Tenant-{n:06}"))
        .collect();
    assert_eq!(names, expected);
    assert_eq!(found.total, expected.len() as u64);
}
