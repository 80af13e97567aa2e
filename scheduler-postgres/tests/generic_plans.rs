#![allow(clippy::expect_used)]
//! Take, renew and release stay linear under PostgreSQL's generic plan.
//!
//! sqlx prepares every statement; after five executions PostgreSQL may plan it once
//! for any parameters (a generic plan), estimating `unnest` of an array parameter at
//! 10 rows. Joined to a lease table whose statistics say almost no lease is held
//! (recurring jobs release their leases between runs, so that is what `ANALYZE`
//! usually sees), that made the lease table the outer side of a nested loop that
//! compared every row with every requested name: 999,000 rows removed by the join
//! filter to release 1,000 leases. Here each statement runs, for 1,000 names, under
//! `plan_cache_mode = force_generic_plan` (and, for comparison, a custom plan) as
//! `EXPLAIN ANALYZE EXECUTE` in a transaction that is rolled back, with statistics
//! taken while every lease was released and while every lease was held; no nested
//! loop of its plan may carry a join filter.

use std::time::Duration;

use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection, Row};
use test_postgres::TestDb;

const NAMES: usize = 1000;

/// A planner setting under which a statement runs.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Generic,
    Custom,
}

impl Plan {
    fn setting(self) -> &'static str {
        match self {
            Plan::Generic => "force_generic_plan",
            Plan::Custom => "force_custom_plan",
        }
    }
}

/// When the lease table's statistics were taken (`ANALYZE`), before the leases were
/// taken again for a later tick.
#[derive(Debug, Clone, Copy)]
enum Analyzed {
    /// Every lease released: the statistics say no lease is held.
    WhileReleased,
    /// Every lease held: the statistics say no lease is free.
    WhileHeld,
}

/// A store holding `NAMES` leases, and a connection of the test's own to the server,
/// with the lease table's statistics taken as `analyzed` says and autovacuum kept from
/// refreshing them.
async fn held_leases(db: &TestDb, analyzed: Analyzed) -> (PostgresStore, PgConnection) {
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let mut conn = PgConnection::connect(&test_postgres::direct_url(db.url()))
        .await
        .expect("connect to inspect");
    conn.execute("ALTER TABLE scheduler_leases SET (autovacuum_enabled = false)")
        .await
        .expect("autovacuum off");
    let names: Vec<LeaseName> = (0..NAMES)
        .map(|i| LeaseName::new(format!("gp-{i:04}")).expect("name"))
        .collect();
    let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
    let take = |tick: Tick| {
        let requests: Vec<_> = names
            .iter()
            .map(|name| TakeRequest::new(name.clone(), tick))
            .collect();
        let store = store.clone();
        async move { store.take(&requests, ttl).await.expect("take").won }
    };
    let first = Tick::new(store.now().await.expect("clock"));
    let won = take(first).await;
    assert_eq!(won.len(), NAMES);
    if let Analyzed::WhileHeld = analyzed {
        conn.execute("ANALYZE scheduler_leases")
            .await
            .expect("analyze");
    }
    let keys: Vec<_> = won.iter().map(|l| l.key()).collect();
    let released = store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
    assert_eq!(released.len(), NAMES);
    if let Analyzed::WhileReleased = analyzed {
        conn.execute("ANALYZE scheduler_leases")
            .await
            .expect("analyze");
    }
    let second = Tick::new(first.at() + chrono::TimeDelta::seconds(1));
    assert_eq!(take(second).await.len(), NAMES);
    (store, conn)
}

/// `EXPLAIN ANALYZE` of `statement` (prepared as `name`) executed with `arguments`
/// under `plan`, after `setup`, in a transaction that is rolled back.
async fn explain(
    conn: &mut PgConnection,
    name: &str,
    arguments: &str,
    plan: Plan,
    setup: &str,
) -> String {
    let mut txn = conn.begin().await.expect("begin");
    txn.execute(sqlx::AssertSqlSafe(format!(
        "SET LOCAL plan_cache_mode = {}",
        plan.setting()
    )))
    .await
    .expect("plan_cache_mode");
    if !setup.is_empty() {
        txn.execute(sqlx::AssertSqlSafe(setup.to_owned()))
            .await
            .expect("setup");
    }
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE {name}({arguments})"
    )))
    .fetch_all(&mut *txn)
    .await
    .expect("explain");
    txn.rollback().await.expect("rollback");
    let lines: Vec<String> = rows
        .iter()
        .map(|row| row.try_get::<String, _>(0).expect("plan line"))
        .collect();
    lines.join("\n")
}

