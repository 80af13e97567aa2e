//! Runs: starting a won tick's task, and what its end means for the tick.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::task::Id;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::{Engine, RunResult, report};
use crate::error::BoxError;
use crate::job::{Duplicate, Interrupted, JobContext, TimedOut};
use crate::lease::{Lease, Release};
use crate::outcome::Outcome;
use crate::runtime::RunRecord;
use crate::runtime::ticks::{Running, Won};

impl Engine {
    pub(super) fn start(&mut self, i: usize, lease: Lease, now: DateTime<Utc>) {
        let mut events = Vec::new();
        let won = self.jobs[i].on_won(lease, now, &mut events);
        report(
            &self.s,
            &mut self.to_release,
            &mut self.to_cancel,
            i,
            &mut events,
        );
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
        self.spawn_attempt(i, wait, lateness);
    }

    /// Spawns the task of the run job `i` holds, to begin after `wait`: the first
    /// attempt, or a retry. The wait ends at an instant fixed now (the task may first
    /// be polled much later, when the loop is done with a big round of takes). A
    /// timeout cancels the attempt's own token (not the run's: a timed-out run is a
    /// failed run, not an interrupted one), then drops the attempt if it has not
    /// ended within the shutdown grace.
    pub(super) fn spawn_attempt(
        &mut self,
        i: usize,
        wait: std::time::Duration,
        lateness: std::time::Duration,
    ) {
        let e = &self.s.entries[i];
        let Some(running) = self.jobs[i].running() else {
            return;
        };
        let lease = &running.lease;
        let attempt_token = running.cancel.child_token();
        let ctx = JobContext {
            job: e.name.clone(),
            tick: lease.tick,
            node: self.s.node.clone(),
            lease: lease.name.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            // The attempt's own token: a timeout cancels it, not the run's.
            cancel: attempt_token.clone(),
            state: self.s.state.clone(),
            attempt: running.attempt,
        };
        let begin_at = Instant::now() + wait;
        let span = info_span!("run", job = %e.name, tick = %lease.tick, scope = %e.scope,
            node = %self.s.node, holder = %lease.holder, token = %lease.token,
            attempt = running.attempt);
        span.in_scope(|| debug!(lateness_ms = lateness.as_millis(), "run starting"));
        let job = e.job.clone();
        let timeout = e.cadence.policy.timeout;
        let grace = self.s.settings.grace;
        self.tell_expiry(running);
        let watchdog = (e.duplicate == Duplicate::NeedsFencing).then(|| Watchdog {
            expiry: running.expiry.subscribe(),
            cancel: running.cancel.clone(),
            expired: running.expired.clone(),
        });
        let run = async move {
            let attempt = crate::runtime::run_attempt(job, ctx, begin_at, timeout, grace);
            let result = match watchdog {
                Some(watchdog) => watchdog.guard(attempt).await,
                None => attempt.await,
            };
            (i, result)
        };
        let task = self.tasks.spawn(run.instrument(span));
        self.by_task.insert(task.id(), i);
        self.jobs[i].on_attempt(begin_at, attempt_token);
    }

    /// A run's task ended: retry it, or record its end and queue its release.
    /// Returns the job it ran, if it was one of the loop's.
    pub(super) fn finished(
        &mut self,
        done: Result<(Id, RunResult), tokio::task::JoinError>,
    ) -> Option<usize> {
        let (id, result) = match done {
            Ok((id, (_, result))) => (id, result),
            Err(err) => {
                let id = err.id();
                let why: BoxError = match err.try_into_panic() {
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
                };
                (id, Err(why))
            }
        };
        let i = self.by_task.remove(&id)?;
        // A run that failed (or was cancelled by its own task at the expiry) after its
        // lease expired unrenewed lost the lease: neither retried nor released. One
        // that succeeded completes its tick as any other, since the release only
        // marks it done if no other instance took the lease meanwhile.
        if result.is_err() && self.jobs[i].expired_unrenewed(self.db_now()) {
            self.lost(i, "the lease expired before it could be renewed");
        }
        if let Err(err) = &result
            && !err.is::<Interrupted>()
            && !self.draining
            && !self.jobs[i].running().is_some_and(|r| r.superseded)
        {
            let now = self.db_now();
            let failed_attempt = self.jobs[i].running().map(|r| (r.started, r.attempt));
            if let Some((attempt, wait)) = self.jobs[i].retry(&self.s.entries[i].cadence, now)
                && let Some((started, failed)) = failed_attempt
                && let Some(running) = self.jobs[i].running()
            {
                let e = &self.s.entries[i];
                let record = RunRecord {
                    job: e.name.to_string(),
                    tick: running.lease.tick,
                    node: self.s.node.to_string(),
                    holder: running.lease.holder.clone(),
                    token: running.lease.token,
                    started,
                    finished: now,
                    outcome: Outcome::Retried,
                    error: Some(crate::error::error_chain(&**err)),
                    lease_lost: false,
                    attempt: failed,
                };
                self.s.observe.run_ended(&e.name, record);
                debug!(job = %e.name, attempt, wait_ms = wait.as_millis(), "retry scheduled");
                self.spawn_attempt(i, wait, std::time::Duration::ZERO);
                return Some(i);
            }
        }
        if let Some(running) = self.jobs[i].on_finished() {
            self.ended(i, &running, result);
        }
        Some(i)
    }

