//! Duration text: `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"`.

use std::time::Duration;

use crate::error::{Error, Result};

const EMPTY: &str = r#"it is empty; write it like "30s", "15m", "1h30m" or "500ms""#;
const NO_NUMBER: &str = r#"expected a number; write it like "30s", "15m", "1h30m" or "500ms""#;
const FRACTION: &str = r#"fractions are not supported; combine units instead, like "1s500ms""#;
const SPACE: &str = r#"spaces are not allowed inside; write it like "1h30m""#;
const TOO_LARGE: &str = "the number is too large";
const OVERFLOW: &str = "it overflows";
const NO_UNIT: &str = "a number needs a unit; use ms, s, m, h or d";
const UNKNOWN_UNIT: &str = "unknown unit; use ms, s, m, h or d";

/// Parses a duration: whole numbers, each followed by a unit (`ms`, `s`, `m`, `h`,
/// `d`), like `"30s"`, `"15m"`, `"1h30m"`, `"500ms"` or `"2d"`; surrounding
/// whitespace is ignored.
///
/// ```
/// # use std::time::Duration;
/// assert_eq!(scheduler_spec::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(scheduler_spec::parse_duration("1.5s").is_err());
/// ```
///
/// # Errors
/// [`Error::InvalidDuration`] if the text is empty, has a number without a unit, an
/// unknown unit, a fraction, a space inside, or overflows.
pub fn parse_duration(input: &str) -> Result<Duration> {
    parse(input).map_err(|reason| Error::InvalidDuration {
        input: input.to_owned(),
        reason,
    })
}

fn parse(input: &str) -> Result<Duration, &'static str> {
    let s = input.trim();
    if s.is_empty() {
        return Err(EMPTY);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(unexpected(rest, NO_NUMBER));
        }
        let value: u64 = rest[..digits].parse().map_err(|_| TOO_LARGE)?;
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
            "m" => seconds(value, 60)?,
            "h" => seconds(value, 3600)?,
            "d" => seconds(value, 86_400)?,
            "" => return Err(unexpected(rest, NO_UNIT)),
            _ => return Err(UNKNOWN_UNIT),
        };
        total = total.checked_add(part).ok_or(OVERFLOW)?;
    }
    Ok(total)
}

fn seconds(value: u64, per_unit: u64) -> Result<Duration, &'static str> {
    value
        .checked_mul(per_unit)
        .map(Duration::from_secs)
        .ok_or(OVERFLOW)
}

/// A more telling reason than `otherwise` when `rest` starts with a character that
/// explains the refusal.
fn unexpected(rest: &str, otherwise: &'static str) -> &'static str {
    match rest.chars().next() {
        Some('.') => FRACTION,
        Some(c) if c.is_whitespace() => SPACE,
        _ => otherwise,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_combine() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse(" 1m1s "), Ok(Duration::from_secs(61)));
        assert_eq!(parse("\t1m\n"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1m1s1ms"), Ok(Duration::from_millis(61_001)));
        assert_eq!(parse("000010s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse("18446744073709551615s999ms"),
            Ok(Duration::new(u64::MAX, 999_000_000))
        );
        assert_eq!(
            parse("213503982334601d"),
            Ok(Duration::from_secs(213_503_982_334_601 * 86_400))
        );
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(parse(""), Err(EMPTY));
        assert_eq!(parse("   "), Err(EMPTY));
        assert_eq!(parse("30"), Err(NO_UNIT));
        assert_eq!(parse("s"), Err(NO_NUMBER));
        assert_eq!(parse("ms"), Err(NO_NUMBER));
        assert_eq!(parse("-1s"), Err(NO_NUMBER));
        assert_eq!(parse("30x"), Err(UNKNOWN_UNIT));
        assert_eq!(parse("30sec"), Err(UNKNOWN_UNIT));
        assert_eq!(parse("30S"), Err(UNKNOWN_UNIT));
        assert_eq!(parse("30µs"), Err(NO_UNIT));
        assert_eq!(parse("1.5s"), Err(FRACTION));
        assert_eq!(parse("1h 30m"), Err(SPACE));
        assert_eq!(parse("99999999999999999999s"), Err(TOO_LARGE));
        assert_eq!(parse("18446744073709551616s"), Err(TOO_LARGE));
        assert_eq!(parse("18446744073709551615m"), Err(OVERFLOW));
        assert_eq!(parse("213503982334602d"), Err(OVERFLOW));
        assert_eq!(parse("18446744073709551615s1s"), Err(OVERFLOW));
        assert_eq!(parse("18446744073709551615s1000ms"), Err(OVERFLOW));
    }

    #[test]
    fn the_error_names_the_input() {
        assert_eq!(
            parse_duration("30x").map_err(|e| e.to_string()),
            Err(r#"invalid duration "30x": unknown unit; use ms, s, m, h or d"#.to_owned())
        );
    }
}
