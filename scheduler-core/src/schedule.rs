//! Schedules: when a job's ticks fall.
//!
//! Two kinds, in one [`Schedule`] type:
//! - [`Schedule::every`]: ticks at whole multiples of a period since the Unix epoch
//!   (every 30 s ticks at :00 and :30 of each minute), so every instance agrees on
//!   tick boundaries without talking to the others;
//! - [`Schedule::cron`]: a cron expression read as crontab reads it
//!   (`[sec] min hour day-of-month month day-of-week [year]`: 5 fields, or 6 and 7
//!   with seconds and a year; see `scheduler_spec::CronExpr`) in a time zone: UTC
//!   unless [`Schedule::in_time_zone`] names an IANA zone.
//!
//! Parsing, the checks and the tick arithmetic are `scheduler_spec`'s, the crate
//! `#[job]` checks its arguments with at compile time: a schedule the macro accepts
//! is one [`Schedule::validate`] accepts, refused with the same message if not.
//!
//! # Daylight saving time
//!
//! Cron expressions are read on the zone's wall clock. Where the wall clock jumps,
//! the rule depends on whether the hour field is restricted (allows fewer than all
//! 24 hours; Vixie cron instead looks for a leading `*`):
//! - **The gap** (spring forward, e.g. 02:00–03:00 does not exist in Berlin on the
//!   last Sunday of March): a time in the gap fires once, at the instant the gap ends
//!   (03:00 CEST), if the hour field is restricted (`0 30 2 * * *`); with a wildcard
//!   hour field (`0 */15 * * * *`) the missing times simply do not happen.
//! - **The repeated hour** (fall back, 02:00–03:00 happens twice on the last Sunday
//!   of October): with a restricted hour field a time fires once, at its first
//!   occurrence; with a wildcard hour field it fires at both, since it is a new
//!   instant each time (a 15-minute job keeps its 15-minute rhythm).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_spec::{CronSchedule, Every};

use crate::lease::Tick;

/// Where the shortest gap of a schedule is measured to lay its ticks out over lease
/// slots: 2000-01-01T00:00:00Z, a fixed instant, so every instance agrees.
pub(crate) const SLOT_ANCHOR: chrono::DateTime<chrono::Utc> =
    chrono::DateTime::from_timestamp_nanos(946_684_800_000_000_000);

/// When a job's ticks fall: every period, or on a cron expression in a time zone.
///
/// Building a `Schedule` never fails: it is checked when the scheduler is built
/// ([`SchedulerBuilder::build`](crate::SchedulerBuilder::build)), which reports an
/// invalid one as [`ScheduleError`]. [`Schedule::validate`] checks one alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Every(Duration),
    Cron { expr: String, tz: String },
}

/// Why a schedule was refused: the schedule rules' own error, shared with the
/// `#[job]` macro so both say the same thing.
pub use scheduler_spec::Error as ScheduleError;

impl Schedule {
    /// Ticks every `period`, aligned to the Unix epoch.
    pub fn every(period: Duration) -> Self {
        Self {
            kind: Kind::Every(period),
        }
    }

    /// Ticks on the cron expression `expr` (5, 6 or 7 fields), in UTC.
    pub fn cron(expr: impl Into<String>) -> Self {
        Self {
            kind: Kind::Cron {
                expr: expr.into(),
                tz: "UTC".to_owned(),
            },
        }
    }

    /// Reads a cron schedule on the wall clock of the IANA time zone `tz`. No effect on
    /// an `every` schedule, whose ticks are instants, not wall-clock times.
    pub fn in_time_zone(mut self, tz: impl Into<String>) -> Self {
        if let Kind::Cron { tz: zone, .. } = &mut self.kind {
            *zone = tz.into();
        }
        self
    }

    /// Checks the schedule: a period of at least 1 ms, or a known time zone and a
    /// cron expression that parses and fires at least once after now.
    ///
    /// # Errors
    /// [`ScheduleError`] saying what is wrong.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        self.compile().map(drop)
    }

    pub(crate) fn compile(&self) -> Result<Compiled, ScheduleError> {
        self.compile_with(&mut CronCache::default())
    }

    /// [`compile`](Self::compile), a cron expression already compiled in `cache`
    /// (the same text in the same zone) shared instead of compiled again.
    pub(crate) fn compile_with(&self, cache: &mut CronCache) -> Result<Compiled, ScheduleError> {
        match &self.kind {
            Kind::Every(period) => Ok(Compiled::Every(Every::new(*period)?)),
            Kind::Cron { expr, tz } => {
                let cron = cache.get_or_parse(expr, tz)?;
                cron.check_fires_after(Utc::now())?;
                Ok(Compiled::Cron(cron))
            }
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Every(period) => write!(f, "every {period:?}"),
            Kind::Cron { expr, tz } => write!(f, "cron \"{expr}\" in {tz}"),
        }
    }
}

