//! Schedules, policies, spans of time and instants, in words.

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{Policy, Schedule};

/// A schedule as the pages show it: in words, as written, and its zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    /// `every 30 s`, `at 09:00:00 on Mon–Fri`.
    pub(crate) words: String,
    /// As written: `every 30s`, `0 0 9 * * Mon-Fri`.
    pub(crate) text: String,
    /// The zone of a cron schedule.
    pub(crate) zone: Option<String>,
}

/// A schedule registered in code, from its `Display` (`every 30s`,
/// `cron "0 0 9 * * Mon-Fri" in Europe/Berlin`): the one view of its parts that
/// `scheduler-core` offers.
pub(crate) fn schedule(schedule: &Schedule) -> Described {
    let shown = schedule.to_string();
    if let Some(period) = shown.strip_prefix("every ") {
        return Described {
            words: every(period),
            text: shown.clone(),
            zone: None,
        };
    }
    if let Some((expr, zone)) = shown
        .strip_prefix("cron \"")
        .and_then(|rest| rest.rsplit_once("\" in "))
    {
        return Described {
            words: cron(expr).unwrap_or_else(|| expr.to_owned()),
            text: expr.to_owned(),
            zone: Some(zone.to_owned()),
        };
    }
    Described {
        words: shown.clone(),
        text: shown,
        zone: None,
    }
}

/// A dynamic schedule's text (a cron expression, or `every 30s`) and zone.
pub(crate) fn schedule_text(text: &str, zone: Option<&str>) -> Described {
    let text = text.trim();
    match text.strip_prefix("every ") {
        Some(period) => Described {
            words: every(period.trim()),
            text: text.to_owned(),
            zone: None,
        },
        None => Described {
            words: cron(text).unwrap_or_else(|| text.to_owned()),
            text: text.to_owned(),
            zone: Some(zone.unwrap_or("UTC").to_owned()),
        },
    }
}

/// `every 30 s` from a period written `30s`, `1.5s`, `250ms` or `1h30m`.
fn every(period: &str) -> String {
    let parsed = scheduler_core::parse_duration(period)
        .ok()
        .or_else(|| debug_duration(period));
    match parsed.and_then(|d| TimeDelta::from_std(d).ok()) {
        Some(d) => format!("every {}", span(d)),
        None => format!("every {period}"),
    }
}

/// A duration as `Debug` writes it (`1.5s`, `250ms`, `10µs`).
fn debug_duration(text: &str) -> Option<std::time::Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" | "us" => number / 1e6,
        "ns" => number / 1e9,
        _ => return None,
    };
    std::time::Duration::try_from_secs_f64(seconds).ok()
}

/// A cron expression (seconds first, optional year) in words, or `None` when it is
/// not six or seven fields.
pub(crate) fn cron(expr: &str) -> Option<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let [sec, min, hour, dom, month, dow, rest @ ..] = fields.as_slice() else {
        return None;
    };
    if rest.len() > 1 {
        return None;
    }
    let mut out = time_of_day(sec, min, hour);
    if !any(dom) {
        out.push_str(&format!(", on day {} of the month", dashes(dom)));
    }
    if !any(month) {
        out.push_str(&format!(", in {}", dashes(month)));
    }
    if !any(dow) {
        out.push_str(&format!(", on {}", dashes(dow)));
    }
    if let Some(year) = rest.first().filter(|y| !any(y)) {
        out.push_str(&format!(", in {}", dashes(year)));
    }
    Some(out)
}

fn any(field: &str) -> bool {
    field == "*" || field == "?"
}

fn dashes(field: &str) -> String {
    field.replace('-', "–").replace(',', ", ")
}

fn number(field: &str) -> Option<u32> {
    field.parse().ok()
}

fn step(field: &str) -> Option<u32> {
    field.strip_prefix("*/").and_then(|n| n.parse().ok())
}

fn time_of_day(sec: &str, min: &str, hour: &str) -> String {
    match (number(sec), number(min), number(hour)) {
        (Some(s), Some(m), Some(h)) => return format!("at {h:02}:{m:02}:{s:02}"),
        (Some(s), Some(m), None) if any(hour) => {
            return format!("every hour at {m:02}:{s:02} past");
        }
        (Some(s), Some(m), None) if step(hour).is_some() => {
            let n = step(hour).unwrap_or(1);
            return format!("every {n} hours at {m:02}:{s:02} past");
        }
        (Some(s), None, None) if any(hour) => {
            let at = if s == 0 {
                String::new()
            } else {
                format!(" at second {s}")
            };
            if any(min) {
                return format!("every minute{at}");
            }
            if let Some(n) = step(min) {
                return format!("every {n} minutes{at}");
            }
        }
        (None, None, None) if any(min) && any(hour) => {
            if any(sec) {
                return "every second".to_owned();
            }
            if let Some(n) = step(sec) {
                return format!("every {n} seconds");
            }
        }
        _ => {}
    }
    format!(
        "second {}, minute {}, hour {}",
        field(sec),
        field(min),
        field(hour)
    )
}

fn field(f: &str) -> String {
    if any(f) {
        "any".to_owned()
    } else if let Some(n) = step(f) {
        format!("every {n}")
    } else {
        dashes(f)
    }
}

