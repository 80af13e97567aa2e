//! Cron expressions and time zones, checked with the parsers `scheduler_core::Schedule`
//! uses at run time (`cron::Schedule::from_str`, `chrono_tz::Tz::from_str`).
//!
//! Each check returns the whole error message, ready to point at the literal.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Checks a cron expression with a seconds field.
pub(crate) fn check_cron(expr: &str) -> Result<(), String> {
    let invalid = |reason: String| format!("invalid cron expression {expr:?}: {reason}");
    let fields = expr.split_whitespace().count();
    if fields == 0 {
        return Err(invalid(format!(
            "it is empty; write it like {EXAMPLE:?} ({FIELDS})"
        )));
    }
    let cron = match cron::Schedule::from_str(expr) {
        Ok(cron) => cron,
        Err(_) if fields == 5 && !expr.trim_start().starts_with('@') => {
            let fixed = format!("0 {}", expr.trim());
            return Err(invalid(format!(
                "it has 5 fields; put a seconds field first, like {fixed:?}"
            )));
        }
        Err(_) if !(6..=7).contains(&fields) && !expr.trim_start().starts_with('@') => {
            return Err(invalid(format!(
                "it has {fields} fields; write 6 or 7 ({FIELDS})"
            )));
        }
        Err(err) => return Err(invalid(reason(&err.to_string()))),
    };
    // Whether it fires at all (February 30th never comes). Checked from the epoch so
    // the answer does not depend on when the code is compiled; an expression whose
    // years are all past is refused when the scheduler is built.
    if cron.after(&DateTime::<Utc>::UNIX_EPOCH).next().is_none() {
        return Err(format!(
            "cron expression {expr:?} never fires; check that its day, month and weekday fields can meet"
        ));
    }
    Ok(())
}

/// An example cron expression.
const EXAMPLE: &str = "0 */15 * * * *";

/// The fields of a cron expression, in order.
const FIELDS: &str = "sec min hour day month weekday [year]";

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

/// Checks an IANA time zone name.
pub(crate) fn check_time_zone(name: &str) -> Result<(), String> {
    if Tz::from_str(name).is_ok() {
        return Ok(());
    }
    let near = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| tz.name())
        .find(|known| known.eq_ignore_ascii_case(name.trim()));
    Err(match near {
        Some(known) => format!("unknown time zone {name:?}; did you mean {known:?}?"),
        None => format!(
            r#"unknown time zone {name:?}; use an IANA name such as "Europe/Berlin" or "UTC""#
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_needs_seconds_and_a_time_that_exists() {
        assert_eq!(check_cron("0 */15 * * * *"), Ok(()));
        assert_eq!(check_cron("0 0 12 * * MON-FRI 2030"), Ok(()));
        assert_eq!(check_cron("@hourly"), Ok(()));
        assert_eq!(
            check_cron("*/15 * * * *"),
            Err(r#"invalid cron expression "*/15 * * * *": it has 5 fields; put a seconds field first, like "0 */15 * * * *""#.to_owned())
        );
        assert_eq!(
            check_cron("0 * * * * * * *"),
            Err(r#"invalid cron expression "0 * * * * * * *": it has 8 fields; write 6 or 7 (sec min hour day month weekday [year])"#.to_owned())
        );
        assert_eq!(
            check_cron(" "),
            Err(r#"invalid cron expression " ": it is empty; write it like "0 */15 * * * *" (sec min hour day month weekday [year])"#.to_owned())
        );
        assert_eq!(
            check_cron("0 0 12 * * Mun"),
            Err(r#"invalid cron expression "0 0 12 * * Mun": 'Mun' is not a valid day of the week."#.to_owned())
        );
        assert!(check_cron("0 0 0 30 2 *").is_err_and(|e| e.contains("never fires")));
    }

    #[test]
    fn time_zones_are_iana_names() {
        assert_eq!(check_time_zone("Europe/Berlin"), Ok(()));
        assert_eq!(check_time_zone("UTC"), Ok(()));
        assert_eq!(
            check_time_zone("europe/berlin"),
            Err(r#"unknown time zone "europe/berlin"; did you mean "Europe/Berlin"?"#.to_owned())
        );
        assert!(check_time_zone("Mars/Olympus").is_err_and(|e| e.contains("IANA")));
    }
}
