//! Reading a cron expression's text, crontab's way and field by field, with messages
//! in our words: 5, 6 or 7 fields, `@daily`-style shorthands, weekday numbers 0–7
//! (0 and 7 are Sunday), names, `L`, `W` and `#`.

use super::days::DayRule;
use crate::spelling::{closest, did_you_mean};

/// The fields of an expression, in order.
pub(super) const FIELDS: &str = "[sec] min hour day month weekday [year]";

/// An example expression.
pub(super) const EXAMPLE: &str = "0 */15 * * * *";

/// The shorthands, and the 6-field expressions they stand for.
const SHORTHANDS: &[(&str, &str)] = &[
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
    ("@monthly", "0 0 0 1 * *"),
    ("@weekly", "0 0 0 * * SUN"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@hourly", "0 0 * * * *"),
];

const SHORTHAND_LIST: &str = "@yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly";

/// The values an expression allows, field by field: `set[v]` for the value `v`.
#[derive(Debug, Clone)]
pub(super) struct Fields {
    pub(super) seconds: Vec<bool>,
    pub(super) minutes: Vec<bool>,
    pub(super) hours: Vec<bool>,
    pub(super) days: DayRule,
    pub(super) months: Vec<bool>,
    /// `None` without a year field.
    pub(super) years: Option<Vec<bool>>,
}

/// Which field a [`Unit`] is, where that changes what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    /// Day of month: `?`, `L`, `W`.
    Days,
    /// Weekday: `?`, `#`, `L`.
    Weekdays,
}

/// A field's kind: its names, bounds and words.
#[derive(Debug)]
pub(super) struct Unit {
    kind: Kind,
    /// One value: "hour".
    one: &'static str,
    /// Several: "hours".
    many: &'static str,
    /// The field: "hour field".
    field: &'static str,
    pub(super) min: u32,
    /// The largest value written.
    max: u32,
    /// The largest value `*` and `n/step` reach (6 for weekdays, where 7 is Sunday too).
    pub(super) top: u32,
    /// Three-letter names for `min`, `min + 1`…, and longer spellings.
    names: &'static [&'static str],
    long_names: &'static [&'static str],
    bounds: &'static str,
}

const fn unit(one: &'static str, many: &'static str, field: &'static str) -> Unit {
    Unit {
        kind: Kind::Plain,
        one,
        many,
        field,
        min: 0,
        max: 59,
        top: 59,
        names: &[],
        long_names: &[],
        bounds: "0 to 59",
    }
}

pub(super) const SECONDS: Unit = unit("second", "seconds", "seconds field");
pub(super) const MINUTES: Unit = unit("minute", "minutes", "minute field");
pub(super) const HOURS: Unit = Unit {
    max: 23,
    top: 23,
    bounds: "0 to 23",
    ..unit("hour", "hours", "hour field")
};
pub(super) const DAYS: Unit = Unit {
    kind: Kind::Days,
    min: 1,
    max: 31,
    top: 31,
    bounds: "1 to 31",
    ..unit("day of month", "days of month", "day-of-month field")
};
pub(super) const MONTHS: Unit = Unit {
    min: 1,
    max: 12,
    top: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    long_names: &[
        "JANUARY",
        "FEBRUARY",
        "MARCH",
        "APRIL",
        "MAY",
        "JUNE",
        "JULY",
        "AUGUST",
        "SEPTEMBER",
        "OCTOBER",
        "NOVEMBER",
        "DECEMBER",
    ],
    bounds: "1 to 12 or JAN to DEC",
    ..unit("month", "months", "month field")
};
pub(super) const WEEKDAYS: Unit = Unit {
    kind: Kind::Weekdays,
    min: 0,
    max: 7,
    top: 6,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    long_names: &[
        "SUNDAY",
        "MONDAY",
        "TUESDAY",
        "WEDNESDAY",
        "THURSDAY",
        "FRIDAY",
        "SATURDAY",
    ],
    bounds: "0 to 7 (0 and 7 are Sunday) or SUN to SAT",
    ..unit("weekday", "weekdays", "weekday field")
};
pub(super) const YEARS: Unit = Unit {
    min: 1970,
    max: 2100,
    top: 2100,
    bounds: "1970 to 2100",
    ..unit("year", "years", "year field")
};

