//! The loop's I/O: sleeps, store calls, spawning runs and feeding results back to
//! each job's [`JobTicks`](super::decide::JobTicks). The decisions about ticks live
//! in `ticks.rs`, the store clock in `store_clock.rs`, logging and counting in
//! `observe.rs`; which jobs a turn visits in `jobs.rs`.
//!
//! Three kinds of store call, each with its own retry: takes (due ticks, ahead of
//! their instant in one call of up to [`TAKE_MOST`] names, or, with less time left,
//! in growing chunks from [`TAKE_CHUNK`] whose runs start as each is answered),
//! renewals (driven by lease expiry, only while a lease is held: never held up by a
//! failing take) and releases (coalesced while runs keep ending, see
//! [`RELEASE_QUIET`], always sent before a take, during the shutdown drain too).
//!
//! The store's clock is learnt from the takes' own answers ([`Taken::now`]); it is
//! read on its own only at start-up and when no sample was taken for
//! [`CLOCK_STALE`], with a take or a renewal: an instance that holds nothing sends
//! nothing between its ticks.
//!
//! A turn of the loop looks at every job; runs that end are handled without one
//! unless their job needs the loop ([`Engine::wake_after_runs_ended`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::{debug, info, warn};

mod backfills;
mod controls;
mod jobs;
mod leases;
mod runs;
pub(crate) use backfills::{BackfillDoor, BackfillJob, BackfillRequest, Reply, Stopped};
pub(super) use runs::ended_as;
mod shutdown;
mod takes;
mod tasks;
mod turns;

use super::Scheduler;
use super::backoff::Backoff;
use super::calls::{Gate, Retry};
use super::decide::Polling;
use super::health::Heartbeat;
use super::store_clock::{Sample, StoreClock};
use crate::error::{BoxError, Error, StoreFailure};
use crate::lease::{LeaseKey, LeaseName, Release, Tick};

type RunResult = (usize, Result<(), BoxError>);

/// Whose run a task is: a job's (by entry), or a backfill's (by backfill and tick).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Job(usize),
    Backfill(u64, usize),
}

/// How long cancelled runs get to return at shutdown before they are aborted.
const CANCEL_NOTICE: Duration = Duration::from_secs(1);

/// The first chunk of a round of takes that is late (its ticks fire before one
/// call for all could be answered): its runs start after one short call instead of
/// after one statement for all (about 100 names per statement is where a
/// statement's fixed cost stops mattering); each next chunk is twice as big.
const TAKE_CHUNK: usize = 100;

/// The most leases one take statement asks for (a round taken ahead of its ticks
/// goes in calls this big: at 10,000 jobs one statement of about 200 ms, well within
/// the store's statement timeout).
const TAKE_MOST: usize = 10_000;

/// Finished runs' releases are sent once none has joined them for this long (runs
/// of one tick end within a few milliseconds of each other), or [`RELEASE_LINGER`]
/// after the first, whichever comes first (each at most an eighth of the ttl). A
/// take never waits for them: pending releases go out first.
const RELEASE_QUIET: Duration = Duration::from_millis(5);

/// The most a finished run's release waits for others to join it in one
/// statement (10,000 runs of one tick take some 40 ms to start and end).
const RELEASE_LINGER: Duration = Duration::from_millis(100);

/// The most a tick is taken ahead of its fire time (and at most half its
/// window, see `JobTicks::due`).
const MAX_AHEAD: Duration = Duration::from_secs(1);

/// Added to the lead of every round of takes (see `Engine::take_due`): even a
/// round of one quick statement is answered before its ticks fire.
const AHEAD_MARGIN: Duration = Duration::from_millis(10);

/// How old the clock sample the estimate rests on may grow before a take or
/// renewal also reads the store's clock on its own (the takes' answers normally keep
/// it fresh; a big take's sample is looser by its commit, so at 10,000 jobs a tick
/// this is one read a minute). The estimate loosens with age by the drift allowed
/// (`store_clock.rs`): 6 ms at a minute.
const CLOCK_STALE: Duration = Duration::from_secs(60);

