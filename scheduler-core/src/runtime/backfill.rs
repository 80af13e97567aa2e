//! Backfill: every tick of a past range of a job, once across the cluster.
//!
//! [`Backfiller::backfill`] lists the job's ticks in the range and runs each under a
//! lease of its own, `{job's lease}\@{tick in Unix microseconds}`: a take of that name
//! for that tick is what makes one instance run it, and its release as completed is
//! what tells every later backfill (on any instance, after a crash too) that the tick
//! is done. The job's own lease, and so its live schedule, is never touched.
//!
//! The loop runs on the caller's task, not the scheduler's: it takes up to
//! `concurrency` ticks not known to be done in one batched take, runs the ones won,
//! renews their leases every renewal interval while they run, releases each as its
//! run ends, and asks again about ticks another instance holds until that instance
//! has completed them (or let them go). Store calls that fail are retried with
//! backoff; a backfill gives up only when no call has succeeded for a whole ttl.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::Entry;
use super::Outcome;
use super::Scheduler;
use super::Settings;
use super::backoff::Backoff;
use super::decide;
use super::engine::ended_as;
use super::calls::Gate;
use super::observe::Observer;
use crate::error::{BoxError, Error, Result};
use crate::job::{Duplicate, Idempotent, JobContext, State};
use crate::lease::{ControlKey, Holder, Lease, LeaseKey, LeaseName, Release, TakeRequest, Tick};
use crate::policy::Policy;
use crate::schedule::Compiled;
use crate::store::Store;

/// The most leases one take, renewal or release asks about (as the live loop's takes).
const CHUNK: usize = 100;

/// How long a tick another instance holds waits before it is asked about again: this,
/// or the renewal interval if shorter, or until its lease expires if sooner.
const POLL: Duration = Duration::from_secs(1);

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

/// What a backfill did: each tick of the range is counted once, as `ran`,
/// `already_done`, `failed` or `paused` (`ran + already_done + failed + paused == ticks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct BackfillReport {
    /// The ticks of the job's schedule in the range.
    pub ticks: usize,
    /// Ticks this call ran to success (and released as completed).
    pub ran: usize,
    /// Ticks found completed: by an earlier backfill, or by another instance
    /// running the same backfill meanwhile.
    pub already_done: usize,
    /// Ticks this call ran whose every attempt failed (or that were interrupted):
    /// released as not completed, so that running the backfill again retries them.
    pub failed: usize,
    /// Ticks not run because the job was paused when they were asked for: only a
    /// resume's catch-up honours a pause (an operator's backfill runs regardless).
    pub paused: usize,
}

/// A handle that runs backfills of a scheduler's jobs
/// ([`Scheduler::backfiller`]): cheap to clone, and usable while the scheduler runs
/// (after [`Scheduler::run_until`] has taken the scheduler).
#[derive(Clone)]
pub struct Backfiller {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    /// Where store calls are measured (the scheduler's metrics, if any).
    observe: Observer,
    node: Arc<str>,
    settings: Settings,
    state: State,
    jobs: Vec<Job>,
    /// The takes carry the job's pause condition: a resume's catch-up stops at a
    /// pause, as live ticks do; an operator's backfill does not.
    honours_pauses: bool,
}

/// What a backfill needs of a registered job.
struct Job {
    name: Arc<str>,
    lease: LeaseName,
    schedule: Compiled,
    policy: Policy,
    holder_prefix: Arc<str>,
    duplicate: Duplicate,
    job: Arc<dyn Idempotent>,
}

impl Job {
    fn of(e: &Entry) -> Self {
        Self {
            name: e.name.clone(),
            lease: e.lease.clone(),
            schedule: e.schedule.clone(),
            policy: e.cadence.policy,
            holder_prefix: e.cadence.holder_prefix.clone(),
            duplicate: e.duplicate,
            job: e.job.clone(),
        }
    }
}

