//! The jobs' tick states, indexed by when each next needs the loop, so that a turn
//! visits the jobs with something to do instead of every job, and the loop's
//! wake-up is read off the index instead of computed over every job (at 10,000 jobs
//! a tick, or a million dynamic schedules, those scans were most of the loop's work).
//!
//! A job is indexed by [`JobTicks::look_at`]: the earliest instant its `due` can do
//! anything with the lead the loop takes ticks ahead by (at most [`MAX_AHEAD`]; all
//! jobs are indexed again when it moves, which it does in steps, so rarely once
//! the rounds of takes settle). Every change marks the job, which
//! is indexed again before the index is read. A change through `IndexMut` (the
//! rare ones: controls, refusals) also has the job visited by the next turn whatever
//! its key says (a turn used to visit every job, so visiting every changed one
//! keeps what a visit did); the changes of every tick go through
//! [`Jobs::keyed_mut`], trusting the key.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use chrono::{DateTime, TimeDelta, Utc};

use super::MAX_AHEAD;
use crate::runtime::decide::JobTicks;

/// Marked: to index again.
const STALE: u8 = 1;
/// Marked: to visit at the next turn.
const TOUCHED: u8 = 2;
/// Not in the set of running jobs.
const ABSENT: usize = usize::MAX;

#[derive(Debug, Default)]
pub(super) struct Jobs {
    ticks: Vec<JobTicks>,
    /// How far ahead of their fire time ticks are taken: the lead the keys are
    /// computed with.
    lead: TimeDelta,
    /// Each job's key in `by_wake`, as last indexed.
    keys: Vec<Option<DateTime<Utc>>>,
    /// The jobs by key: a bucket per instant, in no order (jobs of one cadence
    /// share their keys: 10,000 jobs every second move between two or three
    /// buckets, each move a push and a swap-remove instead of a tree's).
    by_wake: BTreeMap<DateTime<Utc>, Vec<usize>>,
    /// Where each keyed job is in its bucket.
    in_bucket: Vec<usize>,
    /// The jobs whose run holds (or held) a lease, as last indexed, in no order.
    running: Vec<usize>,
    /// Where each job is in `running` ([`ABSENT`]: not there).
    running_at: Vec<usize>,
    /// No later than the earliest expiry of a lease a run holds and has not lost
    /// (exact after [`settle_expiry_floor`](Self::settle_expiry_floor), lowered by
    /// every lease indexed since: a renewal leaves it early until then). `None`: no
    /// such lease.
    expiry_floor: Option<DateTime<Utc>>,
    marks: Vec<u8>,
    stale: Vec<usize>,
    touched: Vec<usize>,
}

impl Jobs {
    pub(super) fn new(count: usize) -> Self {
        let mut jobs = Self::default();
        for _ in 0..count {
            jobs.push(JobTicks::default());
        }
        jobs
    }

    pub(super) fn len(&self) -> usize {
        self.ticks.len()
    }

    /// Room for `more` jobs pushed next.
    pub(super) fn reserve(&mut self, more: usize) {
        self.ticks.reserve(more);
        self.keys.reserve(more);
        self.in_bucket.reserve(more);
        self.running_at.reserve(more);
        self.marks.reserve(more);
        self.stale.reserve(more);
        self.touched.reserve(more);
    }

    pub(super) fn push(&mut self, ticks: JobTicks) {
        self.ticks.push(ticks);
        self.keys.push(None);
        self.in_bucket.push(0);
        self.running_at.push(ABSENT);
        self.marks.push(0);
        self.mark(self.ticks.len() - 1, STALE | TOUCHED);
    }

