//! Jobs: the [`Idempotent`] trait user code implements, and what a run is handed.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::error::BoxError;
pub use crate::lease::Scope;
use crate::lease::{FencingToken, Holder, LeaseName, Tick};
use crate::policy::Policy;
use crate::schedule::Schedule;

/// What a second run of the same tick would do. A holder cut off from the database
/// for longer than the ttl loses its lease to another instance while it may still be
/// running: the tick can then run twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Duplicate {
    /// Nothing: a second run finds the work done (a sweep, a check that adds one more
    /// result, an evaluation against stored state). A lost lease is logged as a
    /// warning and the run finishes.
    #[default]
    Harmless,
    /// Harm: the job needs a fencing token. The runtime declares it at start-up,
    /// hands it the lease's token, and cancels it the moment its lease is lost; its
    /// writes should go through the store's fenced transaction, which refuses a
    /// stale token.
    NeedsFencing,
}

/// A periodic job. The name says the contract: a tick's run may, in rare faults,
/// happen twice, and [`Idempotent::duplicate`] declares what that would cost.
///
/// ```
/// use std::time::Duration;
/// use scheduler_core::{BoxError, Idempotent, JobContext, Schedule, Scope};
///
/// struct Sweep;
///
/// #[scheduler_core::async_trait]
/// impl Idempotent for Sweep {
///     fn name(&self) -> &str { "sweep" }
///     fn schedule(&self) -> Schedule { Schedule::every(Duration::from_secs(3600)) }
///     async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
///         println!("sweeping for tick {}", ctx.tick());
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Idempotent: Send + Sync + 'static {
    /// The job's name, unique in the scheduler; also its lease's name (node jobs
    /// append `:node`). Same rules as [`LeaseName`].
    fn name(&self) -> &str;

    /// When it runs.
    fn schedule(&self) -> Schedule;

    /// Once per tick in the cluster (default) or once per tick per node.
    fn scope(&self) -> Scope {
        Scope::Cluster
    }

    /// What a duplicate run would do. Default: nothing harmful.
    fn duplicate(&self) -> Duplicate {
        Duplicate::Harmless
    }

    /// Delay each tick's start by a random duration up to this bound, to spread load.
    /// Default: none.
    fn jitter(&self) -> Duration {
        Duration::ZERO
    }

    /// How long after its scheduled instant a tick may still start: one that could not
    /// start in time (database down, or its previous holder crashed) is retried within
    /// this window and superseded by the next tick after it. Default: one period.
    fn catch_up(&self) -> Option<Duration> {
        None
    }

    /// What happens to late ticks, overlapping ticks, failed runs and long runs.
    /// Default: [`Policy::default`] (catch up on the latest tick, skip overlapping
    /// ticks, no retries, no timeout).
    fn policy(&self) -> Policy {
        Policy::default()
    }

    /// The types of state the job reads with [`JobContext::state`]:
    /// [`build`](crate::SchedulerBuilder::build) refuses a scheduler that was not
    /// given a value of each. Default: none declared (a missing value is then met at
    /// the first run, as an error naming the types given).
    fn state_types(&self) -> Vec<StateType> {
        Vec::new()
    }

    /// Runs one tick.
    ///
    /// The context's [cancellation token](JobContext::cancellation) fires when the
    /// scheduler shuts down past its grace period or, for jobs that need fencing, when
    /// the lease is lost: long work should watch it.
    ///
    /// # Errors
    /// Whatever the job reports; the runtime logs it and counts the tick as failed. A
    /// panic is caught and counted the same way.
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError>;
}