/// Parses `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"` into a duration, as
/// `#[job]` does ([`scheduler_spec::parse_duration`]).
///
/// # Errors
/// [`ScheduleError::InvalidDuration`] if the text is empty, has a number without a
/// unit, an unknown unit, a fraction, a space inside, or overflows.
pub fn parse_duration(input: &str) -> Result<Duration, ScheduleError> {
    scheduler_spec::parse_duration(input)
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    /// `"30s"`-style text is a period; anything else is read as a cron expression in UTC.
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        let looks_like_duration =
            !s.contains(' ') && s.chars().next().is_some_and(|c| c.is_ascii_digit());
        let schedule = if looks_like_duration {
            Schedule::every(parse_duration(s)?)
        } else {
            Schedule::cron(s)
        };
        schedule.validate()?;
        Ok(schedule)
    }
}

/// A checked schedule, ready to compute ticks.
/// How many ticks [`Compiled::latest_ticks`] walks from a short range's start before
/// it looks from the end instead.
const LINEAR_WALK: usize = 8;

/// Compiled cron expressions by text and zone, each shared by every schedule that
/// compiles the same one while any holds it: a million dynamic schedules of a few
/// thousand distinct expressions (a daily report per customer at one of the day's
/// minutes) hold each once (a compiled expression is about 1.4 KB).
#[derive(Debug, Default)]
pub(crate) struct CronCache {
    by_text: std::collections::HashMap<(String, String), std::sync::Weak<CronSchedule>>,
    /// The size at which entries no schedule holds any more are dropped.
    sweep_at: usize,
}