/// A span of time: `850 ms`, `12.3 s`, `4 min 5 s`, `3 h 2 min`, `2 d 3 h`.
pub(crate) fn span(d: TimeDelta) -> String {
    let ms = d.num_milliseconds().unsigned_abs();
    let sign = if d < TimeDelta::zero() { "−" } else { "" };
    let text = if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        if tenths.is_multiple_of(10) {
            format!("{} s", tenths / 10)
        } else {
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
    } else {
        let s = ms / 1_000;
        let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
        match (d, h) {
            (0, 0) if s == 0 => format!("{m} min"),
            (0, 0) => format!("{m} min {s} s"),
            (0, h) if m == 0 => format!("{h} h"),
            (0, h) => format!("{h} h {m} min"),
            (d, 0) => format!("{d} d"),
            (d, h) => format!("{d} d {h} h"),
        }
    };
    format!("{sign}{text}")
}

/// A count with thousands separated: `100,000`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `at` from `now`: `12 s ago`, `in 3 min`, `now`.
pub(crate) fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = now - at;
    if d.num_milliseconds().abs() < 50 {
        "now".to_owned()
    } else if d > TimeDelta::zero() {
        format!("{} ago", span(d))
    } else {
        format!("in {}", span(-d))
    }
}

/// A policy, one line per part: catch-up, overlap, retry, timeout.
pub(crate) fn policy(policy: &Policy) -> [(&'static str, String); 4] {
    [
        ("catch-up", policy.catch_up.to_string()),
        ("overlap", policy.overlap.to_string()),
        (
            "retry",
            match policy.retry {
                Some(r) => match TimeDelta::from_std(r.backoff) {
                    Ok(b) => format!("{} × after {}, doubling", r.attempts, span(b)),
                    Err(_) => format!("{} ×", r.attempts),
                },
                None => "none".to_owned(),
            },
        ),
        (
            "timeout",
            policy
                .timeout
                .and_then(|t| TimeDelta::from_std(t).ok())
                .map_or_else(|| "none".to_owned(), span),
        ),
    ]
}

/// How late recent runs started (`started − tick`, first attempts only): the median
/// and the largest, or `None` without runs.
pub(crate) fn lateness(mut late: Vec<TimeDelta>) -> Option<(TimeDelta, TimeDelta)> {
    late.sort();
    let median = *late.get(late.len() / 2)?;
    let max = *late.last()?;
    Some((median, max))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[test]
    fn schedules_in_words() {
        let d = schedule(&Schedule::every(Duration::from_secs(30)));
        assert_eq!((d.words.as_str(), d.zone), ("every 30 s", None));
        assert_eq!(
            schedule(&Schedule::every(Duration::from_millis(1500))).words,
            "every 1.5 s"
        );
        assert_eq!(
            schedule(&Schedule::every(Duration::from_secs(5400))).words,
            "every 1 h 30 min"
        );
        let d = schedule(&Schedule::cron("0 0 9 * * Mon-Fri").in_time_zone("Europe/Berlin"));
        assert_eq!(d.words, "at 09:00:00, on Mon–Fri");
        assert_eq!(d.text, "0 0 9 * * Mon-Fri");
        assert_eq!(d.zone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(
            schedule(&Schedule::cron("0 */15 * * * *")).zone.as_deref(),
            Some("UTC")
        );
    }

    #[test]
    fn cron_fields_in_words() {
        assert_eq!(cron("0 */15 * * * *").unwrap(), "every 15 minutes");
        assert_eq!(cron("30 * * * * *").unwrap(), "every minute at second 30");
        assert_eq!(cron("* * * * * *").unwrap(), "every second");
        assert_eq!(cron("*/5 * * * * *").unwrap(), "every 5 seconds");
        assert_eq!(cron("0 5 * * * *").unwrap(), "every hour at 05:00 past");
        assert_eq!(
            cron("0 0 */6 * * *").unwrap(),
            "every 6 hours at 00:00 past"
        );
        assert_eq!(
            cron("0 0 9-17 1 Jan,Jul * 2030").unwrap(),
            "second 0, minute 0, hour 9–17, on day 1 of the month, in Jan, Jul, in 2030"
        );
        assert_eq!(cron("not cron"), None);
        assert_eq!(schedule_text("every 1h30m", None).words, "every 1 h 30 min");
        assert_eq!(
            schedule_text("0 30 2 * * *", None).zone.as_deref(),
            Some("UTC")
        );
    }

    #[test]
    fn spans_and_instants() {
        assert_eq!(span(TimeDelta::milliseconds(850)), "850 ms");
        assert_eq!(span(TimeDelta::milliseconds(12_345)), "12.3 s");
        assert_eq!(span(TimeDelta::seconds(245)), "4 min 5 s");
        assert_eq!(span(TimeDelta::seconds(3 * 3600 + 120)), "3 h 2 min");
        assert_eq!(span(TimeDelta::seconds(2 * 86_400 + 3 * 3600)), "2 d 3 h");
        assert_eq!(span(TimeDelta::milliseconds(-40)), "−40 ms");
        let now = Utc::now();
        assert_eq!(relative(now - TimeDelta::seconds(12), now), "12 s ago");
        assert_eq!(relative(now + TimeDelta::seconds(180), now), "in 3 min");
        assert_eq!(relative(now, now), "now");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(100_000), "100,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn lateness_is_the_median_and_the_largest() {
        let ms = TimeDelta::milliseconds;
        assert_eq!(lateness(vec![ms(5), ms(1), ms(30)]), Some((ms(5), ms(30))));
        assert_eq!(lateness(Vec::new()), None);
    }
}