    /// Every job, each marked changed.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut JobTicks> {
        for i in 0..self.ticks.len() {
            self.mark(i, STALE | TOUCHED);
        }
        self.ticks.iter_mut()
    }

    /// Job `i`, for a change its key accounts for: indexed again, and visited when
    /// its key comes, not at the next turn whatever the key says. A turn's visit
    /// changes it so (the visit acts on what it changed), and so do the changes of
    /// every tick of a busy job: a take won, a run's end, a renewal (at 10,000 runs a
    /// second, the turns after the takes and after the runs' ends visited every job
    /// for nothing). The simulations check at every turn that no job passed over had
    /// anything to do.
    pub(super) fn keyed_mut(&mut self, i: usize) -> &mut JobTicks {
        self.mark(i, STALE);
        &mut self.ticks[i]
    }

    /// What job `i`'s decisions ask the driver to do
    /// ([`JobTicks::take_commands`]): changes nothing the index keeps.
    pub(super) fn take_commands(&mut self, i: usize) -> Vec<crate::runtime::decide::Command> {
        self.ticks[i].take_commands()
    }

    fn mark(&mut self, i: usize, how: u8) {
        let Some(marks) = self.marks.get_mut(i) else {
            return;
        };
        let new = how & !*marks;
        *marks |= how;
        if new & STALE != 0 {
            self.stale.push(i);
        }
        if new & TOUCHED != 0 {
            self.touched.push(i);
        }
    }

    /// The rounds of takes want ticks taken `ahead` of their fire time: the lead
    /// becomes that when it is more than the lead, or less than half of it, and
    /// then every job is indexed again. Between the two the lead stays, so that
    /// the keys are the jobs' wake-ups with the lead the loop uses: a lead that
    /// only grew left every job keyed before its wake-up, so every turn between
    /// the two visited every job and scanned every one for the next wake-up.
    pub(super) fn taking_ahead(&mut self, ahead: TimeDelta) {
        let max = TimeDelta::from_std(MAX_AHEAD).unwrap_or(TimeDelta::MAX);
        let ahead = ahead.min(max);
        if ahead > self.lead || ahead * 2 < self.lead {
            self.lead = ahead;
            for i in 0..self.ticks.len() {
                self.mark(i, STALE);
            }
        }
    }

    /// How far ahead of their fire time ticks are taken (see
    /// [`taking_ahead`](Self::taking_ahead)).
    pub(super) fn lead(&self) -> TimeDelta {
        self.lead
    }

    /// Indexes the jobs changed since they were last indexed.
    fn refresh(&mut self) {
        for i in std::mem::take(&mut self.stale) {
            self.marks[i] &= !STALE;
            let key = self.ticks[i].look_at(self.lead);
            if self.keys[i] != key {
                if let Some(old) = self.keys[i] {
                    self.unkey(i, old);
                }
                if let Some(new) = key {
                    let bucket = self.by_wake.entry(new).or_default();
                    self.in_bucket[i] = bucket.len();
                    bucket.push(i);
                }
                self.keys[i] = key;
            }
            match self.ticks[i].running() {
                Some(run) => {
                    if self.running_at[i] == ABSENT {
                        self.running_at[i] = self.running.len();
                        self.running.push(i);
                    }
                    if !run.lost {
                        let at = run.lease.expires_at;
                        self.expiry_floor = Some(self.expiry_floor.map_or(at, |f| f.min(at)));
                    }
                }
                None => {
                    let at = std::mem::replace(&mut self.running_at[i], ABSENT);
                    if at != ABSENT {
                        self.running.swap_remove(at);
                        if let Some(&moved) = self.running.get(at) {
                            self.running_at[moved] = at;
                        }
                    }
                }
            }
        }
    }

    /// Takes job `i` out of its bucket, `key`'s.
    fn unkey(&mut self, i: usize, key: DateTime<Utc>) {
        let Some(bucket) = self.by_wake.get_mut(&key) else {
            return;
        };
        let at = self.in_bucket[i];
        if bucket.get(at) != Some(&i) {
            debug_assert!(false, "job {i} not where its bucket had it");
            return;
        }
        bucket.swap_remove(at);
        if let Some(&moved) = bucket.get(at) {
            self.in_bucket[moved] = at;
        }
        if bucket.is_empty() {
            self.by_wake.remove(&key);
        }
    }

    /// The jobs a turn at `now` (store clock) visits, in job order: those whose
    /// key has come, and those changed since the last turn.
    pub(super) fn visits(&mut self, now: DateTime<Utc>) -> Vec<usize> {
        self.refresh();
        let mut visit: Vec<usize> = std::mem::take(&mut self.touched);
        for &i in &visit {
            self.marks[i] &= !TOUCHED;
        }
        visit.extend(
            self.by_wake
                .range(..=now)
                .flat_map(|(_, bucket)| bucket.iter().copied()),
        );
        visit.sort_unstable();
        visit.dedup();
        visit
    }

    /// The jobs whose run holds a lease (lost or not), in job order.
    pub(super) fn running(&mut self) -> Vec<usize> {
        self.refresh();
        let mut running = self.running.clone();
        running.sort_unstable();
        running
    }

    /// No later than the earliest expiry of a lease a run holds and has not lost
    /// (`None`: no such lease): a lease can have expired unrenewed at `now` only if
    /// this is no later than `now`.
    pub(super) fn expiry_floor(&mut self) -> Option<DateTime<Utc>> {
        self.refresh();
        self.expiry_floor
    }

    /// Makes [`expiry_floor`](Self::expiry_floor) exact: the earliest expiry of the
    /// leases runs hold and have not lost.
    pub(super) fn settle_expiry_floor(&mut self) {
        self.refresh();
        self.expiry_floor = (self.running.iter())
            .filter_map(|&i| self.ticks[i].running().filter(|r| !r.lost))
            .map(|r| r.lease.expires_at)
            .min();
    }

    /// Whether a job's run holds a lease it still renews.
    pub(super) fn holds_any(&mut self) -> bool {
        self.refresh();
        self.running
            .iter()
            .any(|&i| self.ticks[i].running().is_some_and(|r| !r.lost))
    }

    /// The earliest of the jobs' [`JobTicks::next_wake`] with the lead: read off the
    /// index, visiting only the jobs whose key is before the earliest found so far.
    pub(super) fn next_wake(&mut self) -> Option<DateTime<Utc>> {
        let ahead = self.lead;
        self.refresh();
        let mut best: Option<DateTime<Utc>> = None;
        for (&key, bucket) in &self.by_wake {
            if best.is_some_and(|b| key >= b) {
                break;
            }
            for &i in bucket {
                // No job of this bucket or a later one wakes before its key.
                if best.is_some_and(|b| b <= key) {
                    break;
                }
                if let Some(at) = self.ticks[i].next_wake(ahead) {
                    best = Some(best.map_or(at, |b| b.min(at)));
                }
            }
        }
        best
    }
}

