//! The structs `#[job]` generates, used through `Idempotent` as the runtime uses them.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::DateTime;
use scheduler_core::{
    BoxError, CatchUp, Duplicate, FencingToken, Idempotent, JobContext, LeaseName, MemoryStore,
    Overlap, Policy, Schedule, Scheduler, Scope, StateType, Tick, job,
};

fn context(job: &str, token: i64) -> JobContext {
    let lease = LeaseName::new(job).unwrap_or_else(|e| panic!("{e}"));
    JobContext::detached(
        job,
        Tick::new(DateTime::UNIX_EPOCH),
        "node-1",
        lease,
        FencingToken::new(token),
    )
}

static SWEEPS: AtomicU32 = AtomicU32::new(0);

/// Counts its runs.
#[job(every = "30s")]
async fn sweep(ctx: JobContext) -> Result<(), BoxError> {
    assert_eq!(ctx.job(), "sweep");
    SWEEPS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[job(
    cron = "0 0 3 * * *",
    tz = "Europe/Berlin",
    scope = "node",
    name = "nightly compaction",
    fencing,
    jitter = "1m30s",
    catch_up = "2h",
    state(Config, std::sync::Arc<AtomicU32>)
)]
async fn compact(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(
    every = "1h",
    catch_up = "all",
    catch_up_window = "6h",
    catch_up_max = 3,
    overlap = "buffer_one",
    retry = 2,
    retry_backoff = "10s",
    timeout = "5m"
)]
async fn report(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(
    cron = "0 */15 * * * *",
    catch_up = "skip",
    retry = 4,
    overlap = "cancel_running"
)]
async fn poll(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", overlap = "concurrent", max_concurrent = 3)]
async fn fan_out(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", catch_up = "all", timeout = "30s")]
async fn backfill(_: JobContext) -> Result<(), BoxError> {
    Ok(())
}

/// A state type.
struct Config;

#[derive(Debug, PartialEq, Eq)]
struct Stale(i64);

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stale token {}", self.0)
    }
}

impl std::error::Error for Stale {}

#[job(cron = "*/10 * * * * *", scope = "cluster", fencing = false)]
async fn fenced_write(ctx: JobContext) -> Result<(), Stale> {
    Err(Stale(ctx.token().get()))
}

#[job(every = "1h")]
async fn io_job(_ctx: JobContext) -> std::io::Result<()> {
    Err(std::io::Error::other("disk full"))
}

#[test]
fn defaults_are_the_traits() {
    assert_eq!(sweep.name(), "sweep");
    assert_eq!(sweep.schedule(), Schedule::every(Duration::from_secs(30)));
    assert_eq!(sweep.scope(), Scope::Cluster);
    assert_eq!(sweep.duplicate(), Duplicate::Harmless);
    assert_eq!(sweep.jitter(), Duration::ZERO);
    assert_eq!(sweep.catch_up(), None);
    assert_eq!(sweep.policy(), Policy::default());
    assert_eq!(sweep.state_types(), []);
    // Keys other than the policy keys leave the policy alone.
    assert_eq!(compact.policy(), Policy::default());
}

#[test]
fn every_policy_key_reaches_the_policy() {
    assert_eq!(report.catch_up(), Some(Duration::from_secs(6 * 3600)));
    assert_eq!(
        report.policy(),
        Policy::default()
            .catch_up(CatchUp::All { max: 3 })
            .overlap(Overlap::BufferOne)
            .retry(2, Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
    );

    // The documented defaults: a 1 s backoff, at most 10 ticks caught up.
    assert_eq!(poll.catch_up(), None);
    assert_eq!(
        poll.policy(),
        Policy::default()
            .catch_up(CatchUp::Skip)
            .overlap(Overlap::CancelRunning)
            .retry(4, Duration::from_secs(1))
    );
    assert_eq!(
        fan_out.policy(),
        Policy::default().overlap(Overlap::Concurrent { max: 3 })
    );
    assert_eq!(backfill.catch_up(), None);
    assert_eq!(
        backfill.policy(),
        Policy::default()
            .catch_up(CatchUp::All { max: 10 })
            .timeout(Duration::from_secs(30))
    );
}

#[test]
fn every_key_reaches_its_method() {
    assert_eq!(compact.name(), "nightly compaction");
    assert_eq!(
        compact.schedule(),
        Schedule::cron("0 0 3 * * *").in_time_zone("Europe/Berlin")
    );
    assert_eq!(compact.scope(), Scope::Node);
    assert_eq!(compact.duplicate(), Duplicate::NeedsFencing);
    assert_eq!(compact.jitter(), Duration::from_secs(90));
    assert_eq!(compact.catch_up(), Some(Duration::from_secs(7200)));
    assert_eq!(
        compact.state_types(),
        [
            StateType::of::<Config>(),
            StateType::of::<std::sync::Arc<AtomicU32>>()
        ]
    );

    assert_eq!(fenced_write.schedule(), Schedule::cron("*/10 * * * * *"));
    assert_eq!(fenced_write.scope(), Scope::Cluster);
    assert_eq!(fenced_write.duplicate(), Duplicate::Harmless);
}

#[test]
fn schedules_pass_the_runtime_checks() {
    for job in [
        &sweep as &dyn Idempotent,
        &compact,
        &fenced_write,
        &io_job,
        &report,
        &poll,
        &backfill,
    ] {
        assert_eq!(job.schedule().validate(), Ok(()), "{}", job.name());
    }
}

#[tokio::test]
async fn run_calls_the_body() {
    let before = SWEEPS.load(Ordering::SeqCst);
    let result = sweep.run(context("sweep", 1)).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(SWEEPS.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn run_boxes_the_bodys_error() {
    let err = fenced_write.run(context("fenced_write", 42)).await.err();
    let err = err.unwrap_or_else(|| panic!("the body's error was lost"));
    assert_eq!(err.downcast_ref::<Stale>(), Some(&Stale(42)));

    let err = io_job
        .run(context("io_job", 1))
        .await
        .err()
        .map(|e| e.to_string());
    assert_eq!(err.as_deref(), Some("disk full"));
}

#[test]
fn jobs_register_by_name() {
    let scheduler = Scheduler::builder(MemoryStore::new())
        .state(Config)
        .state(std::sync::Arc::new(AtomicU32::new(0)))
        .job(sweep)
        .job(compact)
        .job(fenced_write)
        .job(io_job)
        .job(report)
        .job(poll)
        .job(backfill)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let declared: Vec<String> = scheduler
        .declarations()
        .into_iter()
        .map(|d| d.job)
        .collect();
    assert_eq!(declared, ["nightly compaction"]);
}

#[test]
fn a_declared_state_type_not_given_is_refused_by_build() {
    let err = Scheduler::builder(MemoryStore::new())
        .state(Config)
        .job(compact)
        .build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "job \"nightly compaction\" needs state of type `alloc::sync::Arc<core::sync::atomic::AtomicU32>`, \
             but the scheduler was given none of that type (SchedulerBuilder::state); \
             it was given: `generated::Config`"
        )
    );
}
