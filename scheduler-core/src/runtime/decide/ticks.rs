//! One job's ticks as a state machine: its schedule cursor, the tick it is trying to
//! take, the run it holds, and every decision about them. No I/O and no clock of its
//! own: the engine hands it the store's time and the store's answers.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::cadence::{Cadence, half};
use super::events::{Command, PassedOver, TickEvent};
use super::runs::{RunEnd, Running};
use crate::lease::{Holder, Release, Tick};
use crate::policy::{CatchUp, Overlap};

/// The tick a job is trying to take.
#[derive(Debug, Clone)]
struct Pending {
    tick: Tick,
    /// When its run may begin (store clock): the tick's instant plus its jitter. A
    /// take may be answered before it (see [`JobTicks::due`]).
    fire_at: DateTime<Utc>,
    /// How long after its instant it may still start ([`Cadence::window`]).
    window: TimeDelta,
    /// The holder every take of this tick asks as: a take whose answer was lost is
    /// recognised as won when it is retried.
    holder: Holder,
    /// A take for it was answered (refused) at least once.
    refused: bool,
    /// The last take for it got no answer: the store may hold it for `holder`.
    unanswered: bool,
    /// When to ask again after a refusal (store clock); `None`: at once.
    retry_at: Option<DateTime<Utc>>,
    /// The holder of the previous tick was asked to stop ([`Overlap::CancelRunning`]).
    cancel_asked: bool,
    /// A take found this very tick held by another holder: winning it later is a
    /// takeover (a refusal for an older tick still running elsewhere is not).
    held_elsewhere: bool,
}

/// What the end of a run's attempt leads to ([`JobTicks::on_attempt_ended`]).
#[derive(Debug)]
pub(crate) enum AttemptEnd {
    /// The attempt failed and the run tries again: attempt number `attempt`, after
    /// `wait`; `failed` is the failed attempt's start and number.
    Retry {
        failed: (DateTime<Utc>, u32),
        attempt: u32,
        wait: Duration,
    },
    /// The run ended: it no longer holds the job.
    Ended {
        lost: bool,
        run: Running,
        end: RunEnd,
    },
    /// No run was under way.
    Gone,
}

/// One job's ticks.
#[derive(Debug, Default)]
pub(crate) struct JobTicks {
    /// The next tick not yet due, the instant (store clock) it fires, and its window
    /// (computed once: a cron schedule walks its calendar for it).
    next: Option<Due>,
    /// Boxed, as is `running`: a job's ticks are mostly idle, and a million dynamic
    /// schedules each hold one of these.
    pending: Option<Box<Pending>>,
    running: Option<Box<Running>>,
    /// Ticks waiting to be caught up after `pending`, oldest first
    /// ([`CatchUp::All`]).
    backlog: VecDeque<Due>,
    /// The tick that came due during the run and waits for it to end
    /// ([`Overlap::BufferOne`]).
    buffered: Option<Due>,
    /// No tick is taken before its instant ([`CatchUp::All`]): a tick taken ahead,
    /// then paused over, would run live and in the pause's catch-up too (whose
    /// range is the pause's, by tick instants).
    not_before_instant: bool,
    /// The earliest instant whose ticks start-up caught up ([`CatchUp::All`]): the
    /// start less the catch-up window. A resume whose pause reaches past it is
    /// caught up by the first poll of the controls, since start-up left the ticks
    /// that pause covered to it ([`catch_up_from`](Self::catch_up_from)).
    catch_up_from: Option<DateTime<Utc>>,
    /// The ticks after this instant leave a pause ended by a catch-up to that catch-up
    /// ([`CatchUp::All`]): all of them for a job started with the scheduler (whose
    /// first poll catches up what start-up left), those after its start for a
    /// dynamic schedule started later (whose start-up nothing catches up after).
    leave_after: Option<DateTime<Utc>>,
    /// The latest tick this entry won ([`last_won`](Self::last_won)).
    last_won: Option<Tick>,
    /// What the driver is to do, drained by [`take_commands`](Self::take_commands).
    commands: Vec<Command>,
    /// The earliest tick refused as paused since the job's last resume was read:
    /// still undecided, for the resume's catch-up may run it (the row is not let go
    /// and its bound not moved past it until a resume is read).
    paused_from: Option<DateTime<Utc>>,
    /// How long after its fire time an idle job's next tick is asked for: another
    /// instance is to take it first ([`set_defer`](Self::set_defer)); zero: at once,
    /// or ahead.
    defer: TimeDelta,
}

