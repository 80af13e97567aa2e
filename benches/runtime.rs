//! Runtime overhead against a real PostgreSQL server: 1,000 and 10,000 registered
//! jobs ticking every second on one instance (as `every 1s` and as the cron
//! expression `* * * * * *` in Europe/Berlin). Reports, per tick:
//! - the statements the instance sends (must stay O(1), not O(jobs));
//! - the CPU time of the scheduler's thread (its loop, the driver's work on that
//!   thread, and spawning the trivial runs), as criterion's time per iteration.
//!
//! Each size runs twice: without metrics, and with OpenTelemetry metrics recorded
//! into an SDK meter provider (the cost of observability per run).
//!
//! `cargo bench -p scheduler-benches --bench runtime`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use scheduler_core::counted::{CallCounts, Counted};
use scheduler_core::{BoxError, Idempotent, JobContext, Schedule, Scheduler};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectOptions, Database};

struct Noop {
    name: String,
    schedule: Schedule,
    runs: Arc<AtomicU64>,
}

#[scheduler_core::async_trait]
impl Idempotent for Noop {
    fn name(&self) -> &str {
        &self.name
    }
    fn schedule(&self) -> Schedule {
        self.schedule.clone()
    }
    async fn run(&self, _: JobContext) -> Result<(), BoxError> {
        self.runs.fetch_add(1, Ordering::Relaxed);
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

struct Instance {
    task: String,
    statements: Arc<OnceLock<CallCounts>>,
    runs: Arc<AtomicU64>,
    jobs: u64,
}

/// Starts one scheduler with `jobs` jobs on a thread of its own (current-thread runtime).
fn start(url: String, jobs: u64, metrics: bool, schedule: Schedule) -> Instance {
    let statements = Arc::new(OnceLock::new());
    let runs = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let (s, r) = (statements.clone(), runs.clone());
    std::thread::spawn(move || {
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
                    schedule: schedule.clone(),
                    runs: r.clone(),
                });
            }
            let scheduler = builder.build().unwrap();
            tx.send(task).unwrap();
            scheduler.run_until(std::future::pending()).await;
        });
    });
    let task = rx.recv().unwrap();
    Instance {
        task,
        statements,
        runs,
        jobs,
    }
}

impl Instance {
    /// Waits until the runs counter has advanced by `ticks` whole ticks.
    fn wait_ticks(&self, ticks: u64) {
        let target = (self.runs.load(Ordering::Relaxed) / self.jobs + ticks) * self.jobs;
        while self.runs.load(Ordering::Relaxed) < target {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut summary = Vec::new();
    let mut group = c.benchmark_group("runtime_per_tick");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(10));
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
        let url = rt.block_on(scheduler_benches::database());
        let instance = start(url, jobs, metrics, schedule);
        instance.wait_ticks(2); // past start-up and the first catch-up
        let mut stats = (0u64, 0u64, 0u64); // ticks, statements, cpu ns
        let label = format!(
            "{jobs}_{kind}_{}",
            if metrics { "metrics" } else { "plain" }
        );
        group.bench_function(&label, |b| {
            b.iter_custom(|iters| {
                instance.wait_ticks(0);
                let (s0, c0) = (
                    instance.statements.get().map_or(0, CallCounts::total),
                    thread_cpu_ns(&instance.task),
                );
                instance.wait_ticks(iters);
                let (s1, c1) = (
                    instance.statements.get().map_or(0, CallCounts::total),
                    thread_cpu_ns(&instance.task),
                );
                stats.0 += iters;
                stats.1 += s1 - s0;
                stats.2 += c1 - c0;
                Duration::from_nanos((c1 - c0) / iters.max(1)) * u32::try_from(iters).unwrap_or(1)
            })
        });
        summary.push((label, jobs, stats));
    }
    group.finish();
    println!(
        "\n{:>22} {:>8} {:>18} {:>20} {:>18}",
        "case", "ticks", "statements/tick", "loop CPU ms/tick", "CPU µs/job/tick"
    );
    for (label, jobs, (ticks, statements, cpu)) in summary {
        let per_tick = cpu as f64 / ticks.max(1) as f64 / 1e6;
        println!(
            "{label:>22} {ticks:>8} {:>18.2} {per_tick:>20.2} {:>18.2}",
            statements as f64 / ticks.max(1) as f64,
            per_tick * 1e3 / jobs as f64
        );
    }
    println!(
        "(one instance; every job ticks each second; statements = its store calls: takes, renewals, releases, clock reads)\n"
    );
}

criterion_group!(benches, overhead);
criterion_main!(benches);
