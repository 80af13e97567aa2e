//! Duration text: `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"`.
//!
//! Accepts and refuses exactly what `scheduler_core::parse_duration` does (this
//! crate cannot depend on core, which depends on it); `tests/duration_matches_core.rs`
//! holds the two together. Only the reasons given for a refusal are more specific.

use std::fmt;
use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalid {
    Empty,
    NoNumber,
    Fraction,
    Space,
    TooLarge,
    Overflow,
    NoUnit,
    UnknownUnit,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invalid::Empty => r#"it is empty; write it like "30s", "15m", "1h30m" or "500ms""#,
            Invalid::NoNumber => {
                r#"expected a number; write it like "30s", "15m", "1h30m" or "500ms""#
            }
            Invalid::Fraction => {
                r#"fractions are not supported; combine units instead, like "1s500ms""#
            }
            Invalid::Space => r#"spaces are not allowed inside; write it like "1h30m""#,
            Invalid::TooLarge => "the number is too large",
            Invalid::Overflow => "it overflows",
            Invalid::NoUnit => "a number needs a unit; use ms, s, m, h or d",
            Invalid::UnknownUnit => "unknown unit; use ms, s, m, h or d",
        })
    }
}

/// Parses a duration: whole numbers, each followed by a unit (`ms`, `s`, `m`, `h`,
/// `d`); surrounding whitespace is ignored.
pub(crate) fn parse(input: &str) -> Result<Duration, Invalid> {
    let s = input.trim();
    if s.is_empty() {
        return Err(Invalid::Empty);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(unexpected(rest, Invalid::NoNumber));
        }
        let value: u64 = rest[..digits].parse().map_err(|_| Invalid::TooLarge)?;
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
            "" => return Err(unexpected(rest, Invalid::NoUnit)),
            _ => return Err(Invalid::UnknownUnit),
        };
        total = total.checked_add(part).ok_or(Invalid::Overflow)?;
    }
    Ok(total)
}

fn seconds(value: u64, per_unit: u64) -> Result<Duration, Invalid> {
    value
        .checked_mul(per_unit)
        .map(Duration::from_secs)
        .ok_or(Invalid::Overflow)
}

/// A more telling reason than `otherwise` when `rest` starts with a character that
/// explains the refusal.
fn unexpected(rest: &str, otherwise: Invalid) -> Invalid {
    match rest.chars().next() {
        Some('.') => Invalid::Fraction,
        Some(c) if c.is_whitespace() => Invalid::Space,
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
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(parse(""), Err(Invalid::Empty));
        assert_eq!(parse("   "), Err(Invalid::Empty));
        assert_eq!(parse("30"), Err(Invalid::NoUnit));
        assert_eq!(parse("s"), Err(Invalid::NoNumber));
        assert_eq!(parse("-1s"), Err(Invalid::NoNumber));
        assert_eq!(parse("30x"), Err(Invalid::UnknownUnit));
        assert_eq!(parse("30sec"), Err(Invalid::UnknownUnit));
        assert_eq!(parse("1.5s"), Err(Invalid::Fraction));
        assert_eq!(parse("1h 30m"), Err(Invalid::Space));
        assert_eq!(parse("99999999999999999999s"), Err(Invalid::TooLarge));
        assert_eq!(parse("18446744073709551615m"), Err(Invalid::Overflow));
        assert_eq!(parse("18446744073709551615s1s"), Err(Invalid::Overflow));
    }
}