/// A tick, the instant (store clock) it fires, and its window.
type Due = (Tick, DateTime<Utc>, TimeDelta);

impl JobTicks {
    /// Starts the schedule at `now`. Ticks before `now` within the catch-up window
    /// are due at once as the catch-up policy says (the store refuses any the
    /// cluster already ran): [`CatchUp::Latest`] the latest, [`CatchUp::All`] each
    /// (the most recent `max`, oldest first), [`CatchUp::Skip`] none. Then the ticks
    /// after now.
    pub(crate) fn start(&mut self, cadence: &Cadence, now: DateTime<Utc>) {
        self.not_before_instant = matches!(cadence.policy.catch_up, CatchUp::All { .. });
        let next = cadence
            .schedule
            .next_after(now)
            .map(|t| (t, cadence.fire_at(t), cadence.window(t)));
        let window = next.map_or(TimeDelta::zero(), |(_, _, window)| window);
        self.catch_up_from = self.not_before_instant.then(|| {
            now.checked_sub_signed(window)
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        });
        self.leave_after = self.not_before_instant.then_some(DateTime::<Utc>::MIN_UTC);
        match cadence.policy.catch_up {
            CatchUp::Skip => {}
            CatchUp::All { max } => {
                let keep = usize::try_from(max).unwrap_or(usize::MAX);
                for tick in cadence.schedule.latest_within(now, window, keep) {
                    self.backlog
                        .push_back((tick, tick.at(), cadence.window(tick)));
                }
                self.pending = self
                    .backlog
                    .pop_front()
                    .map(|(tick, at, window)| Self::fresh(cadence, tick, at, window));
            }
            _ => {
                self.pending = cadence
                    .schedule
                    .latest_at_or_before(now, window)
                    .map(|tick| Self::fresh(cadence, tick, tick.at(), cadence.window(tick)));
            }
        }
        // What `advance_from(now)` would compute again.
        self.next = next;
    }

    /// Whether a resume's catch-up runs `tick` if a pause covered it, so that the take
    /// must leave it to that catch-up ([`ControlKey::caught_up_on_resume`]
    /// (crate::ControlKey)): under [`CatchUp::All`], start-up's ticks too, except a
    /// dynamic schedule's started after the first poll ([`leave_after`]
    /// (Self::leave_after)).
    pub(crate) fn resume_catches_up(&self, tick: Tick) -> bool {
        self.leave_after.is_some_and(|after| tick.at() > after)
    }

    /// The earliest instant whose ticks start-up caught up, under [`CatchUp::All`]:
    /// a resume at or after it may cover ticks start-up left to it.
    pub(crate) fn catch_up_from(&self) -> Option<DateTime<Utc>> {
        self.catch_up_from
    }

    /// Starts the schedule of a job new to the cluster (its lease had no row) at
    /// `now`: as [`start`](Self::start), but no tick from before `now` is caught up
    /// (a nightly job deployed at 23:50 does not run the night's tick before it
    /// existed), as a Kubernetes CronJob or a Temporal schedule never runs a time
    /// from before it was created.
    pub(crate) fn start_new(&mut self, cadence: &Cadence, now: DateTime<Utc>) {
        self.start(cadence, now);
        self.drop_up_to(cadence, now);
    }

    /// Drops the ticks start-up would catch up at or before `at`.
    fn drop_up_to(&mut self, cadence: &Cadence, at: DateTime<Utc>) {
        self.backlog.retain(|(tick, _, _)| tick.at() > at);
        if self.pending.as_ref().is_some_and(|p| p.tick.at() <= at) {
            self.pending = self
                .backlog
                .pop_front()
                .map(|(tick, at, window)| Self::fresh(cadence, tick, at, window));
        }
    }

