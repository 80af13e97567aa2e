//! A failed run is retried under the same lease and fencing token, with backoff,
//! never past the next tick; a run past its timeout is cancelled and counted.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler_core::{
    BoxError, Idempotent, JobContext, Outcome, Policy, RunRecord, RunRecorder, Schedule,
};
use support::{builder, store};

/// One attempt as the job saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempt {
    tick: i64,
    attempt: u32,
    holder: String,
    token: i64,
}

/// Fails its first `failures` attempts at each tick, recording every attempt.
struct Flaky {
    every: Duration,
    failures: u32,
    work: Duration,
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

#[scheduler_core::async_trait]
impl Idempotent for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Attempt {
                tick: ctx.tick().at().timestamp(),
                attempt: ctx.attempt(),
                holder: ctx.holder().to_string(),
                token: ctx.token().get(),
            });
        tokio::select! {
            () = tokio::time::sleep(self.work) => {}
            () = ctx.cancellation().cancelled() => return Err("cancelled".into()),
        }
        if ctx.attempt() <= self.failures {
            return Err(format!("attempt {} failed", ctx.attempt()).into());
        }
        Ok(())
    }
}

/// Collects the run records.
#[derive(Debug, Default)]
struct Records(Mutex<Vec<RunRecord>>);

#[scheduler_core::async_trait]
impl RunRecorder for Records {
    async fn record(&self, run: &RunRecord) -> Result<(), BoxError> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(run.clone());
        Ok(())
    }
}

fn flaky(every: Duration, failures: u32, work: Duration) -> (Flaky, Arc<Mutex<Vec<Attempt>>>) {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let job = Flaky {
        every,
        failures,
        work,
        attempts: attempts.clone(),
    };
    (job, attempts)
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_retried_under_the_same_lease_until_it_succeeds() {
    let store = store();
    // Hourly: the tick run at start-up is the only one in the test.
    let (job, attempts) = flaky(Duration::from_secs(3600), 2, Duration::from_millis(10));
    let records = Arc::new(Records::default());
    let scheduler = builder(&store)
        .job_with_policy(job, Policy::default().retry(3, Duration::from_millis(200)))
        .record_runs(records.clone())
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(3_000)))
        .await;
    let attempts = attempts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // The first tick (at start-up): three attempts, one lease.
    let first: Vec<_> = attempts
        .iter()
        .filter(|a| a.tick == attempts[0].tick)
        .collect();
    assert_eq!(
        first.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1, 2, 3],
        "{attempts:?}"
    );
    assert!(
        first
            .iter()
            .all(|a| a.holder == first[0].holder && a.token == first[0].token),
        "every attempt holds the same lease: {first:?}"
    );
    assert_eq!(stats.count("flaky", Outcome::Retried), 2);
    assert_eq!(stats.count("flaky", Outcome::Succeeded), 1);
    assert_eq!(stats.count("flaky", Outcome::Failed), 0);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let records = records.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let outcomes: Vec<_> = records.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (1, Outcome::Retried),
            (2, Outcome::Retried),
            (3, Outcome::Succeeded)
        ]
    );
    assert_eq!(records[0].error.as_deref(), Some("attempt 1 failed"));
}

#[tokio::test(start_paused = true)]
async fn retries_never_start_at_or_past_the_next_tick() {
    let store = store();
    // Every second, always failing; the backoff doubles: 400 ms, then 800 ms (past
    // the next tick: not tried).
    let (job, attempts) = flaky(Duration::from_secs(1), u32::MAX, Duration::from_millis(10));
    // Started at a whole second's last 420 ms, the start-up tick's second attempt
    // (410 ms in, 10 ms long) would still run when the next tick comes due, which
    // is then rightly skipped as overlapping: not what this test is about.
    support::mid_second(&store).await;
    let scheduler = builder(&store)
        .job_with_policy(job, Policy::default().retry(5, Duration::from_millis(400)))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    let attempts = attempts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut per_tick = std::collections::BTreeMap::<i64, u32>::new();
    for a in &attempts {
        *per_tick.entry(a.tick).or_default() += 1;
    }
    assert!(per_tick.len() >= 4, "{attempts:?}");
    assert!(
        per_tick.values().all(|n| *n <= 2),
        "at most the first attempt and one retry fit in a period: {per_tick:?}"
    );
    assert!(stats.count("flaky", Outcome::Failed) >= 4);
    assert_eq!(
        stats.count("flaky", Outcome::SkippedOverlap),
        0,
        "no retry ran into the next tick"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_past_its_timeout_is_cancelled_and_counted() {
    let store = store();
    // Works 5 s on each tick of an hourly job, with a 1 s timeout; it watches its
    // token.
    let (job, attempts) = flaky(Duration::from_secs(3600), 0, Duration::from_secs(5));
    let records = Arc::new(Records::default());
    let scheduler = builder(&store)
        .job_with_policy(job, Policy::default().timeout(Duration::from_secs(1)))
        .record_runs(records.clone())
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(3_000)))
        .await;
    assert_eq!(attempts.lock().unwrap_or_else(|e| e.into_inner()).len(), 1);
    assert_eq!(stats.count("flaky", Outcome::TimedOut), 1);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let records = records.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::TimedOut);
    assert_eq!(
        records[0].error.as_deref(),
        Some("the run took longer than its timeout of 1s")
    );
    let took = records[0].finished - records[0].started;
    assert!(
        took < chrono::TimeDelta::milliseconds(1_500),
        "the token fired at the timeout and the run stopped: {took}"
    );
}

/// A retry waiting out its backoff never begins once the lease is known lost
/// (taken over meanwhile): a harmless duplicate run may go on, but a new attempt is
/// not started on a lease this instance no longer holds.
#[tokio::test(start_paused = true)]
async fn a_retry_never_begins_after_its_lease_is_lost() {
    let store = store();
    // Hourly, always failing, the first retry 2 s after the first failure.
    let (job, attempts) = flaky(
        Duration::from_secs(3600),
        u32::MAX,
        Duration::from_millis(10),
    );
    let scheduler = builder(&store)
        .job_with_policy(job, Policy::default().retry(3, Duration::from_secs(2)))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let thief = {
        let store = store.clone();
        async move {
            // The first attempt has failed; another holder takes the lease over
            // during the backoff; the next renewal finds it gone.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let name = scheduler_core::LeaseName::new("flaky").expect("name");
            let ttl = scheduler_core::Ttl::new(Duration::from_secs(60)).expect("ttl");
            assert!(store.steal(&name, ttl).is_some(), "the lease row exists");
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    };
    scheduler.run_until(thief).await;
    let attempts = attempts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1],
        "no attempt begins on a lost lease: {attempts:?}"
    );
    assert_eq!(stats.count("flaky", Outcome::LeaseLost), 1);
}