    /// A run ended with `result`: report it and queue its release. `Ok` completes the
    /// tick whatever happened meanwhile; [`Interrupted`] (or an error after the run
    /// was cancelled) hands the tick back for a retry.
    fn ended(&mut self, i: usize, running: &Running, result: Result<(), BoxError>) {
        // A run a newer tick cancelled completes its tick however it ends: the
        // newer tick runs in its place.
        let interrupted = match &result {
            Ok(()) => false,
            Err(_) if running.superseded => false,
            Err(err) => err.is::<Interrupted>() || running.cancel.is_cancelled(),
        };
        let outcome = match &result {
            _ if running.superseded => Outcome::CancelledByNewer,
            Ok(()) => Outcome::Succeeded,
            Err(_) if interrupted => Outcome::Cancelled,
            Err(err) if err.is::<TimedOut>() => Outcome::TimedOut,
            Err(_) => Outcome::Failed,
        };
        let e = &self.s.entries[i];
        self.s.observe.run_ended(
            &e.name,
            RunRecord {
                job: e.name.to_string(),
                tick: running.lease.tick,
                node: self.s.node.to_string(),
                holder: running.lease.holder.clone(),
                token: running.lease.token,
                started: running.started,
                finished: self.db_now(),
                outcome,
                error: result
                    .as_ref()
                    .err()
                    .map(|e| crate::error::error_chain(&**e)),
                lease_lost: running.lost,
                attempt: running.attempt,
            },
        );
        // A triggered run cut short by a graceful shutdown is handed back, as a
        // scheduled tick's run would be: its lease released interrupted (expired,
        // the claim's row otherwise as it was) and the trigger left running under
        // it, which another instance then claims again, as it would a vanished
        // claimant's.
        if running.trigger.is_some() && self.draining && interrupted && !running.lost {
            self.to_release
                .push((running.lease.key(), Release::Interrupted));
            return;
        }
        // A triggered run's end is recorded, and its lease handed back, in one
        // store call: the job's row gets back the completion it had before the
        // claim, whatever the run did.
        if let Some(id) = running.trigger
            && let Some(ctl) = &mut self.ctl
        {
            ctl.to_finish.push(super::controls::Finish {
                id,
                lease: running.lease.name.clone(),
                holder: running.lease.holder.clone(),
                outcome,
                error: result
                    .as_ref()
                    .err()
                    .map(|e| crate::error::error_chain(&**e)),
            });
            return;
        }
        if !running.lost {
            let how = if interrupted {
                Release::Interrupted
            } else {
                Release::Completed
            };
            self.to_release.push((running.lease.key(), how));
        }
    }
}

/// What a run of a job that needs fencing is guarded by: its lease's expiry as the
/// loop last said it ([`Running::expiry`]), the run's token to cancel then, and the
/// flag that says it did ([`Running::expired`]).
struct Watchdog {
    expiry: watch::Receiver<Option<Instant>>,
    cancel: CancellationToken,
    expired: Arc<AtomicBool>,
}

impl Watchdog {
    /// Runs `attempt`, and cancels the run once the lease's expiry passes without a
    /// renewal: the run stops when another instance may take its tick, even while
    /// the loop is held up by a store call that does not answer. The attempt then
    /// ends as a cancelled attempt does.
    async fn guard<F: Future>(mut self, attempt: F) -> F::Output {
        let watch = async {
            loop {
                let at = *self.expiry.borrow_and_update();
                let expired = async {
                    match at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = expired => {
                        self.expired.store(true, Ordering::Relaxed);
                        self.cancel.cancel();
                        warn!("lease expired before it could be renewed: cancelling the run (the job needs fencing)");
                        return;
                    }
                    changed = self.expiry.changed() => {
                        // The loop no longer holds the run: it has nothing more to say.
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        tokio::pin!(attempt);
        tokio::select! {
            biased;
            out = &mut attempt => out,
            () = watch => attempt.await,
        }
    }
}