    /// Drops the ticks start-up would catch up from `since` to `until`: a pause that
    /// ended without catch-up dropped them (a row started in the poll that read the
    /// resume, or after it, would otherwise run the latest of them live: the pause
    /// no longer refuses its take).
    pub(crate) fn drop_within(
        &mut self,
        cadence: &Cadence,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) {
        let within = |tick: &Tick| since <= tick.at() && tick.at() <= until;
        self.backlog.retain(|(tick, _, _)| !within(tick));
        if self.pending.as_ref().is_some_and(|p| within(&p.tick)) {
            self.pending = self
                .backlog
                .pop_front()
                .map(|(tick, at, window)| Self::fresh(cadence, tick, at, window));
        }
    }

    /// Starts the schedule of a dynamic schedule's row changed at `changed`: as
    /// [`start`](Self::start), but no tick from before the change is caught up (a
    /// schedule added at noon does not run its 9 o'clock tick).
    pub(crate) fn start_after(
        &mut self,
        cadence: &Cadence,
        changed: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        self.start(cadence, now);
        // Ticks from before the change are not this entry's; its start-up's ticks
        // after the change are left to a resume's catch-up covering them (a pause
        // and its resume read in the same poll as the change: run twice otherwise).
        if self.leave_after.is_some() {
            self.leave_after = Some(changed.map_or(now, |changed| changed.min(now)));
        }
        if let Some(changed) = changed {
            self.drop_up_to(cadence, changed);
        }
    }

    fn fresh(
        cadence: &Cadence,
        tick: Tick,
        fire_at: DateTime<Utc>,
        window: TimeDelta,
    ) -> Box<Pending> {
        Box::new(Pending {
            tick,
            fire_at,
            window,
            holder: Holder::generate_on(&cadence.holder_prefix),
            refused: false,
            unanswered: false,
            retry_at: None,
            cancel_asked: false,
            held_elsewhere: false,
        })
    }

    /// Drops the pending tick, reporting its holder if a take of it went unanswered.
    fn drop_pending(&mut self, events: &mut Vec<TickEvent>) -> Option<Box<Pending>> {
        let old = self.pending.take()?;
        if old.unanswered {
            events.push(TickEvent::Abandoned {
                tick: old.tick,
                holder: old.holder.clone(),
            });
            self.commands.push(Command::Release {
                holder: old.holder.clone(),
                how: Release::Interrupted,
            });
        }
        Some(old)
    }

    /// How long before its fire time the idle job's next tick `due` may be taken:
    /// `ahead`, at most half its window, and never before its instant when
    /// [`not_before_instant`](Self::not_before_instant); negative (after it) when
    /// deferred ([`set_defer`](Self::set_defer)).
    fn early(&self, due: Due, ahead: TimeDelta) -> TimeDelta {
        let (tick, at, window) = due;
        if self.defer > TimeDelta::zero() {
            return -self.defer.min(half(window));
        }
        let early = ahead.min(half(window)).max(TimeDelta::zero());
        if self.not_before_instant {
            early.min(at - tick.at()).max(TimeDelta::zero())
        } else {
            early
        }
    }

    fn advance_from(&mut self, cadence: &Cadence, after: DateTime<Utc>) {
        self.next = cadence
            .schedule
            .next_after(after)
            .map(|t| (t, cadence.fire_at(t), cadence.window(t)));
    }

