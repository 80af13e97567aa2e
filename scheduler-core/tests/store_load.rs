//! The load an instance puts on its store: one take and at most one release per
//! tick, nothing at all between ticks while it holds no lease, and big ticks taken
//! in chunks whose runs start as each chunk is answered.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::counted::{CallCounts, Counted};
use scheduler_core::{
    BoxError, Idempotent, JobContext, LeaseKey, LeaseName, LocalClock, MemoryStore, Outcome,
    Release, Renewed, Schedule, Scheduler, Store, TakeRequest, Taken, Ttl,
};
use tokio::time::Instant;

/// A job every `every` whose body takes `body`, recording when each run started
/// and how late after its tick (on `clock`, the store's clock).
struct Timed {
    name: String,
    every: Duration,
    body: Duration,
    clock: LocalClock,
    starts: Starts,
}

/// When each run of a job started, and how late after its tick.
type Starts = Arc<Mutex<Vec<(Instant, TimeDelta)>>>;

impl Timed {
    fn new(name: impl Into<String>, every: Duration, body: Duration, clock: LocalClock) -> Self {
        Self {
            name: name.into(),
            every,
            body,
            clock,
            starts: Arc::default(),
        }
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Timed {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(self.every)
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let late = self.clock.now() - ctx.tick().at();
        self.starts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), late));
        tokio::time::sleep(self.body).await;
        Ok(())
    }
}

/// A clock that starts half a second into a minute, so that every test sees its
/// ticks fall at the same instants.
fn clock() -> LocalClock {
    let start = chrono::DateTime::from_timestamp_millis(1_800_000_000_500).unwrap_or_default();
    LocalClock::starting_at(start)
}

/// A memory store (counted) on [`clock`].
fn counted() -> (Arc<Counted<MemoryStore>>, CallCounts, LocalClock) {
    let clock = clock();
    let memory = MemoryStore::with_clock(clock);
    let store = Arc::new(Counted::new(memory));
    let calls = store.calls();
    (store, calls, clock)
}

#[tokio::test(start_paused = true)]
async fn an_idle_instance_sends_nothing_between_ticks() {
    // One job a minute, done in 10 ms: between ticks this instance holds nothing, so it
    // has nothing to renew, and its takes tell it the store's time.
    let (store, calls, clock) = counted();
    let scheduler = Scheduler::builder(store)
        .node_id("a")
        .job(Timed::new(
            "minutely",
            Duration::from_secs(60),
            Duration::from_millis(10),
            clock,
        ))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(
            Duration::from_secs(600) + Duration::from_millis(500),
        ))
        .await;
    let runs = stats.count("minutely", Outcome::Succeeded);
    assert!(runs >= 10, "ran {runs} times in ten minutes");
    let (takes, renewals, releases, reads) = (
        calls.takes(),
        calls.renewals(),
        calls.releases(),
        calls.clock_reads(),
    );
    assert_eq!(
        (takes, renewals, releases),
        (runs, 0, runs),
        "one take and one release per tick, no renewal (takes, renewals, releases)"
    );
    assert!(
        reads <= 2,
        "the store's clock is read at start-up only, then learnt from the takes: {reads} reads"
    );
}

#[tokio::test(start_paused = true)]
async fn runs_ending_within_milliseconds_are_released_in_one_statement() {
    // Twenty jobs every second whose runs end 1 ms apart.
    let (store, calls, clock) = counted();
    let mut builder = Scheduler::builder(store).node_id("a");
    for i in 0..20u64 {
        builder = builder.job(Timed::new(
            format!("job-{i:02}"),
            Duration::from_secs(1),
            Duration::from_millis(200 + i),
            clock,
        ));
    }
    let scheduler = builder.build().unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(10_250)))
        .await;
    let ticks = stats.count("job-00", Outcome::Succeeded);
    assert!(ticks >= 10, "ran {ticks} ticks");
    for i in 0..20 {
        let ran = stats.count(&format!("job-{i:02}"), Outcome::Succeeded);
        assert_eq!(ran, ticks, "job-{i:02} ran every tick");
    }
    assert_eq!(calls.takes(), ticks, "one take per tick");
    assert_eq!(
        calls.releases(),
        ticks,
        "the releases of one tick's runs coalesce into one statement"
    );
    assert_eq!(calls.renewals(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_take_goes_out_after_the_instances_own_pending_release() {
    // A run that ends 5 ms before the next tick: its release is still lingering when
    // that tick comes due, and must reach the store before the take, or the take meets
    // this instance's own lease and waits a quarter of the window.
    let (store, _calls, clock) = counted();
    let job = Timed::new(
        "tight",
        Duration::from_secs(1),
        Duration::from_millis(995),
        clock,
    );
    let starts = job.starts.clone();
    let scheduler = Scheduler::builder(store)
        .node_id("a")
        .job(job)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(10_250)))
        .await;
    assert_eq!(stats.count("tight", Outcome::HeldElsewhere), 0);
    let starts = starts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(starts.len() >= 10, "ran {} ticks", starts.len());
    // Virtual time: each run starts on its tick (the first, at start-up, late).
    for (k, (_, late)) in starts.iter().enumerate().skip(1) {
        assert!(
            late.num_milliseconds() < 50,
            "run {k} started {late} after its tick"
        );
    }
}

