//! When a job's ticks fall, how late they may start, and how soon a refused take
//! asks again: the inputs every decision about a job's ticks reads.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::lease::Tick;
use crate::policy::Policy;
use crate::schedule::Compiled;

/// When a job's ticks fall and how late they may start: what the state machine needs
/// of a job.
#[derive(Debug, Clone)]
pub(crate) struct Cadence {
    pub(crate) schedule: Compiled,
    /// How long after its instant a tick may still start; `None`: one period.
    pub(crate) catch_up: Option<Duration>,
    /// The bound of the random delay added to each tick's start.
    pub(crate) jitter: Duration,
    /// What this instance's holders start with: `node:pid` (see [`Holder::generate_on`]).
    pub(crate) holder_prefix: Arc<str>,
    /// The job's policies.
    pub(crate) policy: Policy,
    /// A duplicate run is not harmless ([`Duplicate::NeedsFencing`]
    /// (crate::job::Duplicate)): a run whose lease is lost is cancelled.
    pub(crate) fenced: bool,
}

/// The longest window a tick is given: 10,000 years, whatever the catch-up window
/// says ("catch up forever" is `Duration::MAX`). It changes nothing a schedule can
/// tell apart, and keeps every instant computed from a window within the calendar.
fn max_window() -> TimeDelta {
    TimeDelta::days(10_000 * 366)
}

/// Half of a window (never negative), by divisions by a constant the compiler turns
/// into shifts: chrono's division by an `i32` showed in the loop's CPU, once per job
/// and turn at 10,000 jobs.
pub(super) fn half(window: TimeDelta) -> TimeDelta {
    let secs = window.num_seconds();
    let nanos = i64::from(window.subsec_nanos());
    TimeDelta::seconds(secs / 2) + TimeDelta::nanoseconds((secs % 2 * 1_000_000_000 + nanos) / 2)
}

impl Cadence {
    /// How long after its instant `tick` may still start (at most [`max_window`]).
    pub(crate) fn window(&self, tick: Tick) -> TimeDelta {
        let jitter = TimeDelta::from_std(self.jitter).unwrap_or(TimeDelta::MAX);
        match self.catch_up {
            Some(d) => TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX),
            None => self.schedule.period_after(tick),
        }
        .max(jitter)
        .min(max_window())
    }

    /// When `tick` fires: its instant plus a random jitter within the bound.
    pub(super) fn fire_at(&self, tick: Tick) -> DateTime<Utc> {
        let bound = u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX);
        if bound == 0 {
            return tick.at();
        }
        let ms = i64::try_from(crate::random::range(0..=bound)).unwrap_or(0);
        tick.at()
            .checked_add_signed(TimeDelta::milliseconds(ms))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// How soon to ask again for a tick whose take was refused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Polling {
    /// While the previous tick's run still holds the lease elsewhere: at least this
    /// often, and more often in a short window ([`overlap_step`]), so this tick starts
    /// soon after it ends.
    pub(crate) overlap: Duration,
    /// While this very tick runs elsewhere: this often, only when the window leaves
    /// room for two such polls (a graceful shutdown elsewhere may hand the tick back
    /// interrupted); otherwise once, when its lease would expire.
    pub(crate) same_tick: Duration,
    /// The lease ttl: a race just lost leaves the winner's lease for about this long.
    pub(crate) ttl: Duration,
}

/// How many times per window a tick waiting for the previous tick's run elsewhere asks
/// again. The run's end is only seen at a poll, so the next run starts up to a step
/// (plus a round trip) after it; with a run longer than the period minus a step, that
/// delay carries over to the next tick, and the next, and a store slow to answer can
/// push one past its window. A quarter window was too coarse: a job busy for 60 % of
/// its period lost a tick on two instances whose store took 210 ms to answer
/// (`overlap_and_jitter.rs`).
const OVERLAP_POLLS_PER_WINDOW: i32 = 16;

/// The shortest step between such polls, unless the window is shorter than four of
/// them (then a quarter window).
const OVERLAP_POLL_FLOOR: TimeDelta = TimeDelta::milliseconds(50);

/// The step between the polls of a tick waiting for the previous tick's run to end
/// elsewhere, in a window of `window`: a sixteenth of it, at least
/// [`OVERLAP_POLL_FLOOR`] (or a quarter window, if less), at most `most`.
pub(super) fn overlap_step(window: TimeDelta, most: TimeDelta) -> TimeDelta {
    (window / OVERLAP_POLLS_PER_WINDOW)
        .max(OVERLAP_POLL_FLOOR.min(window / 4))
        .min(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `half` is chrono's division by two, down to the nanosecond, for every kind of
    /// window: odd seconds, sub-second parts, a day, the longest window.
    #[test]
    fn half_is_a_division_by_two() {
        let windows = [
            TimeDelta::zero(),
            TimeDelta::nanoseconds(1),
            TimeDelta::nanoseconds(999_999_999),
            TimeDelta::seconds(1),
            TimeDelta::milliseconds(1_500),
            TimeDelta::seconds(3) + TimeDelta::nanoseconds(7),
            TimeDelta::days(1),
            max_window(),
            max_window() - TimeDelta::nanoseconds(1),
        ];
        for w in windows {
            assert_eq!(half(w), w / 2, "{w}");
        }
    }
}
