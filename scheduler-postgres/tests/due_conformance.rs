//! The rules of the dynamic schedules' bounds (`scheduler_store_tests::due`) against
//! a real PostgreSQL server, one new database per test; and the plans of the store's
//! own statements: the due read walks the partial index `_schedules_due`, and an
//! advance probes the primary key once per name, under a generic plan too.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{Advance, DueCursor};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_store_tests::SharedStore;
use scheduler_store_tests::due as rules;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};
use test_postgres::TestDb;

async fn store(url: &str) -> PostgresStore {
    PostgresStore::connect(url, PostgresOptions::default())
        .await
        .expect("connect")
}

async fn shared(db: &TestDb) -> SharedStore {
    Arc::new(store(db.url()).await)
}

#[tokio::test]
async fn a_put_bounds_each_row_no_later_than_its_first_tick() {
    let db = TestDb::new().await;
    rules::a_put_bounds_each_row_no_later_than_its_first_tick(&shared(&db).await).await;
}

#[tokio::test]
async fn a_poll_without_schedules_reads_the_rest() {
    let db = TestDb::new().await;
    rules::a_poll_without_schedules_reads_the_rest(&shared(&db).await).await;
}

#[tokio::test]
async fn the_due_read_filters_orders_and_pages() {
    let db = TestDb::new().await;
    rules::the_due_read_filters_orders_and_pages(&shared(&db).await).await;
}

#[tokio::test]
async fn an_advance_moves_forward_only_at_the_version_read() {
    let db = TestDb::new().await;
    rules::an_advance_moves_forward_only_at_the_version_read(&shared(&db).await).await;
}

/// The rows of `sql`, their first column as text.
async fn lines(conn: &DatabaseConnection, sql: &str) -> Vec<String> {
    conn.query_all_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.try_get_by_index::<String>(0).expect("text"))
        .collect()
}

/// The text of the statement the store's connection ran last, found by a part of
/// it: the statement exactly as the store prepared it.
async fn last_statement(conn: &DatabaseConnection, part: &str) -> String {
    let found = lines(
        conn,
        &format!(
            "SELECT query FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND position('{part}' IN query) > 0 \
               AND position('pg_stat_activity' IN query) = 0"
        ),
    )
    .await;
    assert_eq!(
        found.len(),
        1,
        "one statement containing {part:?}: {found:?}"
    );
    found.into_iter().next().expect("one")
}

/// The plan of `statement` (its parameters of `types`) run with `arguments`, under
/// `plan_cache_mode = mode`: prepared, explained and deallocated in a transaction
/// of the test's own (one connection), rolled back.
async fn plan(
    conn: &DatabaseConnection,
    statement: &str,
    types: &str,
    arguments: &str,
    mode: &str,
) -> String {
    let txn = conn.begin().await.expect("begin");
    txn.execute_unprepared(&format!(
        "SET LOCAL plan_cache_mode = {mode}; PREPARE inspected ({types}) AS {statement}"
    ))
    .await
    .expect("prepare");
    let explain = format!("EXPLAIN EXECUTE inspected ({arguments})");
    let plan = txn
        .query_all_raw(Statement::from_string(DbBackend::Postgres, explain))
        .await
        .expect("explain")
        .iter()
        .map(|r| r.try_get_by_index::<String>(0).expect("plan line"))
        .collect::<Vec<_>>()
        .join("\n");
    txn.execute_unprepared("DEALLOCATE inspected")
        .await
        .expect("deallocate");
    txn.rollback().await.expect("rollback");
    plan
}

/// With a few thousand schedules, statistics taken, the due read with a cursor (the
/// store's own statement, run under a generic plan as a prepared statement is after
/// five runs, and under a custom one) walks `_schedules_due` from the cursor; an
/// advance probes the primary key, in name order, and never scans the table.
#[tokio::test]
async fn the_due_read_walks_its_index_and_an_advance_probes_the_key() {
    let db = TestDb::new().await;
    // Directly on the server: its last statement is the store's, not a `COMMIT`.
    let store = store(db.direct_url()).await;
    let conn = test_postgres::inspect(db.url()).await;
    let base: DateTime<Utc> = "2026-12-05T00:00:00Z".parse().expect("instant");
    conn.execute_unprepared(
        "INSERT INTO scheduler_leases_schedules (name, handler, schedule, zone, scope, policy, \
         args, enabled, removed, version, updated_at, actor, next_tick) \
         SELECT 'due-' || lpad(n::text, 5, '0'), CASE WHEN n % 10 = 0 THEN 'other' ELSE \
         'report' END, 'every 1m', NULL, 'cluster', '', '{}', n % 13 <> 0, n % 17 = 0, 1, \
         now(), 't', timestamptz '2026-12-05 00:00:00+00' + (n % 600) * interval '1 minute' \
         FROM generate_series(0, 5999) AS g(n); ANALYZE scheduler_leases_schedules",
    )
    .await
    .expect("fill");
    let controls = scheduler_core::Store::controls(&store).expect("controls");
    let handlers = ["report".to_owned()];
    let until = base + TimeDelta::hours(2);
    let cursor = DueCursor {
        next_tick: base + TimeDelta::minutes(30),
        name: "due-00030".to_owned(),
    };
    let due = controls
        .due_schedules(&handlers, until, Some(&cursor), 100)
        .await
        .expect("due read");
    assert_eq!(due.len(), 100);
    assert!(
        due.iter()
            .all(|d| d.cursor() > cursor && d.next_tick <= until)
    );
    let read = last_statement(&conn, "(next_tick, name) >").await;
    let arguments = "ARRAY['report'], '2026-12-05 02:00:00+00', '2026-12-05 00:30:00+00', \
                     'due-00030', 100";
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let plan = plan(
            &conn,
            &read,
            "text[], timestamptz, timestamptz, text, bigint",
            arguments,
            mode,
        )
        .await;
        assert!(
            plan.contains("Index Scan using scheduler_leases_schedules_due"),
            "{mode}: {plan}"
        );
        // The walk starts at the cursor: the row comparison is a condition of the
        // index, not a filter of every row before it.
        assert!(
            plan.lines()
                .any(|line| line.contains("Index Cond:")
                    && line.contains("ROW(next_tick, name) > ROW(")),
            "{mode}: {plan}"
        );
        assert!(
            !plan.contains("Sort"),
            "{mode}: the index gives the order: {plan}"
        );
    }

    let advances: Vec<Advance> = due
        .iter()
        .map(|d| Advance {
            name: d.row.name.clone(),
            version: d.row.version,
            next_tick: d.next_tick + TimeDelta::hours(1),
        })
        .collect();
    assert_eq!(
        controls
            .advance_schedules(&advances)
            .await
            .expect("advance"),
        100
    );
    let advance = last_statement(&conn, "SET next_tick = v.next").await;
    let arguments = "ARRAY['due-00031', 'due-00032'], ARRAY[1, 1]::bigint[], \
                     ARRAY['2026-12-05 03:00:00+00', '2026-12-05 03:00:00+00']::timestamptz[]";
    for mode in ["force_generic_plan", "force_custom_plan"] {
        let plan = plan(
            &conn,
            &advance,
            "text[], bigint[], timestamptz[]",
            arguments,
            mode,
        )
        .await;
        assert!(
            plan.contains("Index Scan using scheduler_leases_schedules_pkey"),
            "{mode}: {plan}"
        );
        assert!(
            !plan.contains("Seq Scan on scheduler_leases_schedules") && !plan.contains("Hash Join"),
            "{mode}: {plan}"
        );
    }
}
