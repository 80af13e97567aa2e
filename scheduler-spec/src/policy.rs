//! The rules a job's timing settings must keep together ([`check_timing`]), and the
//! policy keys that set them ([`keys`]).

mod keys;

use std::time::Duration;

pub use self::keys::{
    CatchUpSpec, CatchUpWord, DEFAULT_RETRY_BACKOFF, OverlapSpec, OverlapWord, POLICY_KEYS,
    PolicyError, PolicyKeys, PolicySpec, RetrySpec,
};

/// The largest `max` of a catch-up policy that runs every missed tick. The ticks to
/// catch up are found and kept at start-up, and after a resume: a bound keeps that
/// work and memory small whatever the schedule and the window. More missed ticks
/// than this are a backfill's work, which takes them in chunks.
pub const MAX_CATCH_UP: u32 = 100_000;

/// How many missed ticks a catch-up policy that runs every missed tick keeps when
/// no `max` is given (`catch_up = "all"` in `#[job]` and in a dynamic schedule's
/// policy).
pub const DEFAULT_CATCH_UP_MAX: u32 = 10;

/// A job's timing settings, as far as they can contradict each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// The shortest gap between two ticks of the schedule (an `every` period; for a
    /// cron expression, the shortest gap found ahead), if known.
    pub period: Option<Duration>,
    /// The bound of the random delay added to each tick's start.
    pub jitter: Duration,
    /// How late a tick may still start, if set.
    pub window: Option<Duration>,
    /// How long a run may take, if set.
    pub timeout: Option<Duration>,
    /// Retries of a failed run: how many, and the first wait.
    pub retry: Option<(u32, Duration)>,
    /// The `max` of a catch-up policy that runs every missed tick.
    pub catch_up_max: Option<u32>,
}

/// Why a job's timing settings were refused: each message says what to write
/// instead. The macro shows it on the attribute, `scheduler-core` in its build error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// A jitter as long as the period or longer: ticks would start in another tick's
    /// slot, and some would be skipped for overlapping.
    #[error(
        "jitter {jitter:?} is not shorter than the period {period:?}: each tick would start in a later tick's slot; keep the jitter well below the period"
    )]
    JitterNotShorterThanPeriod {
        /// The jitter.
        jitter: Duration,
        /// The period.
        period: Duration,
    },
    /// A catch-up window of zero: no tick could ever start.
    #[error(
        "a catch-up window of zero lets no tick start; give a positive duration or leave it out (one period)"
    )]
    ZeroWindow,
    /// A timeout of zero: every run would be cancelled at once.
    #[error(
        "a run timeout of zero cancels every run at once; give a positive duration or leave it out (no limit)"
    )]
    ZeroTimeout,
    /// Zero retries.
    #[error("`retry` of 0 attempts retries nothing; give at least 1 or leave it out")]
    ZeroRetries,
    /// A retry backoff of zero: the retries would run back to back.
    #[error(
        "a retry backoff of zero retries a failed run at once, over and over; give a positive duration"
    )]
    ZeroBackoff,
    /// A retry backoff as long as the period or longer: no retry could start before
    /// the next tick.
    #[error(
        "retry backoff {backoff:?} is not shorter than the period {period:?}: no retry could start before the next tick; shorten the backoff"
    )]
    BackoffNotShorterThanPeriod {
        /// The backoff.
        backoff: Duration,
        /// The period.
        period: Duration,
    },
    /// At most zero runs at once.
    #[error("concurrent runs with `max` 0 run nothing; give a `max` of at least 1")]
    ZeroConcurrency,
    /// Catch up on at most zero ticks.
    #[error(
        "catching up on all missed ticks with `max` 0 catches up on none; give a `max` of at least 1, or choose skip"
    )]
    ZeroCatchUpMax,
    /// Catch up on more ticks than [`MAX_CATCH_UP`].
    #[error(
        "catching up on all missed ticks with `max` {max} keeps more than {MAX_CATCH_UP} ticks at start-up; give a `max` of at most {MAX_CATCH_UP}, and run a backfill for more"
    )]
    CatchUpMaxTooLarge {
        /// The `max` given.
        max: u32,
    },
}

