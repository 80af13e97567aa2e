//! Issue 16, time itself tested differentially: [`CronSchedule::next_after`] against
//! an oracle that shares none of its code, in every IANA zone chrono-tz knows, over
//! the years 2000–2040.
//!
//! The oracle reads the expression with a field matcher written here (not the `cron`
//! crate, nor this crate's parser), as the README's cron section says crontab reads
//! it: 5 fields (seconds 0) or 6, `@daily`-style shorthands, weekdays 0–7 (0 and 7
//! Sunday) or names, the day-of-month field OR the weekday field when both are
//! restricted (neither `*` nor `?`), `L`, `L-n`, `nW`, `LW`, `FRI#n`, `FRI#L`, `5L`
//! (each day rule by brute force over the month, not by formula). It reads the zone's wall clock as a list of segments of constant UTC offset
//! found by scanning the offset (not `from_local_datetime`), and applies the rule
//! documented on `next_after` to every matching wall time in turn (day by day, then
//! hour, minute and second):
//! - a matching wall time that happens once ticks then;
//! - one that happens twice (a repeated hour) ticks at its first occurrence with a
//!   restricted hour field, at both with a wildcard one;
//! - one that never happens (a gap) ticks once, at the instant the gap ends, with a
//!   restricted hour field, and not at all with a wildcard one.
//!
//! Besides equality with the oracle, the ticks are checked to be whole seconds,
//! strictly increasing (so never the same instant twice), a restricted-hour job never
//! ticks twice for one wall time (the fall-back double run of Kubernetes #121594),
//! and a job firing once a day ticks exactly once for each local calendar day its
//! expression matches: at the first instant whose wall time reaches its time of day.
//! `next_after` is also asked from instants that are not ticks (just before, at and
//! after each transition, and random ones with fractions of a second).
//!
//! Windows: around the offset transitions of sampled years (found by scanning each
//! zone's offset), a random window, and a window around a matching day for each
//! once-a-day expression (Feb 29, Friday the 13th…). By default a seeded sample that
//! fits a debug build's test time: two years per zone, at most three transitions,
//! and every transition of the odd zone-years in `PINNED`; about 13 s in a debug
//! build. `CRON_DST_FULL=1` sweeps every transition from 2000 to 2040 (18 558 of
//! them) with a finer offset scan: about 25 s with `--release`, many minutes
//! without. `CRON_DST_SEED=n` draws other samples and random windows.

use std::time::Instant;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::{TZ_VARIANTS, Tz};
use scheduler_spec::CronSchedule;

/// Issue 16.
const SEED: u64 = 16;
const FIRST_YEAR: i32 = 2000;
const LAST_YEAR: i32 = 2040;
const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

