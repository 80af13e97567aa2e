//! The runtime embedded in the app: [`Scheduler`] and its builder.

mod backfill;
mod backoff;
mod calls;
mod dynamic;
mod engine;
mod health;
mod observe;
mod preview;
mod stats;
mod store_clock;
mod ticks;

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use backfill::{BackfillOptions, BackfillReport, Backfiller};
pub use health::{Health, HealthReport};
use observe::Observer;
pub use observe::{RunRecord, RunRecorder, names as metric_names};
pub use preview::{DstNote, UpcomingTick, WallTime, upcoming_ticks};
pub use stats::Stats;

use crate::clock::LocalClock;
use crate::error::{Error, Result};
use crate::job::{Declaration, Duplicate, Handler, Idempotent, Scope, State, StateValue};
use crate::lease::{Holder, LeaseName, Ttl, validate_name};
use crate::outcome::Outcome;
use crate::policy::{Overlap, Policy};
use crate::store::Store;
use scheduler_spec::{Timing, check_timing};
use ticks::Cadence;

/// Builds a [`Scheduler`]: `Scheduler::builder(store)`, options, jobs, [`build`](Self::build).
#[derive(Debug)]
pub struct SchedulerBuilder {
    store: Arc<dyn Store>,
    config: Config,
    jobs: Vec<JobBox>,
    state: HashMap<TypeId, StateValue>,
    meter: Option<opentelemetry::metrics::Meter>,
    recorder: Option<Arc<dyn RunRecorder>>,
    handlers: Vec<HandlerBox>,
}

/// A handler registered for dynamic schedules, by name.
#[derive(Clone)]
pub(crate) struct HandlerBox(pub(crate) String, pub(crate) Arc<dyn Handler>);

impl std::fmt::Debug for HandlerBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the shortest gap of a schedule is measured to lay its ticks out over lease
/// slots: 2000-01-01T00:00:00Z, a fixed instant, so every instance agrees.
const SLOT_ANCHOR: chrono::DateTime<chrono::Utc> =
    chrono::DateTime::from_timestamp_nanos(946_684_800_000_000_000);

/// A registered job, and the policy it was registered with, if not its own.
struct JobBox(Arc<dyn Idempotent>, Option<Policy>);

impl std::fmt::Debug for JobBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

/// The scheduler's settings; see the setters of [`SchedulerBuilder`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) node: Option<String>,
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Option<Duration>,
    pub(crate) grace: Duration,
    pub(crate) clock: LocalClock,
    pub(crate) retry_base: Duration,
    pub(crate) retry_cap: Duration,
    pub(crate) control_poll: Option<Duration>,
}

/// The settings [`SchedulerBuilder::build`] resolved: nothing left to default.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) ttl: Ttl,
    pub(crate) renew_every: Duration,
    pub(crate) grace: Duration,
    pub(crate) clock: LocalClock,
    pub(crate) retry_base: Duration,
    pub(crate) retry_cap: Duration,
    /// How often the store's controls are polled; `None`: never.
    pub(crate) control_poll: Option<Duration>,
}

/// How often the store's controls are polled unless the builder says otherwise.
pub const DEFAULT_CONTROL_POLL: Duration = Duration::from_secs(5);

impl Default for Config {
    fn default() -> Self {
        Self {
            node: None,
            ttl: Duration::from_secs(120),
            renew_every: None,
            grace: Duration::from_secs(30),
            clock: LocalClock::system(),
            retry_base: Duration::from_millis(100),
            retry_cap: Duration::from_secs(10),
            control_poll: Some(DEFAULT_CONTROL_POLL),
        }
    }
}

impl SchedulerBuilder {
    /// This instance's node id, for node-scoped jobs. Default: the hostname.
    pub fn node_id(mut self, node: impl Into<String>) -> Self {
        self.config.node = Some(node.into());
        self
    }

