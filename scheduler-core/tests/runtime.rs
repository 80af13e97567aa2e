//! The runtime on the in-memory store, on paused tokio time: ticks, overlap, jitter,
//! catch-up, backoff, lost leases, panics, shutdown, build errors.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BoxError, Duplicate, Error, Idempotent, JobContext, LeaseName, MemoryStore, Outcome, Schedule,
    Scheduler, Scope, Store, Ttl,
};

type Log = Arc<Mutex<Vec<Run>>>;

#[derive(Debug, Clone)]
struct Run {
    job: String,
    tick: DateTime<Utc>,
    started: DateTime<Utc>,
    node: String,
    cancelled: bool,
}

/// A configurable test job that records its runs.
#[derive(Clone)]
struct Probe {
    name: &'static str,
    every: Duration,
    scope: Scope,
    duplicate: Duplicate,
    jitter: Duration,
    catch_up: Option<Duration>,
    work: Duration,
    panic: bool,
    store: Arc<MemoryStore>,
    log: Log,
}

impl Probe {
    fn new(name: &'static str, store: &Arc<MemoryStore>, log: &Log) -> Self {
        Self {
            name,
            every: Duration::from_secs(1),
            scope: Scope::Cluster,
            duplicate: Duplicate::Harmless,
            jitter: Duration::ZERO,
            catch_up: None,
            work: Duration::from_millis(10),
            panic: false,
            store: store.clone(),
            log: log.clone(),
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    fn duplicate(&self) -> Duplicate {
        self.duplicate
    }
    fn jitter(&self) -> Duration {
        self.jitter
    }
    fn catch_up(&self) -> Option<Duration> {
        self.catch_up
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        // The store's clock, read directly: a clock read through the store may be told
        // to stall.
        let started = self.store.clock().now();
        if self.panic {
            panic!("probe told to panic");
        }
        let cancelled = tokio::select! {
            () = tokio::time::sleep(self.work) => false,
            () = ctx.cancellation().cancelled() => true,
        };
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Run {
                job: self.name.to_owned(),
                tick: ctx.tick().at(),
                started,
                node: ctx.node().to_owned(),
                cancelled,
            });
        if cancelled {
            Err("cancelled".into())
        } else {
            Ok(())
        }
    }
}

fn runs(log: &Log, job: &str) -> Vec<Run> {
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|r| r.job == job)
        .cloned()
        .collect()
}

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

fn builder(store: &Arc<MemoryStore>) -> scheduler_core::SchedulerBuilder {
    Scheduler::builder_arc(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
}

#[tokio::test(start_paused = true)]
async fn every_tick_runs_once_in_order() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(10_500)))
        .await;
    let ticks: Vec<_> = runs(&log, "tick").iter().map(|r| r.tick).collect();
    assert!(ticks.len() >= 10, "{ticks:?}");
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], TimeDelta::seconds(1), "{ticks:?}");
    }
    for t in &ticks {
        assert_eq!(
            t.timestamp_subsec_nanos(),
            0,
            "ticks are aligned to whole seconds"
        );
    }
    assert_eq!(stats.count("tick", Outcome::Ran) as usize, ticks.len());
}

