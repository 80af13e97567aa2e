//! Takes per tick in a healthy cluster, against a real PostgreSQL server: three
//! `Scheduler` instances (distinct node ids, in one process) run four cluster jobs
//! `every 1s` with a 10 s lease ttl and 0.2 s bodies. The goal: an instance sends at
//! most one take per tick for the jobs due (each take carries all four names), since
//! an instance that lost a tick cannot win it within its window unless the winner
//! hands it back (the winner's lease outlasts the window). Reports, per case, over
//! the measured ticks:
//! - takes per instance per tick, against the baseline of one; first asks and
//!   re-asks (a take for a tick this instance had already been refused), with what
//!   the refusal before each re-ask said and how long after the tick's instant it
//!   was sent;
//! - releases and renewals per instance per second, and the lease statements and
//!   clock reads each instance sent per second (its `Counted` store), beside every
//!   transaction the database committed or rolled back per instance per second
//!   (`pg_stat_database`, control reads included; the server flushes these counts
//!   lazily, so read them as approximate);
//! - runs per (job, tick) over the expected (must be 1.00), duplicates and misses.
//!
//! Two cases: each instance with a `PostgresStore` (and pool) of its own, and the
//! three on clones of one store (one pool). Criterion's time per iteration is one
//! tick of wall time (about a second): the figures are the counts printed after it.
//!
//! `cargo bench -p scheduler-benches --bench takes_per_tick` (`TAKES_SECS=10`
//! measures about 10 ticks per case instead of 40; `TAKES_CASES=own_pools` runs only
//! the cases named, comma-separated; `TAKES_RENEW_MS=300` renews every 300 ms instead
//! of the default quarter ttl, which also sets how often a refused tick held by its
//! winner is asked again when the window leaves room for two such polls).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use scheduler_core::counted::{CallCounts, Counted};
use scheduler_core::{
    BoxError, Controls, Idempotent, JobContext, LeaseKey, LeaseName, Release, Renewed, Schedule,
    Scheduler, Store, TakeRequest, Taken, Tick, Ttl,
};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};

const INSTANCES: usize = 3;
const JOBS: usize = 4;
const PERIOD: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(10);
const BODY: Duration = Duration::from_millis(200);
/// From the start of the schedulers to the first measured tick: start-up's clock
/// reads and catch-up take are behind them.
const SETTLE: Duration = Duration::from_secs(3);

/// What a take's answer said of one name it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Answer {
    Won,
    /// This very tick, held by another holder.
    HeldThisTick,
    /// This tick or a later one already completed.
    Done,
    /// An older tick, still held unexpired (its run goes on, or its release is late).
    OlderHeld,
    /// An older tick, expired: it was free, so another taker won the race.
    OlderFree,
    /// No row reported: free when the statement read it, won by another taker.
    Missing,
    Paused,
    Failed,
}

/// One take as this instance sent it.
#[derive(Debug, Clone)]
struct TakeRecord {
    /// The local clock when it was sent.
    sent: DateTime<Utc>,
    /// The tick asked for (every job ticks at the same instants: one per take).
    tick: Tick,
    names: usize,
    /// What the answer said, by name.
    answers: Vec<Answer>,
}

/// A store that logs every take it forwards: which tick, and what the answer said.
#[derive(Debug)]
struct Logged<S> {
    inner: S,
    log: Arc<Mutex<Vec<TakeRecord>>>,
}

#[scheduler_core::async_trait]
impl<S: Store> Store for Logged<S> {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> scheduler_core::Result<Taken> {
        let sent = Utc::now();
        let taken = self.inner.take(requests, ttl).await;
        let answers = requests
            .iter()
            .map(|r| match &taken {
                Err(_) => Answer::Failed,
                Ok(t) if t.won.iter().any(|l| l.name == r.name) => Answer::Won,
                Ok(t) if t.paused.contains(&r.name) => Answer::Paused,
                Ok(t) => match t.held.iter().find(|h| h.name == r.name) {
                    None => Answer::Missing,
                    Some(h) if h.tick > r.tick || (h.tick == r.tick && h.completed) => Answer::Done,
                    Some(h) if h.tick == r.tick => Answer::HeldThisTick,
                    Some(h) if h.expires_at > t.now.unwrap_or(sent) => Answer::OlderHeld,
                    Some(_) => Answer::OlderFree,
                },
            })
            .collect();
        if let Some(tick) = requests.iter().map(|r| r.tick).min() {
            self.log.lock().unwrap().push(TakeRecord {
                sent,
                tick,
                names: requests.len(),
                answers,
            });
        }
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
        self.inner.release(leases, how).await
    }