    /// How long a lease lasts unless renewed. Default 120 s. A crashed holder's tick
    /// is taken over at most this long after its last renewal.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// How often held leases are renewed (one statement for all of them). Default:
    /// a quarter of the ttl. Must be at most half the ttl.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.config.renew_every = Some(every);
        self
    }

    /// How long a graceful shutdown waits for running jobs before cancelling them.
    /// Default 30 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.grace = grace;
        self
    }

    /// The bounds of the backoff between retries of a failed store call. Default:
    /// from 100 ms up to 10 s, with full jitter. Whatever `cap` says, no retry waits
    /// longer than a quarter of the lease ttl (the renewal interval's default): an
    /// instance notices a store that answers again well within one lease's life.
    pub fn retry_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.config.retry_base = base.max(Duration::from_millis(1));
        self.config.retry_cap = cap.max(self.config.retry_base);
        self
    }

    /// How often the store's controls are polled (one cheap read while nothing
    /// changed): an operator's resume, trigger or dynamic schedule is picked up
    /// within this long. A store that announces its changes
    /// ([`Controls::watch`](crate::Controls::watch): PostgreSQL, directly connected)
    /// is polled when one is announced instead, and on this timer only while its
    /// watch is down, after a failed poll, or while a trigger of a job run here waits
    /// for the job's lease. Default [`DEFAULT_CONTROL_POLL`] (5 s); `None` polls never:
    /// pauses still hold (the take itself refuses a paused job), but this instance
    /// then claims no trigger, catches up nothing on a resume, registers no handler
    /// and runs no dynamic schedule. Stores without controls
    /// ([`Store::controls`]) are never polled.
    pub fn control_poll(mut self, every: Option<Duration>) -> Self {
        self.config.control_poll = every.map(|d| d.max(Duration::from_millis(10)));
        self
    }

    /// The process clock the runtime reads (tests skew it to play a node whose clock
    /// is off). Ticks are scheduled on the store's clock regardless: the runtime
    /// measures this clock's offset from it.
    pub fn clock(mut self, clock: LocalClock) -> Self {
        self.config.clock = clock;
        self
    }

    /// Hands `value` to every job: a run reads it with
    /// [`JobContext::state::<T>()`](crate::JobContext::state). One value per type; a
    /// second of the same type replaces the first.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        let value = StateValue {
            type_name: std::any::type_name::<T>(),
            value: Arc::new(value),
        };
        self.state.insert(TypeId::of::<T>(), value);
        self
    }

    /// Records OpenTelemetry metrics with `meter` (from the app's own meter provider;
    /// the library never installs a global one). The metrics are listed in
    /// [`metric_names`] and the README.
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Hands every finished run to `recorder` (a run history table, say), off the
    /// scheduler's loop.
    pub fn record_runs(mut self, recorder: Arc<dyn RunRecorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Registers a job (a job behind an `Arc` is a job too).
    pub fn job(mut self, job: impl Idempotent) -> Self {
        self.jobs.push(JobBox(Arc::new(job), None));
        self
    }

    /// Registers `handler` under `name` for dynamic schedules
    /// ([`ScheduleRow`](crate::ScheduleRow)): rows naming it are run by it, added,
    /// changed and removed at run time ([`Controls::put_schedule`]), and picked up
    /// by every instance within one control poll.
    ///
    /// [`Controls::put_schedule`]: crate::Controls::put_schedule
    pub fn handler(mut self, name: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers
            .push(HandlerBox(name.into(), Arc::new(handler)));
        self
    }

    /// Registers a job with `policy` instead of its own
    /// ([`Idempotent::policy`]): the builder's way to choose catch-up, overlap,
    /// retries and a timeout for a job written elsewhere.
    pub fn job_with_policy(mut self, job: impl Idempotent, policy: Policy) -> Self {
        self.jobs.push(JobBox(Arc::new(job), Some(policy)));
        self
    }

    /// Checks everything and builds the scheduler.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad job or node name, [`Error::DuplicateJob`],
    /// [`Error::InvalidSchedule`], [`Error::InvalidTiming`] (a jitter as long as the
    /// period, a zero window or timeout, retries that cannot fit before the next
    /// tick), [`Error::MissingState`] for a declared state type not given,
    /// [`Error::InvalidTtl`] and [`Error::TtlTooShort`].
    pub fn build(self) -> Result<Scheduler> {
        let mut config = self.config;
        let ttl = Ttl::new(config.ttl)?;
        let renew_every = config.renew_every.unwrap_or(config.ttl / 4);
        if renew_every.is_zero() || renew_every.saturating_mul(2) > config.ttl {
            return Err(Error::TtlTooShort {
                ttl: config.ttl,
                renew_every,
            });
        }
        // No retry waits past a quarter of the ttl (at least 1 ms).
        let retry_cap = config
            .retry_cap
            .min(config.ttl / 4)
            .max(Duration::from_millis(1));
        let settings = Settings {
            ttl,
            renew_every,
            grace: config.grace,
            clock: config.clock,
            retry_base: retry_cap.min(config.retry_base),
            retry_cap,
            control_poll: config.control_poll,
        };
        let node = match config.node.take() {
            Some(node) => node,
            None => gethostname::gethostname().to_string_lossy().into_owned(),
        };
        validate_name(&node)?;
        let holder_prefix: Arc<str> = Holder::prefix(&node).into();
        let state = State(Arc::new(self.state));
        let mut names = HashSet::new();
        let mut entries = Vec::with_capacity(self.jobs.len());
        let now = config.clock.now();
        for JobBox(job, policy) in self.jobs {
            let name = job.name().to_owned();
            if !names.insert(name.clone()) {
                return Err(Error::DuplicateJob { name });
            }
            let policy = policy.unwrap_or_else(|| job.policy());
            if let Some(missing) = job.state_types().iter().find(|ty| !state.has(ty)) {
                return Err(state.missing(&name, missing.name()));
            }
            entries.extend(entries_for(job, policy, &node, &holder_prefix, now)?);
        }
        let mut handlers = HashMap::new();
        for HandlerBox(name, handler) in self.handlers {
            validate_name(&name)?;
            if handlers
                .insert(name.clone(), HandlerBox(name.clone(), handler))
                .is_some()
            {
                return Err(Error::InvalidControl {
                    reason: format!(
                        "two handlers are named {name:?}; handler names must be unique in a scheduler"
                    ),
                });
            }
        }
        let stats = Stats::new(entries.iter().map(|e| &*e.name));
        let health = Health::new(self.store.clone(), renew_every);
        Ok(Scheduler {
            store: self.store,
            node: node.into(),
            settings,
            entries,
            observe: Observer::new(stats.clone(), self.meter.as_ref(), self.recorder),
            stats,
            health,
            state,
            holder_prefix,
            handlers: Arc::new(handlers),
        })
    }
}

