//! Backfill: every tick of a past range of a job, once across the cluster.
//!
//! [`Backfiller::backfill`] lists the job's ticks in the range and runs each under a
//! lease of its own, `{job's lease}\@{tick in Unix microseconds}`: a take of that name
//! for that tick is what makes one instance run it, and its release as completed is
//! what tells every later backfill (on any instance, after a crash too) that the tick
//! is done. The job's own lease, and so its live schedule, is never touched.
//!
//! The decisions are the decision core's ([`BackfillPlan`](super::decide::BackfillPlan),
//! [`run_end`](super::decide::run_end)); the driver is the scheduler's loop, whose
//! takes, renewals and releases carry the backfill's leases beside the live ones. A
//! backfill asked for while the scheduler does not run gets a loop of its own, with
//! no job.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::oneshot;
use tracing::{Instrument, info_span, warn};

use super::backoff::Backoff;
pub use super::decide::BackfillReport;
use super::engine::{BackfillDoor, BackfillJob, BackfillRequest, Engine, Reply, Stopped};
use super::{Entry, Health, Scheduler};
use crate::error::{Error, Result};
use crate::lease::{LeaseName, Tick};
use crate::schedule::Compiled;

/// How a backfill runs: how many ticks at once, and how many at most.
///
/// ```
/// use scheduler_core::BackfillOptions;
///
/// let options = BackfillOptions::default().concurrency(8).max_ticks(50_000);
/// assert_eq!((options.concurrency, options.max_ticks), (8, 50_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BackfillOptions {
    /// How many ticks this instance runs at once, at most (at least 1; 0 counts as
    /// 1). Default 4. Instances running the same backfill each keep their own bound.
    pub concurrency: usize,
    /// The most ticks a range may hold: a larger range is refused before anything
    /// runs ([`Error::BackfillTooLarge`]). Default 10,000.
    pub max_ticks: usize,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            max_ticks: 10_000,
        }
    }
}

impl BackfillOptions {
    /// With at most `concurrency` ticks running at once.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// With ranges of more than `max_ticks` ticks refused.
    pub fn max_ticks(mut self, max_ticks: usize) -> Self {
        self.max_ticks = max_ticks;
        self
    }
}

/// A handle that runs backfills of a scheduler's jobs
/// ([`Scheduler::backfiller`]): cheap to clone, and usable while the scheduler runs
/// (after [`Scheduler::run_until`] has taken the scheduler).
#[derive(Clone)]
pub struct Backfiller {
    inner: Arc<Inner>,
}

struct Inner {
    /// The scheduler's parts a loop of the backfill's own is built from (no job, no
    /// controls), and the door to the scheduler's own loop.
    scheduler: Scheduler,
    jobs: Vec<Job>,
    /// The takes carry the job's pause condition: a resume's catch-up stops at a
    /// pause, as live ticks do; an operator's backfill does not.
    honours_pauses: bool,
}

/// What a backfill needs of a registered job.
struct Job {
    run: BackfillJob,
    schedule: Compiled,
}

impl Job {
    fn of(e: &Entry) -> Self {
        Self {
            run: BackfillJob {
                name: e.name.clone(),
                lease: e.lease.clone(),
                policy: e.cadence.policy,
                holder_prefix: e.cadence.holder_prefix.clone(),
                fenced: e.cadence.fenced,
                job: e.job.clone(),
            },
            schedule: e.schedule.clone(),
        }
    }
}