impl fmt::Debug for Backfiller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let jobs: Vec<&str> = self.inner.jobs.iter().map(|j| &*j.name).collect();
        f.debug_struct("Backfiller")
            .field("node", &self.inner.node)
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
        Backfiller {
            inner: Arc::new(Inner {
                store: self.store.clone(),
                observe: self.observe.clone(),
                node: self.node.clone(),
                settings: self.settings.clone(),
                state: self.state.clone(),
                jobs,
                honours_pauses,
            }),
        }
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
    /// a [`JobContext`] naming that lease and its fencing token: a fenced write is
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
    ///   attempt failed, or whose run returned [`Interrupted`], is counted `failed`
    ///   and released as not completed: this call does not try it again, another
    ///   instance running the same backfill may, and so does the next backfill of
    ///   the range. A panic counts as a failed attempt, and [`Policy::timeout`]
    ///   (crate::Policy) bounds each attempt as it does live. Jitter, catch-up and
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
        let Some(j) = self.inner.jobs.iter().find(|j| &*j.name == job) else {
            return Err(Error::UnknownJob {
                name: job.to_owned(),
            });
        };
        let ticks = ticks_in(&j.schedule, from, to, options.max_ticks).ok_or_else(|| {
            Error::BackfillTooLarge {
                job: job.to_owned(),
                from,
                to,
                max_ticks: options.max_ticks,
            }
        })?;
        let names = ticks
            .iter()
            .map(|tick| lease_name(&j.lease, *tick))
            .collect::<Result<Vec<_>>>()?;
        let span = info_span!("backfill", job = %j.name, node = %self.inner.node);
        let mut run = Run::new(&self.inner, j, ticks, names, options);
        run.go(to).instrument(span).await
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

/// What a run's task returns: the tick's index and the run's result.
type RunResult = (usize, Result<(), BoxError>);

/// One tick's run in progress: the decisions' view of it, and its token (each
/// attempt gets a child).
struct Running {
    run: decide::Running,
    cancel: CancellationToken,
}

/// One backfill call's state.
struct Run<'a> {
    inner: &'a Inner,
    job: &'a Job,
    ticks: Vec<Tick>,
    names: Vec<LeaseName>,
    /// Each tick's holder, kept across takes whose answer was lost (the store hands
    /// a holder its own acquisition back).
    holders: Vec<Holder>,
    concurrency: usize,
    /// Ticks never asked about, oldest first.
    fresh: VecDeque<usize>,
    /// Ticks held elsewhere (or whose take failed), to ask about again from an
    /// instant on.
    deferred: Vec<(usize, Instant)>,
    running: HashMap<usize, Running>,
    tasks: JoinSet<RunResult>,
    by_task: HashMap<Id, usize>,
    to_release: Vec<(usize, LeaseKey, Release)>,
    next_renew: Instant,
    /// Store calls, one at a time, none waited for longer than two renewal periods
    /// (as the live loop's): a store that stops answering cannot hold renewals up.
    calls: Gate,
    take_at: Option<Instant>,
    release_at: Option<Instant>,
    take_backoff: Backoff,
    renew_backoff: Backoff,
    release_backoff: Backoff,
    /// Since when every store call has failed.
    failing_since: Option<Instant>,
    report: BackfillReport,
    cancel: CancellationToken,
}

impl<'a> Run<'a> {
    fn new(
        inner: &'a Inner,
        job: &'a Job,
        ticks: Vec<Tick>,
        names: Vec<LeaseName>,
        options: BackfillOptions,
    ) -> Self {
        let s = &inner.settings;
        let backoff = || Backoff::new(s.retry_base, s.retry_cap);
        let limit = s
            .renew_every
            .saturating_mul(2)
            .clamp(Duration::from_secs(1), Duration::from_secs(30));
        Self {
            holders: ticks
                .iter()
                .map(|_| Holder::generate_on(&job.holder_prefix))
                .collect(),
            fresh: (0..ticks.len()).collect(),
            report: BackfillReport {
                ticks: ticks.len(),
                ..BackfillReport::default()
            },
            inner,
            job,
            ticks,
            names,
            concurrency: options.concurrency.max(1),
            deferred: Vec::new(),
            running: HashMap::new(),
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
            to_release: Vec::new(),
            next_renew: Instant::now(),
            calls: Gate::new(limit, inner.observe.clone()),
            take_at: None,
            release_at: None,
            take_backoff: backoff(),
            renew_backoff: backoff(),
            release_backoff: backoff(),
            failing_since: None,
            cancel: CancellationToken::new(),
        }
    }

