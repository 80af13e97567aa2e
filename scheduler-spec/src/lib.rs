//! The schedule rules of `scheduler-core`, written once: what a duration, a cron
//! expression, a time zone and a job name may be, the messages that refuse them, and
//! the instants a schedule ticks at.
//!
//! Two crates apply these rules: `scheduler-core`, when a scheduler is built, and its
//! `#[job]` attribute (`scheduler-macros`), while the code compiles. The macro cannot
//! depend on core (core depends on it), so both depend on this crate, and a schedule
//! the macro accepts is one `build()` accepts, with the same words for a mistake.
//!
//! - [`parse_duration`]: `"30s"`, `"15m"`, `"1h30m"`, `"500ms"`, `"2d"`;
//! - [`Every`]: ticks at whole multiples of a period since the Unix epoch;
//! - [`CronExpr`] and [`parse_time_zone`]: a cron expression read as crontab reads
//!   it (5 fields, or 6 and 7 with seconds and a year) and an IANA time zone, checked apart so each mistake can be pointed at;
//! - [`CronSchedule`]: the two together, with [`CronSchedule::next_after`] (the
//!   daylight saving time rule is documented there) and
//!   [`CronSchedule::check_fires_after`] (the "never fires" check);
//! - [`check_name`]: the rule for job and lease names;
//! - [`check_timing`]: the rules a job's jitter, window, timeout and retries keep
//!   with its period;
//! - [`PolicySpec`] and [`PolicyKeys`]: the policy keys (`catch_up`, `overlap`,
//!   `retry`, …), the rules they keep together, and a dynamic schedule's policy text
//!   ([`PolicySpec::parse`]);
//! - [`closest`]: the guess for a misspelled key or word.
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use scheduler_spec::{CronSchedule, parse_duration};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! assert_eq!(parse_duration("1h30m")?.as_secs(), 5400);
//!
//! // 02:30 every night, Berlin time; on the night the clocks spring forward, 02:30
//! // does not exist and the job fires when the gap ends, at 03:00 CEST.
//! let nightly = CronSchedule::parse("0 30 2 * * *", "Europe/Berlin")?;
//! let after: DateTime<Utc> = "2026-03-28T12:00:00Z".parse()?;
//! assert_eq!(nightly.next_after(after), Some("2026-03-29T01:00:00Z".parse()?));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod cron;
mod duration;
mod error;
mod every;
mod name;
mod policy;
mod spelling;
mod zone;

pub use crate::cron::{CronExpr, CronSchedule};
pub use crate::duration::parse_duration;
pub use crate::error::time_zone_hint;
pub use crate::error::{Error, Result};
pub use crate::every::Every;
pub use crate::name::{MAX_NAME_LEN, check_name};
pub use crate::policy::{
    CatchUpSpec, CatchUpWord, DEFAULT_CATCH_UP_MAX, DEFAULT_RETRY_BACKOFF, MAX_CATCH_UP,
    OverlapSpec, OverlapWord, POLICY_KEYS, PolicyError, PolicyKeys, PolicySpec, RetrySpec, Timing,
    TimingError, check_timing,
};
pub use crate::spelling::{closest, did_you_mean};
pub use crate::zone::parse_time_zone;

pub use chrono_tz::Tz;
