//! Runtimes in one test process sharing one database: each "instance" has its own
//! pool and scheduler, and every job records its runs in a `runs` table.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, LocalClock, Schedule, Scheduler, Scope, Stats,
};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const RUNS_TABLE: &str = "CREATE TABLE IF NOT EXISTS runs (
    id       bigserial   PRIMARY KEY,
    job      text        NOT NULL,
    tick     timestamptz NOT NULL,
    node     text        NOT NULL,
    instance text        NOT NULL,
    token    bigint      NOT NULL,
    started  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished timestamptz,
    outcome  text
);
CREATE TABLE IF NOT EXISTS payouts (
    tick  timestamptz NOT NULL,
    token bigint      NOT NULL
)";

/// A job that records each run: a row at start, `finished` and `outcome` at the end.
#[derive(Clone)]
pub struct Recorder {
    pub name: String,
    pub schedule: Schedule,
    pub scope: Scope,
    pub duplicate: Duplicate,
    pub catch_up: Option<Duration>,
    pub work: Duration,
    /// After `work` (or cancellation), attempt a fenced write into `payouts`.
    pub fenced_write: bool,
    pub instance: String,
    pub store: PostgresStore,
}

impl Recorder {
    pub fn new(name: &str, store: &PostgresStore, instance: &str) -> Self {
        Self {
            name: name.to_owned(),
            schedule: Schedule::every(Duration::from_secs(1)),
            scope: Scope::Cluster,
            duplicate: Duplicate::Harmless,
            catch_up: None,
            work: Duration::from_millis(50),
            fenced_write: false,
            instance: instance.to_owned(),
            store: store.clone(),
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        self.schedule.clone()
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    fn duplicate(&self) -> Duplicate {
        self.duplicate
    }
    fn catch_up(&self) -> Option<Duration> {
        self.catch_up
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        // The app's own statements, each in a transaction of the store's: that works
        // directly and behind PgBouncer's transaction pooling alike.
        let txn = self.store.begin().await?;
        let row = txn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "INSERT INTO runs (job, tick, node, instance, token) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                [
                    self.name.clone().into(),
                    ctx.tick().at().into(),
                    ctx.node().to_owned().into(),
                    self.instance.clone().into(),
                    ctx.token().get().into(),
                ],
            ))
            .await?
            .ok_or("no id")?;
        let id: i64 = row.try_get("", "id")?;
        txn.commit().await?;
        let cancelled = tokio::select! {
            () = tokio::time::sleep(self.work) => false,
            () = ctx.cancellation().cancelled() => true,
        };
        let mut outcome = if cancelled {
            "cancelled".to_owned()
        } else {
            "ok".to_owned()
        };
        if self.fenced_write {
            let tick = ctx.tick().at();
            let token = ctx.token().get();
            let written = self
                .store
                .fenced(&Fence::from(&ctx), |txn| {
                    Box::pin(async move {
                        txn.execute_raw(Statement::from_sql_and_values(
                            DbBackend::Postgres,
                            "INSERT INTO payouts (tick, token) VALUES ($1, $2)",
                            [tick.into(), token.into()],
                        ))
                        .await
                        .map(drop)
                    })
                })
                .await;
            outcome = match written {
                Ok(()) => format!("{outcome}+paid"),
                Err(e) if e.is_lease_lost() => format!("{outcome}+refused"),
                Err(e) => format!("{outcome}+error:{e}"),
            };
        }
        let txn = self.store.begin().await?;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "UPDATE runs SET finished = clock_timestamp(), outcome = $2 WHERE id = $1",
            [id.into(), outcome.into()],
        ))
        .await?;
        txn.commit().await?;
        if cancelled {
            Err("cancelled".into())
        } else {
            Ok(())
        }
    }
}