#[tokio::test(start_paused = true)]
async fn two_instances_share_a_cluster_job_and_each_runs_its_node_job() {
    let (store, log) = (store(), Log::default());
    let mut node_job = Probe::new("per-node", &store, &log);
    node_job.scope = Scope::Node;
    let a = builder(&store)
        .node_id("a")
        .job(Probe::new("cluster", &store, &log))
        .job(node_job.clone())
        .build()
        .expect("build");
    let b = builder(&store)
        .node_id("b")
        .job(Probe::new("cluster", &store, &log))
        .job(node_job)
        .build()
        .expect("build");
    let stop = Duration::from_millis(5_500);
    tokio::join!(
        a.run_until(tokio::time::sleep(stop)),
        b.run_until(tokio::time::sleep(stop))
    );
    let mut cluster: Vec<_> = runs(&log, "cluster").iter().map(|r| r.tick).collect();
    let n = cluster.len();
    cluster.dedup();
    assert_eq!(cluster.len(), n, "a cluster tick ran twice");
    assert!(n >= 5);
    for node in ["a", "b"] {
        let mut ticks: Vec<_> = runs(&log, "per-node")
            .iter()
            .filter(|r| r.node == node)
            .map(|r| r.tick)
            .collect();
        let n = ticks.len();
        ticks.sort();
        ticks.dedup();
        assert_eq!(ticks.len(), n);
        assert!(n >= 5, "node {node} ran its node job {n} times");
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_never_overlaps_itself() {
    let (store, log) = (store(), Log::default());
    let mut slow = Probe::new("slow", &store, &log);
    slow.work = Duration::from_millis(2_500);
    let scheduler = builder(&store).job(slow).build().expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(9_900)))
        .await;
    let all = runs(&log, "slow");
    for pair in all.windows(2) {
        assert!(
            pair[1].started >= pair[0].started + TimeDelta::milliseconds(2_500),
            "{all:?}"
        );
    }
    assert!(
        stats.count("slow", Outcome::SkippedOverlap) >= 4,
        "{}",
        stats.count("slow", Outcome::SkippedOverlap)
    );
    assert!(stats.count("slow", Outcome::Ran) >= 2);
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_within_its_bound() {
    let (store, log) = (store(), Log::default());
    let mut jittery = Probe::new("jittery", &store, &log);
    jittery.every = Duration::from_secs(2);
    jittery.jitter = Duration::from_millis(700);
    let scheduler = builder(&store).job(jittery).build().expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(60)))
        .await;
    let all = runs(&log, "jittery");
    assert!(all.len() >= 25);
    // (The first run catches up the tick due at start.)
    let delays: Vec<i64> = all
        .iter()
        .skip(1)
        .map(|r| (r.started - r.tick).num_milliseconds())
        .collect();
    assert!(delays.iter().all(|d| (0..=710).contains(d)), "{delays:?}");
    assert!(
        delays.iter().any(|d| *d > 50),
        "jitter never delayed anything: {delays:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_is_retried_and_the_catch_up_window_decides_what_runs() {
    let (store, log) = (store(), Log::default());
    let mut wide = Probe::new("wide", &store, &log);
    wide.every = Duration::from_secs(10);
    wide.catch_up = Some(Duration::from_secs(10));
    let mut narrow = Probe::new("narrow", &store, &log);
    narrow.every = Duration::from_secs(10);
    narrow.catch_up = Some(Duration::from_secs(1));
    let scheduler = builder(&store)
        .job(wide)
        .job(narrow)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let outage = {
        let store = store.clone();
        async move {
            // Let the first ticks pass, then fail for 3 s around the next one.
            let now = store.now().await.unwrap_or_default();
            let next = (now.timestamp() / 10 + 2) * 10;
            let until_next = (DateTime::from_timestamp(next, 0).unwrap_or_default() - now)
                .to_std()
                .unwrap_or_default();
            tokio::time::sleep(until_next - Duration::from_millis(500)).await;
            store.set_failing(true);
            tokio::time::sleep(Duration::from_secs(3)).await;
            store.set_failing(false);
            tokio::time::sleep(Duration::from_secs(15)).await;
        }
    };
    scheduler.run_until(outage).await;
    // The wide window caught up with the tick that fell in the outage, late but once.
    let wide = runs(&log, "wide");
    let late: Vec<_> = wide
        .iter()
        .skip(1)
        .filter(|r| r.started - r.tick > TimeDelta::seconds(2))
        .collect();
    assert_eq!(late.len(), 1, "{wide:?}");
    // The narrow window let it go: counted missed, and the next tick ran on time.
    assert_eq!(stats.count("narrow", Outcome::Missed), 1);
    let narrow = runs(&log, "narrow");
    assert!(
        narrow
            .iter()
            .skip(1)
            .all(|r| r.started - r.tick < TimeDelta::seconds(1)),
        "{narrow:?}"
    );
    assert!(narrow.len() >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_cancels_a_fencing_job_and_only_warns_a_harmless_one() {
    let (store, log) = (store(), Log::default());
    let mut fenced = Probe::new("fenced", &store, &log);
    fenced.duplicate = Duplicate::NeedsFencing;
    fenced.every = Duration::from_secs(60);
    fenced.work = Duration::from_secs(30);
    let mut harmless = Probe::new("harmless", &store, &log);
    harmless.every = Duration::from_secs(60);
    harmless.work = Duration::from_secs(30);
    let scheduler = builder(&store)
        .job(fenced)
        .job(harmless)
        .build()
        .expect("build");
    assert_eq!(scheduler.declarations().len(), 1);
    assert_eq!(scheduler.declarations()[0].job, "fenced");
    let stats = scheduler.stats();
    let thief = {
        let store = store.clone();
        async move {
            // Wait for both to be running, then steal both leases.
            let names = [
                LeaseName::new("fenced").expect("n"),
                LeaseName::new("harmless").expect("n"),
            ];
            loop {
                let now = store.now().await.unwrap_or_default();
                if names
                    .iter()
                    .all(|n| store.row(n).is_some_and(|r| r.expires_at > now))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
            for n in &names {
                store.steal(n, ttl);
            }
            tokio::time::sleep(Duration::from_secs(40)).await;
        }
    };
    scheduler.run_until(thief).await;
    let fenced = runs(&log, "fenced");
    assert_eq!(fenced.len(), 1);
    assert!(
        fenced[0].cancelled,
        "the fencing job was cancelled at the next renewal"
    );
    let harmless = runs(&log, "harmless");
    assert_eq!(harmless.len(), 1);
    assert!(!harmless[0].cancelled, "the harmless job finished");
    assert_eq!(stats.count("fenced", Outcome::LeaseLost), 1);
    assert_eq!(stats.count("harmless", Outcome::LeaseLost), 1);
    assert_eq!(stats.count("harmless", Outcome::Ran), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_job_is_reported_and_the_others_go_on() {
    let (store, log) = (store(), Log::default());
    let mut bad = Probe::new("bad", &store, &log);
    bad.panic = true;
    let scheduler = builder(&store)
        .job(bad)
        .job(Probe::new("good", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    assert!(stats.count("bad", Outcome::Failed) >= 4);
    assert!(runs(&log, "good").len() >= 5);
    // The panicked runs released their leases: every tick was attempted afresh.
    assert!(stats.count("bad", Outcome::HeldElsewhere) == 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_grace_then_cancels_and_releases_at_once() {
    let (store, log) = (store(), Log::default());
    let mut long = Probe::new("long", &store, &log);
    long.every = Duration::from_secs(3600);
    long.catch_up = Some(Duration::from_secs(3600));
    long.work = Duration::from_secs(600);
    let mut short = Probe::new("short", &store, &log);
    short.every = Duration::from_secs(3600);
    short.catch_up = Some(Duration::from_secs(3600));
    short.work = Duration::from_secs(2);
    let scheduler = builder(&store)
        .shutdown_grace(Duration::from_secs(5))
        .job(long)
        .job(short)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let began = tokio::time::Instant::now();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(500)))
        .await;
    let took = began.elapsed();
    assert_eq!(
        (
            stats.count("short", Outcome::Ran),
            stats.count("long", Outcome::Failed)
        ),
        (1, 1)
    );
    assert!(
        took >= Duration::from_millis(5_400) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert!(
        !runs(&log, "short")[0].cancelled,
        "the short job finished within the grace"
    );
    assert!(
        runs(&log, "long")[0].cancelled,
        "the long job was cancelled"
    );
    let now = store.now().await.expect("now");
    for name in ["long", "short"] {
        let row = store.row(&LeaseName::new(name).expect("n")).expect("row");
        assert!(row.expires_at <= now, "{name} was not released");
    }
    // The finished tick is done; the interrupted one can be retried at once.
    assert!(
        store
            .row(&LeaseName::new("short").expect("n"))
            .expect("row")
            .completed
    );
    assert!(
        !store
            .row(&LeaseName::new("long").expect("n"))
            .expect("row")
            .completed
    );
}

#[tokio::test(start_paused = true)]
async fn health_reports_the_store_and_the_loop() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("p", &store, &log))
        .build()
        .expect("build");
    let health = scheduler.health();
    assert!(
        !health.check(Duration::from_secs(1)).await.scheduler,
        "not started yet"
    );
    let probe = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let up = health.check(Duration::from_secs(1)).await;
        store.set_failing(true);
        let down = health.check(Duration::from_secs(1)).await;
        // The loop's own takes fail from its next tick on, and keep failing.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let failing = health.check(Duration::from_secs(1)).await;
        store.set_failing(false);
        // The loop retries after its backoff (full jitter, up to 10 s): wait for it.
        let mut recovered = health.check(Duration::from_secs(1)).await;
        for _ in 0..40 {
            if recovered.store_failing_for.is_none() && recovered.scheduler {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            recovered = health.check(Duration::from_secs(1)).await;
        }
        (up, down, failing, recovered)
    };
    let (_, (up, down, failing, recovered)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(40))),
        probe
    );
    assert!(up.is_healthy(), "{up:?}");
    assert_eq!(up.store_failing_for, None);
    assert!(!down.database && down.scheduler, "{down:?}");
    let streak = failing
        .store_failing_for
        .expect("the loop's takes were failing");
    assert!(
        streak >= Duration::from_secs(1) && streak <= Duration::from_secs(3),
        "failing for {streak:?}"
    );
    assert!(recovered.is_healthy(), "{recovered:?}");
    assert_eq!(recovered.store_failing_for, None, "the streak ended");
}

#[tokio::test(start_paused = true)]
async fn a_clock_read_stuck_behind_a_pool_wait_does_not_move_the_schedule() {
    // A clock read that waits 4 s (for a pooled connection, a stalled server) reads
    // the store's clock at its end: taken at face value, the midpoint would put the
    // store 2 s ahead and every tick would be taken 2 s early.
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("on-time", &store, &log))
        .build()
        .expect("build");
    let stall = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        store.set_clock_delay(Duration::from_secs(4));
        tokio::time::sleep(Duration::from_secs(9)).await;
        store.set_clock_delay(Duration::ZERO);
    };
    tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(16))),
        stall
    );
    let all = runs(&log, "on-time");
    assert!(all.len() >= 10, "{all:?}");
    for r in &all {
        let late = (r.started - r.tick).num_milliseconds();
        assert!(late >= 0, "tick {} ran {} ms early", r.tick, -late);
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_call_that_never_answers_is_abandoned_and_the_loop_goes_on() {
    // A connection cut without a close: the clock read never answers (an hour is
    // forever here). The loop abandons it after its call limit (two renewal periods:
    // 2 s with a 4 s ttl), counts a store failure and keeps turning.
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .job(Probe::new("cut", &store, &log))
        .build()
        .expect("build");
    let health = scheduler.health();
    let cut = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        store.set_clock_delay(Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_secs(8)).await;
        let during = health.check(Duration::from_millis(100)).await;
        store.set_clock_delay(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(8)).await;
        let after = health.check(Duration::from_millis(100)).await;
        (during, after)
    };
    let (_, (during, after)) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(20))),
        cut
    );
    assert!(during.scheduler, "the loop kept turning: {during:?}");
    assert!(!during.database, "{during:?}");
    assert!(after.is_healthy(), "{after:?}");
    assert_eq!(after.store_failing_for, None, "{after:?}");
    // Takes kept working while clock reads hung: ticks ran all through the cut (a
    // few are missed while the loop waits out a hung read's limit).
    let all = runs(&log, "cut");
    let first = all.first().map(|r| r.tick).expect("runs");
    let during_cut = all
        .iter()
        .filter(|r| {
            r.tick >= first + TimeDelta::seconds(5) && r.tick <= first + TimeDelta::seconds(10)
        })
        .count();
    assert!(during_cut >= 3, "{all:?}");
}