/// The nested loops of an `EXPLAIN ANALYZE` text that carry a join filter, each with
/// the rows its filter removed in all (the text gives them per loop).
fn filtered_nested_loops(plan: &str) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = Vec::new();
    let mut node = "";
    let mut loops = 1;
    for (i, line) in plan.lines().enumerate() {
        let text = line.trim_start();
        if i == 0 || text.starts_with("->") {
            node = text.trim_start_matches("->").trim_start();
            loops = node
                .rsplit_once("loops=")
                .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok())
                .unwrap_or(1);
        } else if text.starts_with("Join Filter:") && node.starts_with("Nested Loop") {
            found.push((format!("{node} {text}"), 0));
        } else if let Some(removed) = text.strip_prefix("Rows Removed by Join Filter: ")
            && let Some(last) = found.last_mut()
            && node.starts_with("Nested Loop")
        {
            last.1 = removed.trim().parse::<u64>().unwrap_or(0) * loops;
        }
    }
    found
}

/// Runs `statement` under a generic and a custom plan and checks both plans.
async fn check(
    conn: &mut PgConnection,
    what: &str,
    statement: &str,
    arguments: &str,
    setup: &str,
) -> Vec<String> {
    let name = what.replace([' ', ','], "_");
    conn.execute(sqlx::AssertSqlSafe(format!(
        "PREPARE {name} AS {statement}"
    )))
    .await
    .expect("prepare");
    let mut failures = Vec::new();
    for plan in [Plan::Generic, Plan::Custom] {
        let text = explain(conn, &name, arguments, plan, setup).await;
        eprintln!("{what}, {plan:?} plan:\n{text}\n");
        if let Plan::Generic = plan {
            assert!(
                !text.contains("gp-0"),
                "{what}: not a generic plan (it names a lease):\n{text}"
            );
        }
        for (node, removed) in filtered_nested_loops(&text) {
            failures.push(format!(
                "{what}, {plan:?} plan: {node} ({removed} rows removed by it)\n{text}"
            ));
        }
    }
    conn.execute(sqlx::AssertSqlSafe(format!("DEALLOCATE {name}")))
        .await
        .expect("deallocate");
    failures
}