    async fn now(&self) -> scheduler_core::Result<DateTime<Utc>> {
        self.inner.now().await
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> scheduler_core::Result<bool> {
        self.inner.request_cancel(name, newer).await
    }

    async fn create_missing(&self, names: &[LeaseName]) -> scheduler_core::Result<Vec<LeaseName>> {
        self.inner.create_missing(names).await
    }

    fn controls(&self) -> Option<&dyn Controls> {
        self.inner.controls()
    }
}

/// One run: which job, which tick (µs since the epoch), on which instance.
type Run = (usize, i64, usize);

/// A cluster job that sleeps through its body and records its run.
struct Sleeper {
    name: String,
    job: usize,
    instance: usize,
    runs: Arc<Mutex<Vec<Run>>>,
}

#[scheduler_core::async_trait]
impl Idempotent for Sleeper {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(PERIOD)
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let tick = ctx.tick().at().timestamp_micros();
        self.runs
            .lock()
            .unwrap()
            .push((self.job, tick, self.instance));
        tokio::time::sleep(BODY).await;
        Ok(())
    }
}

/// Every call an instance made, by kind: take, renew, release, clock read.
type Calls = [u64; 4];

fn calls(c: &CallCounts) -> Calls {
    [c.takes(), c.renewals(), c.releases(), c.clock_reads()]
}

struct Cluster {
    counts: Vec<CallCounts>,
    takes: Vec<Arc<Mutex<Vec<TakeRecord>>>>,
    runs: Arc<Mutex<Vec<Run>>>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// A connection of the bench's own, for `pg_stat_database`.
    probe: DatabaseConnection,
}

