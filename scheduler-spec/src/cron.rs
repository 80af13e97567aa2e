//! Cron expressions, crontab's way (5 fields, or 6 and 7 with seconds and years),
//! read on a time zone's wall clock.

mod days;
mod fields;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use self::days::DayRule;
use self::fields::{DAYS, EXAMPLE, FIELDS, Fields, HOURS, MINUTES, MONTHS, SECONDS, Unit, YEARS};
use crate::error::{Error, Result};

/// The last year the `cron` crate reads; no expression fires after it.
const LAST_YEAR: i32 = 2100;

const SECOND: TimeDelta = TimeDelta::seconds(1);

/// A parsed cron expression, read as crontab reads it:
/// `[sec] min hour day-of-month month day-of-week [year]`.
///
/// - 5 fields are a crontab line (`"0 9 * * 1-5"`, seconds 0); 6 add seconds first
///   (`"0 */15 * * * *"`), 7 a year last. `@yearly`, `@annually`, `@monthly`,
///   `@weekly`, `@daily`, `@midnight` and `@hourly` stand for their crontab lines.
/// - Weekdays are numbers 0–7 (0 and 7 are Sunday, 1 Monday) or names `SUN`–`SAT`;
///   months 1–12 or `JAN`–`DEC`. Lists, ranges and steps: `1,15`, `MON-FRI`, `*/2`.
/// - When both the day-of-month and the weekday field are restricted (neither is
///   `*` or `?`), a day matching **either** matches: `"0 0 12 13 * FRI"` fires on
///   every 13th and every Friday. Otherwise the restricted one alone decides.
/// - Day of month: `L` (the last day), `L-3` (three days before it), `15W` (the
///   weekday nearest the 15th, in the same month), `LW` (the last weekday). Weekday:
///   `FRI#2` (the month's second Friday), `FRI#L` or `5L` (its last Friday).
///
/// ```
/// use chrono::{DateTime, Utc};
/// use scheduler_spec::{CronExpr, CronSchedule, Tz};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A crontab line: 09:00, Monday (1) to Friday (5).
/// let weekdays = CronSchedule::new(CronExpr::parse("0 9 * * 1-5")?, Tz::UTC);
/// let friday: DateTime<Utc> = "2026-06-05T12:00:00Z".parse()?;
/// assert_eq!(weekdays.next_after(friday), Some("2026-06-08T09:00:00Z".parse()?));
///
/// // Both day fields restricted: the 13th, or a Friday.
/// let either = CronSchedule::parse("0 0 12 13 * FRI", "UTC")?;
/// let monday: DateTime<Utc> = "2026-07-06T00:00:00Z".parse()?;
/// assert_eq!(either.next_after(monday), Some("2026-07-10T12:00:00Z".parse()?));
///
/// assert_eq!(
///     CronExpr::parse("0 0 24 * * *").map_err(|e| e.to_string()).err().as_deref(),
///     Some(r#"invalid cron expression "0 0 24 * * *": the hour 24 is out of range; hours go from 0 to 23"#)
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CronExpr {
    source: String,
    /// The `cron` crate's schedules, given the fields in its own numbering: one, or
    /// two (the day-of-month field alone, the weekday field alone) that a day
    /// matching either one matches.
    schedules: Vec<::cron::Schedule>,
    /// With `L`, `W` or `#`, which the crate does not read: the days, checked here
    /// on each day the crate's schedule (with `*` for both day fields) matches.
    day_filter: Option<DayRule>,
    fixed_hours: bool,
}