impl fmt::Debug for Backfiller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let jobs: Vec<&str> = self.inner.jobs.iter().map(|j| &*j.run.name).collect();
        f.debug_struct("Backfiller")
            .field("node", &self.inner.scheduler.node)
            .field("jobs", &jobs)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A handle for backfills of this scheduler's jobs, to keep (or move to another
    /// task) before [`run_until`](Self::run_until) takes the scheduler: backfills then
    /// run beside the live schedule.
    pub fn backfiller(&self) -> Backfiller {
        self.backfiller_with(self.entries.iter().map(Job::of).collect(), false)
    }

    /// A backfiller of entry `i`'s job alone, as that entry reads now: what the
    /// engine catches a resumed job up with (by name, a dynamic schedule changed or
    /// removed and added again would find the entry it replaced).
    pub(crate) fn backfiller_of(&self, i: usize) -> Backfiller {
        let jobs = self.entries.get(i).map(Job::of).into_iter().collect();
        self.backfiller_with(jobs, true)
    }

    fn backfiller_with(&self, jobs: Vec<Job>, honours_pauses: bool) -> Backfiller {
        let mut settings = self.settings.clone();
        settings.control_poll = None;
        Backfiller {
            inner: Arc::new(Inner {
                scheduler: Scheduler {
                    store: self.store.clone(),
                    node: self.node.clone(),
                    settings,
                    entries: Vec::new(),
                    stats: self.stats.clone(),
                    observe: self.observe.clone(),
                    health: Health::new(self.store.clone(), self.settings.renew_every),
                    state: self.state.clone(),
                    holder_prefix: self.holder_prefix.clone(),
                    handlers: Arc::default(),
                    backfills: self.backfills.clone(),
                },
                jobs,
                honours_pauses,
            }),
        }
    }

    /// The request that backfills entry `i`'s job from `from` to `to`, its end
    /// logged (a resume's catch-up, run on the loop itself).
    pub(crate) fn catch_up_request(
        &self,
        i: usize,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        max_ticks: usize,
    ) -> Result<BackfillRequest> {
        let backfiller = self.backfiller_of(i);
        let job = backfiller
            .inner
            .jobs
            .first()
            .ok_or_else(|| Error::UnknownJob {
                name: format!("entry {i}"),
            })?;
        backfiller.request(
            job,
            from,
            to,
            BackfillOptions::default()
                .concurrency(1)
                .max_ticks(max_ticks),
            Reply::Log,
        )
    }

    /// Runs every tick of job `job`'s schedule from `from` to `to` (both included)
    /// once across the cluster: see [`Backfiller::backfill`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use scheduler_core::{
    ///     BackfillOptions, BoxError, Idempotent, JobContext, MemoryStore, Schedule, Scheduler, Store,
    /// };
    ///
    /// struct Rollup;
    /// #[scheduler_core::async_trait]
    /// impl Idempotent for Rollup {
    ///     fn name(&self) -> &str { "rollup" }
    ///     fn schedule(&self) -> Schedule { Schedule::every(Duration::from_secs(60)) }
    ///     async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
    ///         println!("rolling up the minute before {}", ctx.tick());
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), scheduler_core::BoxError> {
    /// use chrono::{DurationRound, TimeDelta};
    ///
    /// let store = std::sync::Arc::new(MemoryStore::new());
    /// let scheduler = Scheduler::builder(store.clone()).node_id("node-a").job(Rollup).build()?;
    /// // Yesterday's minutes, from 00:00 to 23:59.
    /// let today = store.now().await?.duration_trunc(TimeDelta::days(1))?;
    /// let (from, to) = (today - TimeDelta::days(1), today - TimeDelta::minutes(1));
    /// let options = BackfillOptions::default().concurrency(16);
    /// let report = scheduler.backfill("rollup", from, to, options).await?;
    /// assert_eq!((report.ticks, report.ran), (1440, 1440));
    /// // Asked again, on any instance: nothing left to do.
    /// let again = scheduler.backfill("rollup", from, to, options).await?;
    /// assert_eq!((again.ran, again.already_done), (0, 1440));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Backfiller::backfill`].
    pub async fn backfill(
        &self,
        job: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: BackfillOptions,
    ) -> Result<BackfillReport> {
        self.backfiller().backfill(job, from, to, options).await
    }
}

