//! The policy keys, written once: the words they take ([`CatchUpWord`],
//! [`OverlapWord`]), the rules they keep together ([`PolicyKeys::resolve`]) and a
//! dynamic schedule's policy text ([`PolicySpec::parse`]).
//!
//! `#[job]` reads the keys from its attribute and `scheduler-core` from a schedule
//! row's text; both resolve them here, so the two accept the same policies and
//! refuse the same mistakes in the same words.

use std::time::Duration;

use super::{Timing, TimingError};
use crate::spelling::{closest, did_you_mean};

/// The policy keys, in the order the docs list them.
pub const POLICY_KEYS: [&str; 7] = [
    "catch_up",
    "catch_up_max",
    "overlap",
    "max_concurrent",
    "retry",
    "retry_backoff",
    "timeout",
];

/// The wait before the first retry when `retry` is given without `retry_backoff`.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// A catch-up policy (`scheduler_core::CatchUp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpSpec {
    /// `catch_up = "skip"`.
    Skip,
    /// `catch_up = "latest"`.
    Latest,
    /// `catch_up = "all"`, with `catch_up_max` (or [`DEFAULT_CATCH_UP_MAX`](crate::DEFAULT_CATCH_UP_MAX)).
    All {
        /// At most this many ticks caught up.
        max: u32,
    },
}

/// An overlap policy (`scheduler_core::Overlap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapSpec {
    /// `overlap = "skip"`.
    Skip,
    /// `overlap = "buffer_one"`.
    BufferOne,
    /// `overlap = "cancel_running"`.
    CancelRunning,
    /// `overlap = "concurrent"`, with `max_concurrent`.
    Concurrent {
        /// At most this many runs at once.
        max: u32,
    },
}

/// Retries of a failed run (`scheduler_core::Retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySpec {
    /// Retries after the first attempt.
    pub attempts: u32,
    /// The wait before the first retry.
    pub backoff: Duration,
}

/// The policies the keys set; `None` where no key sets one, so the default stays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicySpec {
    /// What `catch_up` (and `catch_up_max`) set.
    pub catch_up: Option<CatchUpSpec>,
    /// What `overlap` (and `max_concurrent`) set.
    pub overlap: Option<OverlapSpec>,
    /// What `retry` (and `retry_backoff`) set.
    pub retry: Option<RetrySpec>,
    /// What `timeout` sets.
    pub timeout: Option<Duration>,
}

/// The word of `catch_up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpWord {
    /// `"skip"`.
    Skip,
    /// `"latest"`.
    Latest,
    /// `"all"`.
    All,
}

impl CatchUpWord {
    /// Every word, as written.
    pub const WORDS: [(&'static str, Self); 3] = [
        ("skip", Self::Skip),
        ("latest", Self::Latest),
        ("all", Self::All),
    ];
}

/// The word of `overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapWord {
    /// `"skip"`.
    Skip,
    /// `"buffer_one"`.
    BufferOne,
    /// `"cancel_running"`.
    CancelRunning,
    /// `"concurrent"` (with `max_concurrent`).
    Concurrent,
}

impl OverlapWord {
    /// Every word, as written.
    pub const WORDS: [(&'static str, Self); 4] = [
        ("skip", Self::Skip),
        ("buffer_one", Self::BufferOne),
        ("cancel_running", Self::CancelRunning),
        ("concurrent", Self::Concurrent),
    ];
}

/// The policy keys as given, each read but not yet checked against the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyKeys {
    /// `catch_up`'s word.
    pub catch_up: Option<CatchUpWord>,
    /// `catch_up_max`.
    pub catch_up_max: Option<u32>,
    /// `overlap`'s word.
    pub overlap: Option<OverlapWord>,
    /// `max_concurrent`.
    pub max_concurrent: Option<u32>,
    /// `retry`.
    pub retry: Option<u32>,
    /// `retry_backoff`.
    pub retry_backoff: Option<Duration>,
    /// `timeout`.
    pub timeout: Option<Duration>,
}

