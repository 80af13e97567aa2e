//! Runtimes in one test process sharing one database: each "instance" has its own
//! pool and scheduler, and every job records its runs in a `runs` table.
//!
//! The tests run on loaded machines (two cores shared with other builds): they wait
//! for conditions, each bounded by a generous [`LIMIT`], and never assert how fast
//! something happened.
//!
//! [`hostile`] holds what the hostile-input tests share.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

pub mod hostile;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, LocalClock, Outcome, Policy, Schedule, Scheduler,
    Scope, Stats,
};
use scheduler_postgres::{Fence, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;

/// How long a test waits for something that takes a second or two on an idle machine.
pub const LIMIT: Duration = Duration::from_secs(60);

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
    pub policy: Policy,
    /// The first this many attempts at each tick fail (after recording themselves).
    pub fail_attempts: u32,
    pub work: Duration,
    /// When set, the work also ends as soon as this turns true (a test's signal, for
    /// runs that must last until the test has seen something).
    pub done: Option<watch::Receiver<bool>>,
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
            policy: Policy::default(),
            fail_attempts: 0,
            work: Duration::from_millis(50),
            done: None,
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
    fn policy(&self) -> Policy {
        self.policy
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
        let mut done = self.done.clone();
        let signalled = async move {
            match &mut done {
                Some(done) => drop(done.wait_for(|d| *d).await),
                None => std::future::pending().await,
            }
        };
        let cancelled = tokio::select! {
            biased;
            () = ctx.cancellation().cancelled() => true,
            () = tokio::time::sleep(self.work) => false,
            () = signalled => false,
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
        } else if ctx.attempt() <= self.fail_attempts {
            Err(format!("attempt {} told to fail", ctx.attempt()).into())
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
    /// What the instance reported that can cost a tick.
    pub troubles: Troubles,
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
    // The connect timeout is also the pool's acquire timeout: a run waiting longer for
    // a connection fails before it records itself, so it is generous.
    let options = PostgresOptions::default()
        .max_connections(pool)
        .connect_timeout(Duration::from_secs(30));
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
        let jobs = jobs(&store);
        ran_before(
            &store,
            jobs.iter().map(|j| (j.name.as_str(), j.scope)),
            &config.node,
        )
        .await;
        let mut builder = Scheduler::builder(store.clone())
            .node_id(config.node)
            .lease_ttl(config.ttl)
            .shutdown_grace(config.grace)
            .retry_backoff(Duration::from_millis(50), Duration::from_millis(500))
            .clock(config.clock);
        for mut job in jobs {
            job.instance = name.to_owned();
            builder = builder.job(job);
        }
        let scheduler = builder.build().expect("build");
        let stats = scheduler.stats();
        let troubles = Troubles {
            stats: stats.clone(),
            warnings: Warnings::default(),
        };
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(
            scheduler
                .run_until(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .with_subscriber(troubles.warnings.clone()),
        );
        Instance {
            name: name.to_owned(),
            store,
            inspect: test_postgres::inspect(url).await,
            stats,
            troubles,
            stop,
            task,
        }
    }

    /// One instance per name of `names` (`a` runs as node `node-a`), each named
    /// after its node and `suffix` (`a1`), with `jobs`.
    pub async fn start_nodes<F>(url: &str, names: &[&str], suffix: &str, jobs: F) -> Vec<Instance>
    where
        F: Fn(&PostgresStore) -> Vec<Recorder> + Clone,
    {
        let mut instances = Vec::new();
        for name in names {
            let config = InstanceConfig {
                node: format!("node-{name}"),
                ..InstanceConfig::default()
            };
            let named = format!("{name}{suffix}");
            instances.push(Instance::start(&named, url, config, jobs.clone()).await);
        }
        instances
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
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What an instance reported that can cost a tick: ticks missed or skipped, runs failed,
/// leases lost (its [`Stats`]), and the warnings and errors its loop logged (failed
/// store calls among them: a take that timed out can leave a tick held by nobody
/// running it). A machine that does not keep up makes these; a test that needs every
/// tick to run looks at ticks during which none were made.
#[derive(Clone)]
pub struct Troubles {
    stats: Stats,
    warnings: Warnings,
}

impl Troubles {
    /// How many reports concern `jobs` (or no job in particular, as a failed store call).
    pub fn count(&self, jobs: &[&str]) -> u64 {
        let counted: u64 = jobs
            .iter()
            .map(|j| {
                [
                    Outcome::Missed,
                    Outcome::Coalesced,
                    Outcome::SkippedOverlap,
                    Outcome::Failed,
                    Outcome::TimedOut,
                    Outcome::Retried,
                    Outcome::LeaseLost,
                ]
                .iter()
                .map(|o| self.stats.count(j, *o))
                .sum::<u64>()
            })
            .sum();
        let logged = self.warnings.0.lock().unwrap();
        let warned: u64 = logged
            .iter()
            .filter(|(job, _)| job.as_deref().is_none_or(|job| jobs.contains(&job)))
            .map(|(_, n)| *n)
            .sum();
        counted + warned
    }

    /// The warnings and errors logged, as `field=value` lines, for a failure message.
    pub fn lines(&self) -> Vec<String> {
        self.warnings.1.lock().unwrap().clone()
    }
}

/// A tracing subscriber for one instance's loop: counts its warnings and errors by
/// the job they name (none for store calls), and keeps their text.
#[derive(Clone, Default)]
struct Warnings(
    Arc<Mutex<HashMap<Option<String>, u64>>>,
    Arc<Mutex<Vec<String>>>,
);

#[derive(Default)]
struct Fields {
    job: Option<String>,
    line: String,
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "job" {
            self.job = Some(text.clone());
        }
        self.line.push_str(&format!("{}={text} ", field.name()));
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        *self.0.lock().unwrap().entry(fields.job).or_default() += 1;
        self.1
            .lock()
            .unwrap()
            .push(format!("{} {}", event.metadata().level(), fields.line));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// How long after its instant a tick's trouble may still be reported: a superseded
/// tick is counted when the next one is due, a take that timed out after up to two
/// call limits.
const SETTLE: TimeDelta = TimeDelta::seconds(5);

/// Waits for `ticks` whole seconds of the store's clock during which no instance
/// reported trouble with `jobs` (see [`Troubles`]), and returns them as `(from, to)`
/// for [`assert_once_per_tick`]: in such a window nothing excuses a tick that did not
/// run. On an idle machine that is the first `ticks` seconds; a machine that stalls
/// only delays it, up to [`LIMIT`] (a runtime that keeps reporting trouble fails).
pub async fn quiet_window(
    instances: &[&Instance],
    jobs: &[&str],
    db: &DatabaseConnection,
    ticks: i64,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let troubles = || -> u64 { instances.iter().map(|i| i.troubles.count(jobs)).sum() };
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut seen = troubles();
    // Every report counted in `seen` was made before `from`.
    let mut from = db_now(db).await;
    loop {
        // Every report made before `now` is counted in `count`.
        let now = db_now(db).await;
        let count = troubles();
        if count != seen {
            seen = count;
            from = db_now(db).await;
        } else if now - from >= TimeDelta::seconds(ticks) + SETTLE {
            return (from, now - SETTLE);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {ticks} s without a reported miss, failure or failed store call in {LIMIT:?}: {:#?}",
            instances
                .iter()
                .flat_map(|i| i.troubles.lines())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
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
/// tick in `(from, to]` exactly once. Returns the number of runs checked.
pub fn assert_once_per_tick(
    rows: &[RunRow],
    jobs: &[&str],
    nodes: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> usize {
    assert_once_per_tick_excusing(rows, jobs, nodes, from, to, 0)
}

/// [`assert_once_per_tick`], where up to `excused` ticks of each (job, node) in
/// `(from, to]` may be missing: as many as the instances reported trouble (see
/// [`Troubles`]) while they were due, for a window a test cannot choose.
pub fn assert_once_per_tick_excusing(
    rows: &[RunRow],
    jobs: &[&str],
    nodes: &[&str],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    excused: u64,
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
            let mut missing = Vec::new();
            let mut t = DateTime::from_timestamp(from.timestamp() + 1, 0).unwrap();
            while t <= to {
                if unique.contains(&t) {
                    checked += 1;
                } else {
                    missing.push(t);
                }
                t += TimeDelta::seconds(1);
            }
            assert!(
                missing.len() as u64 <= excused,
                "{job} on {node} never ran ticks {missing:?} ({excused} excused by reported trouble): {unique:?}"
            );
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

/// The lease `name` as it stands: its token and expiry (the store's clock). Another
/// holder can take it only once that expiry, or a later one a renewal set, has passed.
pub async fn lease(db: &DatabaseConnection, name: &str) -> (i64, DateTime<Utc>) {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT token, expires_at FROM scheduler_leases WHERE name = $1",
            [name.into()],
        ))
        .await
        .expect("lease")
        .expect("a lease row");
    (
        row.try_get("", "token").expect("token"),
        row.try_get("", "expires_at").expect("expires_at"),
    )
}

/// Records the lease of each job of `jobs` (name and scope, as `node` names it) as
/// run ten days ago, unless
/// it has a row: the instances start as a cluster that ran these jobs before, whose
/// start-up catches up as each job's window says (a job new to the cluster catches
/// up nothing from before its start, which the tests of that say themselves).
pub async fn ran_before<'a>(
    store: &PostgresStore,
    jobs: impl IntoIterator<Item = (&'a str, Scope)>,
    node: &str,
) {
    use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
    let now = store.now().await.expect("store clock");
    let tick = Tick::new(now - TimeDelta::days(10));
    let requests: Vec<TakeRequest> = jobs
        .into_iter()
        .map(|(job, scope)| {
            let name = LeaseName::for_job(job, scope, node).expect("lease name");
            TakeRequest::new(name, tick)
        })
        .collect();
    let ttl = Ttl::new(Duration::from_secs(60)).expect("ttl");
    let taken = store.take(&requests, ttl).await.expect("take");
    let keys: Vec<_> = taken.won.iter().map(|l| l.key()).collect();
    store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
}
