//! How a run's attempt ends: tried again, or ended with an outcome, and what becomes
//! of its lease. The same rules for a live tick's run, a triggered run and a
//! backfilled tick's run.

use std::time::Duration;

use super::ticks::Running;
use crate::lease::Release;
use crate::policy::Retry;
use crate::runtime::RunOutcome;

/// How an attempt's task ended, as the driver reads its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It returned `Ok`.
    Succeeded,
    /// It returned [`Interrupted`](crate::job::Interrupted): it hands its tick back.
    Interrupted,
    /// It took longer than its timeout.
    TimedOut,
    /// It returned an error, panicked or was aborted.
    Failed,
}

/// What becomes of a finished run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// Nothing: the lease was lost, another holder may have it.
    Keep,
    /// Released, completed or handed back.
    Release(Release),
    /// A triggered run's end is recorded and its lease handed back in one call.
    FinishTrigger,
}

/// A run's end: its outcome and what becomes of its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunEnd {
    pub(crate) outcome: RunOutcome,
    pub(crate) handover: Handover,
    /// The run handed its tick back (interrupted or cancelled): not done.
    pub(crate) interrupted: bool,
}

/// The end of `run`, whose last attempt ended as `ended`; `draining`: the
/// scheduler is shutting down; `backfill`: a backfilled tick's run.
///
/// A run a newer tick cancelled completes its tick however it ends (the newer tick
/// runs in its place). A run that returned `Interrupted`, or ended after it was
/// cancelled, hands its tick back: released interrupted, for another instance to
/// run. A live tick's run that failed completes its tick (the next tick tries
/// again); a backfilled tick's does not (a later backfill tries again). A triggered
/// run records its end with the trigger, except one cut short by a graceful
/// shutdown, which is handed back like a scheduled tick's (the trigger stays
/// running under it, and another instance claims it again).
pub(crate) fn run_end(ended: Ended, run: &Running, draining: bool, backfill: bool) -> RunEnd {
    let interrupted = match ended {
        Ended::Succeeded => false,
        _ if run.superseded => false,
        Ended::Interrupted => true,
        Ended::TimedOut | Ended::Failed => run.cancelled,
    };
    let outcome = match ended {
        _ if run.superseded => RunOutcome::CancelledByNewer,
        Ended::Succeeded => RunOutcome::Succeeded,
        _ if interrupted => RunOutcome::Cancelled,
        Ended::TimedOut => RunOutcome::TimedOut,
        Ended::Interrupted | Ended::Failed => RunOutcome::Failed,
    };
    let handover = if run.trigger.is_some() && !(draining && interrupted && !run.lost) {
        Handover::FinishTrigger
    } else if run.lost {
        Handover::Keep
    } else if interrupted || (backfill && ended != Ended::Succeeded) {
        Handover::Release(Release::Interrupted)
    } else {
        Handover::Release(Release::Completed)
    };
    RunEnd {
        outcome,
        handover,
        interrupted,
    }
}

/// How long the failed attempt `attempt` (1 for the first) waits before the next,
/// under `retry`: its backoff, doubling each time; `None` when no attempt is left.
pub(crate) fn retry_wait(retry: Retry, attempt: u32) -> Option<Duration> {
    (attempt <= retry.attempts).then(|| {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(20))
            .unwrap_or(u32::MAX);
        retry.backoff.saturating_mul(factor)
    })
}