/// The names and holders of the lease table, as quoted array literals.
async fn arrays(conn: &mut PgConnection) -> (String, String) {
    let row = sqlx::query(
        "SELECT quote_literal(array_agg(name ORDER BY name)::text) AS names, \
                quote_literal(array_agg(holder ORDER BY name)::text) AS holders \
         FROM scheduler_leases",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("arrays");
    (row.get("names"), row.get("holders"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_and_release_stay_linear_under_a_generic_plan() {
    let mut failures = Vec::new();
    for analyzed in [Analyzed::WhileReleased, Analyzed::WhileHeld] {
        let db = TestDb::new().await;
        let (store, mut conn) = held_leases(&db, analyzed).await;
        let [_, renew, release, _] = store.lease_sql();
        let (names, holders) = arrays(&mut conn).await;
        failures.extend(
            check(
                &mut conn,
                &format!("renew 1000, analyzed {analyzed:?}"),
                renew,
                &format!("{names}::text[], {holders}::text[], 60000"),
                "",
            )
            .await,
        );
        failures.extend(
            check(
                &mut conn,
                &format!("release 1000, analyzed {analyzed:?}"),
                release,
                &format!("{names}::text[], {holders}::text[], true"),
                "",
            )
            .await,
        );
    }
    assert!(
        failures.is_empty(),
        "nested loops with a join filter:\n{}",
        failures.join("\n\n")
    );
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_stays_linear_under_a_generic_plan() {
    let mut failures = Vec::new();
    for analyzed in [Analyzed::WhileReleased, Analyzed::WhileHeld] {
        let db = TestDb::new().await;
        let (store, mut conn) = held_leases(&db, analyzed).await;
        let [take, _, _, take_known] = store.lease_sql();
        let (names, _) = arrays(&mut conn).await;
        let row = sqlx::query(
            "SELECT quote_literal(array_agg(now() + interval '1 hour')::text) AS ticks, \
                    quote_literal(array_agg('gp-new-' || n)::text) AS holders, \
                    quote_literal(array_agg('node-' || n % 3)::text) AS nodes, \
                    quote_literal(array_agg(true)::text) AS caught_up \
             FROM generate_series(1, $1) AS n",
        )
        .bind(i32::try_from(NAMES).expect("count"))
        .fetch_one(&mut conn)
        .await
        .expect("arrays");
        let (ticks, holders, nodes, caught_up): (String, String, String, String) = (
            row.get("ticks"),
            row.get("holders"),
            row.get("nodes"),
            row.get("caught_up"),
        );
        // Each request names its job (the lease's name) and its node, and leaves its
        // tick to a resume's catch-up: every one of them looks for a pause, and for a
        // pause that ended with a catch-up.
        let arguments = format!(
            "{names}::text[], {ticks}::timestamptz[], {holders}::text[], 60000, \
             {names}::text[], {nodes}::text[], {caught_up}::bool[]"
        );
        // Every name held by another holder: the take wins nothing and writes nothing.
        failures.extend(
            check(
                &mut conn,
                &format!("losing take 1000, analyzed {analyzed:?}"),
                take,
                &arguments,
                "",
            )
            .await,
        );
        // Every lease expired (in the rolled-back transaction): the take wins all 1,000.
        failures.extend(
            check(
                &mut conn,
                &format!("winning take 1000, analyzed {analyzed:?}"),
                take,
                &arguments,
                "UPDATE scheduler_leases SET expires_at = now() - interval '1 second'",
            )
            .await,
        );
        // Every lease expired and every job paused, on every node or on the asking
        // one (in the rolled-back transaction): the take refuses all 1,000, writing
        // nothing.
        failures.extend(
            check(
                &mut conn,
                &format!("paused take 1000, analyzed {analyzed:?}"),
                take,
                &arguments,
                "UPDATE scheduler_leases SET expires_at = now() - interval '1 second'; \
                 INSERT INTO scheduler_leases_controls \
                   (job, node, paused, since, actor, why, version) \
                 SELECT name, CASE WHEN right(name, 1) < '5' THEN '' ELSE 'node-1' END, \
                        true, now(), 'test', '', 1 \
                 FROM scheduler_leases",
            )
            .await,
        );
        // The take when the pauses are known (each request says whether it is
        // paused, the version row is read instead of the controls table): losing
        // and winning, at the table's version.
        let known_arguments = format!(
            "{names}::text[], {ticks}::timestamptz[], {holders}::text[], 60000, \
             array_fill(false, ARRAY[{NAMES}]), 0, '{{}}'::text[], '{{}}'::text[]"
        );
        failures.extend(
            check(
                &mut conn,
                &format!("losing known take 1000, analyzed {analyzed:?}"),
                take_known,
                &known_arguments,
                "UPDATE scheduler_leases_version SET version = 0",
            )
            .await,
        );
        failures.extend(
            check(
                &mut conn,
                &format!("winning known take 1000, analyzed {analyzed:?}"),
                take_known,
                &known_arguments,
                "UPDATE scheduler_leases SET expires_at = now() - interval '1 second'; \
                 UPDATE scheduler_leases_version SET version = 0",
            )
            .await,
        );
        // Every lease expired and every job resumed with a catch-up from a pause
        // that covers the tick: the take leaves all 1,000 to the catch-up.
        failures.extend(
            check(
                &mut conn,
                &format!("take left to a catch up 1000, analyzed {analyzed:?}"),
                take,
                &arguments,
                "UPDATE scheduler_leases SET expires_at = now() - interval '1 second'; \
                 INSERT INTO scheduler_leases_controls \
                   (job, node, paused, since, actor, why, resumed_at, catch_up, version) \
                 SELECT name, '', false, now() - interval '1 hour', 'test', '', \
                        now() + interval '2 hours', true, 1 \
                 FROM scheduler_leases",
            )
            .await,
        );
    }
    assert!(
        failures.is_empty(),
        "nested loops with a join filter:\n{}",
        failures.join("\n\n")
    );
}
