//! Backfill: every tick of a past range runs once across the instances running it,
//! under leases of its own (the live lease is never touched), resumable after an
//! abort, at most `concurrency` at once; failed ticks are left for the next backfill.
//!
//! On the in-memory store, on paused tokio time.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BackfillOptions, BackfillReport, BoxError, Error, Idempotent, JobContext, LeaseName,
    MemoryStore, Policy, Schedule, Scheduler, SchedulerBuilder, Store,
};

/// What the job saw, across every instance.
#[derive(Debug, Default)]
struct Tally {
    /// (node, tick in seconds, attempt) of every run begun.
    started: Vec<(String, i64, u32)>,
    /// (node, tick in seconds) of every run that did its work to the end.
    done: Vec<(String, i64)>,
    /// Runs going on now, and the most at once.
    running: usize,
    most: usize,
}

type Shared = Arc<Mutex<Tally>>;

fn lock(tally: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(|e| e.into_inner())
}

/// A job every second that works `work`, and fails the first `failures` attempts at
/// the ticks in `failing`.
#[derive(Clone)]
struct Filler {
    work: Duration,
    failing: Arc<Mutex<HashSet<i64>>>,
    failures: u32,
    policy: Policy,
    tally: Shared,
}

impl Filler {
    fn new(tally: &Shared) -> Self {
        Self {
            work: Duration::from_millis(100),
            failing: Arc::default(),
            failures: u32::MAX,
            policy: Policy::default(),
            tally: tally.clone(),
        }
    }
}

/// Ends `running` when the run ends, however it ends (an aborted run is dropped).
struct Leaving(Shared);