/// The expressions, each with the half-width of the window it is checked in (the
/// longer, the fewer its ticks).
const CORPUS: &[(&str, i64)] = &[
    // Restricted hours, once a day: in the gap or the repeated hour of many zones.
    ("0 30 2 * * *", 30 * HOUR),
    ("0 0 1 * * *", 30 * HOUR),
    ("0 0 0 * * *", 30 * HOUR),
    ("0 30 23 * * *", 30 * HOUR),
    ("0 0 3 * * *", 30 * HOUR),
    // Restricted hours, several times: several matching times in one gap.
    ("0 */10 2 * * *", 30 * HOUR),
    ("0 0,30 0-3 * * *", 30 * HOUR),
    ("0 0 */6 * * *", 30 * HOUR),
    ("30 15 1,2 * * *", 30 * HOUR),
    // Wildcard hours.
    ("0 */15 * * * *", 5 * HOUR),
    ("0 */7 * * * *", 3 * HOUR),
    ("0 45 * * * *", 12 * HOUR),
    ("*/20 * * * * *", HOUR),
    ("0 30 * * * SAT,SUN", 30 * HOUR),
    // Days: the 31st, Feb 29, the last days of a month, weekdays (transitions fall
    // on Sundays in much of the world), Friday the 13th (the `cron` crate needs both
    // day fields to match), the first of a month.
    ("0 0 12 31 * *", 30 * HOUR),
    ("0 0 12 29 2 *", 30 * HOUR),
    ("0 0 0 28-31 * *", 30 * HOUR),
    ("0 30 1 * * MON-FRI", 30 * HOUR),
    ("0 0 2 * * SUN", 30 * HOUR),
    ("0 30 1 * * SUN", 30 * HOUR),
    ("0 0 0 1 * *", 30 * HOUR),
    // Issue 34, crontab's reading. Both day fields restricted: either one.
    ("0 0 12 13 * FRI", 30 * HOUR),
    ("0 0 1,15 * SUN", 30 * HOUR),
    ("0 30 2 1 * 0", 30 * HOUR),
    // Weekday numbers (0 and 7 Sunday, 1 Monday), in ranges, lists and steps.
    ("0 30 2 * * 0", 30 * HOUR),
    ("30 2 * * 7", 30 * HOUR),
    ("0 0 2 * * 5-7", 30 * HOUR),
    ("0 30 1 * * 1-5", 30 * HOUR),
    ("0 0 3 * * */2", 30 * HOUR),
    ("0 15 2 * * 0,6", 30 * HOUR),
    ("*/20 2 * * 0", 30 * HOUR),
    // 5 fields and shorthands.
    ("30 2 * * *", 30 * HOUR),
    ("*/30 * * * *", 5 * HOUR),
    ("@daily", 30 * HOUR),
    ("@hourly", 12 * HOUR),
    ("@weekly", 30 * HOUR),
    // L, W, # (transitions fall on the last Sunday in Europe, the second in the US).
    ("0 30 2 L * *", 30 * HOUR),
    ("0 0 12 L-3 * *", 30 * HOUR),
    ("0 30 2 15W * *", 30 * HOUR),
    ("0 30 2 LW * *", 30 * HOUR),
    ("0 30 2 * * SUN#L", 30 * HOUR),
    ("30 2 * * 0#2", 30 * HOUR),
    ("0 0 2 * * 0L", 30 * HOUR),
    ("0 0 2 1W * SUN#1", 30 * HOUR),
];

/// Zone-years whose transitions are always checked: the odd ones.
const PINNED: &[(&str, i32)] = &[
    // A whole day skipped (2011-12-30) going from -10 to +14.
    ("Pacific/Apia", 2011),
    ("Pacific/Fakaofo", 2011),
    // Half-hour daylight saving time; 45-minute offsets.
    ("Australia/Lord_Howe", 2026),
    ("Pacific/Chatham", 2026),
    // Two hours of daylight saving time.
    ("Antarctica/Troll", 2026),
    // Negative daylight saving time in the data (winter is "daylight").
    ("Europe/Dublin", 2026),
    // Transitions at midnight: a gap 00:00-01:00, or 23:00-24:00 repeated.
    ("America/Sao_Paulo", 2018),
    ("America/Santiago", 2026),
    ("America/Asuncion", 2024),
    ("America/Havana", 2026),
    ("Asia/Beirut", 2026),
    ("Asia/Gaza", 2026),
    ("Asia/Tehran", 2021),
    // At 00:01 local, until 2011.
    ("America/St_Johns", 2010),
    // Ramadan: daylight saving time suspended for a month, twice a year.
    ("Africa/Casablanca", 2026),
    ("Africa/Cairo", 2014),
    // Standard time moved: 30 minutes back, or forward, or two hours.
    ("America/Caracas", 2007),
    ("America/Caracas", 2016),
    ("Asia/Pyongyang", 2015),
    ("Asia/Pyongyang", 2018),
    ("Europe/Moscow", 2011),
    ("Europe/Moscow", 2014),
    ("Africa/Juba", 2021),
    ("America/Nuuk", 2023),
    // The usual ones.
    ("Europe/Berlin", 2026),
    ("America/New_York", 2026),
    ("Australia/Sydney", 2026),
];

