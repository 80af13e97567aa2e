//! Backfills on the loop: each a [`BackfillPlan`] of one job's past ticks, whose
//! leases are taken, renewed and released with the loop's own calls (under its gate,
//! backoffs and store clock) and whose runs are spawned and ended as live runs are
//! ([`run_end`](crate::runtime::decide::run_end)). The loop of the running scheduler
//! takes a backfill asked for through its [`BackfillDoor`]; without one running, the
//! backfill runs a loop of its own, with no job ([`Engine::standalone`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{debug, error, info, info_span, warn};

use super::runs::RunHandles;
use super::takes::{ChunkAnswer, TakenByName};
use super::tasks::Prepared;
use super::{Engine, Slot};
use crate::error::{BoxError, Error, StoreFailure};
use crate::job::{Idempotent, JobContext};
use crate::lease::{ControlKey, Lease, LeaseKey, LeaseName, TakeRequest, Tick};
use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::runtime::BackfillReport;
use crate::runtime::decide::{self, Answer, BackfillPlan, Handover};

/// What a backfill needs of a registered job.
#[derive(Clone)]
pub(crate) struct BackfillJob {
    pub(crate) name: Arc<str>,
    pub(crate) lease: LeaseName,
    pub(crate) policy: Policy,
    pub(crate) holder_prefix: Arc<str>,
    pub(crate) fenced: bool,
    pub(crate) job: Arc<dyn Idempotent>,
}

/// Why a backfill stopped before its range was done.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// No store call succeeded for a whole lease ttl.
    Failed(Error),
    /// The scheduler shut down first; the report says what was done.
    ShutDown(BackfillReport),
}

/// Where a backfill's end goes: to its caller, or to the log (a resume's
/// catch-up).
#[derive(Debug)]
pub(crate) enum Reply {
    Caller(oneshot::Sender<Result<BackfillReport, Stopped>>),
    Log,
}

/// A backfill asked of a loop.
pub(crate) struct BackfillRequest {
    pub(crate) job: BackfillJob,
    pub(crate) ticks: Vec<Tick>,
    pub(crate) names: Vec<LeaseName>,
    pub(crate) concurrency: usize,
    /// The takes carry the job's pause condition: a resume's catch-up stops at a
    /// pause, as live ticks do; an operator's backfill does not.
    pub(crate) honours_pauses: bool,
    pub(crate) reply: Reply,
}

/// How backfills reach the running scheduler's loop: set while it runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct BackfillDoor(Arc<Mutex<Option<mpsc::UnboundedSender<BackfillRequest>>>>);

impl BackfillDoor {
    /// Opens the door for a loop; returns what it receives.
    pub(super) fn open(&self) -> mpsc::UnboundedReceiver<BackfillRequest> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        rx
    }

    /// Closes it (the loop is shutting down).
    pub(super) fn close(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Hands `request` to the running loop, or back if none runs.
    pub(crate) fn send(&self, request: BackfillRequest) -> Result<(), Box<BackfillRequest>> {
        let door = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match door.as_ref() {
            Some(tx) => tx.send(request).map_err(|e| Box::new(e.0)),
            None => Err(Box::new(request)),
        }
    }
}

/// The backfills' take in flight: what it asked for (backfill and tick), and its
/// answer to come.
pub(super) type BackfillTake = (Vec<(u64, usize)>, tokio::task::JoinHandle<ChunkAnswer>);

/// One backfill on the loop.
pub(super) struct Unit {
    job: BackfillJob,
    plan: BackfillPlan,
    honours_pauses: bool,
    /// `{job's lease}\@`: what every lease of the backfill starts with.
    prefix: String,
    runs: BTreeMap<usize, BackfillRun>,
    reply: Reply,
    added: Instant,
}

/// A backfilled tick's run.
pub(super) struct BackfillRun {
    run: decide::Running,
    handles: RunHandles,
    abort: Option<AbortHandle>,
}

impl Engine {
    /// Takes backfill `request` on.
    pub(super) fn add_backfill(&mut self, request: BackfillRequest) {
        let prefix = format!("{}\\@", request.job.lease);
        let plan = BackfillPlan::new(
            request.ticks,
            request.names,
            &request.job.holder_prefix,
            request.concurrency,
            self.s.settings.renew_every,
        );
        if let Some((first, last)) = plan.range() {
            info!(job = %request.job.name, ticks = plan.report().ticks, first = %first,
                last = %last, concurrency = request.concurrency, "backfill starting");
        }
        let id = self.next_backfill;
        self.next_backfill += 1;
        self.backfills.insert(
            id,
            Unit {
                job: request.job,
                plan,
                honours_pauses: request.honours_pauses,
                prefix,
                runs: BTreeMap::new(),
                reply: request.reply,
                added: Instant::now(),
            },
        );
    }