/// A shared job is a job: `builder.job(Arc::new(job))` and `builder.job(job)` both
/// work.
#[async_trait]
impl<J: Idempotent + ?Sized> Idempotent for Arc<J> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn schedule(&self) -> Schedule {
        (**self).schedule()
    }
    fn scope(&self) -> Scope {
        (**self).scope()
    }
    fn duplicate(&self) -> Duplicate {
        (**self).duplicate()
    }
    fn jitter(&self) -> Duration {
        (**self).jitter()
    }
    fn catch_up(&self) -> Option<Duration> {
        (**self).catch_up()
    }
    fn state_types(&self) -> Vec<StateType> {
        (**self).state_types()
    }
    fn policy(&self) -> Policy {
        (**self).policy()
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        (**self).run(ctx).await
    }
}

/// What a run is handed: the tick, the node, the lease and its fencing token, and a
/// cancellation token.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) job: Arc<str>,
    pub(crate) tick: Tick,
    pub(crate) node: Arc<str>,
    pub(crate) lease: LeaseName,
    pub(crate) holder: Holder,
    pub(crate) token: FencingToken,
    pub(crate) cancel: CancellationToken,
    pub(crate) state: State,
    pub(crate) attempt: u32,
}

/// Code that dynamic schedules ([`ScheduleRow`](crate::ScheduleRow)) run, registered
/// by name with [`SchedulerBuilder::handler`](crate::SchedulerBuilder::handler): each
/// run gets the job's context and the row's arguments (JSON text, `{}` for none).
///
/// A closure `|ctx: JobContext, args: Arc<str>| async move { … }` is a handler.
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one tick of a schedule bound to this handler.
    async fn run(&self, ctx: JobContext, args: Arc<str>) -> Result<(), BoxError>;
}

#[async_trait::async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(JobContext, Arc<str>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send + 'static,
{
    async fn run(&self, ctx: JobContext, args: Arc<str>) -> Result<(), BoxError> {
        (self)(ctx, args).await
    }
}

/// Values the app hands to every job through the builder's
/// [`state`](crate::SchedulerBuilder::state), one per type.
#[derive(Clone, Default)]
pub(crate) struct State(pub(crate) Arc<HashMap<TypeId, StateValue>>);

/// One value of [`State`], and its type's name for error messages.
#[derive(Clone)]
pub(crate) struct StateValue {
    pub(crate) type_name: &'static str,
    pub(crate) value: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for StateValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name)
    }
}

impl State {
    /// The value of type `T`, or the error naming it and the types given.
    pub(crate) fn get<T: 'static>(&self, job: &str) -> Result<&T, crate::Error> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.value.downcast_ref::<T>())
            .ok_or_else(|| self.missing(job, std::any::type_name::<T>()))
    }

    /// Whether a value of `ty` was given.
    pub(crate) fn has(&self, ty: &StateType) -> bool {
        self.0.contains_key(&ty.id)
    }

    /// [`Error::MissingState`](crate::Error::MissingState) for `job` asking `type_name`.
    pub(crate) fn missing(&self, job: &str, type_name: &'static str) -> crate::Error {
        let mut given: Vec<&'static str> = self.0.values().map(|v| v.type_name).collect();
        given.sort_unstable();
        crate::Error::MissingState {
            job: job.to_owned(),
            type_name,
            given,
        }
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "State({} values)", self.0.len())
    }
}

/// A type of value a job reads with [`JobContext::state`], declared by
/// [`Idempotent::state_types`] (or `#[job(state(T, ...))]`) so that
/// [`build`](crate::SchedulerBuilder::build) can refuse a scheduler that was not
/// given one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateType {
    id: TypeId,
    name: &'static str,
}

