//! What the runtime reports: tick outcome counters ([`Stats`]), OpenTelemetry
//! metrics when the app passes a meter, and a record of each run for an optional
//! [`RunRecorder`] (the run history).
//!
//! The library never installs a global meter provider: the app hands a
//! [`Meter`](opentelemetry::metrics::Meter) to
//! [`SchedulerBuilder::meter`](crate::SchedulerBuilder::meter). Every metric is listed
//! in the README; names and units follow OpenTelemetry's conventions (dot-separated,
//! UCUM units, `{…}` annotations for counts).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};

use super::decide::TickEvent;
use super::stats::Stats;
use crate::error::BoxError;
use crate::lease::{FencingToken, Holder, Tick};
use crate::outcome::Outcome;

/// Metric names, as exported (Prometheus turns dots into `_` and adds unit suffixes).
pub mod names {
    /// Counter of tick outcomes; attributes `job.name`, `outcome`
    /// ([`Outcome::as_str`](crate::Outcome::as_str): `succeeded`, `failed`,
    /// `held_elsewhere`, `skipped_overlap`, `missed`, `lease_lost`, `coalesced`,
    /// `retried`, `timed_out`, `cancelled_by_newer`, `backfilled`, `paused`).
    pub const TICK_OUTCOMES: &str = "scheduler.tick.outcomes";
    /// Histogram of run durations in seconds; attributes `job.name`, `outcome` (as the
    /// run history records it: `succeeded`, `failed`, `cancelled`, `retried`,
    /// `timed_out`, `cancelled_by_newer`).
    pub const RUN_DURATION: &str = "scheduler.run.duration";
    /// Histogram of fire lateness (start minus scheduled tick, store clock) in seconds; attribute `job.name`.
    pub const RUN_LATENESS: &str = "scheduler.run.lateness";
    /// Gauge: Unix time in seconds of each job's last successful run; attribute `job.name`.
    pub const LAST_SUCCESS: &str = "scheduler.run.last_success";
    /// Up-down counter of leases this instance holds.
    pub const LEASES_HELD: &str = "scheduler.leases.held";
    /// Counter of lease renewals; attribute `result` (`renewed`, `lost`).
    pub const RENEWALS: &str = "scheduler.lease.renewals";
    /// Histogram of store call durations in seconds; attributes `operation`
    /// (`take`, `renew`, `release`, `now`) and `result` (`ok`, `error`).
    pub const STORE_DURATION: &str = "scheduler.store.duration";
    /// Counter of failed store calls; attribute `operation`.
    pub const STORE_ERRORS: &str = "scheduler.store.errors";
    /// Gauge: the store's clock minus this instance's clock, in seconds.
    pub const CLOCK_OFFSET: &str = "scheduler.clock.offset";
}

/// One finished run, as handed to a [`RunRecorder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The job.
    pub job: String,
    /// The tick it ran.
    pub tick: Tick,
    /// The node it ran on.
    pub node: String,
    /// The lease's holder for this run.
    pub holder: Holder,
    /// The run's fencing token.
    pub token: FencingToken,
    /// When it started, on the store's clock.
    pub started: DateTime<Utc>,
    /// When it ended, on the store's clock.
    pub finished: DateTime<Utc>,
    /// How it ended.
    pub outcome: Outcome,
    /// The error's text, if it failed.
    pub error: Option<String>,
    /// Whether the lease was lost while it ran.
    pub lease_lost: bool,
    /// Which attempt at the tick it was: 1, then 2 for the first retry, …
    pub attempt: u32,
}

/// A run's end as the loop sees it, borrowed: what a [`RunRecord`] says, made one
/// only for a [`RunRecorder`].
pub(crate) struct RunEnded<'a> {
    pub(crate) job: &'a str,
    pub(crate) node: &'a str,
    pub(crate) tick: Tick,
    pub(crate) holder: &'a Holder,
    pub(crate) token: FencingToken,
    pub(crate) started: DateTime<Utc>,
    pub(crate) finished: DateTime<Utc>,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<&'a str>,
    pub(crate) lease_lost: bool,
    pub(crate) attempt: u32,
}