#[test]
fn next_after_agrees_with_a_wall_clock_oracle_in_every_zone() {
    let full = std::env::var("CRON_DST_FULL").is_ok_and(|v| v == "1");
    let seed = std::env::var("CRON_DST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let started = Instant::now();
    let cases: Vec<Case> = CORPUS
        .iter()
        .map(|&(expr, half)| Case::new(expr, half))
        .collect();
    for &(zone, year) in PINNED {
        let tz: Tz = zone.parse().unwrap_or_else(|e| panic!("{zone}: {e}"));
        assert!(!transitions(tz, year).is_empty(), "{zone} in {year}: none");
    }
    let mut rng = Rng(seed);
    let mut run = Run::default();
    for &tz in TZ_VARIANTS.iter() {
        let years: Vec<i32> = if full {
            (FIRST_YEAR..=LAST_YEAR).collect()
        } else {
            (0..2).map(|_| rng.year()).collect()
        };
        let mut found: Vec<i64> = years.iter().flat_map(|&y| transitions(tz, y)).collect();
        if !full {
            while found.len() > 3 {
                found.swap_remove(rng.below(found.len() as u64) as usize);
            }
            for &(_, year) in PINNED.iter().filter(|(zone, _)| *zone == tz.name()) {
                found.extend(transitions(tz, year));
            }
        }
        found.sort_unstable();
        found.dedup();
        run.transitions += found.len();
        // (centre, cases, transition)
        let mut windows: Vec<(i64, Vec<&Case>, Option<i64>)> = found
            .iter()
            .map(|&b| (b, cases.iter().collect(), Some(b)))
            .collect();
        windows.push((rng.instant(), cases.iter().collect(), None));
        for case in cases.iter().filter(|c| c.time_of_day.is_some()) {
            if let Some(centre) = case.matching_day_near(rng.instant()) {
                windows.push((centre, vec![case], None));
            }
        }
        for (centre, cases, transition) in windows {
            let widest = cases.iter().map(|c| c.half).max().unwrap_or(0);
            let step = if full { 60 } else { 15 * 60 };
            let clock = Clock::scan(
                tz,
                centre - widest - 2 * DAY,
                centre + widest + 2 * DAY,
                step,
            );
            for case in cases {
                // A little jitter, so windows do not all start on the hour.
                let from = centre - case.half + rng.below(600) as i64 - 300;
                let until = centre + case.half;
                run.check(&clock, case, from, until, transition, &mut rng);
            }
        }
        run.zones += 1;
    }
    println!(
        "cron DST oracle ({}, seed {seed}): {} zones, {} expressions, {} transitions, {} windows, {} ticks compared ({} at a gap's end, {} in a second pass, {} second passes skipped), {} probes, {} disagreements, {:.1} s",
        if full { "full sweep" } else { "sample" },
        run.zones,
        cases.len(),
        run.transitions,
        run.windows,
        run.ticks,
        run.gap_ends,
        run.second_passes,
        run.skipped,
        run.probes,
        run.failures.len(),
        started.elapsed().as_secs_f64(),
    );
    assert!(
        run.failures.is_empty(),
        "{} disagreements with the oracle, the first ones:\n{}",
        run.failures.len(),
        run.failures
            .iter()
            .take(25)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// An expression of the corpus, read by the oracle.
struct Case {
    expr: &'static str,
    half: i64,
    fields: Fields,
    /// The one wall time of day it names, as seconds since midnight, if only one.
    time_of_day: Option<i64>,
}

impl Case {
    fn new(expr: &'static str, half: i64) -> Self {
        let fields = Fields::parse(expr);
        let times: Vec<i64> = (0..DAY)
            .filter(|&s| fields.time_matches(s))
            .take(2)
            .collect();
        Self {
            expr,
            half,
            time_of_day: (times.len() == 1).then(|| times[0]),
            fields,
        }
    }

    /// Its time of day, read as UTC, on the first day from `t` on that it matches
    /// (within ten years).
    fn matching_day_near(&self, t: i64) -> Option<i64> {
        let mut day = naive(t).date();
        for _ in 0..3700 {
            if self.fields.day_matches(day) {
                return Some(at_midnight(day) + self.time_of_day?);
            }
            day = day.succ_opt()?;
        }
        None
    }
}

/// The fields of a cron expression: the values each allows, and the day rules.
struct Fields {
    seconds: Vec<bool>,
    minutes: Vec<bool>,
    hours: Vec<bool>,
    months: Vec<bool>,
    days: Days,
}

/// The day-of-month and weekday fields.
struct Days {
    /// Each field is `*` or `?`.
    any_day: bool,
    any_weekday: bool,
    /// Days of month by number (1–31).
    numbers: Vec<bool>,
    /// `L-n` (`L` is `L-0`).
    before_last: Vec<u32>,
    /// `nW`.
    nearest: Vec<u32>,
    /// `LW`.
    last_weekday: bool,
    /// 0 is Sunday, as crontab counts (7 is Sunday too).
    weekdays: Vec<bool>,
    /// `FRI#2`: (weekday, n).
    nth: Vec<(u32, u32)>,
    /// `FRI#L`, `5L`.
    last_of: Vec<u32>,
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The shorthands, as the README writes them out.
const SHORTHANDS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

impl Fields {
    fn parse(expr: &str) -> Self {
        let expr = SHORTHANDS
            .iter()
            .find(|(short, _)| *short == expr)
            .map_or(expr, |(_, long)| *long);
        let mut f: Vec<&str> = expr.split_whitespace().collect();
        if f.len() == 5 {
            f.insert(0, "0");
        }
        assert_eq!(f.len(), 6, "{expr:?}: the oracle reads 5 or 6 fields");
        Self {
            seconds: values(f[0], 0, 59, 59, &[]),
            minutes: values(f[1], 0, 59, 59, &[]),
            hours: values(f[2], 0, 23, 23, &[]),
            months: values(f[4], 1, 12, 12, MONTHS),
            days: Days::parse(f[3], f[5]),
        }
    }

    /// Whether the hour field allows fewer than all 24 hours.
    fn fixed_hours(&self) -> bool {
        self.hours.iter().filter(|h| **h).count() < 24
    }

    fn day_matches(&self, day: NaiveDate) -> bool {
        self.months[day.month() as usize] && self.days.matches(day)
    }

    /// Whether the time of day `s` (seconds since midnight) matches.
    fn time_matches(&self, s: i64) -> bool {
        let s = s as usize;
        self.hours[s / 3600] && self.minutes[s / 60 % 60] && self.seconds[s % 60]
    }
}

impl Days {
    fn parse(days: &str, weekdays: &str) -> Self {
        let mut out = Self {
            any_day: days == "*" || days == "?",
            any_weekday: weekdays == "*" || weekdays == "?",
            numbers: vec![false; 32],
            before_last: Vec::new(),
            nearest: Vec::new(),
            last_weekday: false,
            weekdays: vec![false; 8],
            nth: Vec::new(),
            last_of: Vec::new(),
        };
        let weekday = |s: &str| {
            values(s, 0, 7, 6, WEEKDAYS)
                .iter()
                .position(|v| *v)
                .unwrap_or_else(|| panic!("{s:?}: no weekday")) as u32
                % 7
        };
        for part in days.split(',') {
            if part == "L" {
                out.before_last.push(0);
            } else if part == "LW" {
                out.last_weekday = true;
            } else if let Some(n) = part.strip_prefix("L-") {
                out.before_last.push(number(n));
            } else if let Some(n) = part.strip_suffix('W') {
                out.nearest.push(number(n));
            } else {
                let set = values(if part == "?" { "*" } else { part }, 1, 31, 31, &[]);
                for (d, on) in set.iter().enumerate() {
                    out.numbers[d] |= on;
                }
            }
        }
        for part in weekdays.split(',') {
            if let Some((w, n)) = part.split_once('#') {
                match n {
                    "L" => out.last_of.push(weekday(w)),
                    n => out.nth.push((weekday(w), number(n))),
                }
            } else if let Some(w) = part.strip_suffix('L') {
                out.last_of.push(weekday(w));
            } else {
                let set = values(if part == "?" { "*" } else { part }, 0, 7, 6, WEEKDAYS);
                for (w, on) in set.iter().enumerate() {
                    out.weekdays[w % 7] |= on;
                }
            }
        }
        out
    }

    /// Crontab's rule: with both fields restricted, either; else the restricted one.
    fn matches(&self, day: NaiveDate) -> bool {
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => self.by_day(day),
            (true, false) => self.by_weekday(day),
            (false, false) => self.by_day(day) || self.by_weekday(day),
        }
    }

    fn by_day(&self, day: NaiveDate) -> bool {
        let month = month_days(day);
        let Some(&last) = month.last() else {
            return false;
        };
        let workday = |d: &&NaiveDate| d.weekday().num_days_from_monday() < 5;
        self.numbers[day.day() as usize]
            || self
                .before_last
                .iter()
                .any(|&n| last.day() > n && day.day() == last.day() - n)
            // The weekday of the month nearest to day n, if the month has a day n.
            || self.nearest.iter().any(|&n| {
                n <= last.day()
                    && month
                        .iter()
                        .filter(workday)
                        .min_by_key(|d| (i64::from(d.day()) - i64::from(n)).abs())
                        == Some(&day)
            })
            || (self.last_weekday && month.iter().rfind(|d| workday(d)) == Some(&day))
    }

    fn by_weekday(&self, day: NaiveDate) -> bool {
        let month = month_days(day);
        let w = day.weekday().num_days_from_sunday();
        let same: Vec<&NaiveDate> = month
            .iter()
            .filter(|d| d.weekday() == day.weekday())
            .collect();
        let rank = same.iter().take_while(|d| ***d != day).count() as u32 + 1;
        self.weekdays[w as usize]
            || self.nth.iter().any(|&(x, n)| x == w && rank == n)
            || self
                .last_of
                .iter()
                .any(|&x| x == w && rank as usize == same.len())
    }
}

fn number(s: &str) -> u32 {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?}: the oracle cannot read it: {e}"))
}

/// Every day of `day`'s month, in order.
fn month_days(day: NaiveDate) -> Vec<NaiveDate> {
    let mut out = Vec::new();
    let mut d = day.with_day(1);
    while let Some(at) = d.filter(|d| d.month() == day.month()) {
        out.push(at);
        d = at.succ_opt();
    }
    out
}

/// The values one field allows: lists of `*`, `a`, `a-b`, each with an optional
/// `/step` (`*` and `a/step` run to `top`), numbers or three-letter names.
fn values(field: &str, min: u32, max: u32, top: u32, names: &[&str]) -> Vec<bool> {
    let value = |s: &str| {
        s.parse::<u32>()
            .ok()
            .or_else(|| {
                let at = names.iter().position(|n| n.eq_ignore_ascii_case(s))?;
                Some(min + u32::try_from(at).ok()?)
            })
            .unwrap_or_else(|| panic!("{field:?}: the oracle cannot read {s:?}"))
    };
    let mut allowed = vec![false; max as usize + 1];
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, step.parse().unwrap_or(0)),
            None => (part, 1),
        };
        assert!(step > 0, "{field:?}: bad step");
        let (lo, hi) = match (range, range.split_once('-')) {
            ("*", _) => (min, top),
            (_, Some((a, b))) => (value(a), value(b)),
            (a, None) if part.contains('/') => (value(a), top),
            (a, None) => (value(a), value(a)),
        };
        assert!(
            min <= lo && lo <= hi && hi <= max,
            "{field:?}: out of range"
        );
        for v in (lo..=hi).step_by(step) {
            allowed[v as usize] = true;
        }
    }
    allowed
}