impl Backfiller {
    /// Runs every tick of job `job`'s schedule from `from` to `to` (both included)
    /// once across the cluster, at most `options.concurrency` at once on this
    /// instance, and returns when every tick is done (by this call or anybody else).
    ///
    /// Each tick has a lease of its own (`{job's lease}\@{tick in Unix
    /// microseconds}`; a `\` followed by `@` never appears in a job's own lease,
    /// whose `\` only escape `\` and `:`), taken for the scheduler's lease ttl and
    /// renewed while it runs like a live run's, so the live schedule, its lease and its stats are never
    /// touched, and the backfill may run while the scheduler runs. A tick's run gets
    /// a [`JobContext`](crate::JobContext) naming that lease and its fencing token: a fenced write is
    /// fenced against the tick's own lease. Each tick leaves its lease row in the
    /// store (one row per tick: a 10,000-tick backfill adds 10,000 rows, never
    /// deleted by the scheduler): a completed row is how any later backfill knows the
    /// tick ran.
    ///
    /// - **Exactly once.** A tick released as completed is never run again. A tick
    ///   another instance holds is asked about again (every second, or when its
    ///   lease expires) until it is completed (counted `already_done`) or free
    ///   again: instances running the same backfill share its ticks and all return
    ///   when every tick is done.
    /// - **Resumable.** A backfill stopped anywhere (its future dropped, the process
    ///   gone) runs the ticks it had not completed when any instance starts it
    ///   again: at once for ticks it never took, after their lease's expiry (at most
    ///   one ttl) for the ones it was running.
    /// - **Failures.** A failed run is retried under the same lease as the job's
    ///   [`Policy::retry`](crate::Policy) says (the backoff doubling; the live
    ///   schedule's "not past the next tick" does not apply); a tick whose every
    ///   attempt failed, or whose run returned [`Interrupted`](crate::Interrupted), is counted `failed`
    ///   and released as not completed: this call does not try it again, another
    ///   instance running the same backfill may, and so does the next backfill of
    ///   the range. A panic counts as a failed attempt, and
    ///   [`Policy::timeout`](crate::Policy) bounds each attempt as it does live. Jitter, catch-up and
    ///   overlap policies do not apply: ticks run as soon as they are won, the
    ///   oldest first, up to `concurrency` at once.
    /// - **Not the live schedule's ticks.** The backfill cannot know which past ticks
    ///   the live schedule ran (its lease row records only the latest): a tick the
    ///   live schedule ran that lies in the range runs again. A range reaching past
    ///   the store's clock is refused.
    /// - A node-scoped job's ticks are backfilled for this node (its lease names the
    ///   node).
    ///
    /// Backfill runs are logged (`tracing`); each tick run to success is counted
    /// [`Outcome::Backfilled`](crate::Outcome::Backfilled) in [`Stats`](crate::Stats)
    /// and the metrics. They are not written to the run history.
    ///
    /// Cancel safety: dropping the future stops the backfill like a crash: runs are
    /// aborted, their leases left to expire, and a later backfill resumes.
    ///
    /// # Errors
    /// [`Error::UnknownJob`] if no job is named `job`; [`Error::BackfillTooLarge`]
    /// if the range holds more than `options.max_ticks` ticks;
    /// [`Error::BackfillInFuture`] if a tick of the range is later than the store's
    /// clock; [`Error::InvalidName`] if the job's lease name is too long to name its
    /// ticks' leases (it must leave room for about 20 bytes); [`Error::Store`] if no
    /// store call has succeeded for a whole lease ttl (runs still going are then
    /// aborted, as when the future is dropped). Runs that fail are not errors: see
    /// [`BackfillReport::failed`].
    pub async fn backfill(
        &self,
        job: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: BackfillOptions,
    ) -> Result<BackfillReport> {
        let Some(j) = self.inner.jobs.iter().find(|j| &*j.run.name == job) else {
            return Err(Error::UnknownJob {
                name: job.to_owned(),
            });
        };
        let span = info_span!("backfill", job = %j.run.name, node = %self.inner.scheduler.node);
        async {
            // Refused before anything runs: a range too large, or in the future.
            let (tx, mut rx) = oneshot::channel();
            let request = self.request(j, from, to, options, Reply::Caller(tx))?;
            if let Some(&last) = request.ticks.last() {
                let now = self.store_now().await?;
                if last.at() > now {
                    return Err(Error::BackfillInFuture {
                        job: job.to_owned(),
                        to,
                        now,
                    });
                }
            }
            let mut done = BackfillReport::default();
            let mut request = Some(request);
            loop {
                if let Some(request) = request.take()
                    && let Err(request) = self.inner.scheduler.backfills.send(request)
                {
                    // No scheduler loop runs: a loop of the backfill's own.
                    let engine = Engine::new(self.inner.scheduler.shallow());
                    engine.standalone(*request).await;
                }
                let stopped = match (&mut rx).await {
                    Ok(Ok(report)) => return Ok(done.then(report)),
                    Ok(Err(Stopped::Failed(err))) => return Err(err),
                    Ok(Err(Stopped::ShutDown(report))) => Some(report),
                    // The loop stopped before it took the request.
                    Err(_) => None,
                };
                // The scheduler shut down first: the rest goes on without it.
                warn!("the scheduler shut down during a backfill; the backfill goes on");
                done = done.then_partial(stopped);
                let (again, next) = oneshot::channel();
                rx = next;
                request = Some(self.request(j, from, to, options, Reply::Caller(again))?);
            }
        }
        .instrument(span)
        .await
    }

