//! A backfill's plan: which of a range's ticks to ask for next, what each answer
//! means, and when the range is done. Each tick has a lease of its own
//! (`{job's lease}\@{tick in Unix microseconds}`); the driver takes, renews and
//! releases them with the live ticks' calls, and runs them as it runs live ticks.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::lease::{Held, Holder, LeaseName, Tick};

/// What a backfill did: each tick of the range is counted once, as `ran`,
/// `already_done`, `failed` or `paused` (`ran + already_done + failed + paused == ticks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct BackfillReport {
    /// The ticks of the job's schedule in the range.
    pub ticks: usize,
    /// Ticks this call ran to success (and released as completed).
    pub ran: usize,
    /// Ticks found completed: by an earlier backfill, or by another instance
    /// running the same backfill meanwhile.
    pub already_done: usize,
    /// Ticks this call ran whose every attempt failed (or that were interrupted):
    /// released as not completed, so that running the backfill again retries them.
    pub failed: usize,
    /// Ticks not run because the job was paused when they were asked for: only a
    /// resume's catch-up honours a pause (an operator's backfill runs regardless).
    pub paused: usize,
}

/// How long a tick another instance holds waits before it is asked about again:
/// this, or the renewal interval if shorter, or until its lease expires if sooner.
pub(crate) const BACKFILL_POLL: Duration = Duration::from_secs(1);

/// What a take said of one of the plan's ticks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer<'a> {
    /// Won: the tick runs here.
    Won,
    /// Refused because the job is paused (a resume's catch-up honours pauses).
    Paused,
    /// Held by another holder (or completed), as the take saw its row.
    Held(&'a Held),
    /// Neither won nor held: a race just lost to another taker.
    Lost,
    /// No answer (the call failed): asked again, as the same holder, once the take
    /// may be sent again.
    Unanswered,
}

/// The plan of one backfill: the range's ticks, and where each stands.
#[derive(Debug)]
pub(crate) struct BackfillPlan {
    ticks: Vec<Tick>,
    names: Vec<LeaseName>,
    /// Each tick's holder, kept across takes whose answer was lost (the store hands
    /// a holder its own acquisition back).
    holders: Vec<Holder>,
    concurrency: usize,
    /// How soon a tick held elsewhere is asked about again, at most.
    poll: TimeDelta,
    /// Ticks never asked about, oldest first.
    fresh: VecDeque<usize>,
    /// Ticks held elsewhere (or whose take went unanswered), to ask about again from
    /// an instant on (store clock).
    deferred: Vec<(usize, DateTime<Utc>)>,
    /// Ticks asked about, not answered yet, or running here.
    busy: usize,
    report: BackfillReport,
}

impl BackfillPlan {
    /// A plan for `ticks` (oldest first) under the leases `names`, with holders made
    /// from `holder_prefix`, running at most `concurrency` at once (at least one);
    /// a tick held elsewhere is asked about again within `renew_every` at most.
    pub(crate) fn new(
        ticks: Vec<Tick>,
        names: Vec<LeaseName>,
        holder_prefix: &str,
        concurrency: usize,
        renew_every: Duration,
    ) -> Self {
        let poll = TimeDelta::from_std(BACKFILL_POLL.min(renew_every)).unwrap_or(TimeDelta::MAX);
        Self {
            holders: ticks
                .iter()
                .map(|_| Holder::generate_on(holder_prefix))
                .collect(),
            fresh: (0..ticks.len()).collect(),
            report: BackfillReport {
                ticks: ticks.len(),
                ..BackfillReport::default()
            },
            ticks,
            names,
            concurrency: concurrency.max(1),
            poll,
            deferred: Vec::new(),
            busy: 0,
        }
    }

    /// The ticks to ask for at `now` (store clock), up to the free run slots: the
    /// deferred ones whose time has come first (the oldest), then fresh ones. Each
    /// is then busy until its answer comes ([`on_answer`](Self::on_answer)).
    pub(crate) fn next_takes(&mut self, now: DateTime<Utc>) -> Vec<usize> {
        let free = self.concurrency.saturating_sub(self.busy);
        let mut batch = Vec::with_capacity(free);
        self.deferred.sort_unstable_by_key(|&(i, _)| i);
        let mut k = 0;
        while k < self.deferred.len() && batch.len() < free {
            if self.deferred[k].1 <= now {
                batch.push(self.deferred.remove(k).0);
            } else {
                k += 1;
            }
        }
        while batch.len() < free {
            let Some(i) = self.fresh.pop_front() else {
                break;
            };
            batch.push(i);
        }
        self.busy += batch.len();
        batch
    }

    /// Tick `i`'s instant, lease and holder.
    pub(crate) fn tick(&self, i: usize) -> (Tick, &LeaseName, &Holder) {
        (self.ticks[i], &self.names[i], &self.holders[i])
    }