impl StateType {
    /// The state type `T`.
    pub fn of<T: Send + Sync + 'static>() -> Self {
        Self {
            id: TypeId::of::<T>(),
            name: std::any::type_name::<T>(),
        }
    }

    /// The type's name, as the compiler spells it.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl JobContext {
    /// The app's value of type `T`, as given to
    /// [`SchedulerBuilder::state`](crate::SchedulerBuilder::state) (a database pool,
    /// say).
    ///
    /// # Errors
    /// [`Error::MissingState`](crate::Error::MissingState) when the scheduler was
    /// given no value of type `T`, naming `T` and the types it was given (a job
    /// asking for `PgPool` where the app gave `Arc<PgPool>`, say). Declare the types
    /// a job needs ([`Idempotent::state_types`], `#[job(state(T))]`) and `build()`
    /// checks them before anything runs.
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, crate::Error> {
        self.state.get::<T>(&self.job)
    }

    /// Which attempt at the tick this is: 1 for the first run, 2 for the first
    /// retry ([`Policy::retry`](crate::Policy)), and so on. Every attempt holds the
    /// same lease and fencing token.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The tick being run.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// This instance's node id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The lease this run holds.
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// The holder of the lease (fresh for this run).
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// The lease's fencing token: larger than that of every earlier run of this lease.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Fires when the run must stop: shutdown past the grace period (or at a second
    /// signal: [`shutdown_signal`](crate::shutdown_signal)), or a lost lease of a job
    /// that needs fencing.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the run has been told to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The error to return when the run stopped before its tick's work was done and
    /// the tick should be run again (by another instance, within the job's catch-up
    /// window): `return Err(ctx.interrupted())` after noticing the cancellation.
    ///
    /// The runtime decides from the result alone: `Ok` means the tick is done, even
    /// if the cancellation fired while it ran; [`Interrupted`] releases the lease so
    /// the tick may be retried; any other error counts as a failed, completed tick
    /// (unless the run was cancelled, when it is treated as interrupted).
    pub fn interrupted(&self) -> BoxError {
        Box::new(Interrupted)
    }

    /// A context for calling a job outside the scheduler (tests, one-off runs).
    pub fn detached(
        job: &str,
        tick: Tick,
        node: &str,
        lease: LeaseName,
        token: FencingToken,
    ) -> Self {
        Self {
            job: job.into(),
            tick,
            node: node.into(),
            lease,
            holder: Holder::generate(),
            token,
            cancel: CancellationToken::new(),
            state: State::default(),
            attempt: 1,
        }
    }
}

/// A job's declaration that it needs fencing, as the runtime logs it at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// The job.
    pub job: String,
    /// Its lease.
    pub lease: LeaseName,
    /// Its scope.
    pub scope: Scope,
    /// Its schedule, as text.
    pub schedule: String,
}

/// The error a run returns to say it stopped before its tick's work was done, so the
/// tick may be retried: see [`JobContext::interrupted`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the run was interrupted before its tick's work was done")
    }
}

impl std::error::Error for Interrupted {}

/// The error of a run that took longer than its timeout ([`Policy::timeout`]
/// (crate::Policy)): its cancellation token fired at the timeout, and the run was
/// dropped if it had not ended within the scheduler's shutdown grace after that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut {
    /// The run's timeout.
    pub timeout: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the run took longer than its timeout of {:?}",
            self.timeout
        )
    }
}

impl std::error::Error for TimedOut {}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;

    #[test]
    fn a_state_type_never_given_is_an_error_naming_the_types_given() {
        let lease = LeaseName::new("sweep").unwrap_or_else(|e| panic!("{e}"));
        let mut ctx = JobContext::detached(
            "sweep",
            Tick::new(DateTime::UNIX_EPOCH),
            "node-1",
            lease,
            FencingToken::new(1),
        );
        let err = ctx.state::<u32>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "job \"sweep\" needs state of type `u32`, but the scheduler was given none of \
                 that type (SchedulerBuilder::state); it was given no state at all"
            )
        );

        let value = StateValue {
            type_name: std::any::type_name::<Arc<u32>>(),
            value: Arc::new(Arc::new(7_u32)),
        };
        ctx.state = State(Arc::new(HashMap::from([(TypeId::of::<Arc<u32>>(), value)])));
        assert_eq!(ctx.state::<Arc<u32>>().map(|v| **v).ok(), Some(7));
        let err = ctx.state::<u32>().err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.ends_with("it was given: `alloc::sync::Arc<u32>`")),
            "{err:?}"
        );
    }
}