impl RunEnded<'_> {
    fn to_record(&self) -> RunRecord {
        RunRecord {
            job: self.job.to_owned(),
            tick: self.tick,
            node: self.node.to_owned(),
            holder: self.holder.clone(),
            token: self.token,
            started: self.started,
            finished: self.finished,
            outcome: self.outcome,
            error: self.error.map(str::to_owned),
            lease_lost: self.lease_lost,
            attempt: self.attempt,
        }
    }
}

/// Receives every finished run (the run history of the store crates implements it).
///
/// Called off the scheduler's loop, once per run end; a failure is logged and the run
/// is not recorded (the scheduler does not retry it).
#[async_trait]
pub trait RunRecorder: Send + Sync + fmt::Debug + 'static {
    /// Records one run.
    ///
    /// # Errors
    /// Whatever stopped it; the runtime logs it.
    async fn record(&self, run: &RunRecord) -> Result<(), BoxError>;
}

#[derive(Debug)]
struct Instruments {
    outcomes: Counter<u64>,
    run_duration: Histogram<f64>,
    lateness: Histogram<f64>,
    last_success: Gauge<f64>,
    held: UpDownCounter<i64>,
    renewals: Counter<u64>,
    store_duration: Histogram<f64>,
    store_errors: Counter<u64>,
    clock_offset: Gauge<f64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        // Seconds-scale buckets from 1 ms to 10 min: runs, lateness and statements.
        let buckets = vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0, 300.0, 600.0,
        ];
        Self {
            outcomes: meter
                .u64_counter(names::TICK_OUTCOMES)
                .with_unit("{tick}")
                .with_description("Tick attempts by outcome: succeeded, failed, held_elsewhere, skipped_overlap, missed, lease_lost, coalesced, retried, timed_out, cancelled_by_newer, backfilled, paused")
                .build(),
            run_duration: meter
                .f64_histogram(names::RUN_DURATION)
                .with_unit("s")
                .with_description("How long runs took")
                .with_boundaries(buckets.clone())
                .build(),
            lateness: meter
                .f64_histogram(names::RUN_LATENESS)
                .with_unit("s")
                .with_description("Run start minus its scheduled tick, on the store's clock")
                .with_boundaries(buckets.clone())
                .build(),
            last_success: meter
                .f64_gauge(names::LAST_SUCCESS)
                .with_unit("s")
                .with_description("Unix time of the job's last successful run")
                .build(),
            held: meter
                .i64_up_down_counter(names::LEASES_HELD)
                .with_unit("{lease}")
                .with_description("Leases this instance holds")
                .build(),
            renewals: meter
                .u64_counter(names::RENEWALS)
                .with_unit("{lease}")
                .with_description("Lease renewals by result: renewed or lost")
                .build(),
            store_duration: meter
                .f64_histogram(names::STORE_DURATION)
                .with_unit("s")
                .with_description("Lease store calls (one statement each for SQL stores)")
                .with_boundaries(buckets)
                .build(),
            store_errors: meter
                .u64_counter(names::STORE_ERRORS)
                .with_unit("{error}")
                .with_description("Failed lease store calls")
                .build(),
            clock_offset: meter
                .f64_gauge(names::CLOCK_OFFSET)
                .with_unit("s")
                .with_description("The store's clock minus this instance's clock")
                .build(),
        }
    }
}

/// The runtime's one place to report to: stats always, metrics and run records when
/// configured.
#[derive(Debug, Clone)]
pub(crate) struct Observer {
    pub(crate) stats: Stats,
    metrics: Option<Arc<Instruments>>,
    recorder: Option<Arc<dyn RunRecorder>>,
}

/// The attribute naming the job. Not `job`: Prometheus gives every scraped target a
/// `job` label of its own, which would clash (it becomes `job_name` there).
const JOB: &str = "job.name";

fn job_attr(job: &str) -> KeyValue {
    KeyValue::new(JOB, job.to_owned())
}

impl Observer {
    pub(crate) fn new(
        stats: Stats,
        meter: Option<&Meter>,
        recorder: Option<Arc<dyn RunRecorder>>,
    ) -> Self {
        Self {
            stats,
            metrics: meter.map(|m| Arc::new(Instruments::new(m))),
            recorder,
        }
    }

