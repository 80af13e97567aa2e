//! [`SchedulerBuilder`]: the options, the jobs, and [`build`](SchedulerBuilder::build),
//! which checks them all before anything runs and lays each job out over its
//! lease slots ([`entries_for`](super::entries_for)).

use super::*;

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
    pub(crate) heartbeat: Duration,
    pub(crate) app_version: Option<String>,
    pub(crate) schedules_when_due: bool,
    pub(crate) look_ahead: Option<Duration>,
    pub(crate) schedules_held: usize,
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
    /// How often this instance's heartbeat is recorded.
    pub(crate) heartbeat: Duration,
    /// The version each heartbeat says this instance runs.
    pub(crate) version: Arc<str>,
    /// Dynamic schedules are loaded as they come due, not all at start-up.
    pub(crate) schedules_when_due: bool,
    /// How far ahead they are read, if not the default.
    pub(crate) look_ahead: Option<Duration>,
    /// How many rows an instance holds before it lets idle ones go.
    pub(crate) schedules_held: usize,
}

/// How often the store's controls are polled unless the builder says otherwise.
pub const DEFAULT_CONTROL_POLL: Duration = Duration::from_secs(5);

/// How many dynamic schedules an instance holds before it lets idle ones go, unless
/// the builder says otherwise ([`SchedulerBuilder::schedules_held`]).
pub const DEFAULT_SCHEDULES_HELD: usize = 10_000;

/// How often an instance records its heartbeat unless the builder says otherwise.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// The shortest heartbeat interval [`SchedulerBuilder::build`] accepts.
const MIN_HEARTBEAT: Duration = Duration::from_secs(1);