    /// The request that backfills `job` from `from` to `to`, its end sent to `reply`.
    fn request(
        &self,
        j: &Job,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: BackfillOptions,
        reply: Reply,
    ) -> Result<BackfillRequest> {
        let ticks = ticks_in(&j.schedule, from, to, options.max_ticks).ok_or_else(|| {
            Error::BackfillTooLarge {
                job: j.run.name.to_string(),
                from,
                to,
                max_ticks: options.max_ticks,
            }
        })?;
        let names = ticks
            .iter()
            .map(|tick| lease_name(&j.run.lease, *tick))
            .collect::<Result<Vec<_>>>()?;
        Ok(BackfillRequest {
            job: j.run.clone(),
            ticks,
            names,
            concurrency: options.concurrency.max(1),
            honours_pauses: self.inner.honours_pauses,
            reply,
        })
    }

    /// The store's clock, read with retries; an error once no read succeeded for a
    /// whole ttl.
    async fn store_now(&self) -> Result<DateTime<Utc>> {
        let s = &self.inner.scheduler;
        let mut backoff = Backoff::new(s.settings.retry_base, s.settings.retry_cap);
        let since = tokio::time::Instant::now();
        loop {
            match s.store.now().await {
                Ok(now) => return Ok(now),
                Err(err) if since.elapsed() >= s.settings.ttl.get() => return Err(err),
                Err(err) => {
                    let wait = backoff.next_delay();
                    warn!(error = %err, retry_in = ?wait, "reading the store's clock failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

impl Scheduler {
    /// The scheduler's parts again, without its jobs: what a backfill's own loop is
    /// built from.
    fn shallow(&self) -> Scheduler {
        Scheduler {
            store: self.store.clone(),
            node: self.node.clone(),
            settings: self.settings.clone(),
            entries: Vec::new(),
            stats: self.stats.clone(),
            observe: self.observe.clone(),
            health: self.health.clone(),
            state: self.state.clone(),
            holder_prefix: self.holder_prefix.clone(),
            handlers: self.handlers.clone(),
            backfills: BackfillDoor::default(),
        }
    }
}

impl BackfillReport {
    /// This report of a backfill run again after `self` (cut short by a shutdown):
    /// the ticks `self` ran count as ran, not as found done.
    fn then(self, next: BackfillReport) -> BackfillReport {
        BackfillReport {
            ticks: next.ticks,
            ran: self.ran + next.ran,
            already_done: next.already_done.saturating_sub(self.ran),
            failed: next.failed,
            paused: next.paused,
        }
    }

    /// What `self` and a part cut short by a shutdown ran.
    fn then_partial(self, part: Option<BackfillReport>) -> BackfillReport {
        BackfillReport {
            ran: self.ran + part.map_or(0, |p| p.ran),
            ..self
        }
    }
}

/// The ticks of `schedule` from `from` to `to`, oldest first; `None` if there are
/// more than `max`.
fn ticks_in(
    schedule: &Compiled,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    max: usize,
) -> Option<Vec<Tick>> {
    let mut ticks = Vec::new();
    let mut cursor = from
        .checked_sub_signed(TimeDelta::microseconds(1))
        .unwrap_or(from);
    while let Some(tick) = schedule.next_after(cursor) {
        if tick.at() > to {
            break;
        }
        if tick.at() >= from {
            if ticks.len() == max {
                return None;
            }
            ticks.push(tick);
        }
        cursor = tick.at();
    }
    Some(ticks)
}

/// The lease of `tick`'s backfill: `{lease}\@{micros}`. A job's own lease never holds
/// `\@` (each of its `\` escapes the `\` or `:` that follows), so no backfill lease is
/// ever a live one, and the part before the first `\@` names the job's lease.
fn lease_name(lease: &LeaseName, tick: Tick) -> Result<LeaseName> {
    LeaseName::new(format!("{lease}\\@{}", tick.at().timestamp_micros()))
}

#[cfg(test)]
mod tests;