#[tokio::test(start_paused = true)]
async fn a_skewed_node_clock_still_fires_on_the_store_clock() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .clock(scheduler_core::LocalClock::skewed(TimeDelta::seconds(7)))
        .job(Probe::new("skewed", &store, &log))
        .build()
        .expect("build");
    let start = store.now().await.expect("now");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(5_500)))
        .await;
    let all = runs(&log, "skewed");
    assert!(all.len() >= 5, "{all:?}");
    // (The tick due just before start is caught up at once; the rest fire on time.)
    for r in all.iter().filter(|r| r.tick > start) {
        let late = (r.started - r.tick).num_milliseconds();
        assert!(
            (0..100).contains(&late),
            "started {late} ms after its tick on the store clock"
        );
    }
}

#[test]
fn build_rejects_bad_configuration_with_typed_errors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("rt");
    let _guard = rt.enter();
    let (store, log) = (store(), Log::default());
    let err = builder(&store)
        .job(Probe::new("a", &store, &log))
        .job(Probe::new("a", &store, &log))
        .build()
        .err();
    assert!(
        matches!(err, Some(Error::DuplicateJob { ref name }) if name == "a"),
        "{err:?}"
    );

    let err = builder(&store)
        .lease_ttl(Duration::from_secs(10))
        .renew_every(Duration::from_secs(6))
        .build()
        .err();
    assert!(matches!(err, Some(Error::TtlTooShort { .. })), "{err:?}");
    let err = builder(&store).lease_ttl(Duration::ZERO).build().err();
    assert!(matches!(err, Some(Error::InvalidTtl { .. })), "{err:?}");

    struct BadCron;
    #[scheduler_core::async_trait]
    impl Idempotent for BadCron {
        fn name(&self) -> &str {
            "bad-cron"
        }
        fn schedule(&self) -> Schedule {
            Schedule::cron("61 * * * * *")
        }
        async fn run(&self, _: JobContext) -> Result<(), BoxError> {
            Ok(())
        }
    }
    let err = builder(&store).job(BadCron).build().err();
    assert!(
        matches!(err, Some(Error::InvalidSchedule { ref job, .. }) if job == "bad-cron"),
        "{err:?}"
    );
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.starts_with("job \"bad-cron\" has an invalid schedule: invalid cron expression"),
        "{msg}"
    );

    let mut empty = Probe::new("", &store, &log);
    empty.name = "";
    assert!(matches!(
        builder(&store).job(empty).build().err(),
        Some(Error::InvalidName { .. })
    ));
}
