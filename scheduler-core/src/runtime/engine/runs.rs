//! Runs: starting a won tick's task, and what its end means for the tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::Id;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span};

use super::tasks::{Batch, Prepared, Watchdog};
use super::{Engine, RunResult, Slot};
use crate::error::BoxError;
use crate::job::{Interrupted, JobContext, TimedOut};
use crate::lease::{Lease, LeaseKey};
use crate::outcome::Outcome;
use crate::runtime::decide::{
    AttemptEnd, Command, Ended, Handover, RunEnd, Running, TickEvent, Won,
};
use crate::runtime::observe::RunEnded;

/// The driver's hold on a run's task: whether the run was told to stop, its
/// current attempt's token (with the instant it begins: an attempt that has not
/// begun when the lease is lost never begins), and, for a job that needs fencing,
/// the lease's expiry its task watches.
///
/// A run has no token of its own: cancelling it cancels its attempt's, and every
/// later attempt's is born cancelled (a token per run, parent of the attempts',
/// and an expiry channel per run whether fenced or not, were three allocations and
/// a lock per run that showed in the loop's CPU at 10,000 runs a second).
pub(super) struct RunHandles {
    cancelled: bool,
    pub(super) attempt: Option<(Instant, CancellationToken)>,
    fence: Option<Fence>,
}

/// A fenced run's guard: the lease's expiry as a local instant, for the run's
/// task (it cancels the run then, whatever the loop is waiting for; set when an
/// attempt starts and at each renewal), and the flag the task sets when it did.
struct Fence {
    expiry: watch::Sender<Option<Instant>>,
    expired: Arc<AtomicBool>,
}

/// The runs' handles by job index: a slot per job, since the loop looks each job up
/// at every turn (a hash map's hashing showed in the loop's CPU at 10,000 jobs);
/// and how many of them are fenced runs'.
#[derive(Default)]
pub(super) struct RunTable(Vec<Option<RunHandles>>, usize);

impl RunTable {
    /// How many runs have a fence (their task may cancel them at the lease's
    /// expiry).
    pub(super) fn fenced(&self) -> usize {
        self.1
    }

    pub(super) fn get(&self, i: &usize) -> Option<&RunHandles> {
        self.0.get(*i).and_then(Option::as_ref)
    }

    pub(super) fn get_mut(&mut self, i: &usize) -> Option<&mut RunHandles> {
        self.0.get_mut(*i).and_then(Option::as_mut)
    }

    pub(super) fn insert(&mut self, i: usize, handles: RunHandles) {
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        self.1 += usize::from(handles.fence.is_some());
        if let Some(old) = self.0[i].replace(handles) {
            self.1 -= usize::from(old.fence.is_some());
        }
    }

    pub(super) fn remove(&mut self, i: &usize) -> Option<RunHandles> {
        let old = self.0.get_mut(*i).and_then(Option::take);
        self.1 -= usize::from(old.as_ref().is_some_and(|h| h.fence.is_some()));
        old
    }
}

impl RunHandles {
    /// A run's handles; `fenced`: its job needs fencing (its task watches the
    /// lease's expiry).
    pub(super) fn new(fenced: bool) -> Self {
        Self {
            cancelled: false,
            attempt: None,
            fence: fenced.then(|| Fence {
                expiry: watch::Sender::new(None),
                expired: Arc::default(),
            }),
        }
    }

    /// Cancels the run (at a shutdown past its grace, when its lease is lost …):
    /// its attempt, and any attempt after it.
    pub(super) fn cancel(&mut self) {
        self.cancelled = true;
        if let Some((_, token)) = &self.attempt {
            token.cancel();
        }
    }

    /// Whether the run was cancelled, by the loop or by its task at the lease's
    /// expiry.
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled || self.expired()
    }

    /// Whether the run's task watches the lease's expiry (its job needs fencing).
    pub(super) fn fenced(&self) -> bool {
        self.fence.is_some()
    }

    /// Whether the run's task cancelled it at the lease's expiry.
    pub(super) fn expired(&self) -> bool {
        (self.fence.as_ref()).is_some_and(|f| f.expired.load(Ordering::Relaxed))
    }

    /// Tells the run's task (a fenced run's) when the lease expires, as a local
    /// instant.
    pub(super) fn tell_expiry(&self, at: Instant) {
        if let Some(f) = &self.fence {
            f.expiry.send_replace(Some(at));
        }
    }

    /// A token for the next attempt, beginning at `begin_at`: cancelled on its own
    /// (a timeout), or with the run (born cancelled if the run already is).
    pub(super) fn next_attempt(&mut self, begin_at: Instant) -> CancellationToken {
        let token = CancellationToken::new();
        if self.is_cancelled() {
            token.cancel();
        }
        self.attempt = Some((begin_at, token.clone()));
        token
    }

    /// What the attempt's task of a fenced run is guarded by (`None` for a run
    /// whose job does not need fencing).
    pub(super) fn watchdog(&self, attempt: &CancellationToken) -> Option<Watchdog> {
        self.fence.as_ref().map(|f| Watchdog {
            expiry: f.expiry.subscribe(),
            cancel: attempt.clone(),
            expired: f.expired.clone(),
        })
    }
}