/// The entries of `job` with `policy` on node `node`: one, or one per lease slot of
/// a job running concurrent ticks. What [`SchedulerBuilder::build`] does for each
/// job, and the engine for each dynamic schedule it picks up.
pub(crate) fn entries_for(
    job: Arc<dyn Idempotent>,
    policy: Policy,
    node: &str,
    holder_prefix: &Arc<str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<Entry>> {
    let name = job.name().to_owned();
    validate_name(&name)?;
    let mut entries = Vec::new();
    let schedule_spec = job.schedule();
    let schedule = schedule_spec
        .compile()
        .map_err(|source| Error::InvalidSchedule {
            job: name.clone(),
            cause: source,
        })?;
    let timing = Timing {
        period: schedule.shortest_gap(now),
        jitter: job.jitter(),
        window: job.catch_up(),
        ..policy.timing()
    };
    check_timing(&timing).map_err(|cause| Error::InvalidTiming {
        job: name.clone(),
        cause,
    })?;
    let scope = job.scope();
    let lease = LeaseName::for_job(&name, scope, node)?;
    let name: Arc<str> = name.into();
    // Concurrent runs: one entry per lease slot, each with its share of the
    // ticks, skipping a tick whose slot still runs the one `max` before it.
    let slots = match policy.overlap {
        Overlap::Concurrent { max: 0 } => {
            return Err(Error::InvalidTiming {
                job: name.to_string(),
                cause: scheduler_spec::TimingError::ZeroConcurrency,
            });
        }
        Overlap::Concurrent { max } => max,
        _ => 1,
    };
    // A tick's slot must be a function of the tick alone, the same on every
    // instance whenever it was built: the gap is measured from a fixed
    // instant, not from now (a cron schedule's gaps vary, with DST say).
    // Only a job with several slots needs it (a calendar walk: 100,000 dynamic
    // schedules spent most of their start-up here).
    let gap_ms = if slots > 1 {
        schedule
            .shortest_gap(SLOT_ANCHOR)
            .and_then(|gap| i64::try_from(gap.as_millis()).ok())
            .unwrap_or(1000)
    } else {
        1000
    };
    let policy_whole = policy;
    for slot in 0..slots {
        let (lease, cadence_schedule, policy) = if slots == 1 {
            (lease.clone(), schedule.clone(), policy)
        } else {
            let lease = if slot == 0 {
                lease.clone()
            } else {
                LeaseName::new(format!("{lease}\\#{slot}"))?
            };
            let policy = policy.overlap(Overlap::Skip);
            (lease, schedule.slot(slots, slot, gap_ms), policy)
        };
        entries.push(Entry {
            lease,
            slot,
            job_policy: policy_whole,
            name: Arc::clone(&name),
            schedule: schedule.clone(),
            cadence: Cadence {
                schedule: cadence_schedule,
                catch_up: job.catch_up(),
                jitter: job.jitter(),
                holder_prefix: Arc::clone(holder_prefix),
                policy,
            },
            schedule_text: schedule_spec.to_string(),
            scope,
            duplicate: job.duplicate(),
            job: Arc::clone(&job),
        });
    }
    Ok(entries)
}

/// A job as [`Scheduler::jobs`] describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's name.
    pub name: String,
    /// Its schedule ([`Display`](std::fmt::Display): `every 30s`,
    /// `cron 0 0 9 * * Mon-Fri in Europe/Berlin`); [`upcoming_ticks`] lists the next.
    pub schedule: crate::Schedule,
    /// Once per tick in the cluster, or per node.
    pub scope: Scope,
    /// Its catch-up, overlap, retry and timeout policy.
    pub policy: Policy,
    /// Whether it declared it needs fencing.
    pub duplicate: Duplicate,
    /// Its lease (on this node, for a node-scoped job).
    pub lease: LeaseName,
}