    /// Whether a backfill run holds a lease it still renews.
    pub(super) fn backfills_hold_any(&self) -> bool {
        self.backfills
            .values()
            .any(|u| u.runs.values().any(|r| !r.run.lost))
    }

    /// The keys of the backfill runs' leases to renew, with where each belongs.
    pub(super) fn backfill_keys(&self) -> Vec<((u64, usize), LeaseKey)> {
        self.backfills
            .iter()
            .flat_map(|(&u, unit)| {
                unit.runs
                    .iter()
                    .filter(|(_, r)| !r.run.lost)
                    .map(move |(&t, r)| ((u, t), r.run.lease.key()))
            })
            .collect()
    }

    /// A renewal's answer for backfill run `(u, t)`: renewed until `expires_at`, or
    /// lost (`None`).
    pub(super) fn backfill_renewed(
        &mut self,
        (u, t): (u64, usize),
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    ) {
        let db_now = self.db_now();
        let Some(unit) = self.backfills.get_mut(&u) else {
            return;
        };
        let Some(r) = unit.runs.get_mut(&t) else {
            return;
        };
        match expires_at {
            Some(at) => {
                r.run.lease.expires_at = at;
                let local = super::local_instant(at, Instant::now(), db_now);
                r.handles.tell_expiry(local);
            }
            None => {
                r.run.lost = true;
                if unit.job.fenced {
                    r.run.cancelled = true;
                    r.handles.cancel();
                    warn!(job = %unit.job.name, tick = %r.run.lease.tick,
                        "backfill lease lost; cancelling the run (the job needs fencing)");
                } else {
                    warn!(job = %unit.job.name, tick = %r.run.lease.tick,
                        "backfill lease lost; the run goes on (a duplicate is harmless for this job)");
                }
            }
        }
    }

    /// Sends a take for the backfills' ticks that may be asked for now, up to their
    /// free run slots (a lease named once per call: a tick of two backfills of one
    /// range waits for the next take), unless one is in flight or backing off. It
    /// goes through a gate of its own, beside the live ticks' takes: a backfill
    /// never holds a live tick's take up. Its answer comes back to the loop
    /// ([`on_backfill_take`](Self::on_backfill_take)).
    pub(super) fn send_backfill_take(&mut self) {
        if self.backfills.is_empty()
            || self.draining
            || self.backfill_take.is_some()
            || !self.backfill_retry.ready()
        {
            return;
        }
        let now = self.db_now();
        let mut names = std::collections::HashSet::new();
        let mut asked = Vec::new();
        let mut requests = Vec::new();
        for (&u, unit) in &mut self.backfills {
            for t in unit.plan.next_takes(now) {
                let (tick, name, holder) = unit.plan.tick(t);
                if !names.insert(name.clone()) {
                    unit.plan.on_answer(t, Answer::Lost, now);
                    continue;
                }
                requests.push(TakeRequest {
                    name: name.clone(),
                    tick,
                    holder: holder.clone(),
                    control: unit.honours_pauses.then(|| ControlKey {
                        job: unit.job.name.clone(),
                        node: self.s.node.clone(),
                        caught_up_on_resume: false,
                    }),
                });
                asked.push((u, t));
            }
        }
        if asked.is_empty() {
            return;
        }
        let call = self.send_chunk(requests, &self.backfill_gate);
        self.backfill_take = Some((asked, call));
    }

    /// The answer to the backfills' take in flight.
    pub(super) fn on_backfill_take(&mut self, answer: ChunkAnswer) {
        let Some((asked, _)) = self.backfill_take.take() else {
            return;
        };
        let now = self.db_now();
        match answer {
            Ok((before, taken, after)) => {
                self.backfill_retry.ok();
                self.store_ok();
                if let Some(db) = taken.now {
                    self.note_sample(before, after, db);
                }
                if !taken.won.is_empty() && !self.holds_any() {
                    self.next_renew = Instant::now() + self.s.settings.renew_every;
                }
                let mut taken = TakenByName::from(taken);
                let now = self.db_now();
                for run in asked {
                    self.on_backfill_answer(run, Some(&mut taken), now);
                }
            }
            Err(err) => {
                for run in asked {
                    self.on_backfill_answer(run, None, now);
                }
                let delay = self.backfill_retry.failed(self.s.settings.retry_cap);
                self.store_failed("taking backfill leases", &err, delay);
            }
        }
    }