    /// The tick to take now, with the holder to ask as, if any. Moves due ticks into
    /// place and drops those that can no longer run, reporting each in `events`.
    ///
    /// `ahead`: a tick that fires within this much of `now` may be taken already
    /// (at most half its window ahead), so that a big tick's takes are
    /// answered by the time it fires; its run still begins at the fire time. Only
    /// the job's next tick is taken ahead, never past a tick still pending, and never
    /// while the job's previous run still holds its lease (that decision waits for
    /// the fire time, as without `ahead`).
    pub(crate) fn due(
        &mut self,
        cadence: &Cadence,
        now: DateTime<Utc>,
        ahead: TimeDelta,
        events: &mut Vec<TickEvent>,
    ) -> Option<(Tick, Holder)> {
        let mut passed_over = PassedOver::default();
        if self.running.is_none()
            && let Some(buffered) = self.buffered.take()
        {
            // The run it waited for has ended. It is older than any tick still in
            // `next`, so it goes first: a newer tick that came due meanwhile then
            // supersedes it, as the catch-up policy says.
            self.came_due(cadence, buffered, &mut passed_over, events);
        }
        while let Some((tick, at, window)) = self.next {
            let idle = self.pending.is_none()
                && self.running.is_none()
                && self.backlog.is_empty()
                && self.buffered.is_none();
            let early = if idle {
                self.early((tick, at, window), ahead)
            } else {
                TimeDelta::zero()
            };
            if at - early > now {
                break;
            }
            self.advance_from(cadence, tick.at());
            self.came_due(cadence, (tick, at, window), &mut passed_over, events);
        }
        passed_over.report(cadence.policy.catch_up, events);
        if self.running.is_some() {
            return None;
        }
        loop {
            if self.pending.is_none() {
                let (tick, at, window) = self.backlog.pop_front()?;
                self.pending = Some(Self::fresh(cadence, tick, at, window));
            }
            let pending = self.pending.as_ref()?;
            if now - pending.tick.at() > pending.window {
                if !pending.refused {
                    events.push(TickEvent::Missed {
                        tick: pending.tick,
                        count: 1,
                        superseded: false,
                    });
                }
                self.drop_pending(events);
                continue;
            }
            if pending.retry_at.is_some_and(|at| at > now) {
                return None;
            }
            return Some((pending.tick, pending.holder.clone()));
        }
    }

    /// A tick came due (its fire time passed, or it is taken ahead): the overlap
    /// policy decides while a run holds the job, the catch-up policy while another
    /// tick is still waiting to start.
    fn came_due(
        &mut self,
        cadence: &Cadence,
        due: Due,
        passed_over: &mut PassedOver,
        events: &mut Vec<TickEvent>,
    ) {
        let (tick, at, window) = due;
        if let Some(run) = &mut self.running {
            let running = run.lease.tick;
            let skipped = match cadence.policy.overlap {
                Overlap::BufferOne => self.buffered.replace(due).map(|(old, _, _)| old),
                Overlap::CancelRunning => {
                    if !run.superseded && !run.lost {
                        run.superseded = true;
                        run.cancelled = true;
                        self.commands.push(Command::CancelRun);
                        events.push(TickEvent::CancelledByNewer {
                            tick: running,
                            newer: tick,
                        });
                    }
                    self.buffered.replace(due).map(|(old, _, _)| old)
                }
                _ => Some(tick),
            };
            if let Some(tick) = skipped {
                events.push(TickEvent::SkippedOverlap { tick, running });
            }
            return;
        }
        if self.pending.is_none() && self.backlog.is_empty() {
            self.pending = Some(Self::fresh(cadence, tick, at, window));
            return;
        }
        if let CatchUp::All { max } = cadence.policy.catch_up {
            self.backlog.push_back(due);
            let keep = usize::try_from(max).unwrap_or(usize::MAX);
            // The oldest give way: the pending tick first, then the backlog's.
            while self.backlog.len() + usize::from(self.pending.is_some()) > keep {
                let dropped = match self.drop_pending(events) {
                    Some(old) => (!old.refused).then_some(old.tick),
                    None => self.backlog.pop_front().map(|(tick, _, _)| tick),
                };
                if let Some(tick) = dropped {
                    passed_over.add(tick);
                }
            }
            return;
        }
        if let Some(old) = self.drop_pending(events)
            && !old.refused
        {
            passed_over.add(old.tick);
        }
        self.pending = Some(Self::fresh(cadence, tick, at, window));
    }