/// Starts the three instances on `rt`: each on a store of its own, or on clones of
/// one store (one pool) when `shared`.
fn start(
    rt: &tokio::runtime::Runtime,
    url: &str,
    shared: bool,
    renew_every: Option<Duration>,
) -> Cluster {
    rt.block_on(async {
        let one = if shared {
            Some(
                PostgresStore::connect(url, PostgresOptions::default())
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        let runs = Arc::new(Mutex::new(Vec::new()));
        let (mut counts, mut takes, mut stops, mut tasks) = (vec![], vec![], vec![], vec![]);
        for instance in 0..INSTANCES {
            let store = match &one {
                Some(store) => store.clone(),
                None => PostgresStore::connect(url, PostgresOptions::default())
                    .await
                    .unwrap(),
            };
            let log = Arc::new(Mutex::new(Vec::with_capacity(1024)));
            let store = Counted::new(Logged {
                inner: store,
                log: log.clone(),
            });
            counts.push(store.calls());
            takes.push(log);
            let mut builder = Scheduler::builder(store)
                .node_id(format!("node-{instance}"))
                .lease_ttl(TTL);
            if let Some(every) = renew_every {
                builder = builder.renew_every(every);
            }
            for job in 0..JOBS {
                builder = builder.job(Sleeper {
                    name: format!("job-{job}"),
                    job,
                    instance,
                    runs: runs.clone(),
                });
            }
            let scheduler = builder.build().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            tasks.push(tokio::spawn(scheduler.run_until(async {
                let _ = stopped.await;
            })));
        }
        Cluster {
            counts,
            takes,
            runs,
            stops,
            tasks,
            probe: Database::connect(url).await.unwrap(),
        }
    })
}

impl Cluster {
    fn calls(&self) -> Vec<Calls> {
        self.counts.iter().map(calls).collect()
    }

    /// Transactions committed and rolled back in this database so far.
    fn xacts(&self, rt: &tokio::runtime::Runtime) -> u64 {
        rt.block_on(async {
            let row = self
                .probe
                .query_one_raw(Statement::from_string(
                    self.probe.get_database_backend(),
                    "SELECT (xact_commit + xact_rollback)::bigint AS n \
                     FROM pg_stat_database WHERE datname = current_database()",
                ))
                .await
                .unwrap()
                .unwrap();
            u64::try_from(row.try_get::<i64>("", "n").unwrap()).unwrap()
        })
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        for stop in self.stops {
            let _ = stop.send(());
        }
        rt.block_on(async {
            for task in self.tasks {
                task.await.unwrap();
            }
        });
    }
}

/// Sleeps until half a period after the next tick instant: between one tick's
/// answers and the next tick's takes ahead (at most half a period ahead), at the
/// same phase at every boundary, so that a window's boundaries cut the same share
/// of a tick's takes.
fn to_mid_period() -> DateTime<Utc> {
    let period = i64::try_from(PERIOD.as_micros()).unwrap();
    let now = Utc::now().timestamp_micros();
    let mid = (now - period / 2).div_euclid(period) * period + period + period / 2;
    std::thread::sleep(Duration::from_micros(u64::try_from(mid - now).unwrap()));
    DateTime::from_timestamp_micros(mid).unwrap()
}

/// One case's totals over its measured windows.
struct Case {
    label: &'static str,
    ticks: u64,
    seconds: f64,
    /// Per instance.
    calls: Vec<Calls>,
    /// The transactions the database counted per second, over the whole span.
    xacts: f64,
    /// The measured windows (mid-period to mid-period).
    windows: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    takes: Vec<Vec<TakeRecord>>,
    runs: Vec<Run>,
}

fn measure(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seconds = std::env::var("TAKES_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(40)
        .max(10);
    // `TAKES_RENEW_MS=300`: renew every 300 ms instead of a quarter of the ttl.
    let renew_every = std::env::var("TAKES_RENEW_MS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_millis);
    let mut summary = Vec::new();
    let mut group = c.benchmark_group("takes_per_tick");
    // One iteration is one tick; 10 samples over `seconds` of ticks.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1500))
        // Criterion fits whole iterations per sample into this: a little more than
        // `seconds`, so that ticks a little longer than a second still make `seconds`.
        .measurement_time(Duration::from_secs(seconds + seconds / 8));
    for (label, shared) in [("own_pools", false), ("shared_pool", true)] {
        if let Ok(only) = std::env::var("TAKES_CASES")
            && !only.split(',').any(|c| c.trim() == label)
        {
            continue;
        }
        let url = rt.block_on(scheduler_benches::database());
        let cluster = start(&rt, &url, shared, renew_every);
        std::thread::sleep(SETTLE);
        let (mut ticks, mut elapsed) = (0u64, Duration::ZERO);
        let mut totals = vec![[0u64; 4]; INSTANCES];
        // The database's transaction count at the first window's start and the
        // last's end, and the bench's own reads in between (its counts lag by up to
        // a few seconds per connection, so one long span is read, not each window).
        let (mut xacts, mut reads, mut windows) = (None, 0u64, Vec::new());
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let from = to_mid_period();
                let (t0, c0) = (std::time::Instant::now(), cluster.calls());
                if xacts.is_none() {
                    xacts = Some((t0, cluster.xacts(&rt), t0, 0));
                }
                let mut to = from;
                for _ in 0..iters {
                    to = to_mid_period();
                }
                let (t1, c1) = (std::time::Instant::now(), cluster.calls());
                if let Some((_, _, last, count)) = &mut xacts {
                    (*last, *count) = (t1, cluster.xacts(&rt));
                    reads += 1;
                }
                ticks += iters;
                elapsed += t1 - t0;
                for (total, (a, b)) in totals.iter_mut().zip(c0.iter().zip(&c1)) {
                    for (t, (a, b)) in total.iter_mut().zip(a.iter().zip(b)) {
                        *t += b - a;
                    }
                }
                windows.push((from, to));
                t1 - t0
            })
        });
        // The last window's runs have started by now (bodies end within the period).
        std::thread::sleep(PERIOD);
        let takes = cluster
            .takes
            .iter()
            .map(|log| log.lock().unwrap().clone())
            .collect();
        let runs = cluster.runs.lock().unwrap().clone();
        cluster.stop(&rt);
        summary.push(Case {
            label,
            ticks,
            seconds: elapsed.as_secs_f64(),
            calls: totals,
            xacts: xacts.map_or(0.0, |(t0, x0, t1, x1)| {
                // The bench's own reads: x1 counts the first and all but the last.
                let cluster = x1.saturating_sub(x0).saturating_sub(reads) as f64;
                cluster / (t1 - t0).as_secs_f64().max(1e-9)
            }),
            windows,
            takes,
            runs,
        });
    }
    group.finish();
    for case in &summary {
        report(case, renew_every.unwrap_or(TTL / 4));
    }
}

/// Whether `at` lies in one of the measured windows.
fn measured(windows: &[(DateTime<Utc>, DateTime<Utc>)], at: DateTime<Utc>) -> bool {
    windows.iter().any(|(from, to)| *from < at && at < *to)
}

fn quantiles(mut v: Vec<i64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_unstable();
    let q = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!("{}/{}/{}", q(0.0), q(0.5), v[v.len() - 1])
}

