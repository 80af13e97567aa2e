//! The run history: a scheduler that records its runs writes one row per run, with
//! one `INSERT` each; the retention job deletes old rows in bounded batches and keeps
//! the rest.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use scheduler_core::{
    BoxError, Duplicate, FencingToken, Holder, Idempotent, JobContext, LeaseName, Outcome,
    RunRecord, RunRecorder, Schedule, Scheduler, Scope, Tick,
};
use scheduler_postgres::history::{MAX_ERROR_LEN, RETENTION_JOB};
use scheduler_postgres::{
    HistoryOptions, PostgresOptions, PostgresStore, RunHistory, connect_options,
};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use test_postgres::TestDb;

/// A job every second that succeeds, or fails with `boom`.
struct Every {
    name: &'static str,
    fail: bool,
}

#[scheduler_core::async_trait]
impl Idempotent for Every {
    fn name(&self) -> &str {
        self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if self.fail {
            Err("boom: the disk is full".into())
        } else {
            Ok(())
        }
    }
}

/// A pool that counts the statements whose SQL contains `needle`, built as the store
/// builds its own (behind PgBouncer: no statement cache).
///
/// Behind PgBouncer the store runs its statements unnamed through sqlx, past sea-orm's
/// metric callback: there the count stays 0 and only the direct run checks it.
async fn counting_pool(url: &str, needle: &'static str) -> (DatabaseConnection, Arc<AtomicUsize>) {
    let pool = connect_options(url, &PostgresOptions::for_url(url)).expect("url");
    let mut conn = Database::connect(pool).await.expect("connect");
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    conn.set_metric_callback(move |info| {
        if info.statement.sql.contains(needle) {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    (conn, count)
}

#[derive(Debug)]
struct Row {
    job: String,
    tick: DateTime<Utc>,
    node: String,
    holder: String,
    token: i64,
    started: DateTime<Utc>,
    finished: DateTime<Utc>,
    outcome: String,
    error: Option<String>,
    lease_lost: bool,
}

async fn rows(db: &DatabaseConnection) -> Vec<Row> {
    db.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT job, tick, node, holder, token, started, finished, outcome, error, lease_lost \
         FROM scheduler_leases_runs ORDER BY job, started",
    ))
    .await
    .expect("rows")
    .iter()
    .map(|r| Row {
        job: r.try_get("", "job").unwrap(),
        tick: r.try_get("", "tick").unwrap(),
        node: r.try_get("", "node").unwrap(),
        holder: r.try_get("", "holder").unwrap(),
        token: r.try_get("", "token").unwrap(),
        started: r.try_get("", "started").unwrap(),
        finished: r.try_get("", "finished").unwrap(),
        outcome: r.try_get("", "outcome").unwrap(),
        error: r.try_get("", "error").unwrap(),
        lease_lost: r.try_get("", "lease_lost").unwrap(),
    })
    .collect()
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("count")
        .expect("row")
        .try_get_by_index(0)
        .expect("n")
}

/// How long a test waits for something that takes a second or two on an idle machine.
const LIMIT: Duration = Duration::from_secs(60);

/// Waits until `probe` holds, polling, for at most `limit`.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !probe().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_run_is_one_row_written_by_one_insert() {
    let db = TestDb::new().await;
    let (conn, inserts) = counting_pool(db.url(), "INSERT INTO \"scheduler_leases_runs\"").await;
    let store = PostgresStore::open(conn, PostgresOptions::for_url(db.url()))
        .await
        .expect("store");
    let history = Arc::new(
        RunHistory::new(&store, HistoryOptions::default())
            .await
            .expect("history"),
    );
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .record_runs(history.clone())
        .job(Every {
            name: "works",
            fail: false,
        })
        .job(Every {
            name: "breaks",
            fail: true,
        })
        .build()
        .expect("build");
    let stats = scheduler.stats();
    // Until each job has run twice, however long that takes the machine.
    let counts = stats.clone();
    scheduler
        .run_until(wait_for(LIMIT, "each job to run twice", move || {
            let twice = counts.count("works", Outcome::Succeeded) >= 2
                && counts.count("breaks", Outcome::Failed) >= 2;
            async move { twice }
        }))
        .await;
    let (ok, failed) = (
        stats.count("works", Outcome::Succeeded),
        stats.count("breaks", Outcome::Failed),
    );
    assert!(ok >= 2 && failed >= 2, "ran {ok}, failed {failed}");
    let runs = ok + failed;
    // Runs are recorded off the scheduler's loop: the last ones may land just after it
    // stopped.
    let db = test_postgres::inspect(db.url()).await;
    wait_for(LIMIT, "every run to be recorded", || {
        let db = db.clone();
        async move { count(&db, "SELECT count(*) FROM scheduler_leases_runs").await >= runs as i64 }
    })
    .await;
    let rows = rows(&db).await;
    assert_eq!(rows.len() as u64, runs, "{rows:#?}");
    assert_eq!(
        inserts.load(Ordering::SeqCst),
        if store.transaction_pooling() {
            0
        } else {
            rows.len()
        },
        "one INSERT per run"
    );

    let mut holders: Vec<&str> = rows.iter().map(|r| r.holder.as_str()).collect();
    holders.sort_unstable();
    holders.dedup();
    assert_eq!(holders.len(), rows.len(), "a fresh holder per run");
    for job in ["works", "breaks"] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.job == job).collect();
        for pair in mine.windows(2) {
            assert!(pair[0].tick < pair[1].tick, "{pair:#?}");
            assert!(pair[0].token < pair[1].token, "{pair:#?}");
        }
        for r in &mine {
            assert_eq!(r.node, "node-a");
            assert_eq!(r.tick.nanosecond(), 0, "whole-second ticks: {r:?}");
            assert!(r.started >= r.tick, "{r:?}");
            assert!(r.finished > r.started, "{r:?}");
            assert!(!r.lease_lost, "{r:?}");
            if job == "works" {
                assert_eq!(r.outcome, "succeeded");
                assert_eq!(r.error, None);
            } else {
                assert_eq!(r.outcome, "failed");
                assert!(
                    r.error
                        .as_deref()
                        .is_some_and(|e| e.contains("boom: the disk is full")),
                    "{r:?}"
                );
            }
        }
        // The last run recorded is the lease's last acquisition.
        let last = mine.last().expect("runs");
        let lease = db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT holder, token, tick FROM scheduler_leases WHERE name = $1",
                [job.into()],
            ))
            .await
            .expect("lease")
            .expect("row");
        assert_eq!(lease.try_get::<String>("", "holder").unwrap(), last.holder);
        assert_eq!(lease.try_get::<i64>("", "token").unwrap(), last.token);
        assert_eq!(
            lease.try_get::<DateTime<Utc>>("", "tick").unwrap(),
            last.tick
        );
    }
}