    pub(crate) fn outcome(&self, job: &str, outcome: Outcome) {
        self.stats.add(job, outcome);
        if let Some(m) = &self.metrics {
            m.outcomes.add(
                1,
                &[job_attr(job), KeyValue::new("outcome", outcome.as_str())],
            );
        }
    }

    /// The jobs that need fencing, declared at start-up.
    pub(crate) fn declare(&self, declarations: &[crate::job::Declaration]) {
        for d in declarations {
            tracing::info!(job = %d.job, lease = %d.lease, scope = %d.scope, schedule = %d.schedule,
                "job needs fencing: it gets a fencing token and is cancelled if its lease is lost");
        }
    }

    /// Something happened to a tick of `job` before any run: logged and counted.
    ///
    /// During a store outage (`outage`) ticks passed over are counted as ever but
    /// logged at debug only, the outage's end summing them up in one line (a line per
    /// job per second would drown the outage's own). Returns how many ticks the
    /// event passed over.
    pub(crate) fn tick_event(&self, job: &str, event: &TickEvent, outage: bool) -> u64 {
        macro_rules! passed_over {
            ($($arg:tt)+) => {
                if outage {
                    tracing::debug!($($arg)+);
                } else {
                    tracing::warn!($($arg)+);
                }
            };
        }
        let passed = match event {
            TickEvent::Missed { count, .. } | TickEvent::Coalesced { count, .. } => *count,
            TickEvent::WonTooLate { .. } => 1,
            _ => 0,
        };
        match event {
            TickEvent::Missed {
                tick,
                count,
                superseded: true,
            } => {
                for _ in 0..*count {
                    self.outcome(job, Outcome::Missed);
                }
                passed_over!(job, missed = count, last = %tick,
                    "ticks missed: superseded before they could be attempted");
            }
            TickEvent::Coalesced { tick, count } => {
                for _ in 0..*count {
                    self.outcome(job, Outcome::Coalesced);
                }
                passed_over!(job, coalesced = count, last = %tick,
                    "ticks passed over: a later tick came due before they could start, and runs in their place");
            }
            TickEvent::Missed { tick, .. } => {
                self.outcome(job, Outcome::Missed);
                passed_over!(job, tick = %tick, "tick missed: its catch-up window closed");
            }
            TickEvent::SkippedOverlap { tick, running } => {
                self.outcome(job, Outcome::SkippedOverlap);
                tracing::info!(job, tick = %tick, running = %running,
                    "tick skipped: the previous run still holds the lease");
            }
            TickEvent::HeldElsewhere { tick } => {
                self.outcome(job, Outcome::HeldElsewhere);
                tracing::debug!(job, tick = %tick, "tick held elsewhere");
            }
            TickEvent::Abandoned { tick, holder } => {
                if outage {
                    tracing::debug!(job, tick = %tick, holder = %holder,
                        "tick dropped after an unanswered take: releasing its holder in case the take was applied");
                } else {
                    tracing::info!(job, tick = %tick, holder = %holder,
                        "tick dropped after an unanswered take: releasing its holder in case the take was applied");
                }
            }
            TickEvent::CancelledByNewer { tick, newer } => {
                tracing::info!(job, tick = %tick, newer = %newer,
                    "run cancelled: a newer tick came due and the newest tick wins");
            }
            TickEvent::AskCancel { newer } => {
                tracing::info!(job, newer = %newer,
                    "an older tick runs elsewhere: asking its holder to stop, the newest tick wins");
            }
            TickEvent::Paused { tick } => {
                self.outcome(job, Outcome::Paused);
                tracing::debug!(job, tick = %tick, "tick not run: the job is paused");
            }
            TickEvent::WonTooLate { tick, late, .. } => {
                self.outcome(job, Outcome::Missed);
                passed_over!(job, tick = %tick, late_ms = late.num_milliseconds(),
                    "tick missed: its take was answered after its catch-up window closed; released unrun");
            }
        }
        passed
    }