/// Why policy keys were refused. Each message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A part of a policy text that is not `key = value`.
    #[error("{pair:?} is not `key = value`")]
    NotKeyValue {
        /// The part.
        pair: String,
    },
    /// A key that is not a policy key.
    #[error("unknown key {key:?}; {}valid keys: {}", did_you_mean(*guess), POLICY_KEYS.join(", "))]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The closest policy key, if close.
        guess: Option<&'static str>,
    },
    /// A value that is not a whole number.
    #[error("{key} = {value:?} is not a whole number")]
    NotWholeNumber {
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// A value that is not a duration.
    #[error("{key} = {value:?}: {cause}")]
    NotDuration {
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// Why it is not one.
        #[source]
        cause: crate::Error,
    },
    /// A `catch_up` word that is none of [`CatchUpWord::WORDS`].
    #[error("catch_up = {written:?}: {}skip, latest or all", did_you_mean(*guess))]
    UnknownCatchUp {
        /// The word as written.
        written: String,
        /// The closest word, if close.
        guess: Option<&'static str>,
    },
    /// An `overlap` word that is none of [`OverlapWord::WORDS`].
    #[error(
        "overlap = {written:?}: {}skip, buffer_one, cancel_running or concurrent",
        did_you_mean(*guess)
    )]
    UnknownOverlap {
        /// The word as written.
        written: String,
        /// The closest word, if close.
        guess: Option<&'static str>,
    },
    /// `catch_up_max` without `catch_up = "all"`.
    #[error(
        r#"`catch_up_max` bounds how many missed ticks `catch_up = "all"` runs, and applies to nothing else; add `catch_up = "all"` or remove `catch_up_max`"#
    )]
    CatchUpMaxWithoutAll,
    /// `retry_backoff` without `retry`.
    #[error(
        "`retry_backoff` is the wait before retrying a failed run, and there are no retries; add `retry = 3` (retries after the first attempt) or remove `retry_backoff`"
    )]
    BackoffWithoutRetry,
    /// `max_concurrent = 0` with `overlap = "concurrent"`.
    #[error("`max_concurrent` of 0 runs nothing; give at least 1")]
    ZeroMaxConcurrent,
    /// `overlap = "concurrent"` without `max_concurrent`.
    #[error("`overlap = \"concurrent\"` needs how many runs at once: add `max_concurrent = 2`")]
    ConcurrentWithoutMax,
    /// `max_concurrent` without `overlap = "concurrent"`.
    #[error(
        r#"`max_concurrent` bounds the runs of `overlap = "concurrent"`, and applies to nothing else; add `overlap = "concurrent"` or remove `max_concurrent`"#
    )]
    MaxConcurrentWithoutConcurrent,
    /// Settings a job's timing rules refuse ([`check_timing`](crate::check_timing)).
    #[error(transparent)]
    Timing(#[from] TimingError),
}