/// A registered job, checked.
pub(crate) struct Entry {
    pub(crate) job: Arc<dyn Idempotent>,
    /// The job's whole schedule (a slot's cadence has only its share of the ticks,
    /// [`Overlap::Concurrent`](crate::Overlap::Concurrent)).
    pub(crate) schedule: crate::schedule::Compiled,
    /// Its lease slot (0 unless the job runs concurrent ticks).
    pub(crate) slot: u32,
    /// The job's policy as registered (a slot's cadence has its own).
    pub(crate) job_policy: Policy,
    pub(crate) name: Arc<str>,
    pub(crate) lease: LeaseName,
    pub(crate) cadence: Cadence,
    pub(crate) schedule_text: String,
    pub(crate) scope: Scope,
    pub(crate) duplicate: Duplicate,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("schedule", &self.schedule_text)
            .field("scope", &self.scope)
            .field("duplicate", &self.duplicate)
            .finish_non_exhaustive()
    }
}

/// The scheduler: runs each job's ticks once per tick across all instances sharing
/// the store (or once per node), holding a lease for each run.
///
/// ```
/// use std::time::Duration;
/// use scheduler_core::{BoxError, Idempotent, JobContext, MemoryStore, Schedule, Scheduler};
///
/// struct Hello;
/// #[scheduler_core::async_trait]
/// impl Idempotent for Hello {
///     fn name(&self) -> &str { "hello" }
///     fn schedule(&self) -> Schedule { Schedule::every(Duration::from_secs(1)) }
///     async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
///         println!("hello from tick {}", ctx.tick());
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> scheduler_core::Result<()> {
/// let scheduler = Scheduler::builder(MemoryStore::new()).node_id("node-a").job(Hello).build()?;
/// scheduler.run_until(tokio::time::sleep(Duration::from_millis(1500))).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Scheduler {
    store: Arc<dyn Store>,
    node: Arc<str>,
    settings: Settings,
    entries: Vec<Entry>,
    stats: Stats,
    observe: Observer,
    health: Health,
    state: State,
    /// What this instance's holders start with.
    holder_prefix: Arc<str>,
    /// The handlers of dynamic schedules, by name.
    handlers: Arc<HashMap<String, HandlerBox>>,
}

impl Scheduler {
    /// Starts building a scheduler on `store` (a store behind an `Arc`, shared with
    /// the app or another scheduler, is a store too).
    pub fn builder(store: impl Store) -> SchedulerBuilder {
        SchedulerBuilder {
            store: Arc::new(store),
            config: Config::default(),
            jobs: Vec::new(),
            state: HashMap::new(),
            meter: None,
            recorder: None,
            handlers: Vec::new(),
        }
    }

    /// The jobs that declared they need fencing ([`Duplicate::NeedsFencing`]).
    pub fn declarations(&self) -> Vec<Declaration> {
        self.entries
            .iter()
            .filter(|e| e.duplicate == Duplicate::NeedsFencing)
            // One declaration per job, not per lease slot.
            .filter(|e| e.slot == 0)
            .map(|e| Declaration {
                job: e.name.to_string(),
                lease: e.lease.clone(),
                scope: e.scope,
                schedule: e.schedule_text.clone(),
            })
            .collect()
    }