/// The end of a triggered run, to record: [`Controls::finish_trigger`] also hands
/// the run's lease back in the same statement, restoring the job's row as it was
/// before the claim (a scheduled tick's completion untouched).
///
/// [`Controls::finish_trigger`]: crate::Controls::finish_trigger
pub(super) struct Finish {
    pub(super) id: crate::control::TriggerId,
    /// The run's lease, still renewed until the end is recorded: were it to expire
    /// meanwhile, another instance could claim the trigger again.
    pub(super) lease: crate::lease::LeaseName,
    pub(super) holder: crate::lease::Holder,
    pub(super) outcome: crate::outcome::Outcome,
    pub(super) error: Option<String>,
}

/// How often a store outage is logged again while it lasts.
const OUTAGE_REMINDER: Duration = Duration::from_secs(30);

/// A store outage, as its log lines need it. It lasts from the first failed call
/// until a turn after the store answers again has looked at every due tick (ticks
/// whose take went unanswered are only passed over once a later tick comes due,
/// which may be after the first answer: they belong to the outage's summary, not to
/// a warning each).
#[derive(Debug, Default)]
struct Outage {
    /// When the first call failed.
    since: Option<Instant>,
    /// When the store first answered again (none while it still fails).
    answered: Option<Instant>,
    calls_failed: u64,
    /// Ticks passed over meanwhile (each logged at debug only).
    passed_over: u64,
    /// When it was last logged.
    logged: Option<Instant>,
}

pub(super) struct Engine {
    s: Scheduler,
    /// The jobs' tick states, indexed by when each next needs the loop.
    jobs: jobs::Jobs,
    /// The run tasks, and the runs waiting for their instant.
    tasks: tasks::Tasks,
    /// The tasks of the runs the jobs hold, by job.
    runs: runs::RunTable,
    /// Releases not yet acknowledged by the store.
    to_release: Vec<(LeaseKey, Release)>,
    /// Since when `to_release` has not been empty.
    release_since: Option<Instant>,
    /// When `to_release` last grew, and how long it was then.
    release_grew: (Instant, usize),
    release_quiet: Duration,
    release_linger: Duration,
    leases: Gate,
    clock_gate: Gate,
    clock: StoreClock,
    /// When the clock estimate last moved to a sample.
    sampled: Instant,
    take: Retry,
    /// How far ahead of their fire time the rounds of takes want ticks taken: a
    /// little more than the last round lasted, so a big tick is answered by the
    /// time it fires. The lead in use moves to it in steps (`Jobs::taking_ahead`).
    ahead: TimeDelta,
    /// What a take costs per name in a big round, once one was answered.
    take_cost: Option<Duration>,
    release: Retry,
    renew_fails: Backoff,
    next_renew: Instant,
    polling: Polling,
    beat: Arc<Heartbeat>,
    /// Shutting down: failed runs are not retried.
    draining: bool,
    /// Runs of older ticks on other instances to ask to stop, for newer ticks
    /// (overlap policy "cancel running"): lease name and the newer tick.
    to_cancel: Vec<(LeaseName, Tick)>,
    /// Operators' controls, when the store keeps them and polling is on.
    ctl: Option<controls::ControlLoop>,
    /// The backfills under way, by number.
    backfills: std::collections::BTreeMap<u64, backfills::Unit>,
    next_backfill: u64,
    /// Since when every store call has failed, and the last failure's kind.
    failing_since: Option<Instant>,
    last_failure: Option<StoreFailure>,
    /// The outage under way, for its log lines: calls failed, ticks passed over, and
    /// when it was last logged.
    outage: Outage,
    /// A loop of a backfill's own: it ends with its last backfill.
    standalone: bool,
    /// The backfills' take in flight (what it asked for, and its answer to come),
    /// through a gate of its own, with its own backoff.
    backfill_take: Option<backfills::BackfillTake>,
    backfill_gate: Gate,
    backfill_retry: Retry,
}