/// The word of `words` written as `written`, or the closest word (if close).
fn word<T: Copy>(words: &[(&'static str, T)], written: &str) -> Result<T, Option<&'static str>> {
    match words.iter().find(|(word, _)| *word == written) {
        Some((_, value)) => Ok(*value),
        None => Err(closest(words.iter().map(|(word, _)| *word), written)),
    }
}

impl CatchUpWord {
    /// The word written as `written`; else the closest word, if close.
    ///
    /// # Errors
    /// The guess, when `written` is no word.
    pub fn parse(written: &str) -> Result<Self, Option<&'static str>> {
        word(&Self::WORDS, written)
    }
}

impl OverlapWord {
    /// The word written as `written`; else the closest word, if close.
    ///
    /// # Errors
    /// The guess, when `written` is no word.
    pub fn parse(written: &str) -> Result<Self, Option<&'static str>> {
        word(&Self::WORDS, written)
    }
}

impl PolicyKeys {
    /// The policies the keys set, once the keys that only mean something together
    /// are checked: `catch_up_max` needs `catch_up = "all"`, `retry_backoff` needs
    /// `retry`, `overlap = "concurrent"` and `max_concurrent` need each other (and
    /// at least 1). The timing rules ([`check_timing`](crate::check_timing)) are not
    /// applied: they may need the schedule's period.
    ///
    /// # Errors
    /// The first rule the keys break, in that order.
    pub fn resolve(&self) -> Result<PolicySpec, PolicyError> {
        let catch_up = match self.catch_up {
            None => None,
            Some(CatchUpWord::Skip) => Some(CatchUpSpec::Skip),
            Some(CatchUpWord::Latest) => Some(CatchUpSpec::Latest),
            Some(CatchUpWord::All) => Some(CatchUpSpec::All {
                max: self.catch_up_max.unwrap_or(crate::DEFAULT_CATCH_UP_MAX),
            }),
        };
        if self.catch_up_max.is_some() && self.catch_up != Some(CatchUpWord::All) {
            return Err(PolicyError::CatchUpMaxWithoutAll);
        }
        let retry = match (self.retry, self.retry_backoff) {
            (Some(attempts), backoff) => Some(RetrySpec {
                attempts,
                backoff: backoff.unwrap_or(DEFAULT_RETRY_BACKOFF),
            }),
            (None, Some(_)) => return Err(PolicyError::BackoffWithoutRetry),
            (None, None) => None,
        };
        let overlap = match (self.overlap, self.max_concurrent) {
            (Some(OverlapWord::Concurrent), Some(0)) => return Err(PolicyError::ZeroMaxConcurrent),
            (Some(OverlapWord::Concurrent), Some(max)) => Some(OverlapSpec::Concurrent { max }),
            (Some(OverlapWord::Concurrent), None) => {
                return Err(PolicyError::ConcurrentWithoutMax);
            }
            (_, Some(_)) => return Err(PolicyError::MaxConcurrentWithoutConcurrent),
            (None, None) => None,
            (Some(OverlapWord::Skip), None) => Some(OverlapSpec::Skip),
            (Some(OverlapWord::BufferOne), None) => Some(OverlapSpec::BufferOne),
            (Some(OverlapWord::CancelRunning), None) => Some(OverlapSpec::CancelRunning),
        };
        Ok(PolicySpec {
            catch_up,
            overlap,
            retry,
            timeout: self.timeout,
        })
    }
}

impl PolicySpec {
    /// Whether no key sets a policy.
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }

    /// The timing settings the policies decide (no period, jitter or window).
    pub fn timing(&self) -> Timing {
        Timing {
            timeout: self.timeout,
            retry: self.retry.map(|r| (r.attempts, r.backoff)),
            catch_up_max: match self.catch_up {
                Some(CatchUpSpec::All { max }) => Some(max),
                _ => None,
            },
            ..Timing::default()
        }
    }

    /// Parses a policy written in `#[job]`'s key syntax, as a dynamic schedule keeps
    /// it: comma-separated `key = value` pairs, values quoted or not (`overlap =
    /// "skip", retry = 2`), the keys of [`POLICY_KEYS`]; empty: no policy set. As in
    /// `#[job]`, `catch_up = "all"` without `catch_up_max` keeps at most
    /// [`DEFAULT_CATCH_UP_MAX`](crate::DEFAULT_CATCH_UP_MAX) ticks, and what the
    /// timing rules refuse without a period (a zero, a `catch_up_max` above
    /// [`MAX_CATCH_UP`](crate::MAX_CATCH_UP)) is refused. A key given twice: the
    /// last one counts.
    ///
    /// ```
    /// use scheduler_spec::{OverlapSpec, PolicySpec};
    ///
    /// let spec = PolicySpec::parse(r#"overlap = "concurrent", max_concurrent = 2"#)?;
    /// assert_eq!(spec.overlap, Some(OverlapSpec::Concurrent { max: 2 }));
    /// assert!(PolicySpec::parse("overlap = sometimes").is_err());
    /// # Ok::<(), scheduler_spec::PolicyError>(())
    /// ```
    ///
    /// # Errors
    /// A [`PolicyError`] naming the key or value that is wrong.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut keys = PolicyKeys::default();
        // The words are checked once every pair is read, as before.
        let mut catch_up = None;
        let mut overlap = None;
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| PolicyError::NotKeyValue {
                    pair: pair.to_owned(),
                })?;
            let key = key.trim();
            let value = value.trim().trim_matches('"');
            let Some(key) = POLICY_KEYS.into_iter().find(|k| *k == key) else {
                return Err(PolicyError::UnknownKey {
                    key: key.to_owned(),
                    guess: closest(POLICY_KEYS, key),
                });
            };
            let number = || {
                value
                    .parse::<u32>()
                    .map_err(|_| PolicyError::NotWholeNumber {
                        key,
                        value: value.to_owned(),
                    })
            };
            let duration = || {
                crate::parse_duration(value).map_err(|cause| PolicyError::NotDuration {
                    key,
                    value: value.to_owned(),
                    cause,
                })
            };
            match key {
                "catch_up" => catch_up = Some(value),
                "catch_up_max" => keys.catch_up_max = Some(number()?),
                "overlap" => overlap = Some(value),
                "max_concurrent" => keys.max_concurrent = Some(number()?),
                "retry" => keys.retry = Some(number()?),
                "retry_backoff" => keys.retry_backoff = Some(duration()?),
                _ => keys.timeout = Some(duration()?),
            }
        }
        keys.catch_up = catch_up
            .map(|written| {
                CatchUpWord::parse(written).map_err(|guess| PolicyError::UnknownCatchUp {
                    written: written.to_owned(),
                    guess,
                })
            })
            .transpose()?;
        keys.overlap = overlap
            .map(|written| {
                OverlapWord::parse(written).map_err(|guess| PolicyError::UnknownOverlap {
                    written: written.to_owned(),
                    guess,
                })
            })
            .transpose()?;
        let spec = keys.resolve()?;
        crate::check_timing(&spec.timing())?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests;