impl CronCache {
    fn get_or_parse(&mut self, expr: &str, tz: &str) -> Result<Arc<CronSchedule>, ScheduleError> {
        let key = (expr.to_owned(), tz.to_owned());
        if let Some(cron) = self.by_text.get(&key).and_then(std::sync::Weak::upgrade) {
            return Ok(cron);
        }
        let cron = Arc::new(CronSchedule::parse(expr, tz)?);
        if self.by_text.len() >= self.sweep_at {
            self.by_text.retain(|_, cron| cron.strong_count() > 0);
            self.sweep_at = (self.by_text.len() * 2).max(1024);
        }
        self.by_text.insert(key, Arc::downgrade(&cron));
        Ok(cron)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Compiled {
    Every(Every),
    /// Shared by the clones a job's entries keep (a compiled cron expression is some
    /// kilobytes: a million dynamic schedules held two copies each).
    Cron(Arc<CronSchedule>),
    /// The ticks of `inner` that belong to lease slot `slot` of `slots`
    /// ([`Overlap::Concurrent`](crate::Overlap::Concurrent)).
    Slot {
        inner: Box<Compiled>,
        slots: u32,
        slot: u32,
        /// The schedule's shortest gap, in milliseconds: a tick's index is its
        /// instant over it.
        gap_ms: i64,
    },
}

impl Compiled {
    /// The first tick strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<Tick> {
        match self {
            Compiled::Every(every) => every.next_after(after).map(Tick::new),
            Compiled::Cron(cron) => cron.next_after(after).map(Tick::new),
            Compiled::Slot {
                inner,
                slots,
                slot,
                gap_ms,
            } => {
                // An `every` schedule reaches its slot within `slots` ticks; a cron
                // schedule whose ticks never fall in this slot leaves it to the
                // others (every tick belongs to exactly one slot).
                let mut cursor = after;
                for _ in 0..(u64::from(*slots) * 64).max(1024) {
                    let tick = inner.next_after(cursor)?;
                    if Self::slot_of(tick, *gap_ms, *slots) == *slot {
                        return Some(tick);
                    }
                    cursor = tick.at();
                }
                None
            }
        }
    }

    /// The schedule a slot's ticks come from (itself, when not a slot).
    pub(crate) fn base(&self) -> &Compiled {
        match self {
            Compiled::Slot { inner, .. } => inner.base(),
            other => other,
        }
    }

    /// The lease slot of `tick` among `slots`.
    pub(crate) fn slot_of(tick: Tick, gap_ms: i64, slots: u32) -> u32 {
        let index = tick.at().timestamp_millis().div_euclid(gap_ms.max(1));
        u32::try_from(index.rem_euclid(i64::from(slots.max(1)))).unwrap_or(0)
    }

    /// This schedule's ticks of lease slot `slot` of `slots`.
    pub(crate) fn slot(&self, slots: u32, slot: u32, gap_ms: i64) -> Compiled {
        Compiled::Slot {
            inner: Box::new(self.clone()),
            slots,
            slot,
            gap_ms,
        }
    }

    /// The latest tick at or before `at`, looking back no further than `window`
    /// (a long window costs no more than a short one: see
    /// [`latest_ticks`](Self::latest_ticks)).
    pub(crate) fn latest_at_or_before(&self, at: DateTime<Utc>, window: TimeDelta) -> Option<Tick> {
        self.latest_within(at, window, 1).pop_back()
    }

    /// The most recent `keep` ticks at or before `at`, looking back no further than
    /// `window` (to the calendar's start, if it reaches past it), oldest first.
    pub(crate) fn latest_within(
        &self,
        at: DateTime<Utc>,
        window: TimeDelta,
        keep: usize,
    ) -> VecDeque<Tick> {
        let since = at
            .checked_sub_signed(window)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.latest_ticks(since, at, keep)
    }

    /// The most recent `keep` ticks from `since` to `until` (both included), oldest
    /// first: the ticks a pause went over, or a catch-up window holds.
    ///
    /// Only the end of the range is walked: a span back from `until` that doubles
    /// until it holds `keep` ticks or reaches `since`. So a window of years over a
    /// tick a millisecond costs a few dozen steps, not a walk through every tick.
    pub(crate) fn latest_ticks(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
    ) -> VecDeque<Tick> {
        if keep == 0 {
            return VecDeque::new();
        }
        // A short range of few ticks (a period's catch-up window: a daily tick's
        // day) is walked from its start: a tick or two, where the spans from the
        // end below took a step per doubling (17 for a day), most of a million
        // dynamic schedules' start-up.
        if until - since <= TimeDelta::days(7)
            && let Some(ticks) = self.ticks_between_at_most(since, until, keep, LINEAR_WALK)
        {
            return ticks;
        }
        let mut back = TimeDelta::seconds(1);
        loop {
            let from = until
                .checked_sub_signed(back)
                .map_or(since, |from| from.max(since));
            let ticks = self.ticks_between(from, until, keep);
            if ticks.len() >= keep || from <= since {
                return ticks;
            }
            back = back.checked_mul(2).unwrap_or(TimeDelta::MAX);
        }
    }

    /// [`ticks_between`](Self::ticks_between), unless the range holds more than
    /// `most` ticks (`None`: then it walked `most` and stopped).
    fn ticks_between_at_most(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
        most: usize,
    ) -> Option<VecDeque<Tick>> {
        let mut ticks = VecDeque::new();
        let mut cursor = from
            .checked_sub_signed(TimeDelta::microseconds(1))
            .unwrap_or(from);
        for _ in 0..=most {
            match self.next_after(cursor) {
                Some(tick) if tick.at() <= until => {
                    ticks.push_back(tick);
                    if ticks.len() > keep {
                        ticks.pop_front();
                    }
                    cursor = tick.at();
                }
                _ => return Some(ticks),
            }
        }
        None
    }

    /// The most recent `keep` ticks from `from` to `until` (both included), oldest
    /// first, walking every tick between.
    fn ticks_between(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        keep: usize,
    ) -> VecDeque<Tick> {
        self.ticks_between_at_most(from, until, keep, usize::MAX)
            .unwrap_or_default()
    }

    /// The shortest gap between ticks: an `every` period, or for a cron schedule the
    /// shortest of the next 64 gaps after `from` (what a jitter or a retry backoff
    /// must stay below).
    pub(crate) fn shortest_gap(&self, from: DateTime<Utc>) -> Option<Duration> {
        match self {
            Compiled::Slot { inner, .. } => inner.shortest_gap(from),
            Compiled::Every(every) => u64::try_from(every.period_ms())
                .ok()
                .map(Duration::from_millis),
            Compiled::Cron(_) => {
                let mut at = self.next_after(from)?;
                let mut shortest: Option<TimeDelta> = None;
                for _ in 0..64 {
                    let Some(next) = self.next_after(at.at()) else {
                        break;
                    };
                    let gap = next.at() - at.at();
                    shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
                    at = next;
                }
                shortest.and_then(|gap| gap.to_std().ok())
            }
        }
    }

    /// The time between the tick `tick` and the one after (the catch-up default).
    pub(crate) fn period_after(&self, tick: Tick) -> TimeDelta {
        match self {
            // The job's period, not the slot's: a tick's window is the same either way.
            Compiled::Slot { inner, .. } => inner.period_after(tick),
            Compiled::Every(every) => TimeDelta::milliseconds(every.period_ms()),
            Compiled::Cron(_) => self
                .next_after(tick.at())
                .map(|next| next.at() - tick.at())
                .unwrap_or(TimeDelta::days(1)),
        }
    }
}

#[cfg(test)]
mod tests;