impl Drop for Leaving {
    fn drop(&mut self) {
        lock(&self.0).running -= 1;
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Filler {
    fn name(&self) -> &str {
        "filler"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    fn policy(&self) -> Policy {
        self.policy
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let tick = ctx.tick().at().timestamp();
        {
            let mut t = lock(&self.tally);
            t.started.push((ctx.node().to_owned(), tick, ctx.attempt()));
            t.running += 1;
            t.most = t.most.max(t.running);
        }
        let _leaving = Leaving(self.tally.clone());
        tokio::time::sleep(self.work).await;
        let fails = self.failing.lock().unwrap().contains(&tick);
        if fails && ctx.attempt() <= self.failures {
            return Err(format!("tick {tick} failed").into());
        }
        lock(&self.tally).done.push((ctx.node().to_owned(), tick));
        Ok(())
    }
}

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

fn builder(store: &Arc<MemoryStore>, node: &str) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .node_id(node)
        .lease_ttl(Duration::from_secs(4))
}

fn scheduler(store: &Arc<MemoryStore>, node: &str, job: &Filler) -> Scheduler {
    builder(store, node)
        .job(job.clone())
        .build()
        .expect("build")
}

/// `n` whole-second ticks ending a minute before the store's clock.
async fn past_range(store: &MemoryStore, n: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    let now = store.now().await.expect("now").timestamp();
    let to = DateTime::from_timestamp(now - 60, 0).expect("time");
    (to - TimeDelta::seconds(n - 1), to)
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<i64> {
    (from.timestamp()..=to.timestamp()).collect()
}

/// The ticks done, sorted, each once per run.
fn done(tally: &Shared) -> Vec<i64> {
    let mut ticks: Vec<i64> = lock(tally).done.iter().map(|(_, t)| *t).collect();
    ticks.sort_unstable();
    ticks
}

fn report(ticks: usize, ran: usize, already_done: usize, failed: usize) -> BackfillReport {
    let mut r = BackfillReport::default();
    (r.ticks, r.ran, r.already_done, r.failed) = (ticks, ran, already_done, failed);
    r
}

#[tokio::test(start_paused = true)]
async fn every_tick_runs_once_and_a_second_backfill_finds_them_done() {
    let (store, tally) = (store(), Shared::default());
    let a = scheduler(&store, "a", &Filler::new(&tally));
    let (from, to) = past_range(&store, 50).await;
    let first = a
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(first, report(50, 50, 0, 0));
    assert_eq!(done(&tally), seconds(from, to));
    // Counted as the outcome `backfilled` (stats and metrics).
    assert_eq!(
        a.stats()
            .count("filler", scheduler_core::Outcome::Backfilled),
        50
    );

    // Again, from another instance and a wider range: only the new ticks run.
    let b = scheduler(&store, "b", &Filler::new(&tally));
    let wider = b
        .backfill(
            "filler",
            from - TimeDelta::seconds(5),
            to,
            BackfillOptions::default(),
        )
        .await
        .expect("backfill");
    assert_eq!(wider, report(55, 5, 50, 0));
    assert_eq!(done(&tally), seconds(from - TimeDelta::seconds(5), to));
    assert_eq!(lock(&tally).started.len(), 55);
}

#[tokio::test(start_paused = true)]
async fn an_aborted_backfill_resumes_without_rerunning_completed_ticks() {
    let (store, tally) = (store(), Shared::default());
    let mut job = Filler::new(&tally);
    job.work = Duration::from_secs(1);
    let (from, to) = past_range(&store, 20).await;
    let options = BackfillOptions::default().concurrency(4);

    // Stopped 2.5 s in: two rounds of four done, four more running (aborted).
    let a = scheduler(&store, "a", &job);
    let stopped = tokio::time::timeout(
        Duration::from_millis(2_500),
        a.backfill("filler", from, to, options),
    )
    .await;
    assert!(stopped.is_err(), "the backfill ended before the abort");
    let completed = done(&tally);
    assert_eq!(completed.len(), 8, "{completed:?}");
    let aborted: Vec<i64> = lock(&tally)
        .started
        .iter()
        .map(|(_, t, _)| *t)
        .filter(|t| !completed.contains(t))
        .collect();
    assert_eq!(aborted.len(), 4, "{aborted:?}");
    // Aborted tasks are dropped when the runtime next gets to them.
    for _ in 0..100 {
        if lock(&tally).running == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(lock(&tally).running, 0, "aborted runs were not dropped");

    // Started again on another instance: the rest, the aborted ticks once their
    // leases expired; nothing completed runs again.
    let b = scheduler(&store, "b", &job);
    let resumed = b
        .backfill("filler", from, to, options)
        .await
        .expect("backfill");
    assert_eq!(resumed, report(20, 12, 8, 0));
    assert_eq!(done(&tally), seconds(from, to));
    let rerun: Vec<i64> = lock(&tally)
        .started
        .iter()
        .filter(|(node, _, _)| node == "b")
        .map(|(_, t, _)| *t)
        .filter(|t| completed.contains(t))
        .collect();
    assert!(rerun.is_empty(), "completed ticks ran again: {rerun:?}");
}

#[tokio::test(start_paused = true)]
async fn two_instances_share_a_backfill_and_run_each_tick_once() {
    let (store, tally) = (store(), Shared::default());
    let job = Filler::new(&tally);
    let (from, to) = past_range(&store, 40).await;
    let options = BackfillOptions::default().concurrency(3);
    // On their own tasks: the backfill future is Send and the handle 'static.
    let spawn = |node: &str| {
        let backfiller = scheduler(&store, node, &job).backfiller();
        let tally = tally.clone();
        tokio::spawn(async move {
            let report = backfiller.backfill("filler", from, to, options).await;
            // Neither returns before every tick is done, by either.
            assert_eq!(lock(&tally).done.len(), 40, "returned early: {report:?}");
            report
        })
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let a = a.await.expect("join").expect("backfill a");
    let b = b.await.expect("join").expect("backfill b");
    assert_eq!(done(&tally), seconds(from, to), "each tick once");
    assert_eq!(a.ran + b.ran, 40);
    assert!(
        a.ran > 0 && b.ran > 0,
        "the work was not shared: {a:?} {b:?}"
    );
    for r in [a, b] {
        assert_eq!(r.ran + r.already_done, 40, "{r:?}");
        assert_eq!(r.failed, 0);
    }
    assert!(lock(&tally).most <= 6);
}

#[tokio::test(start_paused = true)]
async fn no_more_than_concurrency_ticks_run_at_once() {
    for concurrency in [1, 3, 7] {
        let (store, tally) = (store(), Shared::default());
        let a = scheduler(&store, "a", &Filler::new(&tally));
        let (from, to) = past_range(&store, 30).await;
        let options = BackfillOptions::default().concurrency(concurrency);
        let r = a
            .backfill("filler", from, to, options)
            .await
            .expect("backfill");
        assert_eq!(r.ran, 30);
        assert_eq!(lock(&tally).most, concurrency);
    }
}

#[tokio::test(start_paused = true)]
async fn the_live_schedule_runs_beside_a_backfill_and_its_lease_is_untouched() {
    let (store, tally) = (store(), Shared::default());
    let mut job = Filler::new(&tally);
    job.work = Duration::from_millis(300);
    let live = LeaseName::new("filler").unwrap();

    // A backfill alone leaves the live lease row as it was.
    let a = scheduler(&store, "a", &job);
    a.run_until(tokio::time::sleep(Duration::from_millis(2_500)))
        .await;
    let row = store.row(&live).expect("live row");
    let a = scheduler(&store, "a", &job);
    let (from, to) = past_range(&store, 10).await;
    let r = a
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(r.ran, 10);
    assert_eq!(store.row(&live), Some(row.clone()));
    for t in seconds(from, to) {
        let name = LeaseName::new(format!("filler\\@{}", t * 1_000_000)).unwrap();
        let tick_row = store.row(&name).expect("a row per tick");
        assert!(tick_row.completed);
        assert_eq!(tick_row.tick.at().timestamp(), t);
    }

    // While the scheduler runs: every live tick still runs once, in turn. (Started
    // mid-second: a start in a second's last milliseconds runs that second's tick
    // late, and the next may be skipped as overlapping it.)
    lock(&tally).done.clear();
    let into = i64::from(store.clock().now().timestamp_subsec_millis());
    tokio::time::sleep(Duration::from_millis(
        u64::try_from((500 - into).rem_euclid(1000)).unwrap_or(0),
    ))
    .await;
    let a = scheduler(&store, "a", &job);
    let backfiller = a.backfiller();
    let (from, to) = (from - TimeDelta::seconds(30), from - TimeDelta::seconds(1));
    let started = store.now().await.unwrap().timestamp();
    let (_, r) = tokio::join!(
        a.run_until(tokio::time::sleep(Duration::from_millis(6_500))),
        backfiller.backfill("filler", from, to, BackfillOptions::default())
    );
    assert_eq!(r.expect("backfill").ran, 30);
    let ticks = done(&tally);
    let live_ticks: Vec<i64> = ticks.iter().copied().filter(|t| *t >= started).collect();
    assert_eq!(ticks.len(), 30 + live_ticks.len());
    assert!(live_ticks.len() >= 5, "{live_ticks:?}");
    for pair in live_ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1,
            "a live tick was missed: {live_ticks:?}"
        );
    }
    let row_now = store.row(&live).expect("live row");
    assert_eq!(row_now.tick.at().timestamp(), *live_ticks.last().unwrap());
    assert!(row_now.tick.at().timestamp() >= started);
}

#[tokio::test(start_paused = true)]
async fn failed_ticks_are_counted_and_left_for_the_next_backfill() {
    let (store, tally) = (store(), Shared::default());
    let job = Filler::new(&tally);
    let (from, to) = past_range(&store, 10).await;
    let bad = [from.timestamp() + 2, from.timestamp() + 7];
    job.failing.lock().unwrap().extend(bad);
    let a = scheduler(&store, "a", &job);
    let r = a
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(r, report(10, 8, 0, 2));
    // Each failed tick was tried once by this call.
    let tries = |t| lock(&tally).started.iter().filter(|s| s.1 == t).count();
    assert_eq!(bad.map(tries), [1, 1]);

    // Fixed: the next backfill runs only the ticks that failed.
    job.failing.lock().unwrap().clear();
    let r = a
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(r, report(10, 2, 8, 0));
    assert_eq!(done(&tally), seconds(from, to));
}

#[tokio::test(start_paused = true)]
async fn the_jobs_retry_policy_retries_a_tick_under_its_lease() {
    let (store, tally) = (store(), Shared::default());
    let mut job = Filler::new(&tally);
    job.failures = 2;
    job.policy = Policy::default().retry(2, Duration::from_millis(200));
    let (from, to) = past_range(&store, 4).await;
    job.failing.lock().unwrap().insert(from.timestamp());
    let r = scheduler(&store, "a", &job)
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(r, report(4, 4, 0, 0));
    let attempts: Vec<u32> = lock(&tally)
        .started
        .iter()
        .filter(|s| s.1 == from.timestamp())
        .map(|s| s.2)
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_refused_before_anything_runs() {
    let (store, tally) = (store(), Shared::default());
    let a = scheduler(&store, "a", &Filler::new(&tally));
    let (from, to) = past_range(&store, 11).await;
    let options = BackfillOptions::default().max_ticks(10);
    let err = a.backfill("filler", from, to, options).await.unwrap_err();
    assert!(
        matches!(err, Error::BackfillTooLarge { max_ticks: 10, .. }),
        "{err}"
    );
    let err = a
        .backfill("nope", from, to, BackfillOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownJob { name } if name == "nope"),
        "{err}"
    );
    let future = store.now().await.unwrap() + TimeDelta::seconds(30);
    let err = a
        .backfill("filler", from, future, BackfillOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BackfillInFuture { .. }), "{err}");
    assert!(lock(&tally).started.is_empty());
    // A range with no tick in it is done at once.
    let r = a
        .backfill("filler", to, from, BackfillOptions::default())
        .await
        .expect("backfill");
    assert_eq!(r, report(0, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_store_outage_is_waited_out_and_one_longer_than_a_ttl_ends_the_backfill() {
    let (store, tally) = (store(), Shared::default());
    let a = scheduler(&store, "a", &Filler::new(&tally));
    let (from, to) = past_range(&store, 10).await;
    store.set_failing_takes(true);
    let backfill = a.backfill("filler", from, to, BackfillOptions::default());
    let recover = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(lock(&tally).started.is_empty());
        store.set_failing_takes(false);
    };
    let (r, ()) = tokio::join!(backfill, recover);
    assert_eq!(r.expect("backfill"), report(10, 10, 0, 0));

    store.set_failing(true);
    let began = tokio::time::Instant::now();
    let (from, to) = (from - TimeDelta::seconds(10), from - TimeDelta::seconds(1));
    let err = a
        .backfill("filler", from, to, BackfillOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    assert!(
        began.elapsed() >= Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
}
