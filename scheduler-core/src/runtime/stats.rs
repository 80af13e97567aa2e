//! Per-job counters: what happened to each tick.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::outcome::Outcome;

/// Counts of tick outcomes per job, shared with the running scheduler.
///
/// Obtained from [`Scheduler::stats`](crate::Scheduler::stats) before the scheduler
/// runs; reading never waits on the scheduler.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Jobs registered in code from the start; dynamic schedules join as they come.
    /// Looked up at every tick's end: hashed (a B-tree's dozen string comparisons
    /// per lookup showed in the loop's CPU at 10,000 runs a second).
    jobs: Arc<RwLock<HashMap<String, Counts>>>,
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

    /// Counts `job` no more (a dynamic schedule let go: its counts go with it).
    pub(crate) fn untrack(&self, job: &str) {
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        jobs.remove(job);
    }

    fn counts(&self, job: &str) -> Option<Counts> {
        let jobs = self.jobs.read().unwrap_or_else(PoisonError::into_inner);
        jobs.get(job).cloned()
    }

    pub(crate) fn add(&self, job: &str, outcome: Outcome) {
        if let Some(counts) = self.counts(job) {
            counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many ticks of `job` ended with `outcome`.
    pub fn count(&self, job: &str, outcome: Outcome) -> u64 {
        self.counts(job)
            .map_or(0, |counts| counts[outcome as usize].load(Ordering::Relaxed))
    }
}
