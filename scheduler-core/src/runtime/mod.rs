//! The runtime embedded in the app: [`Scheduler`] and its builder.

mod backfill;
mod backoff;
mod builder;
mod calls;
mod decide;
mod dynamic;
mod engine;
mod entries;
mod health;
mod observe;
mod preview;
mod stats;
mod store_clock;

use std::any::TypeId;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use backfill::{BackfillOptions, BackfillReport, Backfiller};
pub use builder::{
    DEFAULT_CONTROL_POLL, DEFAULT_HEARTBEAT, DEFAULT_SCHEDULES_HELD, SchedulerBuilder,
};
pub(crate) use builder::{HandlerBox, Settings};
pub(crate) use entries::entries_for;
pub use health::{Health, HealthReport};
use observe::Observer;
pub use observe::{RunRecord, RunRecorder, names as metric_names};
pub use preview::{DstNote, UpcomingTick, WallTime, upcoming_ticks};
pub use stats::Stats;

use crate::clock::LocalClock;
use crate::error::{Error, Result};
use crate::job::{Declaration, Duplicate, Handler, Idempotent, Scope, State, StateValue};
use crate::lease::{Holder, LeaseName, Ttl, validate_name};
use crate::policy::{Overlap, Policy};
use crate::store::Store;
use decide::Cadence;
use scheduler_spec::{Timing, check_timing};

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
    /// How backfills reach the loop while it runs.
    backfills: engine::BackfillDoor,
}

impl Scheduler {
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
    /// `shutdown` is usually [`shutdown_signal()`](crate::shutdown_signal) (Ctrl-C or
    /// SIGTERM), after which a second signal ends the grace period at once; any
    /// future works (a sleep, a channel, a `select!` of several).
    ///
    /// Store failures are logged and retried with backoff; this never returns early
    /// and never panics. Cancel safety: dropping the future stops everything at once,
    /// like a crash: running jobs are aborted and their leases are left to expire.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let door = self.backfills.clone();
        engine::Engine::new(self).run(shutdown, door).await;
    }
}

/// One attempt at a tick, as a run task does it: waits until `begin_at` (unless the
/// attempt's token fires first, or had: [`Interrupted`](crate::Interrupted)), runs the job,
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
    // Cancelled before it began (a run spawned at its instant by a starter, after
    // the loop cancelled it; an attempt after the run was cancelled): it never
    // begins.
    if ctx.cancel.is_cancelled() {
        return Err(crate::Interrupted.into());
    }
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
