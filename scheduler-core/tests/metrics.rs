#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The OpenTelemetry metrics the runtime records, read back through the SDK's
//! in-memory exporter after a scripted run on the in-memory store, on paused time:
//! every exported count is the one the script implies, exactly.
//!
//! The meter provider is built here and handed to the scheduler; nothing global is
//! installed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use scheduler_core::{
    BoxError, Duplicate, Idempotent, JobContext, LeaseName, LocalClock, MemoryStore, Outcome,
    Schedule, Scheduler, Ttl, metric_names,
};
use tokio::time::Instant;

/// A job that works for `work` (or until cancelled), then succeeds or fails.
struct Probe {
    name: &'static str,
    every: Duration,
    work: Duration,
    fail: bool,
    duplicate: Duplicate,
}

impl Probe {
    fn new(name: &'static str, every_ms: u64, work_ms: u64) -> Self {
        Self {
            name,
            every: Duration::from_millis(every_ms),
            work: Duration::from_millis(work_ms),
            fail: false,
            duplicate: Duplicate::Harmless,
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
    fn duplicate(&self) -> Duplicate {
        self.duplicate
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        tokio::select! {
            () = tokio::time::sleep(self.work) => {}
            () = ctx.cancellation().cancelled() => return Err("cancelled: the lease was lost".into()),
        }
        if self.fail {
            return Err("told to fail".into());
        }
        Ok(())
    }
}

type Attrs = BTreeMap<String, String>;

/// One exported data point, whatever the instrument's number type.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    Sum(f64),
    Gauge(f64),
    Histogram { count: u64, sum: f64 },
}

/// The last cumulative export, flattened: metric name → (unit, points).
#[derive(Debug)]
struct Exported(BTreeMap<String, (String, Vec<(Attrs, Point)>)>);

impl Exported {
    fn from(rm: &ResourceMetrics) -> Self {
        let mut out = BTreeMap::new();
        for scope in rm.scope_metrics() {
            for m in scope.metrics() {
                let points = match m.data() {
                    AggregatedMetrics::F64(d) => flatten(d, |v| v),
                    AggregatedMetrics::U64(d) => flatten(d, |v| v as f64),
                    AggregatedMetrics::I64(d) => flatten(d, |v| v as f64),
                };
                out.insert(m.name().to_owned(), (m.unit().to_owned(), points));
            }
        }
        Self(out)
    }

    fn unit(&self, name: &str) -> &str {
        &self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("{name} not exported"))
            .0
    }

    fn points(&self, name: &str) -> &[(Attrs, Point)] {
        &self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("{name} not exported"))
            .1
    }

    /// The points of `name`, keyed by the values of attributes `keys` (in that order).
    fn by(&self, name: &str, keys: &[&str]) -> BTreeMap<Vec<String>, Point> {
        let mut out = BTreeMap::new();
        for (attrs, point) in self.points(name) {
            assert_eq!(
                attrs.keys().map(String::as_str).collect::<Vec<_>>(),
                {
                    let mut k = keys.to_vec();
                    k.sort_unstable();
                    k
                },
                "{name}: unexpected attributes {attrs:?}"
            );
            let key = keys.iter().map(|k| attrs[*k].clone()).collect();
            assert!(
                out.insert(key, *point).is_none(),
                "{name}: duplicate series"
            );
        }
        out
    }
}

fn flatten<T: Copy>(data: &MetricData<T>, f: impl Fn(T) -> f64) -> Vec<(Attrs, Point)> {
    fn attrs<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Attrs {
        kvs.map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect()
    }
    match data {
        MetricData::Sum(s) => s
            .data_points()
            .map(|p| (attrs(p.attributes()), Point::Sum(f(p.value()))))
            .collect(),
        MetricData::Gauge(g) => g
            .data_points()
            .map(|p| (attrs(p.attributes()), Point::Gauge(f(p.value()))))
            .collect(),
        MetricData::Histogram(h) => h
            .data_points()
            .map(|p| {
                let point = Point::Histogram {
                    count: p.count(),
                    sum: f(p.sum()),
                };
                (attrs(p.attributes()), point)
            })
            .collect(),
        MetricData::ExponentialHistogram(_) => panic!("no exponential histograms expected"),
    }
}