/// Reads `expr`; the error is the reason it is refused.
pub(super) fn read(expr: &str) -> Result<Fields, String> {
    let trimmed = expr.trim();
    if trimmed.starts_with('@') {
        return match SHORTHANDS
            .iter()
            .find(|(short, _)| short.eq_ignore_ascii_case(trimmed))
        {
            Some((_, long)) => read(long),
            None if trimmed.eq_ignore_ascii_case("@reboot") => Err(format!(
                "@reboot is not supported (a job runs on a schedule, not at start-up); write {SHORTHAND_LIST}"
            )),
            None => {
                let guess = closest(SHORTHANDS.iter().map(|(s, _)| *s), trimmed);
                Err(format!(
                    "unknown shorthand {trimmed}; {}write {SHORTHAND_LIST}",
                    did_you_mean(guess)
                ))
            }
        };
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    let (seconds, rest) = match fields.len() {
        0 => return Err(format!("it is empty; write it like {EXAMPLE:?} ({FIELDS})")),
        5 => ("0", &fields[..]),
        6 | 7 => (fields[0], &fields[1..]),
        n => return Err(format!("it has {n} fields; write 5, 6 or 7 ({FIELDS})")),
    };
    Ok(Fields {
        seconds: values(&SECONDS, seconds)?,
        minutes: values(&MINUTES, rest[0])?,
        hours: values(&HOURS, rest[1])?,
        days: day_rule(rest[2], rest[4])?,
        months: values(&MONTHS, rest[3])?,
        years: rest.get(5).map(|years| values(&YEARS, years)).transpose()?,
    })
}

/// The values a plain field allows.
fn values(unit: &Unit, field: &str) -> Result<Vec<bool>, String> {
    let mut set = vec![false; unit.max as usize + 1];
    for item in field.split(',') {
        plain_item(unit, field, item, &mut set)?;
    }
    Ok(set)
}

/// Reads one list item, `*`, `a`, `a-b`, each with an optional `/step`, into `set`.
fn plain_item(unit: &Unit, field: &str, item: &str, set: &mut [bool]) -> Result<(), String> {
    if item.is_empty() {
        return Err(format!("the {} {field:?} has an empty item", unit.field));
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => match number(step) {
            Some(step) if step > 0 => (range, Some(step)),
            _ => return Err(format!("the step in {item:?} must be 1 or more")),
        },
        None => (item, None),
    };
    // `?` is crontab's `*` in the two day fields.
    let star = range == "*" || (range == "?" && unit.kind != Kind::Plain);
    let (lo, hi) = if star {
        (unit.min, unit.top)
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, b) = (value(unit, field, item, a)?, value(unit, field, item, b)?);
        if a > b {
            return Err(format!(
                "the range {range:?} runs backwards; write the smaller end first"
            ));
        }
        (a, b)
    } else {
        let a = value(unit, field, item, range)?;
        (a, if step.is_some() { unit.top.max(a) } else { a })
    };
    for v in (lo..=hi).step_by(step.unwrap_or(1) as usize) {
        set[v as usize] = true;
    }
    Ok(())
}

/// One value: a number in the unit's bounds or one of its names.
fn value(unit: &Unit, field: &str, item: &str, text: &str) -> Result<u32, String> {
    if text.is_empty() {
        return Err(format!("the {} {field:?} has an empty item", unit.field));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return match number(text) {
            Some(n) if (unit.min..=unit.max).contains(&n) => Ok(n),
            _ => Err(format!(
                "the {} {text} is out of range; {} go from {}",
                unit.one, unit.many, unit.bounds
            )),
        };
    }
    let upper = text.to_ascii_uppercase();
    let named = |names: &[&str]| names.iter().position(|n| *n == upper);
    if let Some(at) = named(unit.names)
        .or_else(|| named(unit.long_names))
        .or_else(|| match upper.as_str() {
            "TUES" if unit.kind == Kind::Weekdays => Some(2),
            "THURS" if unit.kind == Kind::Weekdays => Some(4),
            _ => None,
        })
    {
        return Ok(unit.min + at as u32);
    }
    misplaced(unit, item)?;
    let guess = closest(unit.names.iter().copied(), &upper);
    Err(format!(
        "{text:?} is not a {}; {}{} go from {}",
        unit.one,
        did_you_mean(guess),
        unit.many,
        unit.bounds
    ))
}