fn report(case: &Case, renew_every: Duration) {
    let ticks = case.ticks.max(1) as f64;
    let secs = case.seconds.max(1e-9);
    println!(
        "\n{}: {} ticks measured over {:.1} s; {INSTANCES} instances, {JOBS} jobs every {PERIOD:?}, ttl {TTL:?} renewed every {renew_every:?}, bodies {BODY:?}",
        case.label, case.ticks, case.seconds
    );
    println!(
        "{:>10} {:>16} {:>9} {:>12} {:>12} {:>14} {:>18}",
        "instance",
        "takes/tick",
        "baseline",
        "releases/s",
        "renewals/s",
        "clock reads/s",
        "lease+clock stmts/s"
    );
    let mut all = [0u64; 4];
    for (i, c) in case.calls.iter().enumerate() {
        let [take, renew, release, now] = *c;
        for (a, b) in all.iter_mut().zip(c) {
            *a += b;
        }
        println!(
            "{:>10} {:>16.2} {:>9.2} {:>12.2} {:>12.2} {:>14.2} {:>18.2}",
            format!("node-{i}"),
            take as f64 / ticks,
            1.0,
            release as f64 / secs,
            renew as f64 / secs,
            now as f64 / secs,
            c.iter().sum::<u64>() as f64 / secs,
        );
    }
    let n = INSTANCES as f64;
    let [take, renew, release, now] = all.map(|v| v as f64 / n);
    println!(
        "{:>10} {:>16.2} {:>9.2} {:>12.2} {:>12.2} {:>14.2} {:>18.2}",
        "mean",
        take / ticks,
        1.0,
        release / secs,
        renew / secs,
        now / secs,
        (take + renew + release + now) / secs
    );
    println!(
        "transactions per instance per second, as the database counted them over the whole span (control reads included; its counts lag, so approximate): {:.2}",
        case.xacts / n
    );

    // The takes of the measured ticks, by instance and tick, in the order sent.
    let mut firsts = 0u64;
    let mut reasks = 0u64;
    let mut after: BTreeMap<Answer, u64> = BTreeMap::new();
    let mut reask_ms = Vec::new();
    let mut per_tick: BTreeMap<usize, u64> = BTreeMap::new();
    let mut names = 0usize;
    for log in &case.takes {
        let mut by_tick: HashMap<Tick, Vec<&TakeRecord>> = HashMap::new();
        for t in log.iter().filter(|t| measured(&case.windows, t.tick.at())) {
            by_tick.entry(t.tick).or_default().push(t);
            names = names.max(t.names);
        }
        for takes in by_tick.values() {
            *per_tick.entry(takes.len()).or_default() += 1;
            firsts += 1;
            for pair in takes.windows(2) {
                reasks += 1;
                for answer in &pair[0].answers {
                    *after.entry(*answer).or_default() += 1;
                }
                reask_ms.push((pair[1].sent - pair[1].tick.at()).num_milliseconds());
            }
        }
    }
    let asked = (firsts + reasks).max(1) as f64;
    println!(
        "takes of the measured ticks (from each instance's log): {} first asks, {} re-asks ({:.0} %); names per take: up to {names}",
        firsts,
        reasks,
        reasks as f64 * 100.0 / asked
    );
    println!(
        "  takes per (instance, tick): {}",
        per_tick
            .iter()
            .map(|(takes, n)| format!("{takes}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if reasks > 0 {
        println!(
            "  answers (by name) before a re-ask: {}",
            after
                .iter()
                .map(|(a, n)| format!("{a:?} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "  re-asks sent after the tick's instant, ms (min/p50/max): {}",
            quantiles(reask_ms)
        );
    }

    // Every measured tick ran each job once.
    let mut ran: HashMap<(usize, i64), u64> = HashMap::new();
    let mut by_instance = [0u64; INSTANCES];
    for &(job, tick, instance) in &case.runs {
        let at = DateTime::from_timestamp_micros(tick).unwrap();
        if measured(&case.windows, at) {
            *ran.entry((job, tick)).or_default() += 1;
            by_instance[instance] += 1;
        }
    }
    let expected = case.ticks * JOBS as u64;
    let duplicates = ran.values().filter(|n| **n > 1).count();
    println!(
        "runs/expected {:.2} ({} distinct (job, tick) of {expected}), duplicates {duplicates}, missed {}; runs by instance {:?}",
        ran.len() as f64 / expected.max(1) as f64,
        ran.len(),
        expected.saturating_sub(ran.len() as u64),
        by_instance
    );
}

criterion_group!(benches, measure);
criterion_main!(benches);
