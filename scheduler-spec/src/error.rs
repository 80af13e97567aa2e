//! Why a schedule or a name was refused.

use std::time::Duration;

/// Why a duration, a period, a cron expression or a time zone was refused.
///
/// Each message names the rejected text and says what to write instead; the macro
/// shows it on the literal, `scheduler-core` in its build error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A duration string that does not parse.
    #[error("invalid duration {input:?}: {reason}")]
    InvalidDuration {
        /// The rejected text.
        input: String,
        /// What is wrong with it, and how to write it instead.
        reason: &'static str,
    },
    /// A period shorter than a millisecond.
    #[error("the period of `every` must be at least 1ms, not {period:?}")]
    PeriodTooShort {
        /// The rejected period.
        period: Duration,
    },
    /// A cron expression that does not parse.
    #[error("invalid cron expression {expr:?}: {reason}")]
    InvalidCron {
        /// The rejected expression.
        expr: String,
        /// What is wrong with it, and how to write it instead.
        reason: String,
    },
    /// A cron expression with no fire time after the instant it was checked at.
    #[error(
        "cron expression {expr:?} never fires; check that its day, month and weekday fields can meet and that its years are not all past"
    )]
    NeverFires {
        /// The expression.
        expr: String,
    },
    /// A name that is not an IANA time zone.
    #[error("unknown time zone {name:?}; {}", time_zone_hint(name))]
    UnknownTimeZone {
        /// The rejected name.
        name: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What to write instead of the unknown time zone `name`: `did you mean
/// "Europe/Berlin"?` when a zone differs from it only in case, else a pointer to IANA
/// names.
pub fn time_zone_hint(name: &str) -> String {
    let near = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| tz.name())
        .find(|known| known.eq_ignore_ascii_case(name.trim()));
    match near {
        Some(known) => format!("did you mean {known:?}?"),
        None => r#"use an IANA name such as "Europe/Berlin" or "UTC""#.to_owned(),
    }
}