impl Index<usize> for Jobs {
    type Output = JobTicks;

    fn index(&self, i: usize) -> &JobTicks {
        &self.ticks[i]
    }
}

impl IndexMut<usize> for Jobs {
    /// Job `i`, marked changed: indexed again, and visited by the next turn.
    fn index_mut(&mut self, i: usize) -> &mut JobTicks {
        self.mark(i, STALE | TOUCHED);
        &mut self.ticks[i]
    }
}

#[cfg(all(debug_assertions, feature = "test-util"))]
impl Jobs {
    /// Checks that a turn passed over nothing: each job it did not visit has
    /// nothing `due` (tests and simulations of small clusters only; visiting every
    /// job each turn is what the index saves).
    pub(super) fn check_passed_over<'a>(
        &mut self,
        visited: &[usize],
        now: DateTime<Utc>,
        ahead: TimeDelta,
        cadence: impl Fn(usize) -> &'a crate::runtime::decide::Cadence,
    ) {
        if self.ticks.len() > 64 {
            return;
        }
        for (i, job) in self.ticks.iter_mut().enumerate() {
            if visited.binary_search(&i).is_ok() {
                continue;
            }
            let before = format!("{job:?}");
            let mut events = Vec::new();
            let due = job.due(cadence(i), now, ahead, &mut events);
            assert!(
                due.is_none() && events.is_empty() && format!("{job:?}") == before,
                "job {i} passed over at {now} (ahead {ahead}) had something to do: \
                 {due:?} {events:?}\nbefore: {before}\nafter: {job:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::policy::{CatchUp, Policy};
    use crate::runtime::decide::Cadence;
    use crate::schedule::Schedule;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    /// One idle job ticking every 10 s, started at 0 (the tick at 0 skipped): its
    /// next tick fires at 10 s.
    fn one_job() -> Jobs {
        let cadence = Cadence {
            schedule: Schedule::every(Duration::from_secs(10)).compile().unwrap(),
            catch_up: None,
            jitter: Duration::ZERO,
            holder_prefix: Arc::from("node-1:1"),
            policy: Policy::default().catch_up(CatchUp::Skip),
            fenced: false,
        };
        let mut ticks = JobTicks::default();
        ticks.start(&cadence, at(0));
        let mut jobs = Jobs::new(0);
        jobs.push(ticks);
        // The push marks it to visit once.
        assert_eq!(jobs.visits(at(0)), [0]);
        jobs
    }

    /// The lead moves up at once and down in steps, and the keys follow it: a lead
    /// that had once been long kept the job keyed a whole lead before its wake-up,
    /// so every turn in between visited it for nothing.
    #[test]
    fn the_keys_follow_the_lead_down_as_well_as_up() {
        let ms = TimeDelta::milliseconds;
        let mut jobs = one_job();
        jobs.taking_ahead(ms(1_000));
        assert_eq!(jobs.next_wake(), Some(at(9_000)));
        assert_eq!(jobs.visits(at(9_000)), [0]);
        // A tenth of it: the lead follows, and the job is no longer visited early.
        jobs.taking_ahead(ms(100));
        assert_eq!(jobs.lead(), ms(100));
        assert!(jobs.visits(at(9_500)).is_empty());
        assert_eq!(jobs.next_wake(), Some(at(9_900)));
        // Less, but not less than half: the lead stays.
        jobs.taking_ahead(ms(60));
        assert_eq!(jobs.lead(), ms(100));
        assert_eq!(jobs.next_wake(), Some(at(9_900)));
        // More: at once.
        jobs.taking_ahead(ms(200));
        assert_eq!(jobs.next_wake(), Some(at(9_800)));
        assert_eq!(jobs.visits(at(9_800)), [0]);
    }
}
