//! Scheduling policies a job chooses: what happens to ticks that could not start on
//! time ([`CatchUp`]), to a tick that comes due while the previous run still runs
//! ([`Overlap`]), to a failed run ([`Retry`]) and to a run that takes too long (a
//! timeout). [`Policy`] holds them; a job returns it from
//! [`Idempotent::policy`](crate::Idempotent::policy), `#[job]` sets it from its keys,
//! and [`SchedulerBuilder::job_with_policy`](crate::SchedulerBuilder::job_with_policy)
//! overrides it at registration.
//!
//! Every tick still runs at most once in the cluster whatever the policy: the
//! policies only decide which ticks are attempted, and when.

use std::fmt;
use std::time::Duration;

/// What happens to ticks that could not start within their window
/// ([`Idempotent::catch_up`](crate::Idempotent::catch_up), one period by default):
/// after an outage of the database, while every instance was down, after a slow
/// start-up. A tick that starts within its window runs, under every policy; a take
/// answered after the window closed runs nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// Ticks that fell due before this instance started are not run, and a tick
    /// superseded by a later one before it could start is missed: nothing is ever
    /// run to make up for lost time.
    Skip,
    /// Coalesce: of the ticks that could not start, only the most recent one within
    /// the window runs, once (at start-up: the latest tick within the window, unless
    /// the cluster already ran it). The ticks passed over are counted `coalesced`.
    /// The default.
    #[default]
    Latest,
    /// Every tick that could not start, oldest first, as long as it is within its
    /// window, and at most `max` of them (the most recent `max`; older ones are
    /// missed). At start-up, the lease row tells which ticks nobody took: each is
    /// taken in turn, oldest first.
    All {
        /// At most this many ticks are kept to be caught up: from 1 to
        /// [`scheduler_spec::MAX_CATCH_UP`] (100,000); `build()` refuses others.
        max: u32,
    },
}

impl fmt::Display for CatchUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatchUp::Skip => f.write_str("skip"),
            CatchUp::Latest => f.write_str("latest"),
            CatchUp::All { max } => write!(f, "all (at most {max})"),
        }
    }
}

/// What happens to a tick that comes due while this instance's previous run of the
/// job still holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Overlap {
    /// The tick is skipped (counted `skipped_overlap`). The default.
    #[default]
    Skip,
    /// The tick waits for the run to end and then runs, once: of several ticks that
    /// come due during one run, the most recent waits (the others are skipped). It
    /// still has to start within its window.
    BufferOne,
    /// The newest tick wins: the running run, wherever it runs in the cluster, is
    /// cancelled through its token (here at once; on another instance at its next
    /// renewal, through a mark on the lease row its renewal reads), completes as
    /// `cancelled_by_newer`, and the new tick starts when its lease is released.
    /// The run should watch its [cancellation token](crate::JobContext::cancellation).
    CancelRunning,
    /// Up to `max` runs of different ticks at once, across the cluster. Each tick
    /// belongs to one of `max` lease slots (tick `n` of an `every` schedule to slot
    /// `n mod max`; a cron tick by its instant over the schedule's shortest gap), and
    /// runs under that slot's lease, so every tick still runs once. A tick whose
    /// slot still runs the tick `max` before it is skipped. Slot 0 is the job's own
    /// lease, slot `k` `job\#k`. Switch a job to or from it only with every instance
    /// stopped: an instance of each kind could run one tick under two leases.
    Concurrent {
        /// How many runs at once, at most.
        max: u32,
    },
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer one",
            Overlap::CancelRunning => "cancel running",
            Overlap::Concurrent { max } => return write!(f, "concurrent (at most {max})"),
        })
    }
}

/// Retries of a failed (or panicked) run, under the same lease and fencing token:
/// the lease stays held and renewed between attempts, so no other instance can take
/// the tick meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Retry {
    /// How many more attempts after the first, at most.
    pub attempts: u32,
    /// The wait before the first retry; each further retry waits twice as long.
    /// No retry starts at or past the job's next tick (then the overlap policy
    /// decides about that tick).
    pub backoff: Duration,
}

/// The policies of one job. [`Policy::default`] is the behaviour of a job that sets
/// none: catch up on the latest tick, skip overlapping ticks, no retries, no timeout.
///
/// ```
/// use std::time::Duration;
/// use scheduler_core::{CatchUp, Overlap, Policy};
///
/// let policy = Policy::default()
///     .catch_up(CatchUp::All { max: 3 })
///     .overlap(Overlap::BufferOne)
///     .retry(2, Duration::from_secs(10))
///     .timeout(Duration::from_secs(300));
/// assert_eq!(policy.retry.map(|r| r.attempts), Some(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Policy {
    /// Ticks that could not start on time.
    pub catch_up: CatchUp,
    /// Ticks due while a run still holds the lease.
    pub overlap: Overlap,
    /// Retries of a failed run; `None`: a failed run is final.
    pub retry: Option<Retry>,
    /// How long a run may take: then its cancellation token fires, and after the
    /// scheduler's shutdown grace the task is aborted (counted `timed_out`).
    /// `None`: no limit.
    pub timeout: Option<Duration>,
}

impl Policy {
    /// The timing settings the policy decides (`timeout`, `retry`, a catch-up
    /// `max`), for [`scheduler_spec::check_timing`]; the schedule's own (period,
    /// jitter, window) left at their defaults.
    pub(crate) fn timing(&self) -> scheduler_spec::Timing {
        scheduler_spec::Timing {
            timeout: self.timeout,
            retry: self.retry.map(|r| (r.attempts, r.backoff)),
            catch_up_max: match self.catch_up {
                CatchUp::All { max } => Some(max),
                _ => None,
            },
            ..scheduler_spec::Timing::default()
        }
    }

    /// With catch-up policy `catch_up`.
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// With overlap policy `overlap`.
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// With up to `attempts` retries of a failed run, the first after `backoff`.
    pub fn retry(mut self, attempts: u32, backoff: Duration) -> Self {
        self.retry = Some(Retry { attempts, backoff });
        self
    }

    /// With runs limited to `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// The policies written as keys (`#[job]`'s, or a dynamic schedule's policy text),
/// over the default where no key sets one: the one place the two become a
/// [`Policy`].
impl From<scheduler_spec::PolicySpec> for Policy {
    fn from(spec: scheduler_spec::PolicySpec) -> Self {
        use scheduler_spec::{CatchUpSpec, OverlapSpec};
        let mut policy = Policy::default();
        if let Some(catch_up) = spec.catch_up {
            policy.catch_up = match catch_up {
                CatchUpSpec::Skip => CatchUp::Skip,
                CatchUpSpec::Latest => CatchUp::Latest,
                CatchUpSpec::All { max } => CatchUp::All { max },
            };
        }
        if let Some(overlap) = spec.overlap {
            policy.overlap = match overlap {
                OverlapSpec::Skip => Overlap::Skip,
                OverlapSpec::BufferOne => Overlap::BufferOne,
                OverlapSpec::CancelRunning => Overlap::CancelRunning,
                OverlapSpec::Concurrent { max } => Overlap::Concurrent { max },
            };
        }
        policy.retry = spec.retry.map(|retry| Retry {
            attempts: retry.attempts,
            backoff: retry.backoff,
        });
        policy.timeout = spec.timeout;
        policy
    }
}