impl Engine {
    /// Job `i` won `lease` (the answer read at `now`, store clock): its run starts,
    /// into `batch`.
    pub(super) fn start(&mut self, i: usize, lease: Lease, now: DateTime<Utc>, batch: &mut Batch) {
        let mut events = Vec::new();
        let won = self.jobs.keyed_mut(i).on_won(lease, now, &mut events);
        self.act(i, &mut events);
        let e = &self.s.entries[i];
        if won == (Won::Run { took_over: true })
            && let Some(r) = self.jobs[i].running()
        {
            info!(job = %e.name, tick = %r.lease.tick, token = %r.lease.token,
                "took over a tick another holder had not completed");
        }
        let Some(running) = self.jobs[i].running() else {
            return;
        };
        // A take answered ahead of the tick's fire time: the run waits for it.
        let wait = (running.started - now).to_std().unwrap_or_default();
        let lateness = (running.started - running.lease.tick.at())
            .to_std()
            .unwrap_or_default();
        self.s.observe.started(&e.name, lateness);
        self.runs
            .insert(i, RunHandles::new(self.s.entries[i].cadence.fenced));
        if let Some(run) = self.prepare_attempt(i, batch.base + wait, lateness) {
            batch.runs.push((Slot::Job(i), run));
        }
    }

    /// Starts job `i`'s run: new handles for it and its first attempt, spawned to
    /// begin after `wait`.
    pub(super) fn start_run(
        &mut self,
        i: usize,
        wait: std::time::Duration,
        lateness: std::time::Duration,
    ) {
        self.runs
            .insert(i, RunHandles::new(self.s.entries[i].cadence.fenced));
        self.spawn_attempt(i, wait, lateness);
    }

    /// Hands job `i`'s tick events to the observer and carries out the commands its
    /// decisions made.
    pub(super) fn act(&mut self, i: usize, events: &mut Vec<TickEvent>) {
        let e = &self.s.entries[i];
        let outage = self.outage.since.is_some();
        for event in events.drain(..) {
            self.outage.passed_over += self.s.observe.tick_event(&e.name, &event, outage);
        }
        for command in self.jobs.take_commands(i) {
            match command {
                Command::Release { holder, how } => {
                    let key = LeaseKey {
                        name: e.lease.clone(),
                        holder,
                    };
                    self.to_release.push((key, how));
                }
                Command::AskCancel { newer } => self.to_cancel.push((e.lease.clone(), newer)),
                Command::CancelRun => {
                    if let Some(h) = self.runs.get_mut(&i) {
                        h.cancel();
                    }
                }
                Command::CancelUnbegun => {
                    if let Some((begins, token)) =
                        self.runs.get(&i).and_then(|h| h.attempt.as_ref())
                        && Instant::now() < *begins
                    {
                        token.cancel();
                    }
                }
            }
        }
    }

    /// Tells the decisions about a run's task that cancelled the run at its lease's
    /// expiry (see [`RunHandles::expired`]).
    pub(super) fn note_expired(&mut self, i: usize) {
        if self.runs.get(&i).is_some_and(RunHandles::expired) {
            self.jobs[i].on_expired();
        }
    }

    /// Spawns the task of the run job `i` holds, to begin after `wait`: the first
    /// attempt, or a retry (see [`prepare_attempt`](Self::prepare_attempt)).
    pub(super) fn spawn_attempt(
        &mut self,
        i: usize,
        wait: std::time::Duration,
        lateness: std::time::Duration,
    ) {
        if let Some(run) = self.prepare_attempt(i, Instant::now() + wait, lateness) {
            self.tasks.spawn(run, Slot::Job(i));
        }
    }

    /// The next attempt of the run job `i` holds, to begin at `begin_at` (fixed
    /// now: the task may first be polled much later, when the loop is done with a
    /// big round of takes). A timeout cancels the attempt's own token (not the
    /// run's: a timed-out run is a failed run, not an interrupted one), then drops
    /// the attempt if it has not ended within the shutdown grace.
    fn prepare_attempt(
        &mut self,
        i: usize,
        begin_at: Instant,
        lateness: std::time::Duration,
    ) -> Option<Prepared> {
        let e = &self.s.entries[i];
        let (Some(running), Some(handles)) = (self.jobs[i].running(), self.runs.get_mut(&i)) else {
            return None;
        };
        let lease = &running.lease;
        let attempt_token = handles.next_attempt(begin_at);
        let watchdog = handles.watchdog(&attempt_token);
        let ctx = JobContext {
            job: e.name.clone(),
            tick: lease.tick,
            node: self.s.node.clone(),
            lease: lease.name.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            // The attempt's own token: a timeout cancels it, not the run's.
            cancel: attempt_token,
            state: self.s.state.clone(),
            attempt: running.attempt,
        };
        let span = info_span!("run", job = %e.name, tick = %lease.tick, scope = %e.scope,
            node = %self.s.node, holder = %lease.holder, token = %lease.token,
            attempt = running.attempt);
        span.in_scope(|| debug!(lateness_ms = lateness.as_millis(), "run starting"));
        let run = Prepared {
            key: i,
            job: e.job.clone(),
            ctx,
            begin_at,
            limits: (e.cadence.policy.timeout, self.s.settings.grace),
            watchdog,
            span,
        };
        self.tell_expiry(i);
        Some(run)
    }