impl Engine {
    pub(super) fn new(s: Scheduler) -> Self {
        let renew_every = s.settings.renew_every;
        // Two renewal periods (a renewal that late is as good as lost), within 1 … 30 s.
        let limit = renew_every
            .saturating_mul(2)
            .clamp(Duration::from_secs(1), Duration::from_secs(30));
        Self {
            jobs: jobs::Jobs::new(s.entries.len()),
            tasks: tasks::Tasks::new(),
            runs: runs::RunTable::default(),
            to_release: Vec::new(),
            release_since: None,
            release_grew: (Instant::now(), 0),
            release_quiet: RELEASE_QUIET.min(s.settings.ttl.get() / 8),
            release_linger: RELEASE_LINGER.min(s.settings.ttl.get() / 8),
            leases: Gate::new(limit, s.observe.clone()),
            clock_gate: Gate::new(limit, s.observe.clone()),
            clock: StoreClock::default(),
            sampled: Instant::now(),
            take: Retry::new(s.settings.retry_base, s.settings.retry_cap),
            ahead: TimeDelta::zero(),
            take_cost: None,
            release: Retry::new(s.settings.retry_base, s.settings.retry_cap),
            renew_fails: Backoff::new(s.settings.retry_base, s.settings.retry_cap),
            next_renew: Instant::now() + renew_every,
            polling: Polling {
                overlap: renew_every.min(Duration::from_secs(1)),
                same_tick: renew_every,
                ttl: s.settings.ttl.get(),
            },
            beat: s.health.heartbeat(),
            draining: false,
            to_cancel: Vec::new(),
            ctl: s
                .settings
                .control_poll
                .filter(|_| s.store.controls().is_some())
                .map(|every| {
                    controls::ControlLoop::new(
                        every,
                        Gate::new(limit, s.observe.clone()),
                        Retry::new(s.settings.retry_base, s.settings.retry_cap),
                        &s.entries,
                        s.handlers.is_empty(),
                        controls::Beats::new(
                            s.settings.heartbeat,
                            s.settings.version.clone(),
                            Retry::new(s.settings.retry_base, s.settings.retry_cap),
                        ),
                        // An instance with no handler runs no row: nothing to load.
                        (s.settings.schedules_when_due && !s.handlers.is_empty()).then_some((
                            s.settings.look_ahead,
                            renew_every.saturating_mul(2) + Duration::from_secs(1),
                            s.settings.schedules_held,
                        )),
                    )
                }),
            backfills: std::collections::BTreeMap::new(),
            next_backfill: 0,
            failing_since: None,
            last_failure: None,
            outage: Outage::default(),
            standalone: false,
            backfill_take: None,
            backfill_gate: Gate::new(limit, s.observe.clone()),
            backfill_retry: Retry::new(s.settings.retry_base, s.settings.retry_cap),
            s,
        }
    }

    fn db_now(&self) -> DateTime<Utc> {
        self.clock.store_time(self.s.settings.clock.now())
    }

    /// Tells the task of job `i`'s run when its lease expires unless renewed
    /// ([`RunHandles::tell_expiry`](runs::RunHandles::tell_expiry)), as a local
    /// instant: a fenced run's only (no other task watches it).
    fn tell_expiry(&self, i: usize) {
        if let (Some(running), Some(handles)) = (self.jobs[i].running(), self.runs.get(&i))
            && handles.fenced()
        {
            let at = local_instant(running.lease.expires_at, Instant::now(), self.db_now());
            handles.tell_expiry(at);
        }
    }

    fn store_ok(&mut self) {
        self.beat.store_ok();
        if self.failing_since.take().is_some() {
            self.outage.answered = Some(Instant::now());
        }
    }

    /// Ends an outage the store has answered since, with one line: called after a
    /// turn that looked at every due tick, so that the ticks the outage passed over
    /// are all in it.
    fn outage_over(&mut self) {
        let (Some(since), Some(answered)) = (self.outage.since, self.outage.answered) else {
            return;
        };
        let o = std::mem::take(&mut self.outage);
        info!(after = ?answered.duration_since(since), calls_failed = o.calls_failed,
            ticks_passed_over = o.passed_over, "the store answers again");
    }

