//! Schedules: when a job's ticks fall.
//!
//! Two kinds, in one [`Schedule`] type:
//! - [`Schedule::every`]: ticks at whole multiples of a period since the Unix epoch
//!   (every 30 s ticks at :00 and :30 of each minute), so every instance agrees on
//!   tick boundaries without talking to the others;
//! - [`Schedule::cron`]: a cron expression **with a seconds field**
//!   (`sec min hour day-of-month month day-of-week [year]`, as the `cron` crate reads
//!   it) in a time zone: UTC unless [`Schedule::in_time_zone`] names an IANA zone.
//!
//! # Daylight saving time
//!
//! Cron expressions are read on the zone's wall clock. Where the wall clock jumps,
//! the rule (the one Vixie cron follows) depends on whether the expression names
//! its hours:
//! - **The gap** (spring forward, e.g. 02:00–03:00 does not exist in Berlin on the
//!   last Sunday of March): a time in the gap fires once, at the instant the gap ends
//!   (03:00 CEST), if the hour field is restricted (`0 30 2 * * *`); with a wildcard
//!   hour field (`0 */15 * * * *`) the missing times simply do not happen.
//! - **The repeated hour** (fall back, 02:00–03:00 happens twice on the last Sunday
//!   of October): with a restricted hour field a time fires once, at its first
//!   occurrence; with a wildcard hour field it fires at both, since it is a new
//!   instant each time (a 15-minute job keeps its 15-minute rhythm).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

use crate::lease::Tick;

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

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A period shorter than a millisecond.
    #[error("the period of `every` must be at least 1ms, not {0:?}")]
    PeriodTooShort(Duration),
    /// A duration string that does not parse.
    #[error(
        "invalid duration {input:?}: {reason}; write it like \"30s\", \"15m\", \"1h30m\" or \"500ms\""
    )]
    InvalidDuration {
        /// The rejected text.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A cron expression that does not parse.
    #[error(
        "invalid cron expression {expr:?}: {reason}; it needs a seconds field: \"sec min hour day month weekday\", e.g. \"0 */15 * * * *\""
    )]
    InvalidCron {
        /// The rejected expression.
        expr: String,
        /// What the parser said.
        reason: String,
    },
    /// A cron expression that never fires.
    #[error("cron expression {expr:?} never fires")]
    NeverFires {
        /// The expression.
        expr: String,
    },
    /// An unknown time zone.
    #[error("unknown time zone {0:?}; use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone(String),
}

impl Schedule {
    /// Ticks every `period`, aligned to the Unix epoch.
    pub fn every(period: Duration) -> Self {
        Self {
            kind: Kind::Every(period),
        }
    }

    /// Ticks on the cron expression `expr` (with a seconds field), in UTC.
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