/// Inserts `n` runs of `job` that started `age` ago (minus one second per row).
async fn insert_runs(db: &DatabaseConnection, job: &str, n: i64, age: &str) {
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "INSERT INTO scheduler_leases_runs \
           (job, tick, node, holder, token, started, finished, outcome, error, lease_lost) \
         SELECT $1, now() - $3::interval, 'node-a', 'h:' || g, g, \
                now() - $3::interval - g * interval '1 second', \
                now() - $3::interval - g * interval '1 second' + interval '5 ms', \
                'succeeded', NULL, false \
         FROM generate_series(1, $2::bigint) AS g",
        [job.into(), n.into(), age.into()],
    ))
    .await
    .expect("insert runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_retention_job_deletes_old_runs_in_batches_and_keeps_the_rest() {
    let db = TestDb::new().await;
    let (conn, deletes) = counting_pool(db.url(), "DELETE FROM \"scheduler_leases_runs\"").await;
    let store = PostgresStore::open(conn, PostgresOptions::for_url(db.url()))
        .await
        .expect("store");
    let history = RunHistory::new(
        &store,
        HistoryOptions::default().retention(Duration::from_secs(3600)),
    )
    .await
    .expect("history");
    let db = &test_postgres::inspect(db.url()).await;
    insert_runs(db, "old", 25_000, "2 hours").await;
    insert_runs(db, "edge", 3, "1 hour").await; // started 1 h 1 s … 1 h 3 s ago
    insert_runs(db, "recent", 5, "10 minutes").await;
    insert_runs(db, "young-edge", 3, "59 minutes").await;

    let job = history.retention_job();
    assert_eq!(job.name(), RETENTION_JOB);
    assert_eq!(job.schedule(), Schedule::every(Duration::from_secs(3600)));
    assert_eq!(job.scope(), Scope::Cluster);
    assert_eq!(job.duplicate(), Duplicate::Harmless);
    let now = Utc::now();
    let ctx = JobContext::detached(
        RETENTION_JOB,
        Tick::new(now),
        "node-a",
        LeaseName::new(RETENTION_JOB).unwrap(),
        FencingToken::new(1),
    );
    job.run(ctx).await.expect("sweep");

    let left = |job: &'static str| {
        let sql = format!("SELECT count(*) FROM scheduler_leases_runs WHERE job = '{job}'");
        async move { count(db, &sql).await }
    };
    assert_eq!(left("old").await, 0);
    assert_eq!(left("edge").await, 0);
    assert_eq!(left("recent").await, 5);
    assert_eq!(left("young-edge").await, 3);
    // 25,003 rows in batches of at most 10,000: three statements.
    let expected = if store.transaction_pooling() { 0 } else { 3 };
    assert_eq!(deletes.load(Ordering::SeqCst), expected);
    // A second sweep finds nothing: a duplicate run is harmless.
    assert_eq!(history.sweep().await.expect("sweep"), 0);
    assert_eq!(left("recent").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduler_runs_the_retention_job_it_is_given() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("store");
    let history = Arc::new(
        RunHistory::new(
            &store,
            HistoryOptions::default().retention(Duration::from_secs(3600)),
        )
        .await
        .expect("history"),
    );
    let conn = test_postgres::inspect(db.url()).await;
    insert_runs(&conn, "old", 50, "3 hours").await;
    insert_runs(&conn, "recent", 5, "1 minute").await;
    // The sweep ran before, two hours ago (a job new to the cluster would catch up
    // no tick from before its start).
    conn.execute_raw(Statement::from_string(
        DbBackend::Postgres,
        "INSERT INTO scheduler_leases (name, holder, tick, token, taken_at, expires_at, released_at) \
         VALUES ('scheduler-history-retention', 'earlier', now() - interval '2 hours', 1, \
                 now(), now(), now())",
    ))
    .await
    .expect("seed the sweep's lease");
    let scheduler = Scheduler::builder(store.clone())
        .record_runs(history.clone())
        .job(history.retention_job())
        .build()
        .expect("build");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(scheduler.run_until(async {
        let _ = stopped.await;
    }));
    // The hourly tick now due is within its catch-up window: it runs at start (the
    // sweep ran before), and its own run is recorded like any other.
    wait_for(LIMIT, "the sweep to run and be recorded", || {
        let conn = conn.clone();
        async move {
            count(
                &conn,
                "SELECT count(*) FROM scheduler_leases_runs \
                 WHERE job = 'scheduler-history-retention' AND outcome = 'succeeded'",
            )
            .await
                >= 1
        }
    })
    .await;
    let _ = stop.send(());
    task.await.expect("scheduler");
    // Only the old runs are gone (the sweep may have run twice if an hour began).
    let jobs = conn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT job, count(*) AS n FROM scheduler_leases_runs \
             WHERE job <> 'scheduler-history-retention' GROUP BY job ORDER BY job",
        ))
        .await
        .expect("left")
        .iter()
        .map(|r| {
            (
                r.try_get::<String>("", "job").unwrap(),
                r.try_get::<i64>("", "n").unwrap(),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(jobs, [("recent".to_owned(), 5)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_table_is_created_once_by_instances_starting_together_in_any_schema() {
    let db = TestDb::new().await;
    let options = || {
        PostgresOptions::default()
            .table("app_a.leases")
            .expect("table")
            .create_schema(true)
    };
    let mut starts = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let url = db.url().to_owned();
        starts.spawn(async move {
            let store = PostgresStore::connect(&url, options()).await?;
            RunHistory::new(&store, HistoryOptions::default()).await
        });
    }
    let histories: Vec<RunHistory> = starts
        .join_all()
        .await
        .into_iter()
        .map(|r| r.expect("every instance starts"))
        .collect();
    assert_eq!(histories[0].table().to_string(), "app_a.leases_runs");
    let store = PostgresStore::connect(db.url(), options().migrate(false))
        .await
        .expect("store");
    assert!(!store.table().to_string().is_empty());
    let conn = &test_postgres::inspect(db.url()).await;
    let indexes = conn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT indexdef FROM pg_indexes \
             WHERE schemaname = 'app_a' AND tablename = 'leases_runs' ORDER BY indexname",
        ))
        .await
        .expect("indexes")
        .iter()
        .map(|r| r.try_get::<String>("", "indexdef").unwrap())
        .collect::<Vec<_>>();
    assert_eq!(indexes.len(), 5, "{indexes:#?}");
    assert!(
        indexes[0].contains("_fail") && indexes[0].contains("(id) WHERE"),
        "{indexes:#?}"
    );
    assert!(indexes[1].contains("(job, started DESC)"), "{indexes:#?}");
    assert!(indexes[2].contains("(job, id)"), "{indexes:#?}");
    assert!(indexes[3].contains("(id)"), "{indexes:#?}");
    assert!(indexes[4].contains("(started)"), "{indexes:#?}");
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        .await,
        0,
        "no advisory lock outlives the creation"
    );

    // A run recorded by hand: long error text with a NUL is cut and cleaned.
    let now = Utc::now();
    let run = RunRecord {
        job: "payout".to_owned(),
        tick: Tick::new(now),
        node: "node-b".to_owned(),
        holder: Holder::generate(),
        token: FencingToken::new(7),
        started: now,
        finished: now + TimeDelta::milliseconds(5),
        outcome: Outcome::Cancelled,
        error: Some(format!("bad\0{}", "x".repeat(10 * MAX_ERROR_LEN))),
        lease_lost: true,
        attempt: 3,
    };
    histories[1].record(&run).await.expect("record");
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT outcome, error, lease_lost, token, node, attempt FROM app_a.leases_runs",
        ))
        .await
        .expect("row")
        .expect("one row");
    let error: String = row.try_get("", "error").unwrap();
    assert!(error.starts_with("bad\u{fffd}xxx"), "{error:.20}");
    assert!(error.len() <= MAX_ERROR_LEN && error.ends_with('…'));
    assert_eq!(row.try_get::<String>("", "outcome").unwrap(), "cancelled");
    assert!(row.try_get::<bool>("", "lease_lost").unwrap());
    assert_eq!(row.try_get::<i64>("", "token").unwrap(), 7);
    assert_eq!(row.try_get::<String>("", "node").unwrap(), "node-b");
    assert_eq!(row.try_get::<i32>("", "attempt").unwrap(), 3);
}