    /// A store call failed: the outage's first failure is logged, then a reminder at
    /// most every [`OUTAGE_REMINDER`]; each failure in between at debug (the metrics
    /// and the health report count them all).
    fn store_failed(&mut self, what: &str, err: &Error, retry_in: Duration) {
        let failure = err.store_failure().unwrap_or(StoreFailure::Other);
        self.beat.store_failed(failure);
        self.last_failure = Some(failure);
        self.outage.calls_failed += 1;
        self.outage.answered = None;
        let now = Instant::now();
        if self.failing_since.is_none() {
            self.failing_since = Some(now);
        }
        let Some(since) = self.outage.since else {
            self.outage.since = Some(now);
            self.outage.logged = Some(now);
            warn!(error = %err, retry_in = ?retry_in,
                "{what} failed: the store is unreachable or failing; retrying with backoff \
                 (runs under way go on; one line when it answers again)");
            return;
        };
        if self
            .outage
            .logged
            .is_none_or(|at| now.duration_since(at) >= OUTAGE_REMINDER)
        {
            self.outage.logged = Some(now);
            warn!(error = %err, for_ = ?since.elapsed(), calls_failed = self.outage.calls_failed,
                "the store is still failing; retrying");
        } else {
            debug!(error = %err, retry_in = ?retry_in, "{what} failed; retrying");
        }
    }

    /// Reads the store's clock (unless a read is still in flight) and updates the
    /// offset. Returns whether a sample was read.
    async fn sync_clock(&mut self) -> bool {
        let local = self.s.settings.clock;
        let store = self.s.store.clone();
        let read = self
            .clock_gate
            .try_run("now", async move {
                let before = local.now();
                let db = store.now().await?;
                Ok((before, db, local.now()))
            })
            .await;
        match read {
            None => false,
            Some(Ok((before, db, after))) => {
                self.note_sample(before, after, db);
                true
            }
            Some(Err(err)) => {
                debug!(error = %err, "reading the store's clock failed");
                false
            }
        }
    }

    /// A reading `db` of the store's clock, made between the local instants `before`
    /// and `after`.
    fn note_sample(&mut self, before: DateTime<Utc>, after: DateTime<Utc>, db: DateTime<Utc>) {
        match self.clock.sample(before, after, db) {
            Sample::Taken { offset, moved } => {
                self.sampled = Instant::now();
                if moved {
                    info!(
                        offset_ms = offset.num_milliseconds(),
                        "clock offset to the store"
                    );
                }
                let seconds = offset.num_microseconds().unwrap_or(0) as f64 / 1e6;
                self.s.observe.clock_offset(seconds);
            }
            Sample::Looser { rtt } => debug!(
                round_trip_ms = rtt.num_milliseconds(),
                "clock sample looser than the estimate; the estimate stands"
            ),
        }
    }

    /// Whether this instance holds a lease it still renews.
    fn holds_any(&mut self) -> bool {
        self.jobs.holds_any()
            || self.ctl.as_ref().is_some_and(|c| !c.to_finish.is_empty())
            || self.backfills_hold_any()
    }

    /// After the runs of jobs `ended` ended, the loop's next wake-up if it can wait
    /// until then (or until the queued releases are due, or one of those jobs needs
    /// the loop, if sooner), or `None` when it needs a whole turn now: one of those
    /// jobs has a tick to take (a tick buffered behind the run), or a triggered run's
    /// end is to be recorded.
    fn wake_after_runs_ended(&mut self, ended: &[usize], wake: Instant) -> Option<Instant> {
        if self.ctl.as_ref().is_some_and(|c| !c.to_finish.is_empty()) {
            return None;
        }
        self.note_releases();
        let (now, db_now) = (Instant::now(), self.db_now());
        let mut wake = wake;
        if let Some(at) = self.release_wake() {
            wake = wake.min(at);
        }
        if let Some(at) = self.backfills_wake() {
            wake = wake.min(at);
        }
        for &i in ended {
            if let Some(at) = self.jobs[i].next_wake(self.jobs.lead()) {
                if at <= db_now {
                    return None;
                }
                wake = wake.min(self.job_wake(at, now, db_now));
            }
        }
        Some(wake)
    }