/// The longest version text a heartbeat carries.
const MAX_VERSION_LEN: usize = 100;

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
            heartbeat: DEFAULT_HEARTBEAT,
            app_version: None,
            schedules_when_due: true,
            look_ahead: None,
            schedules_held: DEFAULT_SCHEDULES_HELD,
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
    /// watch is down, after a failed poll, while a trigger of a job run here waits
    /// for the job's lease, or when it registered handlers (dynamic schedules come
    /// due without a change: [`load_schedules_when_due`](Self::load_schedules_when_due)). Default [`DEFAULT_CONTROL_POLL`] (5 s); `None` polls never:
    /// pauses still hold (the take itself refuses a paused job), but this instance
    /// then claims no trigger, catches up nothing on a resume, registers no handler
    /// and runs no dynamic schedule. Stores without controls
    /// ([`Store::controls`]) are never polled.
    pub fn control_poll(mut self, every: Option<Duration>) -> Self {
        self.config.control_poll = every.map(|d| d.max(Duration::from_millis(10)));
        self
    }

    /// Loads the dynamic schedules as they come due (the default), or all at
    /// start-up (`false`: every instance reads and holds every row of its handlers,
    /// about 1.8 KB each, and every change of every row).
    ///
    /// Each row keeps a bound, its `next_tick`: no tick of it before the bound is
    /// undecided ([`Controls::due_schedules`](crate::Controls::due_schedules)). An
    /// instance that registered handlers reads no schedule at start-up; each poll
    /// (on the timer, and at once when the store announces a change) reads the rows
    /// of its handlers due within the look-ahead
    /// ([`schedules_look_ahead`](Self::schedules_look_ahead)) not run here yet, and
    /// the changes of the rows it holds; it runs each row from its bound on. The
    /// bounds of the cluster rows run here move forward as their ticks are decided.
    /// Once more than [`schedules_held`](Self::schedules_held) rows are held, a row
    /// idle until past the look-ahead is let go (its counts in
    /// [`Scheduler::stats`](crate::Scheduler::stats) with it): memory holds the rows
    /// due soon, and start-up reads one look-ahead, not every row. A triggered row
    /// not loaded is read by name to run it, and a resume with catch-up that the
    /// first poll read of a row not loaded is applied when the row loads. Node-scoped
    /// rows are never let go (each node decides their ticks, so the row's one bound
    /// cannot move past a tick another has not run).
    pub fn load_schedules_when_due(mut self, on: bool) -> Self {
        self.config.schedules_when_due = on;
        self
    }

    /// How far ahead of their next tick the rows are loaded when they are loaded as
    /// they come due ([`load_schedules_when_due`](Self::load_schedules_when_due)):
    /// a row is read before its tick, and let go once idle with its next tick further
    /// than this and half again. Default 30 s; never less than three poll intervals
    /// (a row must be read before its tick even when a poll fails: one loaded after
    /// it starts under its catch-up policy). Shorter holds fewer rows; longer rides
    /// out slower polls.
    pub fn schedules_look_ahead(mut self, ahead: Duration) -> Self {
        self.config.look_ahead = Some(ahead);
        self
    }

    /// How many dynamic schedules an instance holds before it lets idle ones go,
    /// when they are loaded as they come due
    /// ([`load_schedules_when_due`](Self::load_schedules_when_due)). Default
    /// [`DEFAULT_SCHEDULES_HELD`] (10,000, about 18 MB): a smaller table stays
    /// loaded once each row came due, with its counts. `0` lets every idle row go.
    pub fn schedules_held(mut self, rows: usize) -> Self {
        self.config.schedules_held = rows;
        self
    }

    /// How often this instance records its heartbeat
    /// ([`Controls::heartbeat`](crate::Controls::heartbeat)): one write per interval,
    /// the first at its first control poll. Its row ([`Controls::instances`]) stays
    /// live for three intervals after each beat; while it is live, the handlers and
    /// jobs it registered count ([`Controls::handlers`]). At shutdown its row is
    /// marked stopped. Default [`DEFAULT_HEARTBEAT`] (10 s); at least 1 s. Beats go
    /// with the control polls: none when [`control_poll`](Self::control_poll) is
    /// `None` or the store keeps no controls.
    ///
    /// [`Controls::instances`]: crate::Controls::instances
    /// [`Controls::handlers`]: crate::Controls::handlers
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.config.heartbeat = every;
        self
    }

    /// The version this instance says it runs in its heartbeat (what an operator
    /// reads on the instances page). Default: scheduler-core's own version. At most
    /// 100 characters, none of them a control character.
    pub fn app_version(mut self, version: &str) -> Self {
        self.config.app_version = Some(version.to_owned());
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
    /// [`Error::InvalidTtl`] and [`Error::TtlTooShort`]; [`Error::InvalidControl`]
    /// for a heartbeat interval under 1 s or an app version that cannot be recorded.
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
        if config.heartbeat < MIN_HEARTBEAT {
            return Err(Error::InvalidControl {
                reason: format!(
                    "the heartbeat interval {:?} is too short: use at least {MIN_HEARTBEAT:?}",
                    config.heartbeat
                ),
            });
        }
        let version = check_version(config.app_version.take())?;
        let settings = Settings {
            ttl,
            renew_every,
            grace: config.grace,
            clock: config.clock,
            retry_base: retry_cap.min(config.retry_base),
            retry_cap,
            control_poll: config.control_poll,
            heartbeat: config.heartbeat,
            version,
            schedules_when_due: config.schedules_when_due,
            look_ahead: config.look_ahead,
            schedules_held: config.schedules_held,
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
        let mut crons = crate::schedule::CronCache::default();
        for JobBox(job, policy) in self.jobs {
            let name = job.name().to_owned();
            if !names.insert(name.clone()) {
                return Err(Error::DuplicateJob { name });
            }
            let policy = policy.unwrap_or_else(|| job.policy());
            if let Some(missing) = job.state_types().iter().find(|ty| !state.has(ty)) {
                return Err(state.missing(&name, missing.name()));
            }
            entries.extend(entries_for(
                job,
                policy,
                &node,
                &holder_prefix,
                now,
                &mut crons,
            )?);
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
            backfills: engine::BackfillDoor::default(),
        })
    }
}

/// The version a heartbeat says: the app's, checked, or scheduler-core's.
fn check_version(app: Option<String>) -> Result<Arc<str>> {
    let Some(version) = app else {
        return Ok(env!("CARGO_PKG_VERSION").into());
    };
    let bad = if version.is_empty() {
        Some("it is empty")
    } else if version.chars().count() > MAX_VERSION_LEN {
        Some("it is longer than 100 characters")
    } else if version.chars().any(char::is_control) {
        Some("it holds a control character")
    } else {
        None
    };
    match bad {
        Some(why) => Err(Error::InvalidControl {
            reason: format!(
                "the app version {:?} cannot be recorded: {why}",
                version.chars().take(MAX_VERSION_LEN).collect::<String>()
            ),
        }),
        None => Ok(version.into()),
    }
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
}