fn key(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

fn histogram(point: Option<&Point>) -> (u64, f64) {
    match point {
        Some(Point::Histogram { count, sum }) => (*count, *sum),
        other => panic!("not a histogram point: {other:?}"),
    }
}

/// Equal within a millionth, or within 0.02 % for durations: they are measured on
/// the runtime's estimate of the store's clock, which runs up to 100 millionths slow
/// between samples (it errs late, never early).
fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() < 1e-6f64.max(expected.abs() * 2e-4),
        "{what}: {actual} != {expected}"
    );
}

/// A whole minute, so every job's tick grid (1 s, 2 s, 3 s, 60 s) starts on it.
const BASE: i64 = 1_699_999_980;

/// The script, in seconds after `BASE` (the scheduler starts at 0.5, so the tick of
/// 0 of each job is caught up at once, 0.5 s late; renewals every 1 s from 1.5):
///
/// | job      | every | work  | what happens                                              |
/// |----------|-------|-------|-----------------------------------------------------------|
/// | steady   | 2 s   | 0.1 s | ticks 0, 2, 4, 6, 8 run                                   |
/// | failing  | 3 s   | 50 ms | ticks 0, 3, 6 run and return an error                     |
/// | slow     | 1 s   | 2.2 s | ticks 0, 3, 6 run; 1, 2, 4, 5, 7, 8 skipped (overlap)     |
/// | fenced   | 60 s  | 5 s   | lease stolen at 1.0, lost at the 1.5 renewal, cancelled   |
/// | harmless | 60 s  | 5 s   | lease stolen at 1.0, lost at 1.5, finishes at 5.5         |
///
/// Shutdown at 8.25, when nothing runs.
#[tokio::test(start_paused = true)]
async fn the_exported_metrics_match_a_scripted_run_exactly() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();

    let start = DateTime::<Utc>::from_timestamp(BASE, 500_000_000).expect("time");
    let clock = LocalClock::starting_at(start);
    let store = Arc::new(MemoryStore::with_clock(clock));
    // As if the job ran before: start-up catches up the tick before it.
    store.set_jobs_known(true);
    let mut failing = Probe::new("failing", 3_000, 50);
    failing.fail = true;
    let mut fenced = Probe::new("fenced", 60_000, 5_000);
    fenced.duplicate = Duplicate::NeedsFencing;
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .clock(clock)
        .lease_ttl(Duration::from_secs(4))
        .meter(provider.meter("scheduler"))
        .job(Probe::new("steady", 2_000, 100))
        .job(failing)
        .job(Probe::new("slow", 1_000, 2_200))
        .job(fenced)
        .job(Probe::new("harmless", 60_000, 5_000))
        .build()
        .expect("build");
    let stats = scheduler.stats();

    let t0 = Instant::now();
    let script = {
        let store = store.clone();
        async move {
            tokio::time::sleep_until(t0 + Duration::from_millis(500)).await;
            let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
            for name in ["fenced", "harmless"] {
                let name = LeaseName::new(name).expect("name");
                assert!(store.steal(&name, ttl).is_some(), "{name} was not taken");
            }
            tokio::time::sleep_until(t0 + Duration::from_millis(7_750)).await;
        }
    };
    scheduler.run_until(script).await;
    let store_calls = store.calls();

    provider.force_flush().expect("flush");
    let exports = exporter.get_finished_metrics().expect("exports");
    let last = exports.last().expect("at least one export");
    let m = Exported::from(last);

    // Tick outcomes: exactly the script's, and nothing else.
    let expected: BTreeMap<Vec<String>, u64> = [
        (["steady", "succeeded"], 5),
        (["failing", "failed"], 3),
        (["slow", "succeeded"], 3),
        (["slow", "skipped_overlap"], 6),
        (["fenced", "lease_lost"], 1),
        (["fenced", "failed"], 1),
        (["harmless", "lease_lost"], 1),
        (["harmless", "succeeded"], 1),
    ]
    .into_iter()
    .map(|(k, v)| (key(&k), v))
    .collect();
    let outcomes: BTreeMap<Vec<String>, u64> = m
        .by(metric_names::TICK_OUTCOMES, &["job.name", "outcome"])
        .into_iter()
        .map(|(k, p)| match p {
            Point::Sum(v) => (k, v as u64),
            other => panic!("tick outcomes are a counter: {other:?}"),
        })
        .collect();
    assert_eq!(outcomes, expected);
    assert_eq!(m.unit(metric_names::TICK_OUTCOMES), "{tick}");
    // ... and they agree with the scheduler's own counters.
    for job in ["steady", "failing", "slow", "fenced", "harmless"] {
        for &outcome in Outcome::ALL {
            let exported = outcomes
                .get(&key(&[job, outcome.as_str()]))
                .copied()
                .unwrap_or(0);
            assert_eq!(stats.count(job, outcome), exported, "{job} {outcome:?}");
        }
    }

    // Run durations by job and how the run ended (paused time: exact sums).
    let durations = m.by(metric_names::RUN_DURATION, &["job.name", "outcome"]);
    let expected_durations = [
        (["steady", "succeeded"], 5, 0.5),
        (["failing", "failed"], 3, 0.15),
        (["slow", "succeeded"], 3, 6.6),
        (["fenced", "cancelled"], 1, 1.0),
        (["harmless", "succeeded"], 1, 5.0),
    ];
    assert_eq!(durations.len(), expected_durations.len(), "{durations:?}");
    for (k, count, sum) in expected_durations {
        let (c, s) = histogram(durations.get(&key(&k)));
        assert_eq!(c, count, "run duration count of {k:?}");
        assert_close(s, sum, &format!("run duration sum of {k:?}"));
    }
    assert_eq!(m.unit(metric_names::RUN_DURATION), "s");

    // Lateness: one per started run; only the caught-up tick of 0 was late (0.5 s).
    let lateness = m.by(metric_names::RUN_LATENESS, &["job.name"]);
    let expected_lateness = [
        ("steady", 5),
        ("failing", 3),
        ("slow", 3),
        ("fenced", 1),
        ("harmless", 1),
    ];
    assert_eq!(lateness.len(), expected_lateness.len(), "{lateness:?}");
    for (job, count) in expected_lateness {
        let (c, s) = histogram(lateness.get(&key(&[job])));
        assert_eq!(c, count, "lateness count of {job}");
        assert_close(s, 0.5, &format!("lateness sum of {job}"));
    }

    // Last success: only the jobs that succeeded, at the end of their last run.
    let last_success = m.by(metric_names::LAST_SUCCESS, &["job.name"]);
    let expected_last = [("steady", 8.1), ("slow", 8.2), ("harmless", 5.5)];
    assert_eq!(last_success.len(), expected_last.len(), "{last_success:?}");
    for (job, after_base) in expected_last {
        match last_success.get(&key(&[job])) {
            Some(Point::Gauge(at)) => {
                assert_close(
                    *at,
                    BASE as f64 + after_base,
                    &format!("last success of {job}"),
                );
            }
            other => panic!("last success of {job}: {other:?}"),
        }
    }

    // Leases held: back to zero once every run has ended.
    assert_eq!(
        m.points(metric_names::LEASES_HELD),
        &[(Attrs::new(), Point::Sum(0.0))]
    );

    // Renewals: the two stolen leases were lost at 1.5. Renewed: the slow job's lease
    // at 1.5, 2.5 (tick 0), 3.5, 4.5 (tick 3), 6.5, 7.5 (tick 6); nothing else is
    // held at a renewal.
    let renewals = m.by(metric_names::RENEWALS, &["result"]);
    assert_eq!(
        renewals,
        BTreeMap::from([
            (key(&["lost"]), Point::Sum(2.0)),
            (key(&["renewed"]), Point::Sum(6.0)),
        ])
    );

    // Store calls: every call the store answered is timed once, none failed.
    let store_durations = m.by(metric_names::STORE_DURATION, &["operation", "result"]);
    let timed: u64 = store_durations.values().map(|p| histogram(Some(p)).0).sum();
    assert_eq!(timed, store_calls, "{store_durations:?}");
    for op in ["take", "renew", "release", "now"] {
        assert!(
            histogram(store_durations.get(&key(&[op, "ok"]))).0 > 0,
            "{op}"
        );
    }
    assert!(
        store_durations.keys().all(|k| k[1] == "ok"),
        "{store_durations:?}"
    );
    assert!(
        !m.0.contains_key(metric_names::STORE_ERRORS),
        "no store call failed"
    );

    // The store's clock is the scheduler's: no offset.
    assert_eq!(
        m.points(metric_names::CLOCK_OFFSET),
        &[(Attrs::new(), Point::Gauge(0.0))]
    );

    provider.shutdown().expect("shutdown");
}
