//! Preview: the next ticks of a job, in UTC and in its zone.
//!
//! [`upcoming_ticks`] works on a [`Schedule`] alone (the CLI's `next`);
//! [`Scheduler::upcoming`] on a registered job, from the scheduler's clock. Each
//! tick says its instant, its wall-clock time in the schedule's zone, and, where the
//! zone's UTC offset changed since the tick before, a [`DstNote`]: when the clocks
//! moved, by how much, and whether the tick's wall time was skipped (a
//! restricted-hour cron job fires at the gap's end instead) or repeated.

use std::fmt::{self, Write as _};

use chrono::{
    DateTime, FixedOffset, LocalResult, NaiveDateTime, Offset, SecondsFormat, TimeDelta, TimeZone,
    Timelike, Utc,
};
use scheduler_spec::{CronSchedule, Tz};

use super::Scheduler;
use crate::schedule::{Compiled, Schedule, ScheduleError};

/// One upcoming tick: its instant, and its wall-clock time in the schedule's zone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpcomingTick {
    /// The tick's instant. A job with a jitter starts its run up to that long after.
    pub at: DateTime<Utc>,
    /// The tick in RFC 3339, with the offset of the schedule's zone
    /// (`2026-03-29T03:00:00+02:00`); in UTC (`…Z`) for an `every` schedule, whose
    /// ticks are instants, not wall-clock times.
    pub local: String,
    /// The schedule's IANA zone (`Europe/Berlin`, `UTC`); `None` for `every`.
    pub zone: Option<String>,
    /// Set when the zone's offset changed since the tick before (or, for the first
    /// tick, since the instant the preview starts from), and on the second
    /// occurrence of a repeated wall time.
    pub dst: Option<DstNote>,
}

/// A change of the zone's UTC offset (daylight saving time, or a zone changing its
/// standard time) just before a tick, and what it did to the tick's wall time.
///
/// Its `Display` reads `clocks went forward 1h at 2026-03-29T02:00 local; 02:30
/// skipped, fires at the gap's end`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DstNote {
    /// The instant the offset changed: the first with the tick's offset.
    pub transition: DateTime<Utc>,
    /// The wall-clock time the clocks showed as they changed, on the old offset
    /// (`2026-03-29T02:00:00` in Berlin in spring, `2026-10-25T03:00:00` in autumn).
    pub transition_local: NaiveDateTime,
    /// The zone's offset before the change.
    pub offset_before: FixedOffset,
    /// The zone's offset after it, the tick's.
    pub offset_after: FixedOffset,
    /// What the change did to this tick's wall time.
    pub wall_time: WallTime,
}

/// What a change of offset did to a tick's wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WallTime {
    /// Nothing: the tick is the first after the change, at a wall time that exists
    /// once (the interval from the tick before is longer or shorter on the clock).
    Unaffected,
    /// The wall time the cron expression names (`wall`) did not exist: the clocks
    /// jumped over it. A restricted-hour expression fires once, at the gap's end,
    /// which is this tick.
    Skipped {
        /// The first wall time the expression names inside the gap.
        wall: NaiveDateTime,
    },
    /// The tick's wall time happened before the clocks went back too: this is its
    /// second occurrence (a wildcard-hour expression fires at both; a
    /// restricted-hour one only at the first).
    Repeated,
}

impl DstNote {
    /// How far the clocks moved: positive forward (spring), negative back.
    pub fn shift(&self) -> TimeDelta {
        TimeDelta::seconds(i64::from(
            self.offset_after.local_minus_utc() - self.offset_before.local_minus_utc(),
        ))
    }
}

impl fmt::Display for DstNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shift = self.shift();
        let direction = if shift > TimeDelta::zero() {
            "forward"
        } else {
            "back"
        };
        write!(
            f,
            "clocks went {direction} {} at {} local",
            span(shift.abs()),
            wall(self.transition_local, true)
        )?;
        match self.wall_time {
            WallTime::Unaffected => Ok(()),
            WallTime::Skipped { wall: skipped } => {
                write!(
                    f,
                    "; {} skipped, fires at the gap's end",
                    wall(skipped, false)
                )
            }
            WallTime::Repeated => f.write_str("; wall time repeated, second occurrence"),
        }
    }
}