/// A zone's wall clock over a stretch of time: segments of constant UTC offset.
/// Instants and wall times are seconds (wall times read as if they were UTC).
struct Clock {
    tz: Tz,
    /// Where each segment starts.
    starts: Vec<i64>,
    offsets: Vec<i64>,
    /// Where the last one ends.
    end: i64,
}

impl Clock {
    /// Scans `tz`'s offset from `from` to `until` every `step` seconds, and second by
    /// second where it changed. (It would miss an offset that comes and goes within
    /// one step: none does in 2000–2040.)
    fn scan(tz: Tz, from: i64, until: i64, step: i64) -> Self {
        let mut clock = Self {
            tz,
            starts: vec![from],
            offsets: vec![offset(tz, from)],
            end: until,
        };
        let mut t = from;
        while t < until {
            let next = (t + step).min(until);
            let now = clock.offsets[clock.offsets.len() - 1];
            if offset(tz, next) == now {
                t = next;
                continue;
            }
            t += 1;
            while offset(tz, t) == now {
                t += 1;
            }
            clock.starts.push(t);
            clock.offsets.push(offset(tz, t));
        }
        clock
    }

    fn segment_end(&self, i: usize) -> i64 {
        self.starts.get(i + 1).copied().unwrap_or(self.end)
    }

