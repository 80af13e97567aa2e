//! The loop's I/O: sleeps, store calls, spawning runs and feeding results back to
//! each job's [`JobTicks`]. The decisions about ticks live in `ticks.rs`, the store
//! clock in `store_clock.rs`, logging and counting in `observe.rs`.
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

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tracing::{debug, info, warn};

mod backfills;
mod controls;
mod runs;
pub(crate) use backfills::{BackfillDoor, BackfillJob, BackfillRequest, Reply, Stopped};
pub(super) use runs::ended_as;
mod shutdown;
mod takes;

use super::backoff::Backoff;
use super::calls::{Gate, Retry};
use super::decide::{JobTicks, Polling};
use super::health::Heartbeat;
use super::store_clock::{Sample, StoreClock};
use super::{Outcome, Scheduler};
use crate::error::{BoxError, Error, StoreFailure};
use crate::lease::{FencingToken, LeaseKey, LeaseName, Release, Tick};

type RunResult = (usize, Result<(), BoxError>);

/// Whose run a task is: a job's (by entry), or a backfill's (by backfill and tick).
#[derive(Debug, Clone, Copy)]
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

pub(super) struct Engine {
    s: Scheduler,
    jobs: Vec<JobTicks>,
    tasks: JoinSet<RunResult>,
    by_task: HashMap<Id, Slot>,
    /// The tasks of the runs the jobs hold, by job.
    runs: HashMap<usize, runs::RunHandles>,
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
    /// How far ahead of their fire time ticks are taken: a little more than the last
    /// round of takes lasted, so a big tick is answered by the time it fires.
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
            jobs: s.entries.iter().map(|_| JobTicks::default()).collect(),
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
            runs: HashMap::new(),
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
                    )
                }),
            backfills: std::collections::BTreeMap::new(),
            next_backfill: 0,
            failing_since: None,
            last_failure: None,
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
    /// ([`RunHandles::expiry`](runs::RunHandles::expiry)), as a local instant.
    fn tell_expiry(&self, i: usize) {
        if let (Some(running), Some(handles)) = (self.jobs[i].running(), self.runs.get(&i)) {
            let at = local_instant(running.lease.expires_at, Instant::now(), self.db_now());
            handles.expiry.send_replace(Some(at));
        }
    }

    fn store_ok(&mut self) {
        self.beat.store_ok();
        self.failing_since = None;
    }

    fn store_failed(&mut self, what: &str, err: &Error, retry_in: Duration) {
        let failure = err.store_failure().unwrap_or(StoreFailure::Other);
        self.beat.store_failed(failure);
        self.failing_since.get_or_insert_with(Instant::now);
        self.last_failure = Some(failure);
        warn!(error = %err, retry_in = ?retry_in, "{what} failed; retrying");
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
    fn holds_any(&self) -> bool {
        self.jobs
            .iter()
            .any(|j| j.running().is_some_and(|r| !r.lost))
            || self.ctl.as_ref().is_some_and(|c| !c.to_finish.is_empty())
            || self.backfills_hold_any()
    }

    pub(super) async fn run(mut self, shutdown: impl Future<Output = ()>, door: BackfillDoor) {
        let mut shutdown = std::pin::pin!(shutdown);
        self.s.observe.declare(&self.s.declarations());
        info!(node = %self.s.node, jobs = self.s.entries.len(), ttl = ?self.s.settings.ttl.get(), "scheduler starting");
        // Backfills asked for meanwhile wait in the door for the first turn.
        let requests = door.open();
        // Learn the store's clock before computing any tick.
        let mut startup = Backoff::new(self.s.settings.retry_base, self.s.settings.retry_cap);
        loop {
            self.beat.beat();
            if self.sync_clock().await {
                // The first read also paid for the connection's set-up; a second one
                // on the warm connection is kept if its round trip is shorter.
                self.sync_clock().await;
                break;
            }
            self.beat.store_failed(StoreFailure::Unreachable);
            let wait = startup.next_delay();
            warn!(retry_in = ?wait, "reading the store's clock failed; retrying");
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    door.close();
                    return;
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.store_ok();
        let now = self.db_now();
        for (job, e) in self.jobs.iter_mut().zip(&self.s.entries) {
            job.start(&e.cadence, now);
        }
        if let Some(ctl) = &mut self.ctl {
            ctl.started = Some(now);
        }
        self.turns(shutdown, Some(requests)).await;
        door.close();
        self.drain().await;
    }

    /// Runs backfill `request` on this loop, which has no job and ends with it (no
    /// scheduler loop runs to take it). A store that answers no call for a whole
    /// ttl ends the backfill (an error), as it would on the scheduler's loop.
    pub(crate) async fn standalone(mut self, request: BackfillRequest) {
        self.standalone = true;
        self.add_backfill(request);
        let mut startup = Backoff::new(self.s.settings.retry_base, self.s.settings.retry_cap);
        let failure = Error::store_as(
            StoreFailure::Unreachable,
            "reading the store's clock failed",
        );
        while !self.sync_clock().await {
            let wait = startup.next_delay();
            self.store_failed("reading the store's clock", &failure, wait);
            self.settle_backfills();
            if self.backfills.is_empty() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
        self.store_ok();
        let never = std::pin::pin!(std::future::pending::<()>());
        self.turns(never, None).await;
        self.drain().await;
    }

    /// The loop's turns, until `shutdown` (or, on a backfill's own loop, until its
    /// last backfill is over).
    async fn turns(
        &mut self,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
        mut requests: Option<tokio::sync::mpsc::UnboundedReceiver<BackfillRequest>>,
    ) {
        // The store's announcements of control changes: each wakes the loop, whose
        // turn polls when the control loop's own receiver says so.
        let mut announced = None;
        if let Some(ctl) = &mut self.ctl {
            ctl.watch = self.s.store.controls().and_then(|c| c.watch());
            announced = ctl.watch.clone();
        }
        'turns: loop {
            self.beat.beat();
            self.turn().await;
            if self.standalone && self.backfills.is_empty() {
                break;
            }
            let mut wake = self.next_wake();
            // Runs that end before `wake` are handled without a whole turn (which
            // looks at every job: at 10,000 jobs a turn per few ended runs held up
            // the start of the runs still to begin at the same instant).
            loop {
                // Biased, so that a seeded simulation replays exactly; the shutdown
                // first, so that a loop always due (a store slow to answer) still
                // hears it.
                tokio::select! {
                    biased;
                    () = &mut shutdown => break 'turns,
                    () = tokio::time::sleep_until(wake) => break,
                    Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                        let mut ended = Vec::new();
                        ended.extend(self.finished(done));
                        while let Some(done) = self.tasks.try_join_next_with_id() {
                            ended.extend(self.finished(done));
                        }
                        self.beat.beat();
                        match self.wake_after_runs_ended(&ended, wake) {
                            Some(sooner) => wake = sooner,
                            None => break,
                        }
                    }
                    answer = async {
                        match self.backfill_take.as_mut() {
                            Some((_, call)) => call.await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let answer = answer.unwrap_or_else(|join| {
                            Err(Error::store(format!("the take failed: {join}")))
                        });
                        self.on_backfill_take(answer);
                        break;
                    }
                    request = async {
                        match requests.as_mut() {
                            Some(rx) => rx.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        match request {
                            Some(request) => self.add_backfill(request),
                            None => requests = None,
                        }
                        break;
                    }
                    changed = async {
                        match announced.as_mut() {
                            Some(watch) => watch.changed().await.is_ok(),
                            None => std::future::pending().await,
                        }
                    } => {
                        // A store that dropped its watch announces nothing more:
                        // the timer applies (the control loop's receiver says so).
                        if !changed {
                            announced = None;
                        }
                        break;
                    }
                }
            }
        }
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
            if let Some(at) = self.jobs[i].next_wake(self.ahead) {
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
        if Instant::now() >= self.next_renew && self.holds_any() {
            self.renew().await;
        }
        let due = if self.take.ready() {
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

    fn next_wake(&self) -> Instant {
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
        for r in self.jobs.iter().filter_map(JobTicks::running) {
            if !r.lost {
                let at = local_instant(r.lease.expires_at, now, db_now);
                wake = wake.min(at + Duration::from_millis(1));
            }
        }
        if let Some(at) = self.release_wake() {
            wake = wake.min(at);
        }
        if let Some(ctl) = &self.ctl {
            if let Some(at) = ctl.poll_at() {
                wake = wake.min(at);
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
        for at in self.jobs.iter().filter_map(|j| j.next_wake(self.ahead)) {
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

    /// Whether to send the queued releases now: once they have lingered (for more
    /// runs to end and join them), or at once when a take follows; never during the
    /// release's backoff.
    fn releases_due(&mut self, take_follows: bool) -> bool {
        self.note_releases();
        match self.lingered() {
            None => false,
            Some(at) => self.release.ready() && (take_follows || Instant::now() >= at),
        }
    }

    /// Notes when the queue of releases started and when it last grew.
    fn note_releases(&mut self) {
        let len = self.to_release.len();
        if len == 0 {
            self.release_since = None;
        } else if len > self.release_grew.1 || self.release_since.is_none() {
            let now = Instant::now();
            self.release_since.get_or_insert(now);
            self.release_grew.0 = now;
        }
        self.release_grew.1 = len;
    }

    /// When the queued releases have lingered long enough: no release joined them
    /// for [`RELEASE_QUIET`], or [`RELEASE_LINGER`] after the first.
    fn lingered(&self) -> Option<Instant> {
        let since = self.release_since?;
        Some((self.release_grew.0 + self.release_quiet).min(since + self.release_linger))
    }

    /// When the queued releases are next due (see [`Engine::releases_due`]).
    fn release_wake(&self) -> Option<Instant> {
        if self.to_release.is_empty() {
            return None;
        }
        let lingered = self.lingered().unwrap_or_else(Instant::now);
        Some(self.release.at.map_or(lingered, |at| at.max(lingered)))
    }

    /// Sends the queued releases, one call per kind and round. A batch names each
    /// lease once (a store refuses a batch that names one twice), so releases of two
    /// holders of one lease (a run whose release failed, and a later run of the same
    /// job) go in successive rounds.
    async fn flush_releases(&mut self) {
        while !self.to_release.is_empty() {
            for how in [Release::Completed, Release::Interrupted] {
                let mut names = HashSet::new();
                let batch: Vec<usize> = (0..self.to_release.len())
                    .filter(|&k| {
                        let (key, h) = &self.to_release[k];
                        *h == how && names.insert(key.name.clone())
                    })
                    .collect();
                if batch.is_empty() {
                    continue;
                }
                let keys: Vec<LeaseKey> = batch
                    .iter()
                    .map(|&k| self.to_release[k].0.clone())
                    .collect();
                let store = self.s.store.clone();
                let call = async move { store.release(&keys, how).await };
                match self.leases.run("release", call).await {
                    Ok(_) => {
                        for k in batch.into_iter().rev() {
                            self.to_release.swap_remove(k);
                        }
                        self.release.ok();
                        self.store_ok();
                    }
                    Err(err) => {
                        let delay = self.release.failed(self.s.settings.retry_cap);
                        self.store_failed("releasing leases", &err, delay);
                        return;
                    }
                }
            }
        }
    }

    /// Renews every lease this instance holds in one call; a lease not renewed is lost. Runs on its
    /// own clock (every renewal interval, sooner after a failure), whatever the takes
    /// are doing.
    async fn renew(&mut self) {
        let renew_every = self.s.settings.renew_every;
        if self.sampled.elapsed() >= CLOCK_STALE {
            self.sync_clock().await;
        }
        let ours: Vec<(usize, LeaseKey)> = self
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.running().filter(|r| !r.lost).map(|r| (i, r.lease.key())))
            .collect();
        // Triggered runs that ended but whose end is not recorded yet keep their
        // leases until it is.
        let finishing: Vec<LeaseKey> = self.ctl.as_ref().map_or_else(Vec::new, |c| {
            c.to_finish
                .iter()
                .filter(|f| !ours.iter().any(|(_, k)| k.name == f.lease))
                .map(|f| LeaseKey {
                    name: f.lease.clone(),
                    holder: f.holder.clone(),
                })
                .collect()
        });
        let backfilled = self.backfill_keys();
        if ours.is_empty() && finishing.is_empty() && backfilled.is_empty() {
            self.next_renew = Instant::now() + renew_every;
            return;
        }
        let keys: Vec<LeaseKey> = ours
            .iter()
            .map(|(_, k)| k.clone())
            .chain(finishing)
            .chain(backfilled.iter().map(|(_, k)| k.clone()))
            .collect();
        let asked = keys.len();
        let (store, ttl) = (self.s.store.clone(), self.s.settings.ttl);
        let call = async move { store.renew(&keys, ttl).await };
        let result = self.leases.run("renew", call).await;
        match result {
            Ok(renewed) => {
                self.s
                    .observe
                    .renewals(renewed.len(), asked.saturating_sub(renewed.len()));
                self.renew_fails.reset();
                self.store_ok();
                self.next_renew = Instant::now() + renew_every;
                let renewed: HashMap<_, _> = renewed
                    .into_iter()
                    .map(|r| (r.name, (r.expires_at, r.cancel_requested)))
                    .collect();
                for (i, key) in ours {
                    match renewed.get(&key.name) {
                        Some((expires_at, cancel)) => {
                            self.jobs[i].on_renewed(*expires_at);
                            self.tell_expiry(i);
                            if *cancel && let Some(r) = self.jobs[i].on_cancel_requested() {
                                info!(job = %self.s.entries[i].name, tick = %r.lease.tick,
                                    "run cancelled: a newer tick of the job asked for the lease");
                                self.act(i, &mut Vec::new());
                            }
                        }
                        None => self.lost(i, "the renewal found the lease taken over or gone"),
                    }
                }
                for (run, key) in backfilled {
                    let expires_at = renewed.get(&key.name).map(|(at, _)| *at);
                    self.backfill_renewed(run, expires_at);
                }
            }
            Err(err) => {
                // Retried well before the leases expire: within half an interval.
                let delay = self.renew_fails.next_delay().min(renew_every / 2);
                self.next_renew = Instant::now() + delay;
                self.store_failed("renewing leases", &err, delay);
            }
        }
    }

    /// A lease whose expiry passed without a renewal (the store unreachable) is lost:
    /// another instance may take it now.
    fn expire_unrenewed(&mut self) {
        let now = self.db_now();
        for i in 0..self.jobs.len() {
            self.note_expired(i);
            if self.jobs[i].expired_unrenewed(now) {
                self.lost(i, "the lease expired before it could be renewed");
            }
        }
    }

    /// Job `i`'s run lost its lease (`why`).
    fn lost(&mut self, i: usize, why: &str) {
        let fenced = self.s.entries[i].cadence.fenced;
        if let Some(r) = self.jobs[i].on_lost(fenced) {
            let lease = (r.lease.tick, r.lease.token);
            self.report_lost(i, why, lease);
        }
    }

    /// Logs and counts the loss of job `i`'s lease, and carries out what the
    /// decisions said (cancel the run, or an attempt not begun).
    fn report_lost(&mut self, i: usize, why: &str, (tick, token): (Tick, FencingToken)) {
        let e = &self.s.entries[i];
        self.s.observe.outcome(&e.name, Outcome::LeaseLost);
        if e.cadence.fenced {
            warn!(job = %e.name, tick = %tick, token = %token, reason = why,
                "lease lost: cancelling the run (the job needs fencing)");
        } else {
            warn!(job = %e.name, tick = %tick, reason = why,
                "lease lost: the run goes on (a duplicate is harmless for this job)");
        }
        self.act(i, &mut Vec::new());
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