    /// What a dashboard shows of each job registered in code: its name, schedule
    /// (in words and in its zone), scope, policy and fencing declaration. One entry
    /// per job (not per lease slot), in registration order. Dynamic schedules are
    /// rows: [`Controls::schedules`](crate::Controls::schedules).
    pub fn jobs(&self) -> Vec<JobInfo> {
        self.entries
            .iter()
            .filter(|e| e.slot == 0)
            .map(|e| JobInfo {
                name: e.name.to_string(),
                schedule: e.job.schedule(),
                scope: e.scope,
                policy: e.job_policy,
                duplicate: e.duplicate,
                lease: e.lease.clone(),
            })
            .collect()
    }

    /// This instance's node id.
    pub fn node_id(&self) -> &str {
        &self.node
    }

    /// Tick outcome counters, live while the scheduler runs.
    pub fn stats(&self) -> Stats {
        self.stats.clone()
    }

    /// A handle for the app's readiness probe.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Runs until `shutdown` completes, then shuts down gracefully: takes no new
    /// ticks, lets running jobs finish within the grace period, cancels the rest, and
    /// releases every lease at once so other instances can take the next ticks
    /// without waiting for expiry.
    ///
    /// Store failures are logged and retried with backoff; this never returns early
    /// and never panics. Cancel safety: dropping the future stops everything at once,
    /// like a crash: running jobs are aborted and their leases are left to expire.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        engine::Engine::new(self).run(shutdown).await;
    }
}

/// One attempt at a tick, as a run task does it: waits until `begin_at` (unless the
/// attempt's token fires first: [`Interrupted`](crate::Interrupted)), runs the job,
/// and under a `timeout` cancels the attempt's own token when it runs out (not the
/// run's: a timed-out run is a failed run, not an interrupted one), then drops it if
/// it has not ended within `grace`: [`TimedOut`](crate::TimedOut).
pub(crate) async fn run_attempt(
    job: Arc<dyn Idempotent>,
    ctx: crate::JobContext,
    begin_at: tokio::time::Instant,
    timeout: Option<Duration>,
    grace: Duration,
) -> std::result::Result<(), crate::BoxError> {
    if begin_at > tokio::time::Instant::now() {
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(crate::Interrupted.into()),
            () = tokio::time::sleep_until(begin_at) => {}
        }
    }
    let attempt_cancel = ctx.cancel.clone();
    let run = job.run(ctx);
    let Some(timeout) = timeout else {
        return run.await;
    };
    tokio::pin!(run);
    match tokio::time::timeout(timeout, &mut run).await {
        Ok(result) => result,
        Err(_) => {
            attempt_cancel.cancel();
            // Whatever it returns now, it ran out of time; past the grace it is
            // dropped.
            let _ = tokio::time::timeout(grace, &mut run).await;
            Err(crate::TimedOut { timeout }.into())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::{BoxError, JobContext, MemoryStore, Schedule};

    struct Nightly;

    #[async_trait::async_trait]
    impl Idempotent for Nightly {
        fn name(&self) -> &str {
            "nightly"
        }
        fn schedule(&self) -> Schedule {
            Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin")
        }
        fn policy(&self) -> Policy {
            Policy::default().overlap(Overlap::Concurrent { max: 2 })
        }
        async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
            Ok(())
        }
    }

    /// The lease of each tick, as a scheduler built at `built` lays them out.
    fn leases(built: &str, ticks: &[DateTime<Utc>]) -> Vec<String> {
        let at: DateTime<Utc> = built.parse().unwrap();
        let scheduler = Scheduler::builder(MemoryStore::new())
            .node_id("n")
            .clock(LocalClock::starting_at(at))
            .job(Nightly)
            .build()
            .unwrap();
        ticks
            .iter()
            .map(|t| {
                let before = *t - chrono::TimeDelta::seconds(1);
                let entry = scheduler
                    .entries
                    .iter()
                    .find(|e| {
                        e.cadence
                            .schedule
                            .next_after(before)
                            .is_some_and(|n| n.at() == *t)
                    })
                    .unwrap();
                entry.lease.to_string()
            })
            .collect()
    }

    #[test]
    fn instances_built_at_any_time_put_a_tick_in_the_same_lease_slot() {
        // Built in January, or a month before a spring-forward (whose 23.5 h gap is
        // then among the next ticks): the same slot for every tick, so no tick runs
        // under two leases. Slots used to be laid out from the build time's gaps.
        let ticks: Vec<DateTime<Utc>> = (0..6)
            .map(|d| format!("2026-04-{:02}T00:30:00Z", 10 + d).parse().unwrap())
            .collect();
        assert_eq!(
            leases("2026-01-10T12:00:00Z", &ticks),
            leases("2026-03-01T12:00:00Z", &ticks)
        );
    }
}