    /// A run ended as `run` says: logged, counted, measured and recorded.
    pub(crate) fn run_ended(&self, run: &RunEnded<'_>) {
        let job = run.job;
        match (&run.error, run.lease_lost) {
            (None, false) => {
                self.outcome(job, Outcome::Succeeded);
                tracing::debug!(job, tick = %run.tick, "run finished");
            }
            (None, true) => {
                self.outcome(job, Outcome::Succeeded);
                tracing::warn!(job, tick = %run.tick,
                    "run finished after its lease was lost; the tick may have run twice");
            }
            (Some(error), _) if run.outcome == Outcome::Cancelled => {
                self.outcome(job, Outcome::Failed);
                tracing::warn!(job, tick = %run.tick, error = %error,
                    "run interrupted; the tick may be retried");
            }
            (Some(error), _) if run.outcome == Outcome::Retried => {
                self.outcome(job, Outcome::Retried);
                tracing::warn!(job, tick = %run.tick, attempt = run.attempt, error = %error,
                    "run failed; retrying under the same lease");
            }
            (_, _) if run.outcome == Outcome::CancelledByNewer => {
                self.outcome(job, Outcome::CancelledByNewer);
                tracing::info!(job, tick = %run.tick, "run ended after a newer tick cancelled it");
            }
            (Some(error), _) if run.outcome == Outcome::TimedOut => {
                self.outcome(job, Outcome::TimedOut);
                tracing::error!(job, tick = %run.tick, attempt = run.attempt, error = %error,
                    "run timed out");
            }
            (Some(error), _) => {
                self.outcome(job, Outcome::Failed);
                tracing::error!(job, tick = %run.tick, error = %error, "run failed");
            }
        }
        self.ended(run);
    }

    pub(crate) fn started(&self, job: &str, lateness: Duration) {
        if let Some(m) = &self.metrics {
            m.lateness.record(lateness.as_secs_f64(), &[job_attr(job)]);
            m.held.add(1, &[]);
        }
    }

    /// A run ended: metrics now, the record off the loop (built only for a
    /// recorder: its owned strings were two allocations per run otherwise).
    fn ended(&self, run: &RunEnded<'_>) {
        if let Some(m) = &self.metrics {
            let took = (run.finished - run.started).to_std().unwrap_or_default();
            let attrs = [
                job_attr(run.job),
                KeyValue::new("outcome", run.outcome.as_str()),
            ];
            m.run_duration.record(took.as_secs_f64(), &attrs);
            if run.outcome == Outcome::Succeeded {
                let at = run.finished.timestamp_micros() as f64 / 1e6;
                m.last_success.record(at, &[job_attr(run.job)]);
            }
            if run.outcome != Outcome::Retried {
                // A retried run keeps its lease.
                m.held.add(-1, &[]);
            }
        }
        if let Some(recorder) = &self.recorder {
            let recorder = recorder.clone();
            let run = run.to_record();
            tokio::spawn(async move {
                if let Err(err) = recorder.record(&run).await {
                    tracing::warn!(job = %run.job, tick = %run.tick, error = %err, "could not record the run in the history");
                }
            });
        }
    }

    pub(crate) fn renewals(&self, renewed: usize, lost: usize) {
        if let Some(m) = &self.metrics {
            m.renewals
                .add(renewed as u64, &[KeyValue::new("result", "renewed")]);
            if lost > 0 {
                m.renewals
                    .add(lost as u64, &[KeyValue::new("result", "lost")]);
            }
        }
    }

    /// One store call took `took` and succeeded (`ok`) or failed.
    pub(crate) fn store_call(&self, operation: &'static str, took: Duration, ok: bool) {
        if let Some(m) = &self.metrics {
            let result = if ok { "ok" } else { "error" };
            m.store_duration.record(
                took.as_secs_f64(),
                &[
                    KeyValue::new("operation", operation),
                    KeyValue::new("result", result),
                ],
            );
            if !ok {
                m.store_errors
                    .add(1, &[KeyValue::new("operation", operation)]);
            }
        }
    }

    pub(crate) fn clock_offset(&self, seconds: f64) {
        if let Some(m) = &self.metrics {
            m.clock_offset.record(seconds, &[]);
        }
    }
}
