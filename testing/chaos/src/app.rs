//! The app every instance runs (the `chaos-app` binary): its jobs, the tables they
//! record into, and the instance's heartbeat.
//!
//! Every statement of the app runs in a short transaction of its own opened with
//! [`PostgresStore::begin`], so the app also works behind PgBouncer in transaction
//! pooling mode. Every time in the tables is the database's `clock_timestamp()`.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{BoxError, Duplicate, Idempotent, JobContext, Schedule, Scope, Stats};
use scheduler_core::{Health, Outcome};
use scheduler_postgres::{Fence, FencedError, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// The tables the app records into. Created by [`prepare`] under a transaction-level
/// advisory lock, so instances starting together do not race on `CREATE TABLE`.
///
/// - `runs`: one row per run, inserted when the run starts (`started`) and completed
///   when it ends (`finished`, `outcome`);
/// - `payouts`: the fencing job's writes, one per committed fenced transaction; no
///   unique key, so a duplicate would show instead of failing;
/// - `heartbeats`: one row per instance every heartbeat period, with how many ticks
///   the store has answered it so far.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
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
    job      text        NOT NULL,
    tick     timestamptz NOT NULL,
    token    bigint      NOT NULL,
    instance text        NOT NULL,
    written  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS heartbeats (
    instance text        NOT NULL,
    pid      bigint      NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    answered bigint      NOT NULL,
    healthy  boolean     NOT NULL
)";

/// Takes the transaction-level advisory lock [`SCHEMA`] is created under.
pub const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('scheduler-chaos schema'))";

/// One of the app's jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    /// The job's name (and lease name).
    pub name: &'static str,
    /// Cluster or node.
    pub scope: Scope,
    /// How long a run works, in thousandths of the period.
    pub work_permille: u32,
    /// Whether it declares [`Duplicate::NeedsFencing`] and ends with a fenced write
    /// into `payouts`.
    pub fencing: bool,
}

impl JobSpec {
    /// How long a run of it works when the period is `period`.
    pub fn work(&self, period: Duration) -> Duration {
        period * self.work_permille / 1000
    }
}

/// The app's jobs, all every period: three harmless cluster jobs (one of them slow),
/// one cluster job that needs fencing, and one node job.
pub const JOBS: [JobSpec; 5] = [
    JobSpec {
        name: "alerts",
        scope: Scope::Cluster,
        work_permille: 50,
        fencing: false,
    },
    JobSpec {
        name: "sweep",
        scope: Scope::Cluster,
        work_permille: 100,
        fencing: false,
    },
    JobSpec {
        name: "report",
        scope: Scope::Cluster,
        work_permille: 600,
        fencing: false,
    },
    JobSpec {
        name: FENCING_JOB,
        scope: Scope::Cluster,
        work_permille: 400,
        fencing: true,
    },
    JobSpec {
        name: "uptime",
        scope: Scope::Node,
        work_permille: 50,
        fencing: false,
    },
];

/// The job that needs fencing.
pub const FENCING_JOB: &str = "payout";

/// A run's work advances in steps of at most this long, checking for cancellation
/// between steps. A paused process makes no progress: after `SIGCONT` the step under
/// way ends at once, but the remaining ones still take their time, so the runtime's
/// renewal (a few milliseconds after the process resumes) finds the lease lost before
/// the work is done.
pub const STEP: Duration = Duration::from_millis(50);

/// How long the app keeps retrying to record the end of a run while the database is
/// unreachable.
const FINISH_RETRY_FOR: Duration = Duration::from_secs(30);

/// Outcomes recorded in `runs.outcome`: the run's end, then for the fencing job what
/// became of its fenced write.
pub mod outcome {
    /// The work was done.
    pub const OK: &str = "ok";
    /// The run was cancelled before its work was done.
    pub const CANCELLED: &str = "cancelled";
    /// Suffix: the fenced write committed.
    pub const PAID: &str = "+paid";
    /// Suffix: the fenced write was refused (the lease was no longer held).
    pub const REFUSED: &str = "+refused";
    /// Suffix: the fenced write failed otherwise (database unreachable); nothing was
    /// written.
    pub const ERROR: &str = "+error";
}