    /// A run's task ended: retry it, or record its end and queue its release.
    /// Returns the job it ran, if it was one of the loop's.
    pub(super) fn finished(
        &mut self,
        done: Result<(Id, RunResult), tokio::task::JoinError>,
    ) -> Option<usize> {
        let (id, result) = match done {
            Ok((id, (_, result))) => (id, result),
            Err(err) => (err.id(), Err(panicked(err))),
        };
        let i = match self.tasks.slot_of(id)? {
            Slot::Job(i) => i,
            Slot::Backfill(u, t) => {
                self.backfilled(u, t, result);
                return None;
            }
        };
        self.note_expired(i);
        let ended = ended_as(&result);
        let now = self.db_now();
        let end = self.jobs.keyed_mut(i).on_attempt_ended(
            &self.s.entries[i].cadence,
            ended,
            now,
            self.draining,
        );
        if let AttemptEnd::Ended {
            lost: true, run, ..
        } = &end
        {
            let lease = (run.lease.tick, run.lease.token);
            self.report_lost(i, "the lease expired before it could be renewed", lease);
        }
        let e = &self.s.entries[i];
        let error = result
            .as_ref()
            .err()
            .map(|e| crate::error::error_chain(&**e));
        match end {
            AttemptEnd::Retry {
                failed: (started, failed),
                attempt,
                wait,
            } => {
                if let Some(running) = self.jobs[i].running() {
                    self.s.observe.run_ended(&RunEnded {
                        job: &e.name,
                        node: &self.s.node,
                        tick: running.lease.tick,
                        holder: &running.lease.holder,
                        token: running.lease.token,
                        started,
                        finished: now,
                        outcome: Outcome::Retried,
                        error: error.as_deref(),
                        lease_lost: false,
                        attempt: failed,
                    });
                    debug!(job = %e.name, attempt, wait_ms = wait.as_millis(), "retry scheduled");
                    self.spawn_attempt(i, wait, std::time::Duration::ZERO);
                }
            }
            AttemptEnd::Ended { run, end, .. } => {
                self.runs.remove(&i);
                self.ended(i, &run, end, error, now);
            }
            AttemptEnd::Gone => {}
        }
        Some(i)
    }

    /// A run ended as `end` says at `now` (store clock): report it, and queue its
    /// release or its trigger's end.
    fn ended(
        &mut self,
        i: usize,
        running: &Running,
        end: RunEnd,
        error: Option<String>,
        now: DateTime<Utc>,
    ) {
        let e = &self.s.entries[i];
        self.s.observe.run_ended(&RunEnded {
            job: &e.name,
            node: &self.s.node,
            tick: running.lease.tick,
            holder: &running.lease.holder,
            token: running.lease.token,
            started: running.started,
            finished: now,
            outcome: end.outcome,
            error: error.as_deref(),
            lease_lost: running.lost,
            attempt: running.attempt,
        });
        match end.handover {
            Handover::Keep => {}
            Handover::Release(how) => self.to_release.push((running.lease.key(), how)),
            Handover::FinishTrigger => {
                if let (Some(id), Some(ctl)) = (running.trigger, &mut self.ctl) {
                    ctl.to_finish.push(super::Finish {
                        id,
                        lease: running.lease.name.clone(),
                        holder: running.lease.holder.clone(),
                        outcome: end.outcome,
                        error,
                    });
                }
            }
        }
    }
}

/// How an attempt's result reads to the decisions.
pub(crate) fn ended_as(result: &Result<(), BoxError>) -> Ended {
    match result {
        Ok(()) => Ended::Succeeded,
        Err(err) if err.is::<Interrupted>() => Ended::Interrupted,
        Err(err) if err.is::<TimedOut>() => Ended::TimedOut,
        Err(_) => Ended::Failed,
    }
}

/// A run's task that did not return: what to report.
pub(crate) fn panicked(err: tokio::task::JoinError) -> BoxError {
    match err.try_into_panic() {
        Ok(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned());
            match message {
                Some(m) => format!("the job panicked: {m}").into(),
                None => "the job panicked".into(),
            }
        }
        Err(_) => "the job was aborted".into(),
    }
}
