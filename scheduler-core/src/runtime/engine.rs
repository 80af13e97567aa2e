//! The loop: due ticks → one batched take → a task per won tick; one batched renewal
//! every interval; releases as runs end; graceful drain at shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::backoff::Backoff;
use super::health::Heartbeat;
use super::{Entry, Outcome, RunOutcome, RunRecord, Scheduler};
use crate::error::BoxError;
use crate::job::{Duplicate, JobContext};
use crate::lease::{Held, Lease, LeaseKey, Release, TakeRequest, Tick};

/// A tick that is due and not yet run here.
#[derive(Debug, Clone, Copy)]
struct Pending {
    tick: Tick,
    /// A take for it was answered (and lost) at least once.
    attempted: bool,
    /// When to ask again after losing (store clock); `None`: at once.
    retry_at: Option<DateTime<Utc>>,
}

#[derive(Debug)]
struct Running {
    task: Id,
    started: DateTime<Utc>,
    lease: Lease,
    cancel: CancellationToken,
    lost: bool,
}

#[derive(Debug, Default)]
struct JobState {
    /// The next tick not yet due, and the instant (store clock) it fires, jitter included.
    next: Option<(Tick, DateTime<Utc>)>,
    pending: Option<Pending>,
    running: Option<Running>,
}

type RunResult = (usize, Result<(), BoxError>);

/// How long cancelled runs get to return at shutdown before they are aborted.
const CANCEL_NOTICE: Duration = Duration::from_secs(1);

pub(super) struct Engine {
    s: Scheduler,
    renew_every: Duration,
    states: Vec<JobState>,
    tasks: JoinSet<RunResult>,
    by_task: HashMap<Id, usize>,
    /// Releases not yet acknowledged by the store.
    to_release: Vec<(LeaseKey, Release)>,
    /// How long one store call may take before it is abandoned as failed: two renewal
    /// periods (a renewal that late is as good as lost), within 1 s … 30 s.
    call_limit: Duration,
    /// Store clock minus local clock.
    offset: TimeDelta,
    /// The shortest round trip of a clock read so far, and how many samples in a row
    /// were discarded for a long one.
    clock_rtt: Option<TimeDelta>,
    clock_discarded: u32,
    /// How many clock samples were taken.
    clock_samples: u32,
    backoff: Backoff,
    /// No store call before this instant (after a failure).
    retry_at: Option<Instant>,
    next_renew: Instant,
    /// How soon to ask again for a tick whose previous run still holds the lease
    /// elsewhere.
    lost_poll: Duration,
    beat: Arc<Heartbeat>,
}

/// Clock samples with round trips up to this long are always taken.
const MAX_CLOCK_RTT: TimeDelta = TimeDelta::milliseconds(250);
/// How many long-round-trip samples in a row are discarded before one is taken anyway.
const CLOCK_DISCARDS: u32 = 5;

impl Engine {
    pub(super) fn new(s: Scheduler) -> Self {
        let renew_every = s.config.renew_every.unwrap_or(s.ttl.get() / 4);
        let states = s.entries.iter().map(|_| JobState::default()).collect();
        Self {
            renew_every,
            states,
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
            to_release: Vec::new(),
            call_limit: renew_every
                .saturating_mul(2)
                .clamp(Duration::from_secs(1), Duration::from_secs(30)),
            offset: TimeDelta::zero(),
            clock_rtt: None,
            clock_discarded: 0,
            clock_samples: 0,
            backoff: Backoff::new(s.config.retry_base, s.config.retry_cap),
            retry_at: None,
            next_renew: Instant::now() + renew_every,
            lost_poll: renew_every.min(Duration::from_secs(1)),
            beat: s.health.heartbeat(),
            s,
        }
    }

    fn db_now(&self) -> DateTime<Utc> {
        self.s.config.clock.now() + self.offset
    }

    /// The local instant at which the store's clock reads `at`.
    fn instant_of(&self, at: DateTime<Utc>) -> Instant {
        let ahead = (at - self.db_now()).to_std().unwrap_or(Duration::ZERO);
        Instant::now() + ahead
    }