/// A job of the app: records its run in `runs`, works for its share of the period
/// (watching for cancellation), and, if it needs fencing, writes into `payouts`
/// through [`PostgresStore::fenced`] (also when cancelled: a stale holder's write
/// must be refused).
#[derive(Debug, Clone)]
pub struct RecordedJob {
    spec: JobSpec,
    period: Duration,
    instance: Arc<str>,
    /// The lease store, where the fenced writes go.
    store: PostgresStore,
    /// Where `runs` is written: the lease store unless told otherwise.
    record: PostgresStore,
}

impl RecordedJob {
    /// The job `spec`, ticking every `period`, run by `instance`, its leases, fenced
    /// writes and record in `store`.
    pub fn new(spec: JobSpec, period: Duration, instance: &str, store: PostgresStore) -> Self {
        Self {
            spec,
            period,
            instance: instance.into(),
            record: store.clone(),
            store,
        }
    }

    /// Records runs into `record` instead (a database that a failover of the lease
    /// database does not touch); the fenced writes stay in the lease database.
    pub fn recording_to(mut self, record: PostgresStore) -> Self {
        self.record = record;
        self
    }

    async fn work(&self, ctx: &JobContext) -> bool {
        let mut left = self.spec.work(self.period);
        while !left.is_zero() {
            let step = left.min(STEP);
            tokio::select! {
                () = tokio::time::sleep(step) => left -= step,
                () = ctx.cancellation().cancelled() => return false,
            }
        }
        !ctx.is_cancelled()
    }

