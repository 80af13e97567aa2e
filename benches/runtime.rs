//! Runtime overhead against a real PostgreSQL server: 1,000 and 10,000 registered
//! jobs ticking every second on one instance (as `every 1s` and as the cron
//! expression `* * * * * *` in Europe/Berlin). Reports, per tick (a period, 1 s, of
//! measured wall time, so that a missed tick does not inflate the cost per tick):
//! - the statements the instance sends (must stay O(1), not O(jobs)), in total and
//!   by kind (take, renew, release, clock read);
//! - the CPU time of the scheduler's thread (its loop, the driver's work on that
//!   thread, and spawning the trivial runs), as criterion's time per iteration;
//!
//! and, over the measured window of each case:
//! - the lateness of each run: from its tick's instant (`ctx.tick().at()`, on the
//!   store's clock, the same machine's) to the start of its body, p50 and p99;
//! - runs/expected: the runs of the window's ticks over jobs × ticks, where the ticks
//!   are every tick instant from the first after the window opens to the last before
//!   it closes; the (job, tick) pairs that ran more than once (duplicates, must be 0);
//!   and the pairs that never ran (missed), with the ticks they belong to and, as a
//!   cross-check, the ticks the engine's `Stats` counted as missed. The target is
//!   runs/expected = 1.00.
//!
//! Each size runs twice: without metrics, and with OpenTelemetry metrics recorded
//! into an SDK meter provider (the cost of observability per run). Each case's
//! instance is shut down before the next starts, so cases do not disturb each other.
//!
//! `cargo bench -p scheduler-benches --bench runtime` (`RUNTIME_CASES=10000_every_plain`
//! runs only the cases named, comma-separated).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use scheduler_core::counted::{CallCounts, Counted};
use scheduler_core::{BoxError, Idempotent, JobContext, Outcome, Schedule, Scheduler, Stats};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectOptions, Database};

/// Every case's jobs tick once per second (`every 1s`, and cron `* * * * * *`).
const PERIOD_US: i64 = 1_000_000;

/// How long after the window closes its last ticks' runs may still start.
const GRACE: Duration = Duration::from_secs(15);

/// The tick outcomes the engine's [`Stats`] count.
const OUTCOMES: [Outcome; 6] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::HeldElsewhere,
    Outcome::SkippedOverlap,
    Outcome::Missed,
    Outcome::LeaseLost,
];

/// One run as its body saw it on starting.
#[derive(Debug, Clone, Copy)]
struct Run {
    job: u32,
    /// The tick's instant, in microseconds since the epoch.
    tick_us: i64,
    /// From the tick's instant to the body's start, in microseconds.
    late_us: i32,
}

/// What the runs report: a counter to wait on, and one record per run.
///
/// Runs all execute on the scheduler's (current-thread) runtime, so the mutex is
/// never contended while the window is measured: the benchmark's thread only takes
/// it to read the records after the window has closed.
#[derive(Debug, Default)]
struct Probe {
    runs: AtomicU64,
    /// The latest tick any run started for, in microseconds since the epoch.
    latest_tick_us: AtomicI64,
    log: Mutex<Vec<Run>>,
}

struct Noop {
    name: String,
    index: u32,
    schedule: Schedule,
    probe: Arc<Probe>,
}