    /// When this job next needs the loop (store clock): its next tick (`ahead` of
    /// it if it will be taken ahead, see [`JobTicks::due`]), or a retry; a pending
    /// tick with no retry time is due at once. Ticks waiting while a run of this
    /// instance holds the job (a triggered run claimed beside a pending tick) need
    /// nothing until that run ends, and its end wakes the loop.
    pub(crate) fn next_wake(&self, ahead: TimeDelta) -> Option<DateTime<Utc>> {
        let retry = match &self.pending {
            _ if self.running.is_some() => None,
            Some(p) => Some(p.retry_at.unwrap_or(p.tick.at())),
            // Waiting ticks are due as soon as no run holds the job.
            None => self
                .backlog
                .front()
                .or(self.buffered.as_ref())
                .map(|(_, at, _)| *at),
        };
        let next = self.next.map(|(tick, at, window)| {
            if self.pending.is_none()
                && self.running.is_none()
                && self.backlog.is_empty()
                && self.buffered.is_none()
            {
                at - self.early((tick, at, window), ahead)
            } else {
                at
            }
        });
        match (next, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether nothing is under way: no tick taken or to take but the next one not
    /// yet due, no run, nothing waiting.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_none()
            && self.running.is_none()
            && self.backlog.is_empty()
            && self.buffered.is_none()
            && self.paused_from.is_none()
    }

    /// A resume of the job was read: the ticks refused as paused are its catch-up's
    /// to run, or dropped, from now on.
    pub(crate) fn on_resume_read(&mut self) {
        self.paused_from = None;
    }

    /// The latest tick this entry won (and ran, or runs): a dynamic schedule's row
    /// replaced in the poll that reads a resume leaves the ticks its old entries
    /// ran to no catch-up of that resume.
    pub(crate) fn last_won(&self) -> Option<Tick> {
        self.last_won
    }

    /// The earliest tick this job has still to decide: one refused as paused before
    /// a resume was read, the one it tries to take, the first waiting behind it or
    /// behind the run, or the next not yet due.
    /// Every tick before it was taken (here or elsewhere), refused, skipped or
    /// dropped as its policy says. `None`: no tick is left.
    pub(crate) fn first_undecided(&self) -> Option<DateTime<Utc>> {
        [
            self.paused_from,
            self.pending.as_ref().map(|p| p.tick.at()),
            self.backlog.front().map(|(tick, _, _)| tick.at()),
            self.buffered.map(|(tick, _, _)| tick.at()),
            self.next.map(|(tick, _, _)| tick.at()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Asks for an idle job's next ticks `defer` after their fire time (at most
    /// half their window, so a deferred tick is still taken in time), or, with zero,
    /// at once or ahead as before: the instance that is to run this job's ticks
    /// takes them first, and the others take them only if it did not (a spread of
    /// the work over the instances; whoever takes a tick still wins it only by the
    /// store's conditional write). Ticks already waiting are asked for at once.
    pub(crate) fn set_defer(&mut self, defer: TimeDelta) {
        self.defer = defer.max(TimeDelta::zero());
    }

    /// How long after their fire time the job's ticks are asked for
    /// ([`set_defer`](Self::set_defer)).
    pub(crate) fn defer(&self) -> TimeDelta {
        self.defer
    }

    /// The earliest instant (store clock) at which [`JobTicks::due`] may find this
    /// job anything to do with any `ahead` up to `most`: before it, `due` changes
    /// nothing, reports nothing and returns `None`, so a driver may pass the job
    /// over until then (or until it changes the job otherwise). No earlier than
    /// [`next_wake`](Self::next_wake) with `most`, and no later than the end of a
    /// pending tick's window (where `due` drops it as missed). `None`: never.
    pub(crate) fn look_at(&self, most: TimeDelta) -> Option<DateTime<Utc>> {
        let at = self.next.map(|(tick, at, window)| {
            if self.running.is_none() {
                // Idle, taken `early` (deferred when negative); else at its instant.
                at - self.early((tick, at, window), most).max(TimeDelta::zero())
            } else {
                at
            }
        });
        if self.running.is_some() {
            return at;
        }
        // A tick waiting for the run that ended, or waiting behind no pending tick,
        // is taken at once; a pending tick at its retry, or dropped at its window's end.
        let waiting = match &self.pending {
            _ if self.buffered.is_some() => Some(DateTime::<Utc>::MIN_UTC),
            Some(p) => Some(p.retry_at.map_or(DateTime::<Utc>::MIN_UTC, |retry| {
                retry.min(p.tick.at() + p.window)
            })),
            None => (!self.backlog.is_empty()).then_some(DateTime::<Utc>::MIN_UTC),
        };
        match (at, waiting) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

mod answers;
mod run;
#[cfg(test)]
mod tests;