    /// The wall times segment `i` shows: `[start, end)`.
    fn walls(&self, i: usize) -> (i64, i64) {
        (
            self.starts[i] + self.offsets[i],
            self.segment_end(i) + self.offsets[i],
        )
    }

    fn segments(&self) -> std::ops::Range<usize> {
        0..self.starts.len()
    }

    /// The instants the oracle ticks at for the matching wall time `w`, and what
    /// the rule made of them.
    fn ticks_for(&self, w: i64, fixed_hours: bool, out: &mut Vec<(i64, Kind)>) {
        let occurrences = self
            .segments()
            .filter(|&i| (self.walls(i).0..self.walls(i).1).contains(&w))
            .map(|i| w - self.offsets[i]);
        let mut any = false;
        for (n, t) in occurrences.enumerate() {
            any = true;
            out.push(match n {
                0 => (t, Kind::Once),
                _ if fixed_hours => (t, Kind::SecondPassSkipped),
                _ => (t, Kind::SecondPass),
            });
        }
        if !any && fixed_hours {
            // In a gap: once, at its end.
            out.extend(
                self.segments()
                    .skip(1)
                    .find(|&i| self.walls(i - 1).1 <= w && w < self.walls(i).0)
                    .map(|i| (self.starts[i], Kind::GapEnd)),
            );
        }
    }

