//! A lease table altered by hand (a column dropped or retyped, the primary key
//! dropped, the table dropped under an open store, values and names set by hand) gives
//! clear statement or bad-row errors naming what to restore, never a panic; the
//! runtime logs a broken table, keeps retrying and recovers once it is fixed.
//!
//! `pgbouncer.rs` runs these tests again through PgBouncer in transaction pooling
//! mode: the stores under test connect to `db.url()`, while the tests' own set-up and
//! inspection statements go to the server directly (`admin`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler_core::{LeaseKey, Outcome, Release, Scheduler, Store, Tick};
use scheduler_postgres::{Error, PostgresOptions, PostgresStore};
use support::hostile::{
    CREATE_LEASES, Logs, Named, admin, connect, exec, pg, store, store_with, strings, take, tick,
    ttl,
};
use support::wait_for;
use test_postgres::TestDb;
use tokio::sync::oneshot;
use tracing::instrument::WithSubscriber;

/// Polls the readiness probe until `ready` holds for its report, for at most `limit`;
/// returns that report.
async fn probe_until(
    health: &scheduler_core::Health,
    limit: Duration,
    what: &str,
    ready: impl Fn(&scheduler_core::HealthReport) -> bool,
) -> scheduler_core::HealthReport {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let report = health.check(limit).await;
        if ready(&report) {
            return report;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const SHAPE_HINT: &str = "; the lease table does not have the shape the store expects: was it altered by hand? \
                          restore the columns, types and primary key the migrations create";

/// A migrated database with one lease `a` taken and one `b` released, then `alter`
/// run by hand; returns a store opened afterwards (no cached statements), the key
/// of `a`, and the tick `a` was taken for.
async fn altered(alter: &str) -> (TestDb, PostgresStore, Vec<LeaseKey>, Tick) {
    let db = TestDb::new().await;
    let before = store(db.url()).await;
    let t = tick(&before, 0).await;
    let a = take(&before, &["a"], t).await.expect("take a");
    let b = take(&before, &["b"], t).await.expect("take b");
    before
        .release(&b, Release::Completed)
        .await
        .expect("release b");
    exec(&admin(db.url()).await, alter).await;
    let after = connect(db.url(), PostgresOptions::default().migrate(false))
        .await
        .expect("open");
    (db, after, a, t)
}

fn assert_statement(err: &scheduler_core::Error, operation: &str, cause: &str, hint: &str) {
    let msg = err.to_string();
    let Error::Statement { operation: op, .. } = pg(err) else {
        panic!("expected a statement error: {msg}");
    };
    assert_eq!(*op, operation, "{msg}");
    assert!(msg.contains(cause), "{msg}");
    assert!(msg.ends_with(hint), "{msg}");
    println!("{msg}");
}

fn assert_bad_row(err: &scheduler_core::Error, operation: &str, cause: &str) {
    let msg = err.to_string();
    let Error::BadRow { operation: op, .. } = pg(err) else {
        panic!("expected a bad row error: {msg}");
    };
    assert_eq!(*op, operation, "{msg}");
    assert!(msg.contains(cause), "{msg}");
    assert!(msg.ends_with("; was the table altered by hand?"), "{msg}");
    println!("{msg}");
}

#[tokio::test]
async fn a_dropped_column_is_a_clear_statement_error() {
    let (_db, store, a, t) = altered("ALTER TABLE scheduler_leases DROP COLUMN token").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "column \"token\" of relation \"scheduler_leases\" does not exist",
        SHAPE_HINT,
    );
    // Renewal and release do not touch the token: they still work.
    assert_eq!(store.renew(&a, ttl()).await.expect("renew").len(), 1);
    assert_eq!(
        store
            .release(&a, Release::Completed)
            .await
            .expect("release")
            .len(),
        1
    );
    store.now().await.expect("now");
    // The runtime's view: a take is a statement error, however the lease stood.
    let err = take(&store, &["a"], t).await.expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "column \"token\" of relation \"scheduler_leases\" does not exist",
        SHAPE_HINT,
    );
}

