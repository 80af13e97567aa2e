//! The run a job holds: its attempts, retries, renewals, cancellation, loss and
//! end.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{AttemptEnd, JobTicks, Running};
use crate::runtime::decide::cadence::Cadence;
use crate::runtime::decide::events::Command;
use crate::runtime::decide::runs::{Ended, run_end};

impl JobTicks {
    /// The run failed and is tried again at `at` (store clock) under the same lease,
    /// if its retry policy leaves an attempt and `at` comes before the next tick.
    /// Returns the new attempt's number.
    pub(crate) fn retry(
        &mut self,
        cadence: &Cadence,
        now: DateTime<Utc>,
    ) -> Option<(u32, Duration)> {
        let retry = cadence.policy.retry?;
        let running = self.running.as_ref().filter(|r| !r.lost && !r.cancelled)?;
        let wait = crate::runtime::decide::runs::retry_wait(retry, running.attempt)?;
        let at = now.checked_add_signed(TimeDelta::from_std(wait).ok()?)?;
        // The tick after the run's own, whether or not it has come due meanwhile (it
        // may already have, during the run: then `next` is the one after it).
        let next = cadence.schedule.next_after(running.lease.tick.at());
        if next.is_some_and(|next| at >= next.at()) {
            return None;
        }
        let running = self.running.as_mut()?;
        running.attempt += 1;
        running.started = at;
        Some((running.attempt, wait))
    }

    /// The run's current attempt ended as `ended` at `now` (store clock); `draining`:
    /// the scheduler is shutting down. A failed attempt whose lease expired
    /// unrenewed lost the lease (neither retried nor released; one that succeeded
    /// completes its tick as any other, since the release only marks it done if no
    /// other instance took the lease meanwhile). A failed attempt is tried again as
    /// the retry policy says, unless it handed its tick back, was cancelled, or the
    /// scheduler is shutting down.
    pub(crate) fn on_attempt_ended(
        &mut self,
        cadence: &Cadence,
        ended: Ended,
        now: DateTime<Utc>,
        draining: bool,
    ) -> AttemptEnd {
        let failed = ended != Ended::Succeeded;
        let lost = failed && self.expired_unrenewed(now);
        if lost {
            self.on_lost(cadence.fenced);
        }
        if failed
            && ended != Ended::Interrupted
            && !draining
            && let Some(r) = self.running.as_ref().filter(|r| !r.superseded)
        {
            let (started, attempt) = (r.started, r.attempt);
            if let Some((next, wait)) = self.retry(cadence, now) {
                return AttemptEnd::Retry {
                    failed: (started, attempt),
                    attempt: next,
                    wait,
                };
            }
        }
        match self.running.take() {
            Some(run) => {
                let end = run_end(ended, &run, draining, false);
                AttemptEnd::Ended {
                    lost,
                    run: *run,
                    end,
                }
            }
            None => AttemptEnd::Gone,
        }
    }

    /// The run this job holds, if any.
    pub(crate) fn running(&self) -> Option<&Running> {
        self.running.as_deref()
    }

    /// The driver cancelled the run (a shutdown): it is not retried.
    pub(crate) fn on_cancelled(&mut self) {
        if let Some(r) = &mut self.running {
            r.cancelled = true;
        }
    }

    /// The run's task cancelled the run at its lease's expiry (a job that needs
    /// fencing): the lease counts as lost.
    pub(crate) fn on_expired(&mut self) {
        if let Some(r) = &mut self.running {
            r.expired = true;
            r.cancelled = true;
        }
    }

    /// What the decisions since the last call ask the driver to do.
    pub(crate) fn take_commands(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.commands)
    }

    /// The run's lease, renewed until `expires_at`.
    pub(crate) fn on_renewed(&mut self, expires_at: DateTime<Utc>) {
        if let Some(r) = &mut self.running {
            r.lease.expires_at = expires_at;
        }
    }

    /// A newer tick asked the run to stop (its renewal said so): it is cancelled and
    /// completes its tick as `cancelled_by_newer`. Returns the run if this is news.
    pub(crate) fn on_cancel_requested(&mut self) -> Option<&Running> {
        let running = self.running.as_mut().filter(|r| !r.lost && !r.superseded)?;
        running.superseded = true;
        running.cancelled = true;
        self.commands.push(Command::CancelRun);
        Some(running)
    }

    /// The run's lease is lost; a job that needs fencing (`fenced`) has its run
    /// cancelled. Returns the run if it was not already marked lost.
    pub(crate) fn on_lost(&mut self, fenced: bool) -> Option<&Running> {
        let running = self.running.as_mut().filter(|r| !r.lost)?;
        running.lost = true;
        self.commands.push(Command::CancelUnbegun);
        if fenced {
            running.cancelled = true;
            self.commands.push(Command::CancelRun);
        }
        Some(running)
    }

    /// Whether the run's lease has expired without a renewal: by `now` on the store's
    /// clock, or the run's task cancelled the run for it ([`Running::expired`]).
    pub(crate) fn expired_unrenewed(&self, now: DateTime<Utc>) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| !r.lost && (r.lease.expires_at <= now || r.expired))
    }
}