    /// The first instant whose wall time is `w` or later.
    fn first_reaching(&self, w: i64) -> i64 {
        assert!(self.walls(0).0 <= w, "the clock starts too late");
        self.segments()
            .find(|&i| self.walls(i).1 > w)
            .map(|i| self.starts[i].max(w - self.offsets[i]))
            .unwrap_or_else(|| panic!("the clock ends too early"))
    }

    /// The wall times that may tick in `(from, until]`: those of its instants, and
    /// those of the gaps that end in it.
    fn wall_range(&self, from: i64, until: i64) -> (i64, i64) {
        let near = self
            .segments()
            .filter(|&i| self.starts[i] <= until && self.segment_end(i) >= from);
        let offsets: Vec<i64> = near.map(|i| self.offsets[i]).collect();
        let min = offsets.iter().min().copied().unwrap_or(0);
        let max = offsets.iter().max().copied().unwrap_or(0);
        (from + min, until + max)
    }
}

/// What the rule made of a matching wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Its only or first occurrence.
    Once,
    /// With a wildcard hour field, its second occurrence.
    SecondPass,
    /// With a restricted hour field, the end of the gap it is in.
    GapEnd,
    /// With a restricted hour field, its second occurrence: not a tick.
    SecondPassSkipped,
}

/// The oracle: the ticks of `fields` in `(from, until]` and what made them, going
/// through every matching wall time in turn (day by day, then hour, minute and
/// second).
fn oracle(clock: &Clock, fields: &Fields, from: i64, until: i64) -> Vec<(i64, Kind)> {
    let (lo, hi) = clock.wall_range(from, until);
    let allowed = |set: &[bool]| -> Vec<i64> {
        (0..set.len())
            .filter(|&v| set[v])
            .map(|v| v as i64)
            .collect()
    };
    let (hours, minutes, seconds) = (
        allowed(&fields.hours),
        allowed(&fields.minutes),
        allowed(&fields.seconds),
    );
    let mut ticks = Vec::new();
    let mut day = naive(lo).date();
    while at_midnight(day) <= hi {
        if fields.day_matches(day) {
            for h in &hours {
                for m in &minutes {
                    for s in &seconds {
                        let w = at_midnight(day) + h * HOUR + m * 60 + s;
                        if (lo..=hi).contains(&w) {
                            clock.ticks_for(w, fields.fixed_hours(), &mut ticks);
                        }
                    }
                }
            }
        }
        day = day.succ_opt().unwrap_or(day);
    }
    ticks.retain(|(t, _)| (from + 1..=until).contains(t));
    // A gap's end may also be a matching time's first occurrence: one tick.
    ticks.sort_unstable();
    ticks.dedup_by_key(|(t, _)| *t);
    ticks
}