#[tokio::test]
async fn a_changed_column_type_is_a_clear_error() {
    let (_db, store, a, _) = altered("ALTER TABLE scheduler_leases ALTER tick TYPE text").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "operator does not exist: text < timestamp with time zone",
        SHAPE_HINT,
    );
    // The renewal reads `tick` too (is a newer tick asking this run to stop?).
    let err = store.renew(&a, ttl()).await.expect_err("renew");
    assert_statement(
        &err,
        "renew leases",
        "operator does not exist: timestamp with time zone > text",
        SHAPE_HINT,
    );

    let (_db, store, a, _) =
        altered("ALTER TABLE scheduler_leases ALTER expires_at TYPE text").await;
    let err = take(&store, &["b"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "operator does not exist: text <= timestamp with time zone",
        SHAPE_HINT,
    );
    // The renewal's assignment casts to text; reading the expiry back does not decode.
    let err = store.renew(&a, ttl()).await.expect_err("renew");
    assert_bad_row(&err, "renew leases", "expires_at");
    let err = store
        .release(&a, Release::Completed)
        .await
        .expect_err("release");
    assert_statement(
        &err,
        "release leases",
        "LEAST types text and timestamp with time zone cannot be matched",
        SHAPE_HINT,
    );

    // Altered under an open store, whose renewal is a cached prepared statement: its
    // result type changed, which PostgreSQL refuses to replan silently. (One
    // connection, so the renewal after the change runs where the one before cached it.)
    let db = TestDb::new().await;
    let open = store_with(db.url(), PostgresOptions::default().max_connections(1)).await;
    let a = take(&open, &["a"], tick(&open, 0).await)
        .await
        .expect("take");
    open.renew(&a, ttl()).await.expect("renew before");
    exec(
        &admin(db.url()).await,
        "ALTER TABLE scheduler_leases ALTER expires_at TYPE text",
    )
    .await;
    let err = open.renew(&a, ttl()).await.expect_err("renew after");
    if open.transaction_pooling() {
        // Behind PgBouncer the store's statements are unnamed: none is cached, so the
        // renewal is planned afresh and fails where the store reads the expiry back,
        // as it does for a store opened after the change (above).
        assert_bad_row(
            &err,
            "renew leases",
            "error occurred while decoding column \"expires_at\": mismatched types",
        );
    } else {
        assert_statement(
            &err,
            "renew leases",
            "cached plan must not change result type",
            SHAPE_HINT,
        );
    }
}

