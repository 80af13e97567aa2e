//! Per-job counters: what happened to each tick.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// What happened to one tick attempt of a job, as counted by [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The run finished without error.
    Ran,
    /// The run returned an error, panicked, or was cancelled.
    Failed,
    /// Another instance held the lease (it ran the tick, or still runs the previous one).
    HeldElsewhere,
    /// This instance still ran the previous tick: the new one was skipped.
    SkippedOverlap,
    /// The tick could not be attempted within its catch-up window (database down,
    /// process paused) and was superseded.
    Missed,
    /// The lease was lost while the run was under way.
    LeaseLost,
    /// The tick could not start and a later one was run in its place (catch-up
    /// policy [`CatchUp::Latest`](crate::CatchUp::Latest)).
    Coalesced,
    /// The run failed and is tried again under the same lease (its retry policy).
    Retried,
    /// The run took longer than its timeout and was cancelled.
    TimedOut,
    /// A newer tick cancelled the run (overlap policy
    /// [`Overlap::CancelRunning`](crate::Overlap::CancelRunning)).
    CancelledByNewer,
    /// A tick of a backfill ran to success
    /// ([`Scheduler::backfill`](crate::Scheduler::backfill)).
    Backfilled,
    /// The job was paused by an operator: the tick was not run, and is not missed
    /// ([`Controls::pause`](crate::Controls::pause)).
    Paused,
}

impl Outcome {
    const ALL: [Outcome; 12] = [
        Outcome::Ran,
        Outcome::Failed,
        Outcome::HeldElsewhere,
        Outcome::SkippedOverlap,
        Outcome::Missed,
        Outcome::LeaseLost,
        Outcome::Coalesced,
        Outcome::Retried,
        Outcome::TimedOut,
        Outcome::CancelledByNewer,
        Outcome::Backfilled,
        Outcome::Paused,
    ];

    /// The outcome's name, as logs and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ran => "ran",
            Outcome::Failed => "failed",
            Outcome::HeldElsewhere => "held_elsewhere",
            Outcome::SkippedOverlap => "skipped_overlap",
            Outcome::Missed => "missed",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Coalesced => "coalesced",
            Outcome::Retried => "retried",
            Outcome::TimedOut => "timed_out",
            Outcome::CancelledByNewer => "cancelled_by_newer",
            Outcome::Backfilled => "backfilled",
            Outcome::Paused => "paused",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

/// Counts of tick outcomes per job, shared with the running scheduler.
///
/// Obtained from [`Scheduler::stats`](crate::Scheduler::stats) before the scheduler
/// runs; reading never waits on the scheduler.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Jobs registered in code from the start; dynamic schedules join as they come.
    jobs: Arc<RwLock<BTreeMap<String, Counts>>>,
}

type Counts = Arc<[AtomicU64; Outcome::ALL.len()]>;

impl Stats {
    pub(crate) fn new<'a>(jobs: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            jobs: Arc::new(RwLock::new(
                jobs.into_iter()
                    .map(|j| (j.to_owned(), Counts::default()))
                    .collect(),
            )),
        }
    }

    /// Counts `job` from now on (a dynamic schedule picked up at run time).
    pub(crate) fn track(&self, job: &str) {
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        jobs.entry(job.to_owned()).or_default();
    }

    fn counts(&self, job: &str) -> Option<Counts> {
        let jobs = self.jobs.read().unwrap_or_else(PoisonError::into_inner);
        jobs.get(job).cloned()
    }

    pub(crate) fn add(&self, job: &str, outcome: Outcome) {
        if let Some(counts) = self.counts(job) {
            counts[outcome.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many ticks of `job` ended with `outcome`.
    pub fn count(&self, job: &str, outcome: Outcome) -> u64 {
        self.counts(job)
            .map_or(0, |counts| counts[outcome.index()].load(Ordering::Relaxed))
    }
}
