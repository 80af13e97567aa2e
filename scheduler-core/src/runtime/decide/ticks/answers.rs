//! The answers the store gives about a job's pending tick (won, refused, paused,
//! unanswered), and the operators' acts on the job (resume, trigger, retire).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{JobTicks, Running};
use crate::lease::{Held, Lease, Release};
use crate::policy::{CatchUp, Overlap};
use crate::runtime::decide::cadence::{Cadence, Polling, overlap_step};
use crate::runtime::decide::events::{Command, TickEvent, Won};

impl JobTicks {
    /// A take of the pending tick got no answer (it failed, or the loop stopped
    /// waiting): it is asked again as the same holder, and released if dropped.
    pub(crate) fn on_unanswered(&mut self) {
        if let Some(p) = &mut self.pending {
            p.unanswered = true;
        }
    }

    /// The store granted `lease` for the pending tick. `now` is when the answer came
    /// (store clock): the run begins then, or at the tick's fire time if that is
    /// later ([`Running::started`]) — unless the tick's window closed before the
    /// answer came (a take held up by an outage or a slow server): lateness is
    /// decided when the take is answered, not when it was sent.
    pub(crate) fn on_won(
        &mut self,
        lease: Lease,
        now: DateTime<Utc>,
        events: &mut Vec<TickEvent>,
    ) -> Won {
        let pending = self.pending.take();
        if let Some(p) = &pending
            && now - p.tick.at() > p.window
        {
            self.commands.push(Command::Release {
                holder: lease.holder.clone(),
                how: Release::Interrupted,
            });
            events.push(TickEvent::WonTooLate {
                tick: p.tick,
                holder: lease.holder,
                late: now - p.tick.at(),
            });
            return Won::TooLate;
        }
        let took_over = pending.as_ref().is_some_and(|p| p.held_elsewhere);
        if let Some(p) = &pending {
            self.last_won = Some(self.last_won.map_or(p.tick, |t| t.max(p.tick)));
        }
        let started = pending.map_or(now, |p| p.fire_at.max(now));
        self.running = Some(Box::new(Running::new(lease, started, None)));
        Won::Run { took_over }
    }

    /// The store refused the pending tick at `now` because the job is paused. A
    /// take answered ahead of the tick's instant asks again at that instant (a
    /// resume may come in between, and the tick is then the resumed job's first,
    /// after the pause's catch-up range, which ends at the resume); otherwise the
    /// tick is dropped (counted paused), and its holder is released if an earlier
    /// take of it went unanswered (the store may have granted it before the pause).
    pub(crate) fn on_paused(&mut self, now: DateTime<Utc>, events: &mut Vec<TickEvent>) {
        if let Some(p) = &mut self.pending
            && now < p.tick.at()
        {
            p.retry_at = Some(p.tick.at());
            return;
        }
        if let Some(old) = self.drop_pending(events) {
            let at = old.tick.at();
            self.paused_from = Some(self.paused_from.map_or(at, |was| was.min(at)));
            events.push(TickEvent::Paused { tick: old.tick });
        }
    }

    /// The job was resumed after a pause that began at `since`, its paused-over
    /// ticks to be caught up: as at start-up, the catch-up policy picks them among
    /// the ticks from `since` to `now` ([`CatchUp::Latest`] the latest,
    /// [`CatchUp::All`] the most recent `max`, [`CatchUp::Skip`] none), each with
    /// its window counted from `now` (the store refuses any the cluster already
    /// ran). Nothing is added while a tick is already waiting or running: a newer
    /// tick stands for them.
    pub(crate) fn on_resumed(
        &mut self,
        cadence: &Cadence,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) {
        if self.pending.is_some()
            || self.running.is_some()
            || !self.backlog.is_empty()
            || self.buffered.is_some()
        {
            return;
        }
        let keep = match cadence.policy.catch_up {
            CatchUp::Skip => return,
            CatchUp::Latest => 1,
            CatchUp::All { max } => usize::try_from(max).unwrap_or(usize::MAX),
        };
        for tick in cadence.schedule.latest_ticks(since, now, keep) {
            let window = (now - tick.at()) + cadence.window(tick);
            self.backlog.push_back((tick, now, window));
        }
        self.pending = self
            .backlog
            .pop_front()
            .map(|(tick, at, window)| Self::fresh(cadence, tick, at, window));
    }