    async fn go(&mut self, to: DateTime<Utc>) -> Result<BackfillReport> {
        // Dropping the backfill drops the tasks (aborted); this tells the runs that
        // watch their token first.
        let _cancel_on_drop = self.cancel.clone().drop_guard();
        if let Some(&last) = self.ticks.last() {
            let now = self.store_now().await?;
            if last.at() > now {
                return Err(Error::BackfillInFuture {
                    job: self.job.name.to_string(),
                    to,
                    now,
                });
            }
        }
        info!(
            ticks = self.ticks.len(),
            first = ?self.ticks.first().map(|t| t.to_string()),
            last = ?self.ticks.last().map(|t| t.to_string()),
            concurrency = self.concurrency,
            "backfill starting"
        );
        loop {
            if self.release_at.is_none_or(|at| Instant::now() >= at) {
                self.release().await?;
            }
            if !self.running.is_empty() && Instant::now() >= self.next_renew {
                self.renew().await?;
            }
            if self.take_at.is_none_or(|at| Instant::now() >= at) {
                self.take().await?;
            }
            if self.fresh.is_empty()
                && self.deferred.is_empty()
                && self.running.is_empty()
                && self.to_release.is_empty()
            {
                break;
            }
            let wake = self.next_wake();
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(wake) => {}
                Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.finished(done);
                    while let Some(done) = self.tasks.try_join_next_with_id() {
                        self.finished(done);
                    }
                }
            }
        }
        let r = self.report;
        info!(
            ticks = r.ticks,
            ran = r.ran,
            already_done = r.already_done,
            failed = r.failed,
            paused = r.paused,
            "backfill finished"
        );
        Ok(r)
    }

    /// When the loop has something to do next (a finished run wakes it too).
    fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let mut wake = now + self.inner.settings.renew_every;
        if !self.running.is_empty() {
            wake = wake.min(self.next_renew);
        }
        if !self.to_release.is_empty() {
            wake = wake.min(self.release_at.unwrap_or(now));
        }
        if self.running.len() < self.concurrency {
            let ready = self.deferred.iter().map(|&(_, at)| at).min();
            let ready = if self.fresh.is_empty() {
                ready
            } else {
                Some(now)
            };
            if let Some(at) = ready {
                wake = wake.min(at.max(self.take_at.unwrap_or(now)));
            }
        }
        wake
    }

    /// A store call answered: the give-up clock stops.
    fn store_ok(&mut self) {
        self.failing_since = None;
    }

    /// A store call failed: `Err` once every call has failed for a whole ttl.
    fn store_failed(&mut self, what: &str, err: Error, retry_in: Duration) -> Result<()> {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.inner.settings.ttl.get() {
            error!(error = %err, "{what} failed, and no store call has succeeded for a lease ttl; giving up");
            return Err(err);
        }
        warn!(error = %err, retry_in = ?retry_in, "{what} failed; retrying");
        Ok(())
    }

    /// The store's clock, read with retries.
    async fn store_now(&mut self) -> Result<DateTime<Utc>> {
        loop {
            let store = self.inner.store.clone();
            match self
                .calls
                .run("now", async move { store.now().await })
                .await
            {
                Ok(now) => {
                    self.store_ok();
                    return Ok(now);
                }
                Err(err) => {
                    let wait = self.take_backoff.next_delay();
                    self.store_failed("reading the store's clock", err, wait)?;
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Takes the ticks that may be asked about now, up to the free run slots: the
    /// deferred ones whose time has come first (the oldest), then fresh ones.
    async fn take(&mut self) -> Result<()> {
        let free = self.concurrency.saturating_sub(self.running.len());
        if free == 0 {
            return Ok(());
        }
        let now = Instant::now();
        self.deferred.sort_unstable_by_key(|&(i, _)| i);
        let mut batch = Vec::with_capacity(free);
        let mut k = 0;
        while k < self.deferred.len() && batch.len() < free {
            if self.deferred[k].1 <= now {
                batch.push(self.deferred.remove(k).0);
            } else {
                k += 1;
            }
        }
        while batch.len() < free {
            let Some(i) = self.fresh.pop_front() else {
                break;
            };
            batch.push(i);
        }
        if batch.is_empty() {
            return Ok(());
        }
        for (c, chunk) in batch.chunks(CHUNK).enumerate() {
            let requests: Vec<TakeRequest> = chunk
                .iter()
                .map(|&i| TakeRequest {
                    name: self.names[i].clone(),
                    tick: self.ticks[i],
                    holder: self.holders[i].clone(),
                    // A backfill is asked for by an operator: a pause does not stop
                    // it. A resume's catch-up stops at a pause, as live ticks do.
                    control: self.inner.honours_pauses.then(|| ControlKey {
                        job: self.job.name.clone(),
                        node: self.inner.node.clone(),
                        caught_up_on_resume: false,
                    }),
                })
                .collect();
            let ttl = self.inner.settings.ttl;
            let store = self.inner.store.clone();
            let call = async move { store.take(&requests, ttl).await };
            match self.calls.run("take", call).await {
                Ok(taken) => {
                    self.store_ok();
                    self.take_backoff.reset();
                    self.take_at = None;
                    let asked = Instant::now();
                    let poll = POLL.min(self.inner.settings.renew_every);
                    let mut answered = vec![false; chunk.len()];
                    for name in &taken.paused {
                        let Some(k) = chunk.iter().position(|&i| self.names[i] == *name) else {
                            continue;
                        };
                        answered[k] = true;
                        debug!(tick = %self.ticks[chunk[k]], "job paused: tick not caught up");
                        self.report.paused += 1;
                    }
                    for lease in taken.won {
                        let Some(k) = chunk.iter().position(|&i| self.names[i] == lease.name)
                        else {
                            continue;
                        };
                        answered[k] = true;
                        self.start(chunk[k], lease);
                    }
                    for held in taken.held {
                        let Some(k) = chunk.iter().position(|&i| self.names[i] == held.name) else {
                            continue;
                        };
                        answered[k] = true;
                        let i = chunk[k];
                        if held.completed {
                            debug!(tick = %self.ticks[i], "tick already done");
                            self.report.already_done += 1;
                        } else {
                            // Held elsewhere: ask again once its lease has expired,
                            // or sooner (it may be completed before).
                            let left = taken
                                .now
                                .and_then(|now| (held.expires_at - now).to_std().ok())
                                .unwrap_or(poll);
                            let wait = left.min(poll).max(Duration::from_millis(1));
                            debug!(tick = %self.ticks[i], wait_ms = wait.as_millis(),
                                "tick held elsewhere; asking again later");
                            self.deferred.push((i, asked + wait));
                        }
                    }
                    // Neither won nor held: a race just lost to another taker.
                    for (k, &i) in chunk.iter().enumerate() {
                        if !answered[k] {
                            self.deferred.push((i, asked + poll));
                        }
                    }
                }
                Err(err) => {
                    let wait = self.take_backoff.next_delay();
                    self.take_at = Some(Instant::now() + wait);
                    // Asked again after the backoff, as the same holders.
                    for &i in &batch[c * CHUNK..] {
                        self.deferred.push((i, now));
                    }
                    return self.store_failed("taking backfill leases", err, wait);
                }
            }
        }
        Ok(())
    }

    /// Starts the run of tick `i`, won as `lease`.
    fn start(&mut self, i: usize, lease: Lease) {
        if self.running.is_empty() {
            self.next_renew = Instant::now() + self.inner.settings.renew_every;
        }
        debug!(tick = %lease.tick, token = %lease.token, "backfilling tick");
        self.running.insert(
            i,
            Running {
                run: decide::Running::new(lease, chrono::DateTime::<Utc>::MIN_UTC, None),
                cancel: self.cancel.child_token(),
            },
        );
        self.spawn_attempt(i, Duration::ZERO);
    }

    /// Spawns the current attempt of tick `i`'s run, to begin after `wait`.
    fn spawn_attempt(&mut self, i: usize, wait: Duration) {
        let Some(running) = self.running.get(&i) else {
            return;
        };
        let (job, inner) = (self.job, self.inner);
        let lease = &running.run.lease;
        let ctx = JobContext {
            job: job.name.clone(),
            tick: lease.tick,
            node: inner.node.clone(),
            lease: lease.name.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            // The attempt's own token: a timeout cancels it, not the run's.
            cancel: running.cancel.child_token(),
            state: inner.state.clone(),
            attempt: running.run.attempt,
        };
        let span = info_span!("run", tick = %lease.tick, holder = %lease.holder,
            token = %lease.token, attempt = running.run.attempt);
        let begin_at = Instant::now() + wait;
        let run = job.job.clone();
        let timeout = job.policy.timeout;
        let grace = inner.settings.grace;
        let task = async move {
            let result = super::run_attempt(run, ctx, begin_at, timeout, grace).await;
            (i, result)
        };
        let handle = self.tasks.spawn(task.instrument(span));
        self.by_task.insert(handle.id(), i);
    }

    /// A run's task ended: retry it, or queue its release and count it.
    fn finished(&mut self, done: std::result::Result<(Id, RunResult), tokio::task::JoinError>) {
        let (id, result) = match done {
            Ok((id, (_, result))) => (id, result),
            Err(err) => (err.id(), Err(super::engine::panicked(err))),
        };
        let Some(i) = self.by_task.remove(&id) else {
            return;
        };
        let Some(running) = self.running.get_mut(&i) else {
            return;
        };
        let tick = self.ticks[i];
        let ended = ended_as(&result);
        running.run.cancelled |= running.cancel.is_cancelled();
        let end = decide::run_end(ended, &running.run, false, true);
        if let Err(err) = &result
            && !end.interrupted
            && !running.run.lost
            && let Some(wait) = self
                .job
                .policy
                .retry
                .and_then(|retry| decide::retry_wait(retry, running.run.attempt))
        {
            warn!(tick = %tick, attempt = running.run.attempt, error = %crate::error::error_chain(&**err),
                retry_in = ?wait, "backfill run failed; retrying under the same lease");
            running.run.attempt += 1;
            self.spawn_attempt(i, wait);
            return;
        }
        let Some(running) = self.running.remove(&i) else {
            return;
        };
        match &result {
            Ok(()) => {
                self.report.ran += 1;
                self.inner
                    .observe
                    .outcome(&self.job.name, Outcome::Backfilled);
                if running.run.lost {
                    warn!(tick = %tick, "backfill run finished after its lease was lost; the tick may have run twice");
                } else {
                    debug!(tick = %tick, "backfill run finished");
                }
            }
            Err(err) => {
                self.report.failed += 1;
                let error = crate::error::error_chain(&**err);
                if end.interrupted {
                    warn!(tick = %tick, error = %error, "backfill run interrupted; a later backfill retries the tick");
                } else {
                    error!(tick = %tick, attempt = running.run.attempt, error = %error,
                        "backfill run failed; a later backfill retries the tick");
                }
            }
        }
        if let decide::Handover::Release(how) = end.handover {
            self.to_release.push((i, running.run.lease.key(), how));
        }
    }

    /// Renews the leases of every run in one call per chunk; a lease not renewed is
    /// lost (and the run cancelled, for a job that needs fencing).
    async fn renew(&mut self) -> Result<()> {
        let mut held: Vec<(usize, LeaseKey)> = self
            .running
            .iter()
            .filter(|(_, r)| !r.run.lost)
            .map(|(&i, r)| (i, r.run.lease.key()))
            .collect();
        held.sort_unstable_by_key(|(i, _)| *i);
        let renew_every = self.inner.settings.renew_every;
        for chunk in held.chunks(CHUNK) {
            let keys: Vec<LeaseKey> = chunk.iter().map(|(_, k)| k.clone()).collect();
            let (store, ttl) = (self.inner.store.clone(), self.inner.settings.ttl);
            let call = async move { store.renew(&keys, ttl).await };
            match self.calls.run("renew", call).await {
                Ok(renewed) => {
                    self.store_ok();
                    for (i, key) in chunk {
                        if renewed.iter().any(|r| r.name == key.name) {
                            continue;
                        }
                        let Some(running) = self.running.get_mut(i) else {
                            continue;
                        };
                        running.run.lost = true;
                        if self.job.duplicate == Duplicate::NeedsFencing {
                            running.cancel.cancel();
                            warn!(tick = %running.run.lease.tick, "backfill lease lost; cancelling the run (the job needs fencing)");
                        } else {
                            warn!(tick = %running.run.lease.tick, "backfill lease lost; the run goes on (a duplicate is harmless for this job)");
                        }
                    }
                }
                Err(err) => {
                    let wait = self.renew_backoff.next_delay().min(renew_every);
                    self.next_renew = Instant::now() + wait;
                    return self.store_failed("renewing backfill leases", err, wait);
                }
            }
        }
        self.renew_backoff.reset();
        self.next_renew = Instant::now() + renew_every;
        Ok(())
    }

    /// Sends the queued releases, one call per kind and chunk.
    async fn release(&mut self) -> Result<()> {
        for how in [Release::Completed, Release::Interrupted] {
            loop {
                let batch: Vec<usize> = (0..self.to_release.len())
                    .filter(|&k| self.to_release[k].2 == how)
                    .take(CHUNK)
                    .collect();
                if batch.is_empty() {
                    break;
                }
                let keys: Vec<LeaseKey> = batch
                    .iter()
                    .map(|&k| self.to_release[k].1.clone())
                    .collect();
                let store = self.inner.store.clone();
                let call = async move { store.release(&keys, how).await };
                match self.calls.run("release", call).await {
                    Ok(_) => {
                        self.store_ok();
                        self.release_backoff.reset();
                        self.release_at = None;
                        for k in batch.into_iter().rev() {
                            self.to_release.swap_remove(k);
                        }
                    }
                    Err(err) => {
                        let wait = self.release_backoff.next_delay();
                        self.release_at = Some(Instant::now() + wait);
                        return self.store_failed("releasing backfill leases", err, wait);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::DateTime;

    use super::*;
    use crate::job::Scope;
    use crate::schedule::Schedule;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn a_range_holds_its_ticks_both_ends_included() {
        let every = Schedule::every(Duration::from_secs(10))
            .compile()
            .unwrap_or_else(|e| panic!("{e}"));
        let ticks = ticks_in(&every, at(100), at(150), 100).unwrap_or_default();
        let secs: Vec<i64> = ticks.iter().map(|t| t.at().timestamp()).collect();
        assert_eq!(secs, [100, 110, 120, 130, 140, 150]);
        let inside = ticks_in(&every, at(101), at(149), 100).unwrap_or_default();
        assert_eq!(inside.len(), 4);
        assert_eq!(ticks_in(&every, at(150), at(100), 100), Some(Vec::new()));
        assert_eq!(
            ticks_in(&every, at(100), at(150), 6).map(|t| t.len()),
            Some(6)
        );
        assert_eq!(ticks_in(&every, at(100), at(150), 5), None);
        // A huge range is refused without listing it.
        assert_eq!(ticks_in(&every, at(0), at(i64::from(i32::MAX)), 10), None);
        // From the calendar's first instant, too.
        assert_eq!(ticks_in(&every, DateTime::<Utc>::MIN_UTC, at(0), 10), None);
    }

    #[test]
    fn backfill_leases_are_never_live_leases() {
        let tick = Tick::new(at(1_700_000_000));
        let name = |job: &str, scope, node: &str| {
            let live = LeaseName::for_job(job, scope, node).unwrap_or_else(|e| panic!("{e}"));
            lease_name(&live, tick)
                .unwrap_or_else(|e| panic!("{e}"))
                .to_string()
        };
        assert_eq!(
            name("sweep", Scope::Cluster, "n"),
            "sweep\\@1700000000000000"
        );
        assert_eq!(name("up", Scope::Node, "eu"), "up:eu\\@1700000000000000");
        // A job whose name looks like a backfill lease gets a live lease of its own.
        let backfill = name("sweep", Scope::Cluster, "n");
        for (job, scope, node) in [
            (backfill.as_str(), Scope::Cluster, "n"),
            ("sweep\\", Scope::Node, "@1700000000000000"),
            ("sweep", Scope::Node, "\\@1700000000000000"),
        ] {
            let live = LeaseName::for_job(job, scope, node).unwrap_or_else(|e| panic!("{e}"));
            assert_ne!(live.as_str(), backfill, "{job} {node}");
        }
        // Names too long for a tick suffix are refused, not cut.
        let long = LeaseName::new("x".repeat(190)).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            lease_name(&long, tick),
            Err(Error::InvalidName { .. })
        ));
    }
}