#[scheduler_core::async_trait]
impl Idempotent for Noop {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        self.schedule.clone()
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let started = Utc::now();
        let tick = ctx.tick().at();
        let late_us = (started - tick).num_microseconds().unwrap_or(i64::MAX);
        let run = Run {
            job: self.index,
            tick_us: tick.timestamp_micros(),
            late_us: i32::try_from(late_us).unwrap_or(if late_us < 0 {
                i32::MIN
            } else {
                i32::MAX
            }),
        };
        self.probe.log.lock().unwrap().push(run);
        self.probe
            .latest_tick_us
            .fetch_max(run.tick_us, Ordering::Relaxed);
        self.probe.runs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// On-CPU nanoseconds of one thread, from /proc (first field of schedstat).
fn thread_cpu_ns(task: &str) -> u64 {
    std::fs::read_to_string(format!("{task}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Store calls by kind: take, renew, release, clock read.
type Calls = [u64; 4];

fn calls(counts: Option<&CallCounts>) -> Calls {
    counts.map_or([0; 4], |c| {
        [c.takes(), c.renewals(), c.releases(), c.clock_reads()]
    })
}

struct Instance {
    task: String,
    statements: Arc<OnceLock<CallCounts>>,
    probe: Arc<Probe>,
    jobs: u64,
    stats: Stats,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts one scheduler with `jobs` jobs on a thread of its own (current-thread runtime).
fn start(url: String, jobs: u64, metrics: bool, schedule: Schedule) -> Instance {
    let statements = Arc::new(OnceLock::new());
    let probe = Arc::new(Probe {
        // Room for a minute of ticks: no reallocation on the loop's thread while measured.
        log: Mutex::new(Vec::with_capacity(usize::try_from(jobs * 64).unwrap())),
        ..Probe::default()
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (s, p) = (statements.clone(), probe.clone());
    let thread = std::thread::spawn(move || {
        let task = std::fs::read_link("/proc/thread-self")
            .map(|p| format!("/proc/{}", p.display()))
            .unwrap_or_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut options = ConnectOptions::new(url);
            options.max_connections(2).sqlx_logging(false);
            let conn = Database::connect(options).await.unwrap();
            let store = PostgresStore::open(conn, PostgresOptions::default())
                .await
                .unwrap();
            // Every store call is one lease statement (or one clock read).
            let store = Counted::new(store);
            s.set(store.calls()).unwrap();
            // Kept alive for the scheduler's lifetime.
            let provider = metrics.then(|| {
                let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporter::default();
                let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter)
                    .with_interval(Duration::from_secs(5))
                    .build();
                opentelemetry_sdk::metrics::SdkMeterProvider::builder()
                    .with_reader(reader)
                    .build()
            });
            let mut builder = Scheduler::builder(store).lease_ttl(Duration::from_secs(60));
            if let Some(provider) = &provider {
                use opentelemetry::metrics::MeterProvider as _;
                builder = builder.meter(provider.meter("scheduler"));
            }
            for i in 0..jobs {
                builder = builder.job(Noop {
                    name: format!("job-{i:05}"),
                    index: u32::try_from(i).unwrap(),
                    schedule: schedule.clone(),
                    probe: p.clone(),
                });
            }
            let scheduler = builder.build().unwrap();
            tx.send((task, scheduler.stats())).unwrap();
            scheduler
                .run_until(async {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    let (task, stats) = rx.recv().unwrap();
    Instance {
        task,
        statements,
        probe,
        jobs,
        stats,
        stop,
        thread,
    }
}

impl Instance {
    fn runs(&self) -> u64 {
        self.probe.runs.load(Ordering::Relaxed)
    }

    /// The tick outcomes the engine itself counted, over all jobs, by [`OUTCOMES`].
    fn outcomes(&self) -> [u64; OUTCOMES.len()] {
        let mut counts = [0; OUTCOMES.len()];
        for i in 0..self.jobs {
            let job = format!("job-{i:05}");
            for (count, outcome) in counts.iter_mut().zip(OUTCOMES) {
                *count += self.stats.count(&job, outcome);
            }
        }
        counts
    }

    /// Waits until the runs counter has advanced by `ticks` whole ticks.
    fn wait_ticks(&self, ticks: u64) {
        let target = (self.runs() / self.jobs + ticks) * self.jobs;
        while self.runs() < target {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the runs of every tick up to `last_us` have had their chance to
    /// start: two later ticks have begun running, or [`GRACE`] has passed.
    fn settle(&self, last_us: i64) {
        let deadline = std::time::Instant::now() + GRACE;
        let past = last_us + 2 * PERIOD_US;
        while std::time::Instant::now() < deadline
            && (Utc::now().timestamp_micros() < past
                || self.probe.latest_tick_us.load(Ordering::Relaxed) < past)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Shuts the scheduler down gracefully and waits for its thread.
    fn stop(self) {
        let _ = self.stop.send(());
        self.thread.join().unwrap();
    }
}

/// The runs of one window, judged against its ticks.
struct Runs {
    /// The window's tick instants.
    ticks: u64,
    runs: u64,
    expected: u64,
    duplicates: u64,
    missed: u64,
    /// The window's ticks some job missed: (index in the window, jobs that missed it).
    gaps: Vec<(i64, u64)>,
    p50_ms: f64,
    p99_ms: f64,
}

/// Judges the runs of the ticks from the first at or after `from` to the last at or
/// before `to`.
fn judge(probe: &Probe, jobs: u64, from: DateTime<Utc>, to: DateTime<Utc>) -> Runs {
    let first = (from.timestamp_micros() + PERIOD_US - 1).div_euclid(PERIOD_US) * PERIOD_US;
    let last = to.timestamp_micros().div_euclid(PERIOD_US) * PERIOD_US;
    let ticks = u64::try_from((last - first) / PERIOD_US + 1).unwrap_or(0);
    let mut window: Vec<Run> = probe
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|r| (first..=last).contains(&r.tick_us))
        .copied()
        .collect();
    let runs = window.len() as u64;
    let mut late: Vec<i32> = window.iter().map(|r| r.late_us).collect();
    late.sort_unstable();
    let quantile = |q: f64| {
        late.get(((late.len() as f64 - 1.0) * q).round() as usize)
            .map_or(f64::NAN, |&us| f64::from(us) / 1e3)
    };
    window.sort_unstable_by_key(|r| (r.tick_us, r.job));
    let (mut distinct, mut duplicates, mut gaps) = (0u64, 0u64, Vec::new());
    let mut tick = first;
    for same_tick in window.chunk_by(|a, b| a.tick_us == b.tick_us) {
        for skipped in (tick..same_tick[0].tick_us).step_by(PERIOD_US as usize) {
            gaps.push(((skipped - first) / PERIOD_US, jobs));
        }
        let mut ran = 0;
        for pair in same_tick.chunk_by(|a, b| a.job == b.job) {
            ran += 1;
            duplicates += u64::from(pair.len() > 1);
        }
        if ran < jobs {
            gaps.push(((same_tick[0].tick_us - first) / PERIOD_US, jobs - ran));
        }
        distinct += ran;
        tick = same_tick[0].tick_us + PERIOD_US;
    }
    for skipped in (tick..=last).step_by(PERIOD_US as usize) {
        gaps.push(((skipped - first) / PERIOD_US, jobs));
    }
    let expected = jobs * ticks;
    Runs {
        ticks,
        runs,
        expected,
        duplicates,
        missed: expected.saturating_sub(distinct),
        gaps,
        p50_ms: quantile(0.50),
        p99_ms: quantile(0.99),
    }
}

/// One case's totals over its measured window.
struct Case {
    label: String,
    jobs: u64,
    /// Ticks elapsed while criterion measured: wall time over the period.
    ticks: f64,
    calls: Calls,
    cpu_ns: u64,
    runs: Runs,
    /// Tick outcomes as the engine's [`Stats`] counted them, from just before the
    /// window opened to after it settled: a cross-check of `runs`.
    outcomes: [u64; OUTCOMES.len()],
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut summary = Vec::new();
    let mut group = c.benchmark_group("runtime_per_tick");
    // One iteration is one tick (about a second of wall time); the warm-up's estimate
    // spans a few ticks so that 10 samples take about 20 ticks, not more.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1500))
        .measurement_time(Duration::from_secs(20));
    // `every 1s` and the same ticks as a cron expression (`* * * * * *`, in a zone with
    // daylight saving time): the cost of cron arithmetic on the loop.
    let every = || Schedule::every(Duration::from_secs(1));
    let cron = || Schedule::cron("* * * * * *").in_time_zone("Europe/Berlin");
    for (jobs, metrics, schedule, kind) in [
        (1_000u64, false, every(), "every"),
        (1_000, true, every(), "every"),
        (1_000, false, cron(), "cron"),
        (10_000, false, every(), "every"),
        (10_000, true, every(), "every"),
        (10_000, false, cron(), "cron"),
    ] {
        let label = format!(
            "{jobs}_{kind}_{}",
            if metrics { "metrics" } else { "plain" }
        );
        // `RUNTIME_CASES=10000_every_plain,1000_cron` runs only the cases named.
        if let Ok(only) = std::env::var("RUNTIME_CASES")
            && !only.split(',').any(|c| c.trim() == label)
        {
            continue;
        }
        let url = rt.block_on(scheduler_benches::database());
        let instance = start(url, jobs, metrics, schedule);
        instance.wait_ticks(2); // past start-up and the first catch-up
        let outcomes_before = instance.outcomes();
        let (mut elapsed, mut calls_total, mut cpu_ns) = (Duration::ZERO, [0u64; 4], 0u64);
        let mut window: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
        group.bench_function(&label, |b| {
            b.iter_custom(|iters| {
                let opened = Utc::now();
                instance.wait_ticks(0);
                let (t0, s0, c0) = (
                    std::time::Instant::now(),
                    calls(instance.statements.get()),
                    thread_cpu_ns(&instance.task),
                );
                instance.wait_ticks(iters);
                let (t1, s1, c1) = (
                    std::time::Instant::now(),
                    calls(instance.statements.get()),
                    thread_cpu_ns(&instance.task),
                );
                elapsed += t1 - t0;
                for (total, (a, b)) in calls_total.iter_mut().zip(s0.iter().zip(s1)) {
                    *total += b - a;
                }
                cpu_ns += c1 - c0;
                let closed = Utc::now();
                window = Some(window.map_or((opened, closed), |(from, _)| (from, closed)));
                // CPU per elapsed tick (not per iteration: a missed tick makes one longer).
                let ticks = (t1 - t0).as_micros() as f64 / PERIOD_US as f64;
                Duration::from_nanos(((c1 - c0) as f64 / ticks.max(1.0) * iters as f64) as u64)
            })
        });
        let (from, to) = window.expect("criterion ran the case");
        instance.settle(to.timestamp_micros().div_euclid(PERIOD_US) * PERIOD_US);
        let runs = judge(&instance.probe, jobs, from, to);
        // `RUNTIME_DUMP=dir` writes each case's runs, in the order they started, as
        // `dir/<case>.csv` (job, tick µs, lateness µs), for a closer look.
        if let Ok(dir) = std::env::var("RUNTIME_DUMP") {
            let log = instance.probe.log.lock().unwrap();
            let mut csv = String::from("job,tick_us,late_us\n");
            for r in log.iter() {
                csv.push_str(&format!("{},{},{}\n", r.job, r.tick_us, r.late_us));
            }
            std::fs::write(format!("{dir}/{label}.csv"), csv).unwrap();
        }
        let mut outcomes = instance.outcomes();
        for (after, before) in outcomes.iter_mut().zip(outcomes_before) {
            *after -= before;
        }
        instance.stop();
        summary.push(Case {
            label,
            jobs,
            ticks: elapsed.as_micros() as f64 / PERIOD_US as f64,
            calls: calls_total,
            cpu_ns,
            runs,
            outcomes,
        });
    }
    group.finish();
    println!(
        "\n{:>20} {:>6} {:>15} {:>27} {:>16} {:>15} {:>18} {:>8} {:>13} {:>10} {:>7}",
        "case",
        "ticks",
        "statements/tick",
        "take/renew/release/now",
        "loop CPU ms/tick",
        "CPU µs/job/tick",
        "lateness p50/p99",
        "instants",
        "runs/expected",
        "duplicates",
        "missed"
    );
    for case in &summary {
        let per_tick = |n: u64| n as f64 / case.ticks.max(1.0);
        let cpu_ms = per_tick(case.cpu_ns) / 1e6;
        let [take, renew, release, now] = case.calls.map(per_tick);
        let r = &case.runs;
        println!(
            "{:>20} {:>6.1} {:>15.2} {:>27} {cpu_ms:>16.2} {:>15.2} {:>18} {:>8} {:>13.4} {:>10} {:>7}",
            case.label,
            case.ticks,
            per_tick(case.calls.iter().sum()),
            format!("{take:.2}/{renew:.2}/{release:.2}/{now:.2}"),
            cpu_ms * 1e3 / case.jobs as f64,
            format!("{:.2}/{:.2} ms", r.p50_ms, r.p99_ms),
            r.ticks,
            r.runs as f64 / r.expected.max(1) as f64,
            r.duplicates,
            r.missed,
        );
    }
    println!(
        "(one instance; every job ticks each second; statements = its store calls: takes, renewals, releases, clock reads;\n \
         ticks = measured wall time over the 1 s period; lateness = tick instant to the run body's start; runs/expected = runs / (jobs × the window's tick instants))"
    );
    for case in &summary {
        let outcomes: Vec<String> = OUTCOMES
            .iter()
            .zip(case.outcomes)
            .filter(|(_, n)| *n > 0)
            .map(|(outcome, n)| format!("{} {n}", outcome.as_str()))
            .collect();
        let gaps: Vec<String> = case
            .runs
            .gaps
            .iter()
            .map(|(tick, jobs)| format!("tick {tick}: {jobs} jobs"))
            .collect();
        println!(
            "{}: engine's Stats from start of window to settled: {}; runs missing at {} of {} ticks{}{}",
            case.label,
            outcomes.join(", "),
            case.runs.gaps.len(),
            case.runs.ticks,
            if gaps.is_empty() { "" } else { ": " },
            gaps.join(", ")
        );
    }
    println!();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