/// One running instance.
pub struct Instance {
    pub name: String,
    pub store: PostgresStore,
    /// A connection of the test's own to the same database, never through PgBouncer.
    pub inspect: DatabaseConnection,
    pub stats: Stats,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

pub struct InstanceConfig {
    pub node: String,
    pub ttl: Duration,
    pub grace: Duration,
    pub clock: LocalClock,
    pub pool: u32,
}

impl Default for InstanceConfig {
    fn default() -> Self {
        Self {
            node: "node-a".to_owned(),
            ttl: Duration::from_secs(4),
            grace: Duration::from_secs(5),
            clock: LocalClock::system(),
            pool: 4,
        }
    }
}

pub async fn store(url: &str, pool: u32) -> PostgresStore {
    let options = PostgresOptions::default()
        .max_connections(pool)
        .connect_timeout(Duration::from_secs(2));
    let store = PostgresStore::connect(url, options).await.expect("connect");
    store
        .connection()
        .execute_unprepared(RUNS_TABLE)
        .await
        .expect("runs table");
    store
}

impl Instance {
    /// Starts an instance with jobs made by `jobs` from its own store.
    pub async fn start(
        name: &str,
        url: &str,
        config: InstanceConfig,
        jobs: impl FnOnce(&PostgresStore) -> Vec<Recorder>,
    ) -> Instance {
        let store = store(url, config.pool).await;
        let mut builder = Scheduler::builder(store.clone())
            .node_id(config.node)
            .lease_ttl(config.ttl)
            .shutdown_grace(config.grace)
            .retry_backoff(Duration::from_millis(50), Duration::from_millis(500))
            .clock(config.clock);
        for mut job in jobs(&store) {
            job.instance = name.to_owned();
            builder = builder.job(job);
        }
        let scheduler = builder.build().expect("build");
        let stats = scheduler.stats();
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(scheduler.run_until(async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
        Instance {
            name: name.to_owned(),
            store,
            inspect: test_postgres::inspect(url).await,
            stats,
            stop,
            task,
        }
    }

    /// Graceful shutdown; waits until it is done.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// A crash: the loop and its runs stop at once, nothing is released.
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Waits until `probe` holds, polling, for at most `limit`.
pub async fn wait_for<F, Fut>(limit: Duration, what: &str, mut probe: F)
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

/// All rows of `runs`, as (job, tick, node, instance, token, outcome).
#[derive(Debug, Clone)]
pub struct RunRow {
    pub job: String,
    pub tick: DateTime<Utc>,
    pub node: String,
    pub instance: String,
    pub token: i64,
    pub started: DateTime<Utc>,
    pub outcome: Option<String>,
}

pub async fn runs(db: &DatabaseConnection) -> Vec<RunRow> {
    db.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT job, tick, node, instance, token, started, outcome FROM runs ORDER BY job, node, tick, started",
    ))
    .await
    .expect("runs")
    .iter()
    .map(|r| RunRow {
        job: r.try_get("", "job").unwrap(),
        tick: r.try_get("", "tick").unwrap(),
        node: r.try_get("", "node").unwrap(),
        instance: r.try_get("", "instance").unwrap(),
        token: r.try_get("", "token").unwrap(),
        started: r.try_get("", "started").unwrap(),
        outcome: r.try_get("", "outcome").unwrap(),
    })
    .collect()
}

/// Checks that each (job, node) ran each tick at most once, and every whole-second
/// tick in `[from, to]` exactly once. Returns the number of runs checked.
pub fn assert_once_per_tick(
    rows: &[RunRow],
    jobs: &[&str],
    nodes: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> usize {
    let mut checked = 0;
    for job in jobs {
        for node in nodes {
            let ticks: Vec<DateTime<Utc>> = rows
                .iter()
                .filter(|r| r.job == *job && r.node == *node)
                .map(|r| r.tick)
                .collect();
            let mut unique = ticks.clone();
            unique.dedup();
            assert_eq!(
                unique.len(),
                ticks.len(),
                "{job} on {node} ran a tick twice: {ticks:?}"
            );
            let mut t = DateTime::from_timestamp(from.timestamp() + 1, 0).unwrap();
            while t <= to {
                assert!(
                    unique.contains(&t),
                    "{job} on {node} never ran tick {t}: {unique:?}"
                );
                checked += 1;
                t += TimeDelta::seconds(1);
            }
        }
    }
    checked
}

/// The database's clock.
pub async fn db_now(db: &DatabaseConnection) -> DateTime<Utc> {
    db.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT clock_timestamp() AS now",
    ))
    .await
    .expect("now")
    .expect("row")
    .try_get("", "now")
    .expect("now")
}