    /// The answer about tick `i` came at `now` (store clock). Returns whether the
    /// tick runs here now.
    pub(crate) fn on_answer(&mut self, i: usize, answer: Answer<'_>, now: DateTime<Utc>) -> bool {
        let again = |wait: TimeDelta| now.checked_add_signed(wait).unwrap_or(now);
        match answer {
            Answer::Won => return true,
            Answer::Paused => self.report.paused += 1,
            Answer::Held(held) if held.completed => self.report.already_done += 1,
            // Held elsewhere: asked again once its lease has expired, or sooner (it
            // may be completed before).
            Answer::Held(held) => {
                let left = (held.expires_at - now)
                    .min(self.poll)
                    .max(TimeDelta::milliseconds(1));
                self.deferred.push((i, again(left)));
            }
            Answer::Lost => self.deferred.push((i, again(self.poll))),
            Answer::Unanswered => self.deferred.push((i, now)),
        }
        self.busy = self.busy.saturating_sub(1);
        false
    }

    /// Tick `i`'s run ended: run to success (`ran`), or not (failed or
    /// interrupted: released as not completed, for a later backfill).
    pub(crate) fn on_run_ended(&mut self, ran: bool) {
        if ran {
            self.report.ran += 1;
        } else {
            self.report.failed += 1;
        }
        self.busy = self.busy.saturating_sub(1);
    }

    /// Whether every tick is answered for: none left to ask about, none running.
    pub(crate) fn done(&self) -> bool {
        self.fresh.is_empty() && self.deferred.is_empty() && self.busy == 0
    }

    /// When the plan next has a tick to ask for (store clock), if a run slot is free.
    pub(crate) fn next_wake(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.busy >= self.concurrency {
            return None;
        }
        if !self.fresh.is_empty() {
            return Some(now);
        }
        self.deferred.iter().map(|&(_, at)| at).min()
    }

    /// What the backfill did so far.
    pub(crate) fn report(&self) -> BackfillReport {
        self.report
    }

    /// The range's first and last ticks.
    pub(crate) fn range(&self) -> Option<(Tick, Tick)> {
        Some((*self.ticks.first()?, *self.ticks.last()?))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn plan(n: i64, concurrency: usize) -> BackfillPlan {
        let ticks: Vec<Tick> = (0..n).map(|s| Tick::new(at(s * 60))).collect();
        let names = (0..n)
            .map(|s| LeaseName::new(format!("job\\@{s}")).unwrap())
            .collect();
        BackfillPlan::new(ticks, names, "node:1", concurrency, Duration::from_secs(5))
    }

    fn held(completed: bool, expires_at: DateTime<Utc>) -> Held {
        Held {
            name: LeaseName::new("job\\@0").unwrap(),
            tick: Tick::new(at(0)),
            expires_at,
            completed,
        }
    }

    #[test]
    fn takes_the_oldest_ticks_up_to_the_free_slots() {
        let mut p = plan(5, 2);
        assert_eq!(p.next_takes(at(1000)), vec![0, 1]);
        assert_eq!(p.next_takes(at(1000)), Vec::<usize>::new(), "no free slot");
        assert!(p.on_answer(0, Answer::Won, at(1000)));
        assert!(!p.on_answer(1, Answer::Paused, at(1000)));
        assert_eq!(p.next_takes(at(1000)), vec![2]);
        p.on_run_ended(true);
        assert_eq!(p.next_takes(at(1000)), vec![3]);
    }

    #[test]
    fn a_tick_held_elsewhere_is_asked_again_at_its_expiry_or_a_poll() {
        let mut p = plan(2, 1);
        assert_eq!(p.next_takes(at(1000)), vec![0]);
        let h = held(false, at(1010));
        p.on_answer(0, Answer::Held(&h), at(1000));
        // Deferred by the poll (1 s), sooner than its expiry; the next fresh tick
        // goes first.
        assert_eq!(p.next_wake(at(1000)), Some(at(1000)));
        assert_eq!(p.next_takes(at(1000)), vec![1]);
        p.on_answer(1, Answer::Held(&held(true, at(0))), at(1000));
        assert_eq!(p.next_wake(at(1000)), Some(at(1001)));
        assert_eq!(p.next_takes(at(1000)), Vec::<usize>::new());
        assert_eq!(p.next_takes(at(1001)), vec![0]);
        p.on_answer(0, Answer::Held(&held(true, at(0))), at(1001));
        assert!(p.done());
        let r = p.report();
        assert_eq!((r.ticks, r.already_done, r.ran), (2, 2, 0));
    }

    #[test]
    fn an_unanswered_take_asks_again_as_the_same_holder() {
        let mut p = plan(1, 1);
        let holder = p.tick(0).2.clone();
        assert_eq!(p.next_takes(at(1000)), vec![0]);
        p.on_answer(0, Answer::Unanswered, at(1000));
        assert_eq!(p.next_takes(at(1000)), vec![0]);
        assert_eq!(*p.tick(0).2, holder);
        assert!(!p.done());
        assert!(p.on_answer(0, Answer::Won, at(1000)));
        p.on_run_ended(false);
        assert!(p.done());
        assert_eq!(p.report().failed, 1);
    }
}