    /// The answer of a take for backfill `u`'s tick `t` (`None`: the call failed),
    /// at `now` (store clock).
    pub(super) fn on_backfill_answer(
        &mut self,
        (u, t): (u64, usize),
        taken: Option<&mut TakenByName>,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        let Some(unit) = self.backfills.get_mut(&u) else {
            return;
        };
        let Some(taken) = taken else {
            unit.plan.on_answer(t, Answer::Unanswered, now);
            return;
        };
        let name = unit.plan.tick(t).1.clone();
        if let Some(lease) = taken.won.remove(&name) {
            unit.plan.on_answer(t, Answer::Won, now);
            self.renew_soon_if_short(&lease, now);
            self.start_backfilled(u, t, lease);
        } else if taken.paused.contains(&name) {
            debug!(job = %unit.job.name, tick = %unit.plan.tick(t).0, "job paused: tick not caught up");
            unit.plan.on_answer(t, Answer::Paused, now);
        } else if let Some(held) = taken.held.get(&name) {
            unit.plan.on_answer(t, Answer::Held(held), now);
        } else {
            unit.plan.on_answer(t, Answer::Lost, now);
        }
    }

    /// Starts backfill `u`'s run of tick `t`, won as `lease`.
    fn start_backfilled(&mut self, u: u64, t: usize, lease: Lease) {
        let now = self.db_now();
        let Some(unit) = self.backfills.get_mut(&u) else {
            return;
        };
        debug!(job = %unit.job.name, tick = %lease.tick, token = %lease.token, "backfilling tick");
        unit.runs.insert(
            t,
            BackfillRun {
                run: decide::Running::new(lease, now, None),
                handles: RunHandles::new(unit.job.fenced),
                abort: None,
            },
        );
        self.spawn_backfilled(u, t, std::time::Duration::ZERO);
    }

    /// Spawns the current attempt of backfill `u`'s run of tick `t`, to begin after
    /// `wait`.
    fn spawn_backfilled(&mut self, u: u64, t: usize, wait: std::time::Duration) {
        let expires = self.db_now();
        let Some(unit) = self.backfills.get_mut(&u) else {
            return;
        };
        let Some(r) = unit.runs.get_mut(&t) else {
            return;
        };
        let lease = &r.run.lease;
        let span = info_span!("run", job = %unit.job.name, tick = %lease.tick, holder = %lease.holder,
            token = %lease.token, attempt = r.run.attempt, backfill = true);
        let begin_at = Instant::now() + wait;
        let attempt_token = r.handles.next_attempt(begin_at);
        let ctx = JobContext {
            job: unit.job.name.clone(),
            tick: lease.tick,
            node: self.s.node.clone(),
            lease: lease.name.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            cancel: attempt_token,
            state: self.s.state.clone(),
            attempt: r.run.attempt,
        };
        let at = super::local_instant(lease.expires_at, Instant::now(), expires);
        r.handles.tell_expiry(at);
        let watchdog = r.handles.watchdog(&ctx.cancel);
        let run = Prepared {
            key: t,
            job: unit.job.job.clone(),
            ctx,
            begin_at,
            limits: (unit.job.policy.timeout, self.s.settings.grace),
            watchdog,
            span,
        };
        let task = self.tasks.spawn(run, Slot::Backfill(u, t));
        r.abort = Some(task);
    }

    /// Backfill `u`'s run of tick `t` ended its attempt with `result`: retried, or
    /// counted and its lease queued for release.
    pub(super) fn backfilled(&mut self, u: u64, t: usize, result: Result<(), BoxError>) {
        let draining = self.draining;
        let Some(unit) = self.backfills.get_mut(&u) else {
            return;
        };
        let Some(r) = unit.runs.get_mut(&t) else {
            return;
        };
        let tick = r.run.lease.tick;
        r.run.cancelled |= r.handles.is_cancelled();
        let end = decide::run_end(super::ended_as(&result), &r.run, draining, true);
        if let Err(err) = &result
            && !end.interrupted
            && !r.run.lost
            && !draining
            && let Some(wait) = unit
                .job
                .policy
                .retry
                .and_then(|retry| decide::retry_wait(retry, r.run.attempt))
        {
            warn!(job = %unit.job.name, tick = %tick, attempt = r.run.attempt,
                error = %crate::error::error_chain(&**err), retry_in = ?wait,
                "backfill run failed; retrying under the same lease");
            r.run.attempt += 1;
            self.spawn_backfilled(u, t, wait);
            return;
        }
        let Some(r) = unit.runs.remove(&t) else {
            return;
        };
        unit.plan.on_run_ended(result.is_ok());
        match &result {
            Ok(()) => {
                self.s.observe.outcome(&unit.job.name, Outcome::Backfilled);
                if r.run.lost {
                    warn!(job = %unit.job.name, tick = %tick,
                        "backfill run finished after its lease was lost; the tick may have run twice");
                } else {
                    debug!(job = %unit.job.name, tick = %tick, "backfill run finished");
                }
            }
            Err(err) => {
                let error = crate::error::error_chain(&**err);
                if end.interrupted {
                    warn!(job = %unit.job.name, tick = %tick, error = %error,
                        "backfill run interrupted; a later backfill retries the tick");
                } else {
                    error!(job = %unit.job.name, tick = %tick, attempt = r.run.attempt, error = %error,
                        "backfill run failed; a later backfill retries the tick");
                }
            }
        }
        if let Handover::Release(how) = end.handover {
            self.to_release.push((r.run.lease.key(), how));
        }
    }