    async fn pay(&self, ctx: &JobContext) -> &'static str {
        let values = vec![
            Value::from(self.spec.name),
            ctx.tick().at().into(),
            ctx.token().get().into(),
            Value::from(&*self.instance),
        ];
        let written = self
            .store
            .fenced(&Fence::from(ctx), |txn| {
                Box::pin(async move {
                    txn.execute_raw(Statement::from_sql_and_values(
                        DbBackend::Postgres,
                        "INSERT INTO payouts (job, tick, token, instance) VALUES ($1, $2, $3, $4)",
                        values,
                    ))
                    .await
                    .map(drop)
                })
            })
            .await;
        match written {
            Ok(()) => outcome::PAID,
            Err(err) if err.is_lease_lost() => {
                warn!(job = self.spec.name, tick = %ctx.tick(), token = %ctx.token(),
                    "the fenced write was refused: the lease is no longer held");
                outcome::REFUSED
            }
            Err(err) => {
                let err: FencedError<sea_orm::DbErr> = err;
                warn!(job = self.spec.name, tick = %ctx.tick(), error = %err, "the fenced write failed");
                outcome::ERROR
            }
        }
    }

    /// Records the end of run `id`, retrying while the database is unreachable. The
    /// recorded `finished` is the database's time when the record lands: never before
    /// the run really ended.
    async fn finish(&self, id: i64, outcome: &str) {
        let deadline = tokio::time::Instant::now() + FINISH_RETRY_FOR;
        loop {
            let recorded = execute(
                &self.record,
                "UPDATE runs SET finished = clock_timestamp(), outcome = $2 WHERE id = $1",
                vec![id.into(), outcome.into()],
            )
            .await;
            match recorded {
                Ok(_) => return,
                Err(err) if tokio::time::Instant::now() < deadline => {
                    debug!(run = id, error = %err, "recording the end of a run failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(err) => {
                    warn!(run = id, error = %err, "could not record the end of a run");
                    return;
                }
            }
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for RecordedJob {
    fn name(&self) -> &str {
        self.spec.name
    }

    fn schedule(&self) -> Schedule {
        Schedule::every(self.period)
    }

    fn scope(&self) -> Scope {
        self.spec.scope
    }

    fn duplicate(&self) -> Duplicate {
        if self.spec.fencing {
            Duplicate::NeedsFencing
        } else {
            Duplicate::Harmless
        }
    }

    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let rows = query(
            &self.record,
            "INSERT INTO runs (job, tick, node, instance, token) VALUES ($1, $2, $3, $4, $5) \
             RETURNING id",
            vec![
                self.spec.name.into(),
                ctx.tick().at().into(),
                ctx.node().into(),
                Value::from(&*self.instance),
                ctx.token().get().into(),
            ],
        )
        .await?;
        let id: i64 = rows
            .first()
            .ok_or("the insert into runs returned no id")?
            .try_get("", "id")?;
        let done = self.work(&ctx).await;
        let mut outcome = if done {
            outcome::OK
        } else {
            outcome::CANCELLED
        }
        .to_owned();
        if self.spec.fencing {
            outcome.push_str(self.pay(&ctx).await);
        }
        self.finish(id, &outcome).await;
        if done {
            Ok(())
        } else {
            Err("cancelled".into())
        }
    }
}

/// Creates the app's tables ([`SCHEMA`]) unless they exist, in one transaction under
/// a transaction-level advisory lock.
///
/// # Errors
/// [`Error::Database`] if a statement fails.
pub async fn prepare(store: &PostgresStore) -> Result<()> {
    let failed = Error::database;
    let txn = store
        .begin()
        .await
        .map_err(failed("begin creating the tables"))?;
    txn.execute_unprepared(SCHEMA_LOCK)
        .await
        .map_err(failed("lock the schema"))?;
    txn.execute_unprepared(SCHEMA)
        .await
        .map_err(failed("create the tables"))?;
    txn.commit().await.map_err(failed("commit the tables"))
}

/// How many tick attempts of `jobs` the store has answered so far: runs that ended
/// (won takes) plus ticks found held elsewhere (lost takes). It grows only while the
/// instance's loop gets answers from the store.
pub fn answered(stats: &Stats, jobs: &[JobSpec]) -> u64 {
    jobs.iter()
        .map(|job| {
            [Outcome::Succeeded, Outcome::Failed, Outcome::HeldElsewhere]
                .iter()
                .map(|outcome| stats.count(job.name, *outcome))
                .sum::<u64>()
        })
        .sum()
}

/// Writes a heartbeat row every `every` until the process ends: the instance, its
/// process id, [`answered`] and the readiness probe's verdict. A failed write (the
/// database unreachable) is skipped.
pub async fn heartbeat(
    store: PostgresStore,
    instance: String,
    stats: Stats,
    health: Health,
    every: Duration,
) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let healthy = health.check(every).await.is_healthy();
        let beat = execute(
            &store,
            "INSERT INTO heartbeats (instance, pid, answered, healthy) VALUES ($1, $2, $3, $4)",
            vec![
                instance.as_str().into(),
                i64::from(std::process::id()).into(),
                i64::try_from(answered(&stats, &JOBS))
                    .unwrap_or(i64::MAX)
                    .into(),
                healthy.into(),
            ],
        )
        .await;
        if let Err(err) = beat {
            debug!(error = %err, "heartbeat failed");
        }
    }
}

/// Runs one statement in a short transaction of its own and returns its rows.
async fn query(store: &PostgresStore, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>> {
    let failed = Error::database;
    let txn = store.begin().await.map_err(failed("begin a transaction"))?;
    let rows = txn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .map_err(failed("run a statement of the app"))?;
    txn.commit().await.map_err(failed("commit"))?;
    Ok(rows)
}

/// Runs one statement in a short transaction of its own.
async fn execute(store: &PostgresStore, sql: &str, values: Vec<Value>) -> Result<()> {
    let failed = Error::database;
    let txn = store.begin().await.map_err(failed("begin a transaction"))?;
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        sql,
        values,
    ))
    .await
    .map_err(failed("run a statement of the app"))?;
    txn.commit().await.map_err(failed("commit"))
}