    /// Checks the schedule.
    ///
    /// # Errors
    /// [`ScheduleError`] saying what is wrong.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        self.compile().map(drop)
    }

    pub(crate) fn compile(&self) -> Result<Compiled, ScheduleError> {
        match &self.kind {
            Kind::Every(period) => {
                let ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
                if ms < 1 {
                    return Err(ScheduleError::PeriodTooShort(*period));
                }
                Ok(Compiled::Every { ms })
            }
            Kind::Cron { expr, tz } => {
                let tz: Tz = tz
                    .parse()
                    .map_err(|_| ScheduleError::UnknownTimeZone(tz.clone()))?;
                let cron =
                    cron::Schedule::from_str(expr).map_err(|e| ScheduleError::InvalidCron {
                        expr: expr.clone(),
                        reason: e.to_string(),
                    })?;
                let fixed_hours = cron::TimeUnitSpec::count(cron.hours()) < 24;
                let compiled = Compiled::Cron {
                    cron: Box::new(cron),
                    tz,
                    fixed_hours,
                };
                let epoch = DateTime::from_timestamp(0, 0).unwrap_or_default();
                if compiled
                    .next_after(epoch.max(Utc::now() - TimeDelta::days(1)))
                    .is_none()
                {
                    return Err(ScheduleError::NeverFires { expr: expr.clone() });
                }
                Ok(compiled)
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

/// Parses `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"` into a duration.
///
/// # Errors
/// [`ScheduleError::InvalidDuration`] if the text is empty, has a number without a
/// unit, an unknown unit, or overflows.
pub fn parse_duration(input: &str) -> Result<Duration, ScheduleError> {
    let fail = |reason| ScheduleError::InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(fail("expected a number"));
        }
        let value: u64 = rest[..digits]
            .parse()
            .map_err(|_| fail("the number is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => value
                .checked_mul(60)
                .map(Duration::from_secs)
                .ok_or_else(|| fail("it overflows"))?,
            "h" => value
                .checked_mul(3600)
                .map(Duration::from_secs)
                .ok_or_else(|| fail("it overflows"))?,
            "d" => value
                .checked_mul(86_400)
                .map(Duration::from_secs)
                .ok_or_else(|| fail("it overflows"))?,
            "" => return Err(fail("a number needs a unit (ms, s, m, h, d)")),
            _ => return Err(fail("unknown unit; use ms, s, m, h or d")),
        };
        total = total
            .checked_add(part)
            .ok_or_else(|| fail("it overflows"))?;
    }
    Ok(total)
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
#[derive(Debug, Clone)]
pub(crate) enum Compiled {
    Every {
        ms: i64,
    },
    Cron {
        cron: Box<cron::Schedule>,
        tz: Tz,
        fixed_hours: bool,
    },
}

impl Compiled {
    /// The first tick strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<Tick> {
        match self {
            Compiled::Every { ms } => {
                let t = after.timestamp_millis();
                let next = t.div_euclid(*ms).checked_add(1)?.checked_mul(*ms)?;
                DateTime::from_timestamp_millis(next).map(Tick::new)
            }
            Compiled::Cron {
                cron,
                tz,
                fixed_hours,
            } => cron_next_after(cron, *tz, *fixed_hours, after).map(Tick::new),
        }
    }

    /// The latest tick at or before `at`, looking back no further than `window`.
    pub(crate) fn latest_at_or_before(&self, at: DateTime<Utc>, window: TimeDelta) -> Option<Tick> {
        let mut latest = None;
        let mut cursor = at - window - TimeDelta::microseconds(1);
        while let Some(tick) = self.next_after(cursor) {
            if tick.at() > at {
                break;
            }
            latest = Some(tick);
            cursor = tick.at();
        }
        latest
    }

    /// The time between the tick `tick` and the one after (the catch-up default).
    pub(crate) fn period_after(&self, tick: Tick) -> TimeDelta {
        match self {
            Compiled::Every { ms } => TimeDelta::milliseconds(*ms),
            Compiled::Cron { .. } => self
                .next_after(tick.at())
                .map(|next| next.at() - tick.at())
                .unwrap_or(TimeDelta::days(1)),
        }
    }
}

/// How far local wall-clock time may sit from UTC around a transition, and then some:
/// used to bound the search below.
const SLACK: TimeDelta = TimeDelta::hours(3);

fn cron_next_after(
    cron: &cron::Schedule,
    tz: Tz,
    fixed_hours: bool,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    // Walk the expression on the naive wall clock (as if the zone had no DST), map
    // each wall time to instants by the DST rule, and keep the earliest instant after
    // `after`. Wall order and instant order differ only around a transition, so the
    // walk may stop once a wall time lies well past the best instant found.
    let wall_after = after.with_timezone(&tz).naive_local();
    let start = Utc.from_utc_datetime(&(wall_after - SLACK));
    let mut best: Option<DateTime<Utc>> = None;
    for wall in cron.after(&start).take(10_000) {
        let wall = wall.naive_utc();
        if let Some(b) = best
            && wall - SLACK > b.with_timezone(&tz).naive_local()
        {
            break;
        }
        for instant in wall_to_instants(tz, fixed_hours, wall) {
            if instant > after && best.is_none_or(|b| instant < b) {
                best = Some(instant);
            }
        }
    }
    best
}

/// The instants a wall-clock time stands for, under the DST rule of the module docs.
fn wall_to_instants(tz: Tz, fixed_hours: bool, wall: NaiveDateTime) -> Vec<DateTime<Utc>> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
        LocalResult::Ambiguous(first, second) => {
            if fixed_hours {
                vec![first.with_timezone(&Utc)]
            } else {
                vec![first.with_timezone(&Utc), second.with_timezone(&Utc)]
            }
        }
        LocalResult::None if fixed_hours => {
            // The first wall-clock minute that exists after the gap is its end.
            let mut probe = wall;
            for _ in 0..(24 * 60) {
                probe = probe
                    .checked_add_signed(TimeDelta::minutes(1))
                    .unwrap_or(probe);
                let minute = probe.date().and_hms_opt(
                    chrono::Timelike::hour(&probe),
                    chrono::Timelike::minute(&probe),
                    0,
                );
                if let Some(minute) = minute
                    && let Some(t) = tz.from_local_datetime(&minute).earliest()
                {
                    return vec![t.with_timezone(&Utc)];
                }
            }
            Vec::new()
        }
        LocalResult::None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn ticks(schedule: &Schedule, from: &str, n: usize) -> Vec<String> {
        let compiled = schedule.compile().unwrap_or_else(|e| panic!("{e}"));
        let mut at = utc(from);
        let mut out = Vec::new();
        for _ in 0..n {
            let Some(t) = compiled.next_after(at) else {
                break;
            };
            out.push(
                t.at()
                    .with_timezone(&chrono_tz::Europe::Berlin)
                    .format("%m-%d %H:%M %Z")
                    .to_string(),
            );
            at = t.at();
        }
        out
    }

    #[test]
    fn every_is_aligned_to_the_epoch() {
        let s = Schedule::every(Duration::from_secs(30))
            .compile()
            .unwrap_or_else(|e| panic!("{e}"));
        let t = s.next_after(utc("2026-11-30T10:00:07.5Z"));
        assert_eq!(t.map(Tick::at), Some(utc("2026-11-30T10:00:30Z")));
        // Exactly on a boundary: the next one, strictly after.
        assert_eq!(
            s.next_after(utc("2026-11-30T10:00:30Z")).map(Tick::at),
            Some(utc("2026-11-30T10:01:00Z"))
        );
        // Every instance agrees whatever instant it starts from.
        let s7 = Schedule::every(Duration::from_secs(7))
            .compile()
            .unwrap_or_else(|e| panic!("{e}"));
        let a = s7
            .next_after(utc("2026-11-30T10:00:00Z"))
            .map(|t| t.at().timestamp());
        assert_eq!(a.map(|s| s % 7), Some(0));
        assert_eq!(
            s.latest_at_or_before(utc("2026-11-30T10:00:59Z"), TimeDelta::seconds(60))
                .map(Tick::at),
            Some(utc("2026-11-30T10:00:30Z"))
        );
        assert_eq!(
            s.latest_at_or_before(utc("2026-11-30T10:00:59Z"), TimeDelta::seconds(10)),
            None
        );
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "30", "s", "30x", "1.5s", "-1s", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
        assert!(matches!(
            "0s".parse::<Schedule>(),
            Err(ScheduleError::PeriodTooShort(_))
        ));
        assert!("30s".parse::<Schedule>().is_ok());
        assert!("0 */15 * * * *".parse::<Schedule>().is_ok());
    }

    #[test]
    fn bad_cron_and_zones_are_refused() {
        assert!(matches!(
            Schedule::cron("not cron").validate(),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert!(matches!(
            Schedule::cron("0 0 0 30 2 *").validate(),
            Err(ScheduleError::NeverFires { .. })
        ));
        assert!(matches!(
            Schedule::cron("0 * * * * *")
                .in_time_zone("Mars/Olympus")
                .validate(),
            Err(ScheduleError::UnknownTimeZone(_))
        ));
    }

    #[test]
    fn berlin_spring_forward_gap() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let fixed = Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin");
        assert_eq!(
            ticks(&fixed, "2026-03-27T12:00:00Z", 4),
            [
                "03-28 02:30 CET",
                "03-29 03:00 CEST",
                "03-30 02:30 CEST",
                "03-31 02:30 CEST"
            ]
        );
        let wildcard = Schedule::cron("0 30 * * * *").in_time_zone("Europe/Berlin");
        assert_eq!(
            ticks(&wildcard, "2026-03-28T23:45:00Z", 3),
            ["03-29 01:30 CET", "03-29 03:30 CEST", "03-29 04:30 CEST"]
        );
    }

    #[test]
    fn berlin_fall_back_repeated_hour() {
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:xx happens twice.
        let fixed = Schedule::cron("0 30 2 * * *").in_time_zone("Europe/Berlin");
        assert_eq!(
            ticks(&fixed, "2026-10-23T12:00:00Z", 3),
            ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET"]
        );
        let wildcard = Schedule::cron("0 0/30 * * * *").in_time_zone("Europe/Berlin");
        assert_eq!(
            ticks(&wildcard, "2026-10-24T23:15:00Z", 6),
            [
                "10-25 01:30 CEST",
                "10-25 02:00 CEST",
                "10-25 02:30 CEST",
                "10-25 02:00 CET",
                "10-25 02:30 CET",
                "10-25 03:00 CET"
            ]
        );
    }
}