/// Checks that a job's timing settings can work together.
///
/// ```
/// use std::time::Duration;
/// use scheduler_spec::{Timing, TimingError, check_timing};
///
/// let timing = Timing {
///     period: Some(Duration::from_secs(1)),
///     jitter: Duration::from_secs(3600),
///     ..Timing::default()
/// };
/// assert!(matches!(check_timing(&timing), Err(TimingError::JitterNotShorterThanPeriod { .. })));
/// ```
///
/// # Errors
/// The first rule the settings break.
pub fn check_timing(timing: &Timing) -> Result<(), TimingError> {
    if let Some(period) = timing.period
        && !timing.jitter.is_zero()
        && timing.jitter >= period
    {
        return Err(TimingError::JitterNotShorterThanPeriod {
            jitter: timing.jitter,
            period,
        });
    }
    if timing.window.is_some_and(|w| w.is_zero()) {
        return Err(TimingError::ZeroWindow);
    }
    if timing.timeout.is_some_and(|t| t.is_zero()) {
        return Err(TimingError::ZeroTimeout);
    }
    if let Some((attempts, backoff)) = timing.retry {
        if attempts == 0 {
            return Err(TimingError::ZeroRetries);
        }
        if backoff.is_zero() {
            return Err(TimingError::ZeroBackoff);
        }
        if let Some(period) = timing.period
            && backoff >= period
        {
            return Err(TimingError::BackoffNotShorterThanPeriod { backoff, period });
        }
    }
    match timing.catch_up_max {
        Some(0) => return Err(TimingError::ZeroCatchUpMax),
        Some(max) if max > MAX_CATCH_UP => return Err(TimingError::CatchUpMaxTooLarge { max }),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn every(period: Duration) -> Timing {
        Timing {
            period: Some(period),
            ..Timing::default()
        }
    }

    #[test]
    fn each_rule_refuses_its_case_and_sensible_settings_pass() {
        let cases = [
            (
                Timing {
                    jitter: S,
                    ..every(S)
                },
                Some(TimingError::JitterNotShorterThanPeriod {
                    jitter: S,
                    period: S,
                }),
            ),
            (
                Timing {
                    window: Some(Duration::ZERO),
                    ..every(S)
                },
                Some(TimingError::ZeroWindow),
            ),
            (
                Timing {
                    timeout: Some(Duration::ZERO),
                    ..every(S)
                },
                Some(TimingError::ZeroTimeout),
            ),
            (
                Timing {
                    retry: Some((0, S)),
                    ..every(S * 10)
                },
                Some(TimingError::ZeroRetries),
            ),
            (
                Timing {
                    retry: Some((2, Duration::ZERO)),
                    ..every(S * 10)
                },
                Some(TimingError::ZeroBackoff),
            ),
            (
                Timing {
                    retry: Some((2, S * 10)),
                    ..every(S * 10)
                },
                Some(TimingError::BackoffNotShorterThanPeriod {
                    backoff: S * 10,
                    period: S * 10,
                }),
            ),
            (
                Timing {
                    catch_up_max: Some(0),
                    ..every(S)
                },
                Some(TimingError::ZeroCatchUpMax),
            ),
            (
                Timing {
                    catch_up_max: Some(MAX_CATCH_UP + 1),
                    ..every(S)
                },
                Some(TimingError::CatchUpMaxTooLarge {
                    max: MAX_CATCH_UP + 1,
                }),
            ),
            (
                Timing {
                    catch_up_max: Some(MAX_CATCH_UP),
                    ..every(S)
                },
                None,
            ),
            (
                Timing {
                    jitter: S / 2,
                    window: Some(S * 60),
                    timeout: Some(S * 30),
                    retry: Some((3, S)),
                    catch_up_max: Some(3),
                    ..every(S * 10)
                },
                None,
            ),
            (Timing::default(), None),
        ];
        for (timing, want) in cases {
            assert_eq!(check_timing(&timing).err(), want, "{timing:?}");
        }
    }
}