impl CronExpr {
    /// Parses `expr`.
    ///
    /// # Errors
    /// [`Error::InvalidCron`], whose reason says what to change: a wrong number of
    /// fields, a value out of its field's bounds (seconds and minutes 0–59, hours
    /// 0–23, days of month 1–31, months 1–12 or `JAN`–`DEC`, weekdays 0–7 or
    /// `SUN`–`SAT`, years 1970–2100), a word that is no name (with a guess), `L`,
    /// `W` or `#` in a field they do not belong in, an unknown shorthand.
    pub fn parse(expr: &str) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidCron {
            expr: expr.to_owned(),
            reason,
        };
        let fields = fields::read(expr).map_err(invalid)?;
        let fixed_hours = fields.hours.iter().filter(|h| **h).count() < 24;
        let rule = &fields.days;
        let all_days = (true, true);
        let day_sets: Vec<(bool, bool)> = if rule.has_special() {
            vec![all_days]
        } else if rule.either() {
            vec![(false, true), (true, false)]
        } else {
            vec![(rule.any_day, rule.any_weekday)]
        };
        let schedules = day_sets
            .into_iter()
            .map(|(any_day, any_weekday)| {
                let text = crate_text(&fields, any_day, any_weekday);
                ::cron::Schedule::from_str(&text).map_err(|_| {
                    invalid(format!(
                        "it cannot be read; write it like {EXAMPLE:?} ({FIELDS})"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            source: expr.to_owned(),
            schedules,
            day_filter: rule.has_special().then(|| fields.days.clone()),
            fixed_hours,
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the hour field allows fewer than all 24 hours (`2`, `0-2`, `*/2`)
    /// rather than all of them (`*`, `0-23`): it decides how the expression meets
    /// daylight saving time (see [`CronSchedule::next_after`]).
    pub fn has_fixed_hours(&self) -> bool {
        self.fixed_hours
    }

    /// Whether the wall time `wall` matches.
    #[cfg_attr(not(test), allow(dead_code))]
    fn matches(&self, wall: NaiveDateTime) -> bool {
        self.schedules.iter().any(|s| s.includes(wall.and_utc()))
            && self
                .day_filter
                .as_ref()
                .is_none_or(|days| days.matches(wall.date()))
    }

    /// The first wall time later than `wall` that matches, up to 2100.
    fn next_match(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        let after = |schedule: &::cron::Schedule, wall: NaiveDateTime| {
            let next = schedule.after(&wall.and_utc()).next()?;
            Some(next.naive_utc())
        };
        let Some(days) = &self.day_filter else {
            return self.schedules.iter().filter_map(|s| after(s, wall)).min();
        };
        // The crate matches every day: skip the days the filter refuses, one step each.
        let schedule = self.schedules.first()?;
        let mut wall = wall;
        loop {
            let next = after(schedule, wall)?;
            if days.matches(next.date()) {
                return Some(next);
            }
            wall = next.date().and_hms_opt(23, 59, 59)?;
        }
    }
}

/// The expression for the `cron` crate: 6 or 7 fields of plain numbers (weekdays
/// counted from 1 = Sunday, as the crate does), `*` for a day field if told.
fn crate_text(fields: &Fields, any_day: bool, any_weekday: bool) -> String {
    let rule = &fields.days;
    let days: Vec<bool> = (0..=DAYS.top).map(|d| rule.days & (1 << d) != 0).collect();
    let weekdays: String = if any_weekday {
        "*".to_owned()
    } else {
        (0..7)
            .filter(|w| rule.weekdays & (1 << w) != 0)
            .map(|w| (w + 1).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut text = [
        list(&SECONDS, &fields.seconds),
        list(&MINUTES, &fields.minutes),
        list(&HOURS, &fields.hours),
        if any_day {
            "*".to_owned()
        } else {
            list(&DAYS, &days)
        },
        list(&MONTHS, &fields.months),
        weekdays,
    ]
    .join(" ");
    if let Some(years) = &fields.years {
        text.push(' ');
        text.push_str(&list(&YEARS, years));
    }
    text
}

/// A field's values as a list, or `*` when it allows all.
fn list(unit: &Unit, set: &[bool]) -> String {
    let allowed: Vec<String> = (unit.min..=unit.top)
        .filter(|&v| set.get(v as usize).copied().unwrap_or(false))
        .map(|v| v.to_string())
        .collect();
    if allowed.len() == (unit.top - unit.min + 1) as usize {
        "*".to_owned()
    } else {
        allowed.join(",")
    }
}

impl FromStr for CronExpr {
    type Err = Error;

    fn from_str(expr: &str) -> Result<Self> {
        Self::parse(expr)
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for CronExpr {}

/// A cron expression read on the wall clock of a time zone: the instants it ticks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    expr: CronExpr,
    tz: Tz,
}

impl CronSchedule {
    /// `expr` read in `tz`.
    pub fn new(expr: CronExpr, tz: Tz) -> Self {
        Self { expr, tz }
    }

    /// Parses the time zone `tz`, then the expression `expr`.
    ///
    /// This does not check that the expression ever fires: see
    /// [`check_fires_after`](Self::check_fires_after).
    ///
    /// # Errors
    /// [`Error::UnknownTimeZone`] or [`Error::InvalidCron`].
    pub fn parse(expr: &str, tz: &str) -> Result<Self> {
        let tz = crate::parse_time_zone(tz)?;
        Ok(Self::new(CronExpr::parse(expr)?, tz))
    }

    /// The expression.
    pub fn expr(&self) -> &CronExpr {
        &self.expr
    }

    /// The time zone the expression is read in.
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// Checks that the schedule fires at some instant after `now`: the check both
    /// `#[job]` (at compile time) and `scheduler-core` (when a scheduler is built)
    /// apply. It is a full search, as far as the `cron` crate reads years (2100): an
    /// expression refused here has no tick left, and one accepted has at least one.
    ///
    /// # Errors
    /// [`Error::NeverFires`] if [`next_after(now)`](Self::next_after) is `None`: the
    /// day, month and weekday fields never meet (February 30th), or all its years
    /// are past.
    pub fn check_fires_after(&self, now: DateTime<Utc>) -> Result<()> {
        match self.next_after(now) {
            Some(_) => Ok(()),
            None => Err(Error::NeverFires {
                expr: self.expr.as_str().to_owned(),
            }),
        }
    }

    /// The first tick strictly after `after`; `None` only if the expression has no
    /// fire time left (its years are past, or its fields never meet).
    ///
    /// # Daylight saving time
    ///
    /// The expression is read on the zone's wall clock. Where the wall clock jumps,
    /// the rule depends on whether the hour field is restricted, allowing fewer than
    /// all 24 hours ([`CronExpr::has_fixed_hours`]; Vixie cron instead counts an hour
    /// or minute field starting with `*` as a wildcard). The day fields decide which
    /// local calendar days match before this rule applies.
    /// - **The gap** (spring forward, e.g. 02:00–03:00 does not exist in Berlin on
    ///   the last Sunday of March): a time in the gap fires once, at the instant the
    ///   gap ends (03:00 CEST), if the hour field is restricted (`0 30 2 * * *`); with
    ///   a wildcard hour field (`0 */15 * * * *`) the missing times simply do not
    ///   happen.
    /// - **The repeated hour** (fall back, 02:00–03:00 happens twice on the last
    ///   Sunday of October): with a restricted hour field a time fires once, at its
    ///   first occurrence; with a wildcard hour field it fires at both, since it is a
    ///   new instant each time (a 15-minute job keeps its 15-minute rhythm).
    ///
    /// # Cost
    ///
    /// It asks the `cron` crate for the first matching wall time after `after`'s
    /// local time and reads it in the zone: one step of the crate's iterator (two
    /// when both day fields are restricted; with `L`, `W` or `#`, one per day up to
    /// the next matching day) and a few zone lookups. Only around a transition
    /// does it look further: a matching time in a gap (fixed hours: a bisection to
    /// the gap's end; wildcard hours: one more step from there), or `after` inside
    /// a repeated hour (a bisection to the instant the clocks went back, then at
    /// most three steps).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // No wall time before 1970 matches, and no zone is a day off UTC: any earlier
        // instant has the same next tick as a day before the epoch.
        let after = after.max(DateTime::UNIX_EPOCH - TimeDelta::days(1));
        let local = wall_at(self.tz, after)?;
        match self.tz.from_local_datetime(&local) {
            LocalResult::Ambiguous(first, second) => self.next_in_repeat(
                after,
                local,
                first.with_timezone(&Utc),
                second.with_timezone(&Utc),
            ),
            _ => self.first_from(local),
        }
    }

    /// The first tick for a matching wall time later than `wall`, when every such
    /// tick is later than every wall time up to `wall`.
    ///
    /// That holds unless `wall` lies in a repeated hour: the earliest instant a wall
    /// time stands for never decreases as the wall time grows (a gap's times map to
    /// its end, a repeated time's first occurrence comes first).
    fn first_from(&self, mut wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        loop {
            let next = self.first_match_after(wall)?;
            match self.tz.from_local_datetime(&next) {
                LocalResult::Single(t) => return Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(first, _) => return Some(first.with_timezone(&Utc)),
                LocalResult::None => {
                    let end = gap_end(self.tz, next)?;
                    if self.expr.fixed_hours {
                        return Some(end);
                    }
                    // With wildcard hours the gap's times do not happen: go on from
                    // the first wall time after it.
                    wall = wall_at(self.tz, end)?.checked_sub_signed(SECOND)?;
                }
            }
        }
    }

    /// The next tick after `after`, whose wall time `local` happens twice: at
    /// `first` and, once the clocks went back, at `second`.
    fn next_in_repeat(
        &self,
        after: DateTime<Utc>,
        local: NaiveDateTime,
        first: DateTime<Utc>,
        second: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        // The instant the clocks go back, and the repeated wall times [from, to).
        let back = first_second(first.timestamp(), second.timestamp(), |t| {
            offset_at(self.tz, t) == offset_at(self.tz, second)
        })?;
        let from = wall_at(self.tz, back)?;
        let to = wall_at(self.tz, back.checked_sub_signed(SECOND)?)?.checked_add_signed(SECOND)?;
        let in_repeat = |wall: &NaiveDateTime| *wall < to;
        // A repeated wall time's first or second occurrence.
        let pass = |wall: NaiveDateTime, second: bool| match self.tz.from_local_datetime(&wall) {
            LocalResult::Ambiguous(first, later) => {
                Some(if second { later } else { first }.with_timezone(&Utc))
            }
            _ => None,
        };
        let wildcard = !self.expr.fixed_hours;
        if after < back {
            // In the first pass: the next repeated time still to come in it, then
            // (with wildcard hours) the first repeated time in the second pass.
            if let Some(wall) = self.first_match_after(local).filter(in_repeat) {
                return pass(wall, false);
            }
            if wildcard
                && let Some(wall) = self
                    .first_match_after(from.checked_sub_signed(SECOND)?)
                    .filter(in_repeat)
            {
                return pass(wall, true);
            }
        } else if wildcard && let Some(wall) = self.first_match_after(local).filter(in_repeat) {
            // In the second pass: the next repeated time in it.
            return pass(wall, true);
        }
        // Past the repeated hour: no wall time before its end is left.
        self.first_from(to.checked_sub_signed(SECOND)?)
    }

    /// The first wall time later than `wall` that the expression matches.
    fn first_match_after(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        // The `cron` crate reads years 1970 to 2100 (and misreads negative ones).
        if wall.year() > LAST_YEAR {
            return None;
        }
        let wall = wall.max(DateTime::UNIX_EPOCH.naive_utc() - SECOND);
        self.expr.next_match(wall)
    }
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\" in {}", self.expr, self.tz)
    }
}

/// The instant the gap holding the wall time `wall` ends: the first instant whose
/// wall time is later than `wall`, which does not exist in `tz`.
fn gap_end(tz: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    // UTC offsets lie between -12 h and +14 h: 26 h before `wall` read as UTC the wall
    // clock shows an earlier time, 26 h after it a later one. The second where it
    // passes `wall` is the gap's end (a repeated hour jumps back, never past `wall`).
    const BOUND: i64 = 26 * 3600;
    let guess = wall.and_utc().timestamp();
    first_second(guess.checked_sub(BOUND)?, guess.checked_add(BOUND)?, |t| {
        wall_at(tz, t).is_some_and(|local| local > wall)
    })
}

/// The first whole second in `(lo, hi]` (Unix seconds) at which `reached` holds,
/// given it fails at `lo`, holds at `hi` and changes once in between: a bisection.
fn first_second(
    mut lo: i64,
    mut hi: i64,
    reached: impl Fn(DateTime<Utc>) -> bool,
) -> Option<DateTime<Utc>> {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if reached(DateTime::from_timestamp(mid, 0)?) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0)
}

/// The wall-clock time in `tz` at `t`; `None` past the range of [`NaiveDateTime`].
fn wall_at(tz: Tz, t: DateTime<Utc>) -> Option<NaiveDateTime> {
    let offset = tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    t.naive_utc().checked_add_offset(offset)
}

/// The zone's offset from UTC at `t`.
fn offset_at(tz: Tz, t: DateTime<Utc>) -> i32 {
    tz.offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc()
}

#[cfg(test)]
mod tests;
