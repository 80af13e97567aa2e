//! The model's checks of the operators' extras and triggers: backfills, dynamic
//! schedules changed or removed, and requests to stop a triggered run.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{World, delta, short};

impl World {
    /// A newer tick's request to stop marked the run holding `lease` as `holder`:
    /// not a triggered run asked for after that tick.
    pub(crate) fn asked_to_stop(
        &mut self,
        inst: usize,
        lease: &str,
        holder: &str,
        newer: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        self.note(
            now,
            format!("i{inst} asks {lease} to stop for tick {}", short(newer)),
        );
        let claim = self
            .claims
            .get(&(lease.to_owned(), holder.to_owned()))
            .copied();
        if let Some(at) = claim
            && newer <= at
        {
            self.violation(
                now,
                format!(
                    "tick {} of {lease} asked the trigger of {} to stop: it is older",
                    short(newer),
                    short(at)
                ),
            );
        }
    }

    /// Whether an operator's backfill asked for `job`'s `tick` by `at` (it runs
    /// the tick again, once, whether the live schedule ran it or not).
    pub(crate) fn backfilled(&self, job: &str, tick: DateTime<Utc>, at: DateTime<Utc>) -> bool {
        self.backfills
            .iter()
            .any(|b| b.job == job && b.from <= tick && tick <= b.to && b.asked <= at)
    }

    /// Whether dynamic schedule `job` changed around `tick` (within the time an
    /// instance takes to read it), or before it while instance `inst` was faulty.
    pub(super) fn relaid(
        &self,
        job: &str,
        tick: DateTime<Utc>,
        inst: usize,
        now: DateTime<Utc>,
    ) -> bool {
        let name = job.split(':').next().unwrap_or(job);
        let within = self.hears_within.map_or(TimeDelta::MAX, delta);
        let near = |a: DateTime<Utc>, b: DateTime<Utc>| {
            a.checked_add_signed(within).is_none_or(|end| b <= end)
        };
        self.puts.iter().any(|(n, p)| {
            n == name && near(tick, *p) && (near(*p, tick) || self.faulty_within(inst, *p, now))
        })
    }

    /// A run of dynamic schedule `job` began: not long after its removal, unless
    /// its instance could not hear of it.
    pub(super) fn check_removed(
        &mut self,
        job: &str,
        inst: usize,
        attempt: u32,
        now: DateTime<Utc>,
    ) {
        let Some(within) = self.hears_within else {
            return;
        };
        let late = self.removals.iter().find(|(name, at, again)| {
            name == job
                && attempt == 1
                && *at + delta(within) < now
                && again.is_none_or(|again| now < again)
        });
        if let Some(&(_, at, _)) = late
            && !self.faulty_within(inst, at, now)
        {
            self.violation(
                now,
                format!(
                    "dynamic schedule {job} removed at {} ran on i{inst}",
                    short(at)
                ),
            );
        }
    }

    /// An operator's backfill of `job` (its key job) from `from` to `to` returned:
    /// each tick of the range ran under its own lease, unless some failed.
    pub(crate) fn backfill_returned(
        &mut self,
        job: &str,
        every: Duration,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
        report: &scheduler_core::BackfillReport,
        now: DateTime<Utc>,
    ) {
        self.note(now, format!("backfill of {job} returned {report:?}"));
        let step = delta(every).num_milliseconds().max(1);
        let mut t = from.timestamp_millis().div_euclid(step) * step;
        let mut ticks = Vec::new();
        while let Some(tick) = DateTime::<Utc>::from_timestamp_millis(t) {
            t += step;
            if tick > to {
                break;
            }
            if tick >= from {
                ticks.push(tick);
            }
        }
        if report.ticks != ticks.len() {
            self.violation(
                now,
                format!(
                    "backfill of {job} counted {} ticks of {}",
                    report.ticks,
                    ticks.len()
                ),
            );
        }
        if report.failed > 0 || report.paused > 0 {
            return;
        }
        for tick in ticks {
            let done = self
                .commits
                .get(&(job.to_owned(), tick))
                .is_some_and(|v| v.iter().any(|c| c.2));
            if !done {
                self.violation(
                    now,
                    format!("backfill of {job} returned, tick {} never ran", short(tick)),
                );
            }
        }
    }
}
