//! How a run's attempt ends: tried again, or ended with an outcome, and what becomes
//! of its lease. The same rules for a live tick's run, a triggered run and a
//! backfilled tick's run.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::lease::{Lease, Release};
use crate::outcome::Outcome;
use crate::policy::Retry;

/// A run this instance holds the lease for.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) lease: Lease,
    /// When the run begins (store clock): when the take was answered, or the tick's
    /// fire time if the take was answered ahead of it.
    pub(crate) started: DateTime<Utc>,
    /// The run was told to stop ([`Command::CancelRun`](super::Command::CancelRun), or by the driver at a
    /// shutdown or at the lease's expiry): it is not retried.
    pub(crate) cancelled: bool,
    /// The lease was lost while it ran: it is neither renewed nor released.
    pub(crate) lost: bool,
    /// Which attempt at the tick runs: 1, then 2 for the first retry, …
    pub(crate) attempt: u32,
    /// A newer tick cancelled it ([`Overlap::CancelRunning`](crate::policy::Overlap::CancelRunning)): it completes its tick
    /// when it ends, however it ends.
    pub(crate) superseded: bool,
    /// The operator's trigger this run answers, if it is one
    /// ([`JobTicks::on_manual`](super::JobTicks::on_manual)).
    pub(crate) trigger: Option<crate::control::TriggerId>,
    /// The run's own task cancelled it at the lease's expiry (a job that needs
    /// fencing): the lease counts as lost then, even if a renewal answered
    /// afterwards.
    pub(crate) expired: bool,
}

impl Running {
    /// The first attempt's run under `lease`, beginning at `started`.
    pub(crate) fn new(
        lease: Lease,
        started: DateTime<Utc>,
        trigger: Option<crate::control::TriggerId>,
    ) -> Self {
        Running {
            lease,
            started,
            cancelled: false,
            lost: false,
            attempt: 1,
            superseded: false,
            trigger,
            expired: false,
        }
    }
}

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
    pub(crate) outcome: Outcome,
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
        _ if run.superseded => Outcome::CancelledByNewer,
        Ended::Succeeded => Outcome::Succeeded,
        _ if interrupted => Outcome::Cancelled,
        Ended::TimedOut => Outcome::TimedOut,
        Ended::Interrupted | Ended::Failed => Outcome::Failed,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::DateTime;

    use super::*;
    use crate::control::TriggerId;
    use crate::lease::{FencingToken, Holder, Lease, LeaseName, Tick};

    fn run() -> Running {
        let at = DateTime::from_timestamp(1_000, 0).unwrap();
        let lease = Lease {
            name: LeaseName::new("job").unwrap(),
            tick: Tick::new(at),
            holder: Holder::generate_on("n:1"),
            token: FencingToken::new(7),
            expires_at: at,
        };
        Running::new(lease, at, None)
    }

    fn end(ended: Ended, r: &Running, draining: bool, backfill: bool) -> (Outcome, Handover) {
        let e = run_end(ended, r, draining, backfill);
        (e.outcome, e.handover)
    }

    use Handover::{FinishTrigger, Keep, Release as R};
    use Release::{Completed, Interrupted};

    #[test]
    fn a_live_run_completes_its_tick_unless_it_hands_it_back() {
        let r = run();
        assert_eq!(
            end(Ended::Succeeded, &r, false, false),
            (Outcome::Succeeded, R(Completed))
        );
        assert_eq!(
            end(Ended::Failed, &r, false, false),
            (Outcome::Failed, R(Completed))
        );
        assert_eq!(
            end(Ended::TimedOut, &r, false, false),
            (Outcome::TimedOut, R(Completed))
        );
        assert_eq!(
            end(Ended::Interrupted, &r, false, false),
            (Outcome::Cancelled, R(Interrupted))
        );
        // Cancelled (a shutdown, a fenced run's lost lease): handed back.
        let mut cancelled = run();
        cancelled.cancelled = true;
        assert_eq!(
            end(Ended::Failed, &cancelled, true, false),
            (Outcome::Cancelled, R(Interrupted))
        );
        assert_eq!(
            end(Ended::Succeeded, &cancelled, true, false),
            (Outcome::Succeeded, R(Completed))
        );
    }

    #[test]
    fn a_run_a_newer_tick_cancelled_completes_its_tick_however_it_ends() {
        let mut r = run();
        r.superseded = true;
        r.cancelled = true;
        for ended in [
            Ended::Succeeded,
            Ended::Failed,
            Ended::Interrupted,
            Ended::TimedOut,
        ] {
            assert_eq!(
                end(ended, &r, false, false),
                (Outcome::CancelledByNewer, R(Completed))
            );
        }
    }

    #[test]
    fn a_lost_lease_is_not_released() {
        let mut r = run();
        r.lost = true;
        assert_eq!(end(Ended::Succeeded, &r, false, false).1, Keep);
        assert_eq!(end(Ended::Failed, &r, false, true).1, Keep);
    }

    #[test]
    fn a_backfilled_tick_that_failed_is_left_for_a_later_backfill() {
        let r = run();
        assert_eq!(
            end(Ended::Succeeded, &r, false, true),
            (Outcome::Succeeded, R(Completed))
        );
        assert_eq!(
            end(Ended::Failed, &r, false, true),
            (Outcome::Failed, R(Interrupted))
        );
        assert_eq!(
            end(Ended::TimedOut, &r, false, true),
            (Outcome::TimedOut, R(Interrupted))
        );
    }

    #[test]
    fn a_triggered_run_records_its_end_unless_a_shutdown_cut_it_short() {
        let mut r = run();
        r.trigger = Some(TriggerId(3));
        assert_eq!(
            end(Ended::Failed, &r, false, false),
            (Outcome::Failed, FinishTrigger)
        );
        assert_eq!(
            end(Ended::Interrupted, &r, false, false),
            (Outcome::Cancelled, FinishTrigger)
        );
        // Cut by a graceful shutdown: handed back, the trigger claimed again elsewhere.
        assert_eq!(
            end(Ended::Interrupted, &r, true, false),
            (Outcome::Cancelled, R(Interrupted))
        );
        r.lost = true;
        assert_eq!(end(Ended::Interrupted, &r, true, false).1, FinishTrigger);
    }

    #[test]
    fn retries_wait_their_backoff_doubling_until_none_is_left() {
        let retry = Retry {
            attempts: 3,
            backoff: Duration::from_secs(2),
        };
        let waits: Vec<_> = (1..=4).map(|a| retry_wait(retry, a)).collect();
        let s = Duration::from_secs;
        assert_eq!(waits, vec![Some(s(2)), Some(s(4)), Some(s(8)), None]);
    }
}
