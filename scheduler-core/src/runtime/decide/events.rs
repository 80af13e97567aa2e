//! What the decisions hand the driver: [`TickEvent`]s to log and count, and
//! [`Command`]s to carry out (a release, an ask to cancel, a run to cancel).

use chrono::TimeDelta;

use crate::lease::{Holder, Release, Tick};
use crate::policy::CatchUp;
#[cfg(doc)]
use crate::policy::Overlap;

/// Something about a tick that the observer logs and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TickEvent {
    /// Ticks that were never attempted: superseded by a later one (`superseded`), or
    /// their catch-up window closed.
    Missed {
        tick: Tick,
        count: u64,
        superseded: bool,
    },
    /// The tick came due while this instance's previous run still held the lease.
    SkippedOverlap { tick: Tick, running: Tick },
    /// The first refused take of a tick: another holder has it, or it already ran.
    HeldElsewhere { tick: Tick },
    /// A tick dropped while a take of it had gone unanswered: the store may have
    /// granted it to `holder` all the same, so that holder is to be released.
    Abandoned { tick: Tick, holder: Holder },
    /// A newer tick, come due during the run of `tick`, cancelled that run
    /// ([`Overlap::CancelRunning`]).
    CancelledByNewer { tick: Tick, newer: Tick },
    /// The run of an older tick holds the lease on another instance: it is to be
    /// asked to stop, for `newer` ([`Overlap::CancelRunning`]).
    AskCancel { newer: Tick },
    /// Ticks that could not start and were passed over for a later one that runs in
    /// their place ([`CatchUp::Latest`]); `tick` is the last of them.
    Coalesced { tick: Tick, count: u64 },
    /// A take of the tick was granted to `holder` only after its catch-up window had
    /// closed (`late` after the tick's instant, on the store's clock when the answer
    /// came): the tick is missed, not run, and its lease released unrun.
    WonTooLate {
        tick: Tick,
        holder: Holder,
        late: TimeDelta,
    },
    /// The take was refused because an operator paused the job: the tick is not
    /// run, and not missed.
    Paused { tick: Tick },
}

/// Ticks passed over in one turn because a later tick came due before they could
/// start: missed ([`CatchUp::Skip`], or [`CatchUp::All`] beyond its `max`) or
/// coalesced into the later one ([`CatchUp::Latest`]).
#[derive(Debug, Default)]
pub(super) struct PassedOver {
    last: Option<Tick>,
    count: u64,
}

impl PassedOver {
    pub(super) fn add(&mut self, tick: Tick) {
        self.last = Some(self.last.map_or(tick, |last| last.max(tick)));
        self.count += 1;
    }

    pub(super) fn report(self, policy: CatchUp, events: &mut Vec<TickEvent>) {
        let Some(tick) = self.last else {
            return;
        };
        events.push(match policy {
            CatchUp::Latest => TickEvent::Coalesced {
                tick,
                count: self.count,
            },
            _ => TickEvent::Missed {
                tick,
                count: self.count,
                superseded: true,
            },
        });
    }
}

/// What a granted take leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Won {
    /// The run begins; `took_over`: an earlier take found this tick held by another
    /// holder (the tick is taken over from it).
    Run { took_over: bool },
    /// The answer came after the tick's window closed: nothing runs
    /// ([`TickEvent::WonTooLate`]).
    TooLate,
}

/// Something the driver is to do for a job: the decisions' only way to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Release the job's lease as held by `holder`, the way `how` says (a tick
    /// abandoned while its take went unanswered, or won too late: harmless if the
    /// store never granted it, since a release names its holder).
    Release { holder: Holder, how: Release },
    /// Ask the holder of an older tick's run to stop, for tick `newer`
    /// ([`Overlap::CancelRunning`]).
    AskCancel { newer: Tick },
    /// Cancel the run the job holds (its task sees its token cancelled).
    CancelRun,
    /// Cancel the run's current attempt if it has not begun yet (a retry's backoff,
    /// a tick taken ahead): an attempt never begins once the lease is known lost.
    CancelUnbegun,
}