#[derive(Default)]
struct Run {
    zones: usize,
    transitions: usize,
    windows: usize,
    ticks: usize,
    probes: usize,
    gap_ends: usize,
    second_passes: usize,
    skipped: usize,
    failures: Vec<String>,
}

impl Run {
    /// Compares `case`'s ticks in `(from, until]` with the oracle's, checks their
    /// properties, and asks `next_after` from instants that are not ticks.
    fn check(
        &mut self,
        clock: &Clock,
        case: &Case,
        from: i64,
        until: i64,
        transition: Option<i64>,
        rng: &mut Rng,
    ) {
        self.windows += 1;
        let tz = clock.tz;
        let schedule = match CronSchedule::parse(case.expr, tz.name()) {
            Ok(schedule) => schedule,
            Err(e) => {
                self.failures
                    .push(format!("{:?} in {}: refused: {e}", case.expr, tz.name()));
                return;
            }
        };
        assert_eq!(
            schedule.expr().has_fixed_hours(),
            case.fields.fixed_hours(),
            "{}: fixed hours",
            case.expr
        );
        let ruled = oracle(clock, &case.fields, from, until);
        for (_, kind) in &ruled {
            match kind {
                Kind::Once => {}
                Kind::SecondPass => self.second_passes += 1,
                Kind::GapEnd => self.gap_ends += 1,
                Kind::SecondPassSkipped => self.skipped += 1,
            }
        }
        let want: Vec<i64> = ruled
            .iter()
            .filter(|(_, kind)| *kind != Kind::SecondPassSkipped)
            .map(|&(t, _)| t)
            .collect();
        let mut failures = Vec::new();
        let mut fail =
            |what: String| failures.push(format!("{:?} in {}: {what}", case.expr, tz.name()));

        // The chain of ticks from `from`.
        let mut got = Vec::new();
        let mut after = utc(from, 0);
        while let Some(next) = schedule.next_after(after) {
            if next <= after {
                fail(format!(
                    "next_after({}) = {}: not after it",
                    show(tz, after),
                    show(tz, next)
                ));
                break;
            }
            if next.timestamp_subsec_nanos() != 0 {
                fail(format!("{} is not a whole second", show(tz, next)));
            }
            if next.timestamp() > until {
                break;
            }
            got.push(next.timestamp());
            after = next;
        }
        self.ticks += got.len().max(want.len());
        if got != want {
            let i = got.iter().zip(&want).take_while(|(g, w)| g == w).count();
            let after = if i == 0 { from } else { want[i - 1] };
            let tick = |t: Option<&i64>| {
                t.map_or("nothing in the window".to_owned(), |&t| show(tz, utc(t, 0)))
            };
            fail(format!(
                "next_after({}) = {}, the rule says {} ({} ticks in the window, the rule says {})",
                show(tz, utc(after, 0)),
                tick(got.get(i)),
                tick(want.get(i)),
                got.len(),
                want.len()
            ));
            self.failures.extend(failures);
            return;
        }

        // A restricted-hour job never ticks twice for one wall time.
        if case.fields.fixed_hours() {
            let mut walls: Vec<i64> = got.iter().map(|&t| t + clock_offset(clock, t)).collect();
            walls.sort_unstable();
            if let Some(w) = walls.windows(2).find(|w| w[0] == w[1]) {
                fail(format!("two ticks for the wall time {}", naive(w[0])));
            }
        }

        // Once a day: one tick per matching local day, where its wall time is reached.
        if let Some(time) = case.time_of_day {
            let (lo, hi) = clock.wall_range(from, until);
            let mut day = naive(lo).date();
            let mut reached = Vec::new();
            while at_midnight(day) <= hi {
                if case.fields.day_matches(day) {
                    let t = clock.first_reaching(at_midnight(day) + time);
                    if (from + 1..=until).contains(&t) {
                        reached.push((day, t));
                    }
                }
                day = day.succ_opt().unwrap_or(day);
            }
            // Two days meet at one instant only when a gap swallows a whole day
            // (Apia, 2011-12-30): that day's tick is the next day's midnight.
            let mut per_day: Vec<i64> = reached.iter().map(|&(_, t)| t).collect();
            per_day.dedup();
            if per_day != got {
                fail(format!(
                    "ticks {:?}, but one a day for the matching days {:?}",
                    got.iter().map(|&t| show(tz, utc(t, 0))).collect::<Vec<_>>(),
                    reached
                        .iter()
                        .map(|(d, t)| format!("{d} at {}", show(tz, utc(*t, 0))))
                        .collect::<Vec<_>>()
                ));
            }
        }

        // From instants that are not ticks: around the transition, and random ones.
        let mut probes: Vec<(i64, u32)> = Vec::new();
        if let Some(b) = transition {
            for d in [-HOUR, -1, 0, 1, HOUR / 2, HOUR, 2 * HOUR] {
                probes.push((b + d, 0));
            }
            probes.push((b - 1, 500_000_000));
        }
        for _ in 0..3 {
            let t = from + rng.below((until - from) as u64) as i64;
            probes.push((t, rng.below(1_000_000_000) as u32));
        }
        for (t, nanos) in probes {
            if !(from..until).contains(&t) {
                continue;
            }
            self.probes += 1;
            let at = utc(t, nanos);
            let next = schedule.next_after(at);
            let expected = want.iter().find(|&&w| w > t);
            let ok = match (expected, next) {
                (Some(&w), Some(n)) => n == utc(w, 0),
                (None, Some(n)) => n.timestamp() > until,
                (_, None) => false,
            };
            if !ok {
                fail(format!(
                    "next_after({}) = {}, the rule says {}",
                    show(tz, at),
                    next.map_or("None".to_owned(), |n| show(tz, n)),
                    expected.map_or("a tick after the window".to_owned(), |&w| show(
                        tz,
                        utc(w, 0)
                    ))
                ));
            }
        }
        self.failures.extend(failures);
    }
}