    /// A run asked for by an operator ([`Controls::trigger`](crate::Controls::trigger))
    /// holds the job's lease `lease` from `now`: it runs like a tick's run (renewed,
    /// released, lost), and ticks that come due meanwhile meet it as the overlap
    /// policy says. Refused (`false`) while a run already holds the job.
    pub(crate) fn on_manual(
        &mut self,
        lease: Lease,
        trigger: crate::control::TriggerId,
        now: DateTime<Utc>,
    ) -> bool {
        if self.running.is_some() {
            return false;
        }
        self.running = Some(Box::new(Running::new(lease, now, Some(trigger))));
        true
    }

    /// The job is gone (a dynamic schedule removed or changed): no tick is due any
    /// more; a run under way ends as it would.
    pub(crate) fn retire(&mut self, events: &mut Vec<TickEvent>) {
        self.next = None;
        self.backlog.clear();
        self.buffered = None;
        // A tick waiting to start is not run by this entry: reported missed (the
        // changed row's new entry starts after the change).
        if let Some(old) = self.drop_pending(events)
            && !old.refused
        {
            events.push(TickEvent::Missed {
                tick: old.tick,
                count: 1,
                superseded: false,
            });
        }
    }

    /// The store refused the pending tick; `held` is the lease's row as the take saw
    /// it, `now` when the answer came (store clock). Decides when asking again could
    /// win, or drops the tick.
    pub(crate) fn on_refused(
        &mut self,
        cadence_overlap: Overlap,
        held: Option<&Held>,
        now: DateTime<Utc>,
        polling: Polling,
        events: &mut Vec<TickEvent>,
    ) {
        let Some(p) = &mut self.pending else {
            return;
        };
        // An answer: had an earlier take been applied, this one would have won.
        p.unanswered = false;
        if !p.refused {
            p.refused = true;
            events.push(TickEvent::HeldElsewhere { tick: p.tick });
        }
        let window = p.window;
        let delta = |d: Duration| TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
        let overlap_poll = now + overlap_step(window, delta(polling.overlap));
        let same_tick_poll =
            (delta(polling.same_tick) * 2 < window).then(|| now + delta(polling.same_tick));
        let retry_at = match held {
            // Done elsewhere, or a later tick already taken: nothing left to do.
            Some(h) if h.tick > p.tick || (h.tick == p.tick && h.completed) => None,
            // This tick runs elsewhere: it frees up when that lease expires (its holder
            // crashed) or is handed back interrupted.
            Some(h) if h.tick == p.tick => {
                p.held_elsewhere = true;
                Some(same_tick_poll.map_or(h.expires_at, |at| at.min(h.expires_at)))
            }
            // The previous tick still runs elsewhere: this one may start when it ends
            // (and asks it to end, if the newest tick wins).
            Some(h) if h.expires_at > now => {
                if cadence_overlap == Overlap::CancelRunning && !p.cancel_asked {
                    p.cancel_asked = true;
                    events.push(TickEvent::AskCancel { newer: p.tick });
                    self.commands.push(Command::AskCancel { newer: p.tick });
                }
                Some(h.expires_at.min(overlap_poll))
            }
            // The row the statement read was already free for this tick, yet the take
            // lost (or the store reports no row: it was free, or did not exist, when
            // the statement read it): another instance won this tick in the same
            // instant. Its lease lasts about a ttl.
            _ => {
                let expires = now + delta(polling.ttl);
                Some(same_tick_poll.map_or(expires, |at| at.min(expires)))
            }
        };
        match retry_at {
            Some(at) if at - p.tick.at() <= window => p.retry_at = Some(at),
            _ => {
                self.drop_pending(events);
            }
        }
    }
}