/// A statement whose cached plan went stale under an open store (a column retyped to
/// one the store still reads: `holder`, `text` to `varchar` and back) fails once, and
/// the pool connection it was cached on is closed rather than handed back: the next
/// call prepares it afresh on a new connection and succeeds, instead of failing the
/// same way on every call for the connection's lifetime. On an app's own pool of one
/// connection, where the store keeps nothing out of the pool and every statement runs
/// on that connection: a lease statement (in a transaction of its own) and a read (in
/// autocommit).
#[tokio::test]
async fn a_stale_cached_statement_fails_once_not_on_every_call() {
    use scheduler_postgres::{connect_options, diagnostics::lease_status};
    let db = TestDb::new().await;
    let options = PostgresOptions::for_url(db.url()).max_connections(1);
    let pool = connect_options(db.url(), &options).expect("url");
    let pool = sea_orm::Database::connect(pool).await.expect("app pool");
    let open = PostgresStore::open(pool, options).await.expect("open");
    let admin = admin(db.url()).await;
    // Behind PgBouncer nothing is cached: each statement is planned afresh.
    let cached = !open.transaction_pooling();
    let stale = |err: &dyn std::fmt::Display| {
        assert!(
            err.to_string()
                .contains("cached plan must not change result type"),
            "{err}"
        );
    };

    // The store's first take probes the pauses, and the next ones, once it has read
    // them, send the take it then keeps sending: that one is cached.
    for name in ["a", "a2", "a3"] {
        take(&open, &[name], tick(&open, 0).await)
            .await
            .expect("take before");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    exec(
        &admin,
        "ALTER TABLE scheduler_leases ALTER holder TYPE varchar(300)",
    )
    .await;
    if cached {
        stale(
            &take(&open, &["b"], tick(&open, 0).await)
                .await
                .expect_err("the cached take went stale"),
        );
    }
    take(&open, &["c"], tick(&open, 0).await)
        .await
        .expect("take planned afresh on a new connection");

    lease_status(&open, open.table())
        .await
        .expect("status before");
    exec(
        &admin,
        "ALTER TABLE scheduler_leases ALTER holder TYPE text",
    )
    .await;
    if cached {
        stale(
            &lease_status(&open, open.table())
                .await
                .expect_err("the cached read went stale"),
        );
    }
    let status = lease_status(&open, open.table())
        .await
        .expect("status planned afresh on a new connection")
        .expect("table");
    let names: Vec<&str> = status.leases.iter().map(|l| l.lease.as_str()).collect();
    assert_eq!(names, ["a", "a2", "a3", "c"]);
}

#[tokio::test]
async fn a_dropped_primary_key_is_a_clear_error() {
    let (_db, store, _, _) =
        altered("ALTER TABLE scheduler_leases DROP CONSTRAINT scheduler_leases_pkey").await;
    let err = take(&store, &["c"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(
        &err,
        "take leases",
        "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        SHAPE_HINT,
    );
}

#[tokio::test]
async fn a_table_dropped_under_an_open_store_is_a_clear_error() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let t = tick(&store, 0).await;
    let a = take(&store, &["a"], t).await.expect("take");
    let admin = admin(db.url()).await;
    exec(&admin, "DROP TABLE scheduler_leases").await;
    let hint = "; the table does not exist: run the migrations (open the store with migrate(true)) \
                or check the table name and the search_path";
    let missing = "relation \"scheduler_leases\" does not exist";
    let err = take(&store, &["a"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_statement(&err, "take leases", missing, hint);
    let err = store.renew(&a, ttl()).await.expect_err("renew");
    assert_statement(&err, "renew leases", missing, hint);
    let err = store
        .release(&a, Release::Completed)
        .await
        .expect_err("release");
    assert_statement(&err, "release leases", missing, hint);
    store
        .now()
        .await
        .expect("the clock does not need the table");

    // The bookkeeping table still says the migration was applied: opening says so.
    let err = connect(db.url(), PostgresOptions::default())
        .await
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "migration setup failed: the bookkeeping table scheduler_leases_migrations records \
             {CREATE_LEASES}, m20261201_000002_cancel_requests, m20261202_000003_controls, \
             m20261204_000004_jobs, m20261204_000005_instances, m20261205_000006_schedule_indexes, \
             m20261205_000007_next_tick as applied, but the lease table scheduler_leases does not exist; was it dropped by hand? \
             delete the rows of scheduler_leases_migrations (DELETE FROM scheduler_leases_migrations) to have the \
             migrations create it again"
        )
    );
    println!("{err}");
    // Doing what it says repairs it (the controls' tables, which survived, are kept).
    exec(&admin, "DELETE FROM scheduler_leases_migrations").await;
    let repaired = connect(db.url(), PostgresOptions::default())
        .await
        .expect("migrates again");
    take(&repaired, &["a"], tick(&repaired, 2).await)
        .await
        .expect("take");
}

#[tokio::test]
async fn null_and_out_of_range_values_set_by_hand_are_bad_rows_not_panics() {
    // `a` is held (taken, not released): a take of `a` reads its row back.
    let (_db, store, _, t) = altered(
        "ALTER TABLE scheduler_leases ALTER expires_at DROP NOT NULL;
         UPDATE scheduler_leases SET expires_at = NULL WHERE name = 'a'",
    )
    .await;
    let err = take(&store, &["a"], t).await.expect_err("take");
    assert_bad_row(&err, "take leases", "expires_at");

    // PostgreSQL's timestamps reach further than chrono's (and 'infinity' further
    // still): decoding them must not overflow. A held row is only read to tell the
    // runtime when to ask again, so one set out of range by hand ("parked") reads as
    // the end or start of time and does not fail the batch it came with: the other
    // job of the batch is still taken.
    let cases = [
        ("expires_at", "infinity"),
        ("expires_at", "294000-01-01 00:00:00+00"),
        ("tick", "infinity"),
        ("tick", "-infinity"),
        ("tick", "294000-01-01 00:00:00+00"),
    ];
    for (column, value) in cases {
        let (_db, store, _, t) = altered(&format!(
            "UPDATE scheduler_leases SET {column} = '{value}' WHERE name = 'a'"
        ))
        .await;
        let won = take(&store, &["a", "fresh"], t)
            .await
            .unwrap_or_else(|e| panic!("{column} = {value}: {e}"));
        assert_eq!(won.len(), 1, "{column} = {value}: only fresh is free");
    }
    // An expiry of '-infinity' is simply expired: the take wins the lease.
    let (_db, store, _, t) =
        altered("UPDATE scheduler_leases SET expires_at = '-infinity' WHERE name = 'a'").await;
    assert_eq!(take(&store, &["a"], t).await.expect("take").len(), 1);
}

#[tokio::test]
async fn names_the_store_cannot_hold_are_bad_rows_not_panics() {
    // Rows are only ever read back by a requested (valid) name, so a bad name put in
    // by hand is never read: it sits there, and everything else keeps working.
    let long = "x".repeat(300);
    let (db, store, _, _) = altered(&format!(
        "INSERT INTO scheduler_leases (name, holder, tick, token, expires_at)
         VALUES ('{long}', 'by hand', now(), 1, now() + interval '1 hour'),
                (E'new\\nline', 'by hand', now(), 1, now() + interval '1 hour')"
    ))
    .await;
    let t = tick(&store, 1).await;
    let keys = take(&store, &["c", &"x".repeat(200)], t)
        .await
        .expect("take");
    assert_eq!(keys.len(), 2);
    let lens = strings(
        &admin(db.url()).await,
        "SELECT octet_length(name)::text FROM scheduler_leases WHERE holder = 'by hand' ORDER BY 1",
    )
    .await;
    assert_eq!(lens, [Some("300".to_owned()), Some("8".to_owned())]);

    // Unless the column's type changes what comes back: `char(210)` pads every name
    // to 210 bytes, longer than a lease name may be.
    let (_db, store, _, _) =
        altered("ALTER TABLE scheduler_leases ALTER name TYPE char(210)").await;
    let err = take(&store, &["c"], tick(&store, 1).await)
        .await
        .expect_err("take");
    assert_bad_row(&err, "take leases", "a name must be at most 200 bytes long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_logs_a_broken_table_retries_and_recovers_once_it_is_fixed() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let admin = admin(db.url()).await;
    exec(&admin, "ALTER TABLE scheduler_leases DROP COLUMN token").await;
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .job(Named {
            work: Duration::from_millis(10),
            ..Named::new("broken table job", &seen)
        })
        .build()
        .expect("build");
    let (stats, health) = (scheduler.stats(), scheduler.health());
    let logs = Logs::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(
        scheduler
            .run_until(async move {
                let _ = stopped.await;
            })
            .with_subscriber(logs.clone()),
    );
    let job = "broken table job";
    // Passed over for the next tick (coalesced, the default catch-up) or missed.
    wait_for(Duration::from_secs(60), "two ticks missed", || {
        let missed = stats.count(job, Outcome::Missed) + stats.count(job, Outcome::Coalesced);
        async move { missed >= 2 }
    })
    .await;
    assert!(!run.is_finished(), "the scheduler keeps running");
    assert_eq!(stats.count(job, Outcome::Succeeded), 0);
    let line = logs
        .find("taking due leases failed")
        .expect("the failure is logged");
    assert!(
        line.contains("lease store failed: take leases failed: ")
            && line.contains("column \"token\" of relation \"scheduler_leases\" does not exist")
            && line.contains(SHAPE_HINT)
            && line.contains("retry_in="),
        "{line}"
    );
    println!("logged: {line}");
    // The loop keeps turning; the readiness probe's database check only reads the
    // clock, which needs no table, and it says how long the takes have been failing.
    // (The probe's view of the loop is of its last turn: on a loaded machine a probe
    // may come just after a stall, so it is asked until it sees a recent turn.)
    probe_until(
        &health,
        Duration::from_secs(60),
        "the probe to see the loop turning and its takes failing",
        |r| r.scheduler && r.database && r.store_failing_for.is_some(),
    )
    .await;

    exec(
        &admin,
        "ALTER TABLE scheduler_leases ADD COLUMN token bigint NOT NULL DEFAULT 1",
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "a run once the table is fixed",
        || {
            let ran = stats.count(job, Outcome::Succeeded);
            async move { ran >= 1 }
        },
    )
    .await;
    let report = probe_until(
        &health,
        Duration::from_secs(60),
        "the probe to see the takes succeed",
        |r| r.store_failing_for.is_none(),
    )
    .await;
    assert!(report.database, "recovered: {report:?}");
    stop.send(()).expect("scheduler running");
    run.await.expect("the scheduler does not panic");
}