    fn store_ok(&mut self) {
        self.backoff.reset();
        self.beat.store_ok();
    }

    fn store_failed(&mut self, what: &str, err: &crate::Error) {
        self.beat.store_failed();
        let delay = self.backoff.next_delay();
        warn!(error = %err, retry_in = ?delay, "{what} failed; retrying");
        self.retry_at = Some(Instant::now() + delay);
    }

    fn store_ready(&self) -> bool {
        self.retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// Measures the offset of the store's clock from ours (halfway through the call).
    async fn sync_clock(&mut self) -> bool {
        let clock = self.s.config.clock;
        let before = clock.now();
        match self
            .s
            .observe
            .timed("now", self.call_limit, self.s.store.now())
            .await
        {
            Ok(db) => {
                let after = clock.now();
                let rtt = after - before;
                // The read happened somewhere within the round trip; the midpoint is
                // off by up to half of it. A read stuck behind a pool wait or a stalled
                // server would shift the schedule by seconds (and take ticks early):
                // such a sample is discarded while a good offset is known, unless
                // round trips stay long (the network changed).
                if let Some(best) = self.clock_rtt
                    && rtt > best
                    && (rtt > (best * 4).max(MAX_CLOCK_RTT)
                        || (self.clock_discarded == 0 && self.clock_samples == 1))
                    && self.clock_discarded < CLOCK_DISCARDS
                {
                    self.clock_discarded += 1;
                    debug!(
                        round_trip_ms = rtt.num_milliseconds(),
                        best_ms = best.num_milliseconds(),
                        "clock sample discarded: its round trip was too long"
                    );
                    return true;
                }
                // After a run of long round trips the one taken becomes the new
                // best: the network changed.
                self.clock_rtt = Some(match self.clock_rtt {
                    Some(best) if self.clock_discarded < CLOCK_DISCARDS => best.min(rtt),
                    _ => rtt,
                });
                self.clock_discarded = 0;
                self.clock_samples = self.clock_samples.saturating_add(1);
                let mid = before + rtt / 2;
                let offset = db - mid;
                if (offset - self.offset).num_milliseconds().abs() > 1000 {
                    info!(
                        offset_ms = offset.num_milliseconds(),
                        "clock offset to the store"
                    );
                }
                self.offset = offset;
                self.s
                    .observe
                    .clock_offset(offset.num_microseconds().unwrap_or(0) as f64 / 1e6);
                true
            }
            Err(err) => {
                self.store_failed("reading the store's clock", &err);
                false
            }
        }
    }

    fn declare(&self) {
        for d in self.s.declarations() {
            info!(job = %d.job, lease = %d.lease, scope = %d.scope, schedule = %d.schedule,
                "job needs fencing: it gets a fencing token and is cancelled if its lease is lost");
        }
    }

    /// Sets each job's first due tick: the latest one within its catch-up window (the
    /// store refuses it if it already ran), and the next one after now.
    fn init_ticks(&mut self) {
        let now = self.db_now();
        for (i, e) in self.s.entries.iter().enumerate() {
            let state = &mut self.states[i];
            let probe = e.schedule.next_after(now - TimeDelta::days(400));
            let window = probe.map(|t| window(e, t)).unwrap_or(TimeDelta::zero());
            state.pending = e
                .schedule
                .latest_at_or_before(now, window)
                .map(|tick| Pending {
                    tick,
                    attempted: false,
                    retry_at: None,
                });
            state.next = e.schedule.next_after(now).map(|t| (t, fire_at(e, t)));
        }
    }

    pub(super) async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        self.declare();
        info!(node = %self.s.node, jobs = self.s.entries.len(), ttl = ?self.s.ttl.get(), "scheduler starting");
        // Learn the store's clock before computing any tick.
        loop {
            self.beat.beat();
            if self.sync_clock().await {
                // The first read also paid for the connection's set-up; a second one
                // on the warm connection is kept if its round trip is shorter.
                self.sync_clock().await;
                self.store_ok();
                self.retry_at = None;
                break;
            }
            let wait = self.retry_at.unwrap_or_else(Instant::now);
            tokio::select! {
                () = tokio::time::sleep_until(wait) => {}
                () = &mut shutdown => return,
            }
        }
        self.init_ticks();
        loop {
            self.beat.beat();
            self.turn().await;
            let wake = self.next_wake();
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.finished(done);
                    while let Some(done) = self.tasks.try_join_next_with_id() {
                        self.finished(done);
                    }
                }
                () = &mut shutdown => break,
            }
        }
        self.drain().await;
    }

    /// One turn of the loop: take due ticks, renew, release, notice lost leases.
    async fn turn(&mut self) {
        let renew_due = Instant::now() >= self.next_renew;
        if self.store_ready() {
            self.take_due().await;
        }
        if renew_due && self.store_ready() {
            self.renew().await;
        }
        if !self.to_release.is_empty() && self.store_ready() {
            self.flush_releases().await;
        }
        self.expire_unrenewed();
    }

    fn next_wake(&self) -> Instant {
        // After a failure, nothing can happen before the backoff allows a retry.
        if let Some(at) = self.retry_at
            && at > Instant::now()
        {
            return at;
        }
        let mut wake = self.next_renew;
        for state in &self.states {
            let retry = state.pending.and_then(|p| p.retry_at);
            for at in state.next.map(|(_, at)| at).into_iter().chain(retry) {
                wake = wake.min(self.instant_of(at));
            }
        }
        wake
    }

    /// Collects due ticks (new ones, and lost ones whose retry time has come within
    /// their catch-up window), and takes them all in one store call.
    async fn take_due(&mut self) {
        let now = self.db_now();
        let mut requests = Vec::new();
        let mut asked = Vec::new();
        for (i, e) in self.s.entries.iter().enumerate() {
            let state = &mut self.states[i];
            // (After a long pause many ticks may be due at once: each superseded one is
            // counted, and logged once.)
            let mut superseded = 0u64;
            while let Some((tick, at)) = state.next {
                if at > now {
                    break;
                }
                if let Some(old) = state.pending.take()
                    && !old.attempted
                {
                    self.s.observe.outcome(&e.name, Outcome::Missed);
                    superseded += 1;
                }
                state.pending = Some(Pending {
                    tick,
                    attempted: false,
                    retry_at: None,
                });
                state.next = e.schedule.next_after(tick.at()).map(|t| (t, fire_at(e, t)));
            }
            if superseded > 0 {
                warn!(job = %e.name, missed = superseded, "ticks missed: superseded before they could be attempted");
            }
            let Some(pending) = state.pending else {
                continue;
            };
            if let Some(running) = &state.running {
                state.pending = None;
                if !pending.attempted {
                    self.s.observe.outcome(&e.name, Outcome::SkippedOverlap);
                    info!(job = %e.name, tick = %pending.tick, running = %running.lease.tick,
                        "tick skipped: the previous run still holds the lease");
                }
                continue;
            }
            if now - pending.tick.at() > window(e, pending.tick) {
                state.pending = None;
                if !pending.attempted {
                    self.s.observe.outcome(&e.name, Outcome::Missed);
                    warn!(job = %e.name, tick = %pending.tick, "tick missed: its catch-up window closed");
                }
                continue;
            }
            if pending.retry_at.is_none_or(|at| at <= now) {
                requests.push(TakeRequest::new(e.lease.clone(), pending.tick));
                asked.push(i);
            }
        }
        if requests.is_empty() {
            return;
        }
        let span = tracing::debug_span!("take", ticks = requests.len(), node = %self.s.node);
        let call = self.s.store.take(&requests, self.s.ttl).instrument(span);
        let taken = self.s.observe.timed("take", self.call_limit, call).await;
        match taken {
            Ok(taken) => {
                self.store_ok();
                self.retry_at = None;
                let mut won: HashMap<_, _> =
                    taken.won.into_iter().map(|l| (l.name.clone(), l)).collect();
                let held: HashMap<_, _> = taken
                    .held
                    .into_iter()
                    .map(|h| (h.name.clone(), h))
                    .collect();
                for i in asked {
                    let lease = self.s.entries[i].lease.clone();
                    match won.remove(&lease) {
                        Some(lease) => {
                            if self.states[i].pending.is_some_and(|p| p.attempted) {
                                info!(job = %self.s.entries[i].name, tick = %lease.tick, token = %lease.token,
                                    "took over a tick another holder had not completed");
                            }
                            self.states[i].pending = None;
                            self.start(i, lease);
                        }
                        None => self.lost_take(i, held.get(&lease), now),
                    }
                }
            }
            Err(err) => self.store_failed("taking due leases", &err),
        }
    }

    /// A take of job `i`'s pending tick lost: decide when asking again could win.
    fn lost_take(&mut self, i: usize, held: Option<&Held>, now: DateTime<Utc>) {
        let e = &self.s.entries[i];
        let Some(p) = &mut self.states[i].pending else {
            return;
        };
        if !p.attempted {
            p.attempted = true;
            self.s.observe.outcome(&e.name, Outcome::HeldElsewhere);
            debug!(job = %e.name, tick = %p.tick, "tick held elsewhere");
        }
        let window = window(e, p.tick);
        let poll = now
            + (TimeDelta::from_std(self.lost_poll).unwrap_or(TimeDelta::seconds(1)))
                .min(window / 4);
        let retry_at = match held {
            // Done elsewhere, or a later tick already taken: nothing left to do.
            Some(h) if h.tick > p.tick || (h.tick == p.tick && h.completed) => None,
            // Running elsewhere (this tick, or still the previous one): it frees up when
            // it expires, or sooner if released (a graceful shutdown interrupts it, or
            // the previous run ends). Ask again by then, at least every `lost_poll`.
            Some(h) => Some(h.expires_at.min(poll)),
            None => Some(poll),
        };
        match retry_at {
            Some(at) if at - p.tick.at() <= window => p.retry_at = Some(at),
            _ => self.states[i].pending = None,
        }
    }

    fn start(&mut self, i: usize, lease: Lease) {
        let e = &self.s.entries[i];
        let cancel = CancellationToken::new();
        let ctx = JobContext {
            job: e.name.clone(),
            tick: lease.tick,
            node: self.s.node.clone(),
            lease: lease.name.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            cancel: cancel.clone(),
            state: self.s.state.clone(),
        };
        let started = self.db_now();
        let lateness = (started - lease.tick.at()).num_milliseconds();
        self.s.observe.started(
            &e.name,
            (started - lease.tick.at()).to_std().unwrap_or_default(),
        );
        let span = info_span!("run", job = %e.name, tick = %lease.tick, scope = %e.scope,
            node = %self.s.node, holder = %lease.holder, token = %lease.token);
        span.in_scope(|| debug!(lateness_ms = lateness, "run starting"));
        let job = e.job.clone();
        let task = self
            .tasks
            .spawn(async move { (i, job.run(ctx).await) }.instrument(span));
        self.by_task.insert(task.id(), i);
        self.states[i].running = Some(Running {
            task: task.id(),
            started,
            lease,
            cancel,
            lost: false,
        });
    }

    fn finished(&mut self, done: Result<(Id, RunResult), tokio::task::JoinError>) {
        let (id, result) = match done {
            Ok((id, (_, result))) => (id, result),
            Err(err) => {
                let why: BoxError = if err.is_panic() {
                    "the job panicked".into()
                } else {
                    "the job was cancelled".into()
                };
                (err.id(), Err(why))
            }
        };
        let Some(i) = self.by_task.remove(&id) else {
            return;
        };
        let e = &self.s.entries[i];
        let Some(running) = self.states[i].running.take() else {
            return;
        };
        if running.task != id {
            return;
        }
        match &result {
            Ok(()) if !running.lost => {
                self.s.observe.outcome(&e.name, Outcome::Ran);
                debug!(job = %e.name, tick = %running.lease.tick, "run finished");
            }
            Ok(()) => {
                self.s.observe.outcome(&e.name, Outcome::Ran);
                warn!(job = %e.name, tick = %running.lease.tick, "run finished after its lease was lost; the tick may have run twice");
            }
            Err(err) => {
                self.s.observe.outcome(&e.name, Outcome::Failed);
                error!(job = %e.name, tick = %running.lease.tick, error = %err, "run failed");
            }
        }
        self.record_end(i, &running, result.as_ref().err().map(|e| e.to_string()));
        if !running.lost {
            // A run stopped by its token did not complete its tick: let it be retried.
            let how = if running.cancel.is_cancelled() {
                Release::Interrupted
            } else {
                Release::Completed
            };
            self.to_release.push((running.lease.key(), how));
        }
    }

    fn record_end(&self, i: usize, running: &Running, error: Option<String>) {
        let outcome = match &error {
            None => RunOutcome::Succeeded,
            Some(_) if running.cancel.is_cancelled() => RunOutcome::Cancelled,
            Some(_) => RunOutcome::Failed,
        };
        self.s.observe.ended(RunRecord {
            job: self.s.entries[i].name.to_string(),
            tick: running.lease.tick,
            node: self.s.node.to_string(),
            holder: running.lease.holder.clone(),
            token: running.lease.token,
            started: running.started,
            finished: self.db_now(),
            outcome,
            error,
            lease_lost: running.lost,
        });
    }

    async fn flush_releases(&mut self) {
        for how in [Release::Completed, Release::Interrupted] {
            let keys: Vec<LeaseKey> = self
                .to_release
                .iter()
                .filter(|(_, h)| *h == how)
                .map(|(k, _)| k.clone())
                .collect();
            if keys.is_empty() {
                continue;
            }
            let call = self.s.store.release(&keys, how);
            match self.s.observe.timed("release", self.call_limit, call).await {
                Ok(_) => {
                    self.to_release.retain(|(_, h)| *h != how);
                    self.store_ok();
                }
                Err(err) => {
                    self.store_failed("releasing leases", &err);
                    return;
                }
            }
        }
    }

    /// Renews every held lease in one call; a lease not renewed is lost.
    async fn renew(&mut self) {
        self.sync_clock().await;
        let held: Vec<(usize, LeaseKey)> = self
            .states
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.running
                    .as_ref()
                    .filter(|r| !r.lost)
                    .map(|r| (i, r.lease.key()))
            })
            .collect();
        if held.is_empty() {
            self.next_renew = Instant::now() + self.renew_every;
            return;
        }
        let keys: Vec<LeaseKey> = held.iter().map(|(_, k)| k.clone()).collect();
        let call = self.s.store.renew(&keys, self.s.ttl);
        match self.s.observe.timed("renew", self.call_limit, call).await {
            Ok(renewed) => {
                self.s
                    .observe
                    .renewals(renewed.len(), keys.len().saturating_sub(renewed.len()));
                self.store_ok();
                self.retry_at = None;
                self.next_renew = Instant::now() + self.renew_every;
                let renewed: HashMap<_, _> = renewed
                    .into_iter()
                    .map(|r| (r.name, r.expires_at))
                    .collect();
                for (i, key) in held {
                    match renewed.get(&key.name) {
                        Some(expires_at) => {
                            if let Some(r) = &mut self.states[i].running {
                                r.lease.expires_at = *expires_at;
                            }
                        }
                        None => self.lost(i, "the renewal found the lease taken over or gone"),
                    }
                }
            }
            Err(err) => self.store_failed("renewing leases", &err),
        }
    }

    /// A lease whose expiry passed without a renewal (the store unreachable) is lost:
    /// another instance may take it now.
    fn expire_unrenewed(&mut self) {
        let now = self.db_now();
        let expired: Vec<usize> = self
            .states
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.running
                    .as_ref()
                    .is_some_and(|r| !r.lost && r.lease.expires_at <= now)
            })
            .map(|(i, _)| i)
            .collect();
        for i in expired {
            self.lost(i, "the lease expired before it could be renewed");
        }
    }

    fn lost(&mut self, i: usize, why: &str) {
        let e = &self.s.entries[i];
        let Some(running) = &mut self.states[i].running else {
            return;
        };
        running.lost = true;
        self.s.observe.outcome(&e.name, Outcome::LeaseLost);
        match e.duplicate {
            Duplicate::NeedsFencing => {
                running.cancel.cancel();
                warn!(job = %e.name, tick = %running.lease.tick, token = %running.lease.token, reason = why,
                    "lease lost: cancelling the run (the job needs fencing)");
            }
            Duplicate::Harmless => {
                warn!(job = %e.name, tick = %running.lease.tick, reason = why,
                    "lease lost: the run goes on (a duplicate is harmless for this job)");
            }
        }
    }

    /// Graceful shutdown: no new ticks; running jobs get the grace period (their
    /// leases still renewed); the rest are cancelled; every lease is released at once.
    async fn drain(&mut self) {
        let deadline = Instant::now() + self.s.config.grace;
        info!(running = self.tasks.len(), grace = ?self.s.config.grace, "scheduler shutting down");
        while !self.tasks.is_empty() {
            let wake = self.next_renew.min(deadline);
            tokio::select! {
                Some(done) = self.tasks.join_next_with_id() => self.finished(done),
                () = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= deadline {
                        break;
                    }
                    if self.store_ready() {
                        self.renew().await;
                    }
                    self.expire_unrenewed();
                }
            }
        }
        // Past the grace period: cancel, give the runs a moment to notice, then abort.
        for state in &self.states {
            if let Some(running) = &state.running {
                warn!(job = %self.s.entries[self.by_task.get(&running.task).copied().unwrap_or(0)].name,
                    tick = %running.lease.tick, "cancelling the run at shutdown");
                running.cancel.cancel();
            }
        }
        let notice = tokio::time::sleep(CANCEL_NOTICE);
        tokio::pin!(notice);
        while !self.tasks.is_empty() {
            tokio::select! {
                Some(done) = self.tasks.join_next_with_id() => self.finished(done),
                () = &mut notice => break,
            }
        }
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        let aborted: Vec<(usize, Running)> = self
            .states
            .iter_mut()
            .enumerate()
            .filter_map(|(i, state)| state.running.take().map(|r| (i, r)))
            .collect();
        for (i, running) in aborted {
            self.s
                .observe
                .outcome(&self.s.entries[i].name, Outcome::Failed);
            // Its token was cancelled above: recorded as cancelled.
            self.record_end(i, &running, Some("aborted at shutdown".to_owned()));
            warn!(job = %self.s.entries[i].name, tick = %running.lease.tick, "run aborted at shutdown");
            if !running.lost {
                self.to_release
                    .push((running.lease.key(), Release::Interrupted));
            }
        }
        // Release everything in (at most) one call per kind; a few quick retries, then
        // leave the rest to expire.
        for _ in 0..3 {
            self.retry_at = None;
            self.flush_releases().await;
            if self.to_release.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        info!(unreleased = self.to_release.len(), "scheduler stopped");
    }
}

/// How long after its instant `tick` may still start.
fn window(e: &Entry, tick: Tick) -> TimeDelta {
    let jitter = TimeDelta::from_std(e.jitter).unwrap_or(TimeDelta::MAX);
    match e.catch_up {
        Some(d) => TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX),
        None => e.schedule.period_after(tick),
    }
    .max(jitter)
}

/// When `tick` fires: its instant plus a random jitter within the job's bound.
fn fire_at(e: &Entry, tick: Tick) -> DateTime<Utc> {
    let bound = u64::try_from(e.jitter.as_millis()).unwrap_or(u64::MAX);
    if bound == 0 {
        return tick.at();
    }
    tick.at() + TimeDelta::milliseconds(i64::try_from(rand::random_range(0..=bound)).unwrap_or(0))
}
