//! The crate's error type.

use std::time::Duration;

/// A boxed error from a store's backend (a database driver error, say).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in `scheduler-core`, and in a store as seen through the
/// [`Store`](crate::Store) trait.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lease or job name is empty, too long or holds a character a store cannot keep.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name (possibly shortened).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A lease ttl outside the accepted range.
    #[error("invalid lease ttl {ttl:?}: it must be at least {min:?} and at most {max:?}")]
    InvalidTtl {
        /// The rejected ttl.
        ttl: Duration,
        /// The smallest accepted ttl.
        min: Duration,
        /// The largest accepted ttl.
        max: Duration,
    },
    /// One batch names the same lease twice.
    #[error("lease {name:?} appears twice in one batch; take each name once per call")]
    DuplicateInBatch {
        /// The repeated lease name.
        name: String,
    },
    /// Two jobs registered under one name.
    #[error("two jobs are named {name:?}; job names must be unique in a scheduler")]
    DuplicateJob {
        /// The repeated name.
        name: String,
    },
    /// A job's schedule is invalid.
    #[error("job {job:?} has an invalid schedule: {source}")]
    InvalidSchedule {
        /// The job.
        job: String,
        /// What is wrong with the schedule.
        #[source]
        source: crate::schedule::ScheduleError,
    },
    /// The lease ttl leaves no room for renewals.
    #[error(
        "lease ttl {ttl:?} is too short for renewals every {renew_every:?}; the ttl must be at least twice the renewal interval (default renewal: ttl/4)"
    )]
    TtlTooShort {
        /// The ttl.
        ttl: Duration,
        /// The renewal interval.
        renew_every: Duration,
    },
    /// The store's backend failed (database unreachable, statement failed, …).
    ///
    /// The runtime treats this as transient: it logs it and retries with backoff.
    #[error("lease store failed: {source}")]
    Store {
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Wraps a backend error as [`Error::Store`].
    pub fn store(source: impl Into<BoxError>) -> Self {
        Error::Store {
            source: source.into(),
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `err` and every source below it, as one line: `a: b: c`.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let next = e.to_string();
        // A message that already ends with its cause's text is not repeated.
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}
