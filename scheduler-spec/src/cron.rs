//! Cron expressions with a seconds field, read on a time zone's wall clock.

use std::fmt;
use std::str::FromStr;

use ::cron::TimeUnitSpec;
use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use crate::error::{Error, Result};

/// An example cron expression.
const EXAMPLE: &str = "0 */15 * * * *";

/// The fields of a cron expression, in order.
const FIELDS: &str = "sec min hour day month weekday [year]";

/// The last year the `cron` crate reads; no expression fires after it.
const LAST_YEAR: i32 = 2100;

const SECOND: TimeDelta = TimeDelta::seconds(1);

/// A parsed cron expression **with a seconds field**:
/// `sec min hour day-of-month month day-of-week [year]`, as the `cron` crate reads
/// it (`"0 */15 * * * *"`, `"0 30 2 * * Mon-Fri"`, `"@hourly"`).
#[derive(Debug, Clone)]
pub struct CronExpr {
    schedule: ::cron::Schedule,
    fixed_hours: bool,
}

impl CronExpr {
    /// Parses `expr`.
    ///
    /// # Errors
    /// [`Error::InvalidCron`], whose reason says what to change: a missing seconds
    /// field (5 fields), a wrong number of fields, or what the `cron` crate found.
    pub fn parse(expr: &str) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidCron {
            expr: expr.to_owned(),
            reason,
        };
        let fields = expr.split_whitespace().count();
        if fields == 0 {
            return Err(invalid(format!(
                "it is empty; write it like {EXAMPLE:?} ({FIELDS})"
            )));
        }
        let nickname = expr.trim_start().starts_with('@');
        if let Some(weekdays) = expr.split_whitespace().nth(5).filter(|_| !nickname)
            && weekdays.split(',').any(|part| {
                part.split('/')
                    .next()
                    .is_some_and(|p| p.contains(|c: char| c.is_ascii_digit()))
            })
        {
            return Err(invalid(format!(
                "the weekday field {weekdays:?} uses numbers, which cron implementations count \
                 differently (here 1 = Sunday … 7 = Saturday; in Vixie cron 0 = Sunday, 1 = Monday); \
                 write day names instead, like \"MON-FRI\""
            )));
        }
        match ::cron::Schedule::from_str(expr) {
            Ok(schedule) => {
                let fixed_hours = schedule.hours().count() < 24;
                Ok(Self {
                    schedule,
                    fixed_hours,
                })
            }
            Err(_) if fields == 5 && !nickname => {
                let fixed = format!("0 {}", expr.trim());
                Err(invalid(format!(
                    "it has 5 fields; put a seconds field first, like {fixed:?}"
                )))
            }
            Err(_) if !(6..=7).contains(&fields) && !nickname => Err(invalid(format!(
                "it has {fields} fields; write 6 or 7 ({FIELDS})"
            ))),
            Err(err) => Err(invalid(reason(&err.to_string()))),
        }
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        self.schedule.source()
    }

    /// Whether the hour field names hours (`2`, `0-2`, `*/6`) rather than all 24
    /// (`*`): it decides how the expression meets daylight saving time (see
    /// [`CronSchedule::next_after`]).
    pub fn has_fixed_hours(&self) -> bool {
        self.fixed_hours
    }
}

/// The `cron` crate's message, which reads `"<expr>\n<caret>\n<what>"`: what follows
/// the caret, starting lowercase; a generic reason when nothing does.
fn reason(message: &str) -> String {
    let lines: Vec<&str> = message.lines().collect();
    let what = match lines.as_slice() {
        [_, caret, rest @ ..] if caret.trim() == "^" => rest.join(" "),
        _ => message.to_owned(),
    };
    let mut chars = what.trim().chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => format!("it does not parse; write it like {EXAMPLE:?} ({FIELDS})"),
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
    /// the rule (the one Vixie cron follows) depends on whether the expression names
    /// its hours ([`CronExpr::has_fixed_hours`]):
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
    /// local time and reads it in the zone: one step of the crate's iterator and a
    /// few zone lookups, with no search over candidates. Only around a transition
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
        let next = self.expr.schedule.after(&wall.and_utc()).next()?;
        Some(next.naive_utc())
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