/// `1h`, `30m`, `1h30m`, `20s`.
fn span(d: TimeDelta) -> String {
    let s = d.num_seconds();
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    let mut out = String::new();
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if value != 0 {
            let _ = write!(out, "{value}{unit}");
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// `2026-03-29T02:00` (with the date) or `02:30`, seconds shown when not zero.
fn wall(t: NaiveDateTime, date: bool) -> String {
    let time = if t.second() == 0 { "%H:%M" } else { "%H:%M:%S" };
    if date {
        t.format(&format!("%Y-%m-%dT{time}")).to_string()
    } else {
        t.format(time).to_string()
    }
}

/// The first `n` ticks of `schedule` strictly after `after`, in UTC and in the
/// schedule's zone, changes of offset marked. Fewer when the schedule has no more
/// (a cron expression's years run out).
///
/// The first tick is compared with `after`: a change of offset between `after` and
/// it is marked on it.
///
/// ```
/// use chrono::{DateTime, Utc};
/// use scheduler_core::{Schedule, WallTime, upcoming_ticks};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let nightly = Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin");
/// let after: DateTime<Utc> = "2026-03-28T12:00:00Z".parse()?;
/// let ticks = upcoming_ticks(&nightly, after, 2)?;
/// // 02:30 does not exist on 29 March in Berlin: the tick is at 03:00 CEST.
/// assert_eq!(ticks[0].local, "2026-03-29T03:00:00+02:00");
/// let dst = ticks[0].dst.as_ref().ok_or("no DST note")?;
/// assert!(matches!(dst.wall_time, WallTime::Skipped { .. }));
/// assert_eq!(
///     dst.to_string(),
///     "clocks went forward 1h at 2026-03-29T02:00 local; 02:30 skipped, fires at the gap's end"
/// );
/// assert_eq!(ticks[1].local, "2026-03-30T02:30:00+02:00");
/// assert_eq!(ticks[1].dst, None);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`ScheduleError`] when the schedule is invalid, as
/// [`Schedule::validate`] says (a cron expression that never fires after now
/// included).
pub fn upcoming_ticks(
    schedule: &Schedule,
    after: DateTime<Utc>,
    n: usize,
) -> Result<Vec<UpcomingTick>, ScheduleError> {
    Ok(upcoming(&schedule.compile()?, after, n))
}

impl Scheduler {
    /// The next `n` ticks of the job named `job` after now, in UTC and in its
    /// schedule's zone, changes of offset marked (see [`upcoming_ticks`]); `None`
    /// when the scheduler has no job of that name.
    ///
    /// "Now" is this instance's clock ([`SchedulerBuilder::clock`]), an estimate of
    /// the store's clock the ticks are run on: a tick within the clocks' skew of
    /// now may already be past for the store. A job with a jitter starts each run up
    /// to that long after its tick.
    ///
    /// [`SchedulerBuilder::clock`]: crate::SchedulerBuilder::clock
    pub fn upcoming(&self, job: &str, n: usize) -> Option<Vec<UpcomingTick>> {
        let entry = self.entries.iter().find(|e| &*e.name == job)?;
        Some(upcoming(&entry.schedule, self.settings.clock.now(), n))
    }
}

/// What [`upcoming_ticks`] returns, for a checked schedule.
fn upcoming(schedule: &Compiled, after: DateTime<Utc>, n: usize) -> Vec<UpcomingTick> {
    // `n` is the caller's: no allocation sized by it alone.
    let mut ticks = Vec::with_capacity(n.min(1024));
    let mut previous = after;
    while ticks.len() < n {
        let Some(tick) = schedule.next_after(previous) else {
            break;
        };
        let at = tick.at();
        ticks.push(match schedule.base() {
            Compiled::Every(_) | Compiled::Slot { .. } => UpcomingTick {
                at,
                local: at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
                zone: None,
                dst: None,
            },
            Compiled::Cron(cron) => {
                let tz = cron.time_zone();
                UpcomingTick {
                    at,
                    local: at
                        .with_timezone(&tz)
                        .to_rfc3339_opts(SecondsFormat::AutoSi, false),
                    zone: Some(tz.name().to_owned()),
                    dst: dst_note(cron, previous, at),
                }
            }
        });
        previous = at;
    }
    ticks
}

/// The note for the tick at `at` of `cron`, whose previous tick (or the preview's
/// start) is `previous`.
fn dst_note(cron: &CronSchedule, previous: DateTime<Utc>, at: DateTime<Utc>) -> Option<DstNote> {
    let tz = cron.time_zone();
    let offset_after = offset_at(tz, at);
    let wall_at = at.naive_utc().checked_add_offset(offset_after)?;
    // A wall time happening twice, this tick at its second occurrence: the change
    // lies between the two.
    let (from, repeated) = match tz.from_local_datetime(&wall_at) {
        LocalResult::Ambiguous(first, second) if second.with_timezone(&Utc) == at => {
            (first.with_timezone(&Utc), true)
        }
        _ if offset_at(tz, previous) != offset_after => (previous, false),
        _ => return None,
    };
    let transition = first_with_offset(tz, from, at, offset_after)?;
    let offset_before = offset_at(tz, transition - TimeDelta::seconds(1));
    let transition_local = transition.naive_utc().checked_add_offset(offset_before)?;
    let wall_time = if repeated {
        WallTime::Repeated
    } else {
        skipped(cron, at == transition, transition_local, wall_at)
            .map_or(WallTime::Unaffected, |wall| WallTime::Skipped { wall })
    };
    Some(DstNote {
        transition,
        transition_local,
        offset_before,
        offset_after,
        wall_time,
    })
}

/// The first wall time `cron` names in the gap `[gap_start, gap_end)` the clocks
/// jumped over, when the tick is at the gap's end (`at_gap_end`) and stands for it:
/// a restricted-hour expression fires a time in the gap at its end.
fn skipped(
    cron: &CronSchedule,
    at_gap_end: bool,
    gap_start: NaiveDateTime,
    gap_end: NaiveDateTime,
) -> Option<NaiveDateTime> {
    if !at_gap_end || !cron.expr().has_fixed_hours() || gap_end <= gap_start {
        return None;
    }
    // The expression read in UTC, which has no gaps: its ticks are its wall times.
    let on_wall_clock = CronSchedule::new(cron.expr().clone(), Tz::UTC);
    let first = on_wall_clock
        .next_after((gap_start - TimeDelta::seconds(1)).and_utc())?
        .naive_utc();
    (first < gap_end).then_some(first)
}

/// The zone's offset at `t`.
fn offset_at(tz: Tz, t: DateTime<Utc>) -> FixedOffset {
    tz.offset_from_utc_datetime(&t.naive_utc()).fix()
}

/// The first whole second in `(from, to]` with the offset `offset`, which `to` has
/// and `from` has not: a bisection (zones change offset on whole seconds).
fn first_with_offset(
    tz: Tz,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    offset: FixedOffset,
) -> Option<DateTime<Utc>> {
    let (mut lo, mut hi) = (from.timestamp(), to.timestamp());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset_at(tz, DateTime::from_timestamp(mid, 0)?) == offset {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_wall_times_are_short() {
        assert_eq!(span(TimeDelta::hours(1)), "1h");
        assert_eq!(span(TimeDelta::minutes(30)), "30m");
        assert_eq!(span(TimeDelta::minutes(90)), "1h30m");
        assert_eq!(span(TimeDelta::seconds(20)), "20s");
        let t = NaiveDateTime::parse_from_str("2026-03-29T02:30:15", "%Y-%m-%dT%H:%M:%S")
            .unwrap_or_default();
        assert_eq!(wall(t, true), "2026-03-29T02:30:15");
        assert_eq!(wall(t, false), "02:30:15");
    }
}