fn clock_offset(clock: &Clock, t: i64) -> i64 {
    let i = clock.starts.partition_point(|&s| s <= t) - 1;
    clock.offsets[i]
}

/// The instants in `year` (UTC) at which `tz`'s offset changes: a scan every six
/// hours, then a bisection to the second.
fn transitions(tz: Tz, year: i32) -> Vec<i64> {
    let start = |y: i32| at_midnight(NaiveDate::from_ymd_opt(y, 1, 1).unwrap_or_default());
    let (mut t, end) = (start(year), start(year + 1));
    let mut now = offset(tz, t);
    let mut found = Vec::new();
    while t < end {
        let next = t + 6 * HOUR;
        if offset(tz, next) != now {
            let (mut lo, mut hi) = (t, next);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if offset(tz, mid) == now {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            found.push(hi);
            now = offset(tz, hi);
        }
        t = next;
    }
    found
}

/// `tz`'s UTC offset at the instant `t`, in seconds.
fn offset(tz: Tz, t: i64) -> i64 {
    let offset = tz.offset_from_utc_datetime(&naive(t)).fix();
    i64::from(offset.local_minus_utc())
}

fn utc(t: i64, nanos: u32) -> DateTime<Utc> {
    DateTime::from_timestamp(t, nanos).unwrap_or_else(|| panic!("{t} is out of range"))
}

fn naive(t: i64) -> NaiveDateTime {
    utc(t, 0).naive_utc()
}

fn at_midnight(day: NaiveDate) -> i64 {
    day.and_time(chrono::NaiveTime::MIN).and_utc().timestamp()
}

/// An instant as UTC and on `tz`'s wall clock.
fn show(tz: Tz, t: DateTime<Utc>) -> String {
    format!(
        "{} ({})",
        t.format("%Y-%m-%dT%H:%M:%S%.fZ"),
        t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")
    )
}

/// SplitMix64: a small seeded generator, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn year(&mut self) -> i32 {
        FIRST_YEAR + self.below((LAST_YEAR - FIRST_YEAR + 1) as u64) as i32
    }

    /// An instant from 2000 to 2040, away from the ends.
    fn instant(&mut self) -> i64 {
        let day = |y: i32| at_midnight(NaiveDate::from_ymd_opt(y, 1, 1).unwrap_or_default());
        let (lo, hi) = (day(FIRST_YEAR) + 3 * DAY, day(LAST_YEAR + 1) - 3 * DAY);
        lo + self.below((hi - lo) as u64) as i64
    }
}