/// Refuses `L`, `W` and `#` outside the fields they belong in, saying where.
fn misplaced(unit: &Unit, item: &str) -> Result<(), String> {
    let upper = item.to_ascii_uppercase();
    let in_days = unit.kind == Kind::Days;
    let in_weekdays = unit.kind == Kind::Weekdays;
    let belongs = if upper.contains('#') && !in_weekdays {
        "# (the nth weekday, like FRI#2) belongs in the weekday field"
    } else if upper.ends_with('W') && upper.len() > 1 && !in_days {
        "W (the nearest weekday, like 15W) belongs in the day-of-month field"
    } else if (upper == "L" || upper.starts_with("L-") || upper.ends_with('L'))
        && !in_days
        && !in_weekdays
    {
        "L (the last day, like L or L-3, or the last weekday, like FRI#L) belongs in the \
         day-of-month or weekday field"
    } else {
        return Ok(());
    };
    Err(format!("{item:?} in the {}: {belongs}", unit.field))
}

/// Reads the day-of-month and weekday fields.
fn day_rule(days: &str, weekdays: &str) -> Result<DayRule, String> {
    let mut rule = DayRule {
        any_day: days == "*" || days == "?",
        days: 0,
        from_last: Vec::new(),
        nearest_weekday: Vec::new(),
        last_weekday: false,
        any_weekday: weekdays == "*" || weekdays == "?",
        weekdays: 0,
        nth: Vec::new(),
        last_of: Vec::new(),
    };
    let mut set = vec![false; DAYS.max as usize + 1];
    for item in days.split(',') {
        let upper = item.to_ascii_uppercase();
        if upper == "L" {
            rule.from_last.push(0);
        } else if upper == "LW" {
            rule.last_weekday = true;
        } else if let Some(n) = upper.strip_prefix("L-") {
            match number(n) {
                Some(n) if n <= 30 => rule.from_last.push(n),
                _ => {
                    return Err(format!(
                        "{item:?}: the days before the last in L-n go from 0 to 30"
                    ));
                }
            }
        } else if let Some(n) = upper.strip_suffix('W').filter(|n| !n.is_empty()) {
            rule.nearest_weekday.push(value(&DAYS, days, item, n)?);
        } else if upper.contains('W') {
            return Err(format!(
                "{item:?}: W names one day (like 15W), not a range or a step; list them: 1W,15W"
            ));
        } else {
            plain_item(&DAYS, days, item, &mut set)?;
        }
    }
    rule.days = bits(&set);
    let mut set = vec![false; WEEKDAYS.max as usize + 1];
    for item in weekdays.split(',') {
        let upper = item.to_ascii_uppercase();
        let weekday = |text: &str| value(&WEEKDAYS, weekdays, item, text).map(|w| w % 7);
        if let Some((day, n)) = item.split_once('#') {
            let day = weekday(day)?;
            match n.to_ascii_uppercase().as_str() {
                "L" => rule.last_of.push(day),
                n => match number(n) {
                    Some(n) if (1..=5).contains(&n) => {
                        rule.nth.push((day, n));
                    }
                    _ => {
                        return Err(format!(
                            "{item:?}: the nth weekday goes from #1 to #5, or #L for the last"
                        ));
                    }
                },
            }
        } else if let Some(day) = upper.strip_suffix('L').filter(|d| !d.is_empty()) {
            rule.last_of.push(weekday(day)?);
        } else {
            plain_item(&WEEKDAYS, weekdays, item, &mut set)?;
        }
    }
    // 7 is Sunday too.
    set[0] |= set[7];
    set[7] = false;
    rule.weekdays = bits(&set) as u8;
    Ok(rule)
}

/// A number written with digits only; `None` past `u32`.
fn number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A set of small values as bits.
fn bits(set: &[bool]) -> u32 {
    set.iter()
        .enumerate()
        .filter(|(_, on)| **on)
        .fold(0, |acc, (v, _)| acc | (1 << v))
}