    /// When a backfill next has a tick to ask for, as a local instant.
    /// (None while their take is in flight: its answer wakes the loop.)
    pub(super) fn backfills_wake(&self) -> Option<Instant> {
        if self.backfill_take.is_some() || self.draining {
            return None;
        }
        let (now, db_now) = (Instant::now(), self.db_now());
        self.backfills
            .values()
            .filter_map(|u| u.plan.next_wake(db_now))
            .map(|at| super::local_instant(at, now, db_now))
            .min()
            .map(|at| at.max(self.backfill_retry.at.unwrap_or(now)))
    }

    /// Ends the backfills that are over: done (every tick answered for and its
    /// lease released), given up (no store call succeeded for a whole ttl since it
    /// began), or dropped by their caller (its runs aborted, their leases left to
    /// expire, as at a crash).
    pub(super) fn settle_backfills(&mut self) {
        let ttl = self.s.settings.ttl.get();
        let failing = self.failing_since;
        let ids: Vec<u64> = self.backfills.keys().copied().collect();
        for u in ids {
            let Some(unit) = self.backfills.get(&u) else {
                continue;
            };
            let gone = matches!(&unit.reply, Reply::Caller(tx) if tx.is_closed());
            let given_up = failing.is_some_and(|since| since.max(unit.added).elapsed() >= ttl);
            let done = unit.plan.done()
                && unit.runs.is_empty()
                && !self
                    .to_release
                    .iter()
                    .any(|(k, _)| k.name.as_str().starts_with(&unit.prefix));
            if !(gone || given_up || done) {
                continue;
            }
            let Some(mut unit) = self.backfills.remove(&u) else {
                continue;
            };
            for r in unit.runs.values_mut() {
                r.handles.cancel();
                if let Some(task) = &r.abort {
                    task.abort();
                }
            }
            let report = unit.plan.report();
            let result = if done {
                info!(job = %unit.job.name, ticks = report.ticks, ran = report.ran,
                    already_done = report.already_done, failed = report.failed,
                    paused = report.paused, "backfill finished");
                Ok(report)
            } else if given_up {
                let failure = self.last_failure.unwrap_or(StoreFailure::Other);
                warn!(job = %unit.job.name, "backfill given up: no store call succeeded for a whole ttl");
                Err(Stopped::Failed(Error::store_as(
                    failure,
                    format!("no store call succeeded for {ttl:?}"),
                )))
            } else {
                continue;
            };
            unit.finish(result);
        }
    }

    /// Past a shutdown's grace: the backfill runs are cancelled.
    pub(super) fn cancel_backfill_runs(&mut self) {
        for unit in self.backfills.values_mut() {
            for r in unit.runs.values_mut() {
                r.run.cancelled = true;
                r.handles.cancel();
            }
        }
    }

    /// At the end of a shutdown: every backfill still under way stops here; its
    /// caller carries on without this loop.
    pub(super) fn hand_back_backfills(&mut self) {
        for (_, unit) in std::mem::take(&mut self.backfills) {
            let report = unit.plan.report();
            unit.finish(Err(Stopped::ShutDown(report)));
        }
    }
}

impl Unit {
    fn finish(self, result: Result<BackfillReport, Stopped>) {
        match self.reply {
            Reply::Caller(tx) => {
                let _ = tx.send(result);
            }
            Reply::Log => match result {
                Ok(r) => info!(job = %self.job.name, ran = r.ran, already_done = r.already_done,
                    failed = r.failed, paused_again = r.paused, "ticks paused over caught up"),
                Err(err) => warn!(job = %self.job.name, error = ?err,
                    "catching up the ticks paused over stopped"),
            },
        }
    }
}