/// A store whose takes take 50 ms each, recording each take's size and answer time,
/// and each release's size.
#[derive(Debug)]
struct SlowTakes {
    inner: MemoryStore,
    takes: Mutex<Vec<(usize, Instant)>>,
    releases: Mutex<Vec<usize>>,
    /// How many takes of more than 200 names still fail (after their 50 ms).
    fail_big: AtomicU32,
}

#[scheduler_core::async_trait]
impl Store for SlowTakes {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if requests.len() > 200
            && self
                .fail_big
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            self.takes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((0, Instant::now()));
            return Err(scheduler_core::Error::store(
                "canceling statement due to statement timeout",
            ));
        }
        let taken = self.inner.take(requests, ttl).await;
        self.takes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((requests.len(), Instant::now()));
        taken
    }
    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> scheduler_core::Result<Vec<Renewed>> {
        self.inner.renew(leases, ttl).await
    }
    async fn release(
        &self,
        leases: &[LeaseKey],
        how: Release,
    ) -> scheduler_core::Result<Vec<LeaseName>> {
        self.releases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(leases.len());
        self.inner.release(leases, how).await
    }
    async fn now(&self) -> scheduler_core::Result<chrono::DateTime<chrono::Utc>> {
        self.inner.now().await
    }
}

impl SlowTakes {
    /// The takes' sizes, in order (0: a take that failed).
    fn take_sizes(&self) -> Vec<usize> {
        self.takes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, _)| *n)
            .collect()
    }
}

/// 250 jobs a minute, 1 ms each, on a store whose takes take 50 ms, its clock half a
/// second into a minute (the next tick is a minute away); with each job's starts.
fn big_tick() -> (Arc<SlowTakes>, Scheduler, Vec<Starts>) {
    let store = Arc::new(SlowTakes {
        inner: MemoryStore::with_clock(clock()),
        takes: Mutex::default(),
        releases: Mutex::default(),
        fail_big: AtomicU32::new(0),
    });
    let mut builder = Scheduler::builder(store.clone()).node_id("a");
    let mut starts = Vec::new();
    for i in 0..250 {
        let job = Timed::new(
            format!("job-{i:03}"),
            Duration::from_secs(60),
            Duration::from_millis(1),
            store.inner.clock(),
        );
        starts.push(job.starts.clone());
        builder = builder.job(job);
    }
    let scheduler = builder.build().unwrap_or_else(|e| panic!("{e}"));
    (store, scheduler, starts)
}

#[tokio::test(start_paused = true)]
async fn a_big_tick_is_taken_in_chunks_whose_runs_start_as_each_is_answered() {
    let (store, scheduler, starts) = big_tick();
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(5)))
        .await;
    let takes = store
        .takes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let sizes: Vec<usize> = takes.iter().map(|(n, _)| *n).collect();
    // Late (the tick at start-up): a first chunk of 100, then twice as many.
    assert_eq!(sizes, [100, 150], "the tick's takes, by size");
    let first_run = starts
        .iter()
        .filter_map(|s| {
            let starts = s.lock().unwrap_or_else(|e| e.into_inner());
            starts.first().map(|(at, _)| *at)
        })
        .min()
        .unwrap_or_else(|| panic!("nothing ran"));
    let last_answer = takes[1].1;
    assert!(
        first_run < last_answer,
        "the first chunk's runs start before the last chunk is answered"
    );
    for i in 0..250 {
        assert_eq!(stats.count(&format!("job-{i:03}"), Outcome::Succeeded), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_big_tick_is_taken_ahead_so_its_runs_start_on_time() {
    // 250 jobs a minute, takes of 50 ms each: the tick at start-up is taken late, in
    // two chunks; the next ones are taken ahead of their instant, each in one call
    // (its runs released in one), and every run waits for its instant.
    let (store, scheduler, starts) = big_tick();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(150)))
        .await;
    let sizes = store.take_sizes();
    assert_eq!(sizes, [100, 150, 250, 250], "takes, by size");
    let releases = store
        .releases
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(releases, [250, 250, 250], "releases, by size");
    for (i, s) in starts.iter().enumerate() {
        let s = s.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(s.len(), 3, "job {i} ran at start-up and on two ticks");
        for (_, late) in &s[1..] {
            assert!(
                *late >= TimeDelta::zero() && *late < TimeDelta::milliseconds(5),
                "job {i}: a run began {late} after its tick"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_big_take_that_fails_is_asked_again_in_chunks() {
    // The second tick's one take of 250 names fails (cut by the server's bound, say):
    // it is retried after its backoff, late, so in chunks of 100 and 150; every job
    // still runs once a tick, and the next tick goes in one call again.
    let (store, scheduler, _) = big_tick();
    store.fail_big.store(1, SeqCst);
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_secs(150)))
        .await;
    let sizes = store.take_sizes();
    assert_eq!(
        sizes,
        [100, 150, 0, 100, 150, 250],
        "takes, by size (0: the failed one)"
    );
    for i in 0..250 {
        assert_eq!(stats.count(&format!("job-{i:03}"), Outcome::Succeeded), 3);
    }
}