    /// One turn of the loop: renew (when due and something is held), release what
    /// ended (at once if a take follows, else once the linger is over), take due
    /// ticks, notice leases that expired unrenewed.
    async fn turn(&mut self) {
        self.poll_answered().await;
        if Instant::now() >= self.next_renew && self.holds_any() {
            self.renew().await;
        }
        let take_ready = self.take.ready();
        let due = if take_ready {
            self.collect_due()
        } else {
            Vec::new()
        };
        if self.releases_due(!due.is_empty()) {
            self.flush_releases().await;
        }
        if !due.is_empty() {
            self.take_due(due).await;
        }
        self.send_backfill_take();
        self.controls_turn().await;
        if !self.to_cancel.is_empty() {
            self.ask_cancels().await;
        }
        self.expire_unrenewed();
        self.settle_backfills();
        if take_ready {
            self.outage_over();
        }
    }

    /// Asks the holders of older ticks to stop, one statement each (rare: only jobs
    /// whose newest tick wins, only when a tick finds the previous one running
    /// elsewhere). A failed ask is logged; the tick still waits for the run to end.
    async fn ask_cancels(&mut self) {
        for (name, newer) in std::mem::take(&mut self.to_cancel) {
            let store = self.s.store.clone();
            let lease = name.clone();
            let call = async move { store.request_cancel(&lease, newer).await };
            match self.leases.run("request cancel", call).await {
                Ok(marked) => {
                    debug!(lease = %name, newer = %newer, marked, "asked the holder to stop")
                }
                Err(err) => warn!(lease = %name, newer = %newer, error = %err,
                    "could not ask the holder of an older tick to stop; the newer tick waits for it"),
            }
        }
    }

    fn next_wake(&mut self) -> Instant {
        let (now, db_now) = (Instant::now(), self.db_now());
        // At least once a renewal period, even when nothing needs the store: the
        // readiness probe watches the loop turn (a turn that has nothing to do sends
        // nothing).
        let mut wake = now + self.s.settings.renew_every;
        if self.holds_any() {
            wake = wake.min(self.next_renew);
        }
        // A lease expiring unrenewed is lost then (a run that needs fencing is
        // cancelled by its own task; the loop records it).
        // (The floor may be early, after a renewal: that turn settles it.)
        if let Some(at) = self.jobs.expiry_floor() {
            let at = local_instant(at, now, db_now);
            wake = wake.min(at + Duration::from_millis(1));
        }
        if let Some(at) = self.release_wake() {
            wake = wake.min(at);
        }
        if let Some(ctl) = &self.ctl {
            if let Some(at) = ctl.poll_at() {
                wake = wake.min(at);
            }
            if !self.standalone {
                wake = wake.min(ctl.beats.next);
            }
            if !ctl.rows.is_empty() {
                wake = now;
            }
            if !ctl.to_finish.is_empty() {
                wake = wake.min(ctl.finish_retry.at.unwrap_or(now));
            }
        }
        // A job's wake-up on the store clock, as a local instant; not before the take's
        // backoff allows.
        if let Some(at) = self.jobs.next_wake() {
            wake = wake.min(self.job_wake(at, now, db_now));
        }
        if let Some(at) = self.backfills_wake() {
            wake = wake.min(at);
        }
        wake
    }

    /// A job's wake-up `at` on the store clock as a local instant (`now` locally is
    /// `db_now` there), not before the take's backoff allows.
    fn job_wake(&self, at: DateTime<Utc>, now: Instant, db_now: DateTime<Utc>) -> Instant {
        local_instant(at, now, db_now).max(self.take.at.unwrap_or(now))
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("jobs", &self.jobs.len())
            .field("running", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

/// The local instant at which the store's clock reads `at`, when it reads `db_now`
/// locally at `now` (`now` itself if `at` has passed).
fn local_instant(at: DateTime<Utc>, now: Instant, db_now: DateTime<Utc>) -> Instant {
    now + (at - db_now).to_std().unwrap_or(Duration::ZERO)
}