/// A history table created before retries existed gets its `attempt` column when a
/// store opens it, and keeps its rows (each a first attempt).
#[tokio::test]
async fn a_history_table_from_before_retries_gets_the_attempt_column() {
    let db = TestDb::new().await;
    let admin = Database::connect(db.direct_url()).await.expect("admin");
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("store");
    admin
        .execute_unprepared(
            "CREATE TABLE scheduler_leases_runs (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job text NOT NULL,
                tick timestamptz NOT NULL, node text NOT NULL, holder text NOT NULL,
                token bigint NOT NULL, started timestamptz NOT NULL, finished timestamptz NOT NULL,
                outcome text NOT NULL, error text, lease_lost boolean NOT NULL);
             INSERT INTO scheduler_leases_runs (job, tick, node, holder, token, started, finished, outcome, lease_lost)
             VALUES ('old', now(), 'n', 'h', 1, now(), now(), 'succeeded', false)",
        )
        .await
        .expect("the old table");
    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("opens and upgrades");
    let now = Utc::now();
    let run = RunRecord {
        job: "new".to_owned(),
        tick: Tick::new(now),
        node: "n".to_owned(),
        holder: Holder::generate(),
        token: FencingToken::new(2),
        started: now,
        finished: now,
        outcome: Outcome::Retried,
        error: Some("first try failed".to_owned()),
        lease_lost: false,
        attempt: 1,
    };
    history.record(&run).await.expect("record");
    let attempts: Vec<(String, i32)> = admin
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT job, attempt FROM scheduler_leases_runs ORDER BY id",
        ))
        .await
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r.try_get("", "job").unwrap(),
                r.try_get("", "attempt").unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, [("old".to_owned(), 1), ("new".to_owned(), 1)]);
}
