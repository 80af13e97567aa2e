//! The crate's error type.

use std::time::Duration;

/// A boxed error from a store's backend (a database driver error, say).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in `scheduler-core`, and in a store as seen through the
/// [`Store`](crate::Store) trait.
///
/// Each message is whole and says every cause once (`lease store failed: take leases
/// failed: …`), so `{err}` in a log line is enough; the cause is a field, not a
/// [`source`](std::error::Error::source), so a report walking the chain does not
/// print it twice.
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
    #[error("job {job:?} has an invalid schedule: {cause}")]
    InvalidSchedule {
        /// The job.
        job: String,
        /// What is wrong with the schedule.
        cause: scheduler_spec::Error,
    },
    /// A job's jitter, catch-up window, timeout or retries cannot work with each
    /// other or with its schedule (a jitter as long as the period, say).
    #[error("job {job:?} has invalid timing: {cause}")]
    InvalidTiming {
        /// The job.
        job: String,
        /// Which rule it breaks, and what to write instead.
        cause: scheduler_spec::TimingError,
    },
    /// A job needs a value of a type the scheduler was not given
    /// ([`SchedulerBuilder::state`](crate::SchedulerBuilder::state)): from `build()`
    /// for a type the job declared, from [`JobContext::state`](crate::JobContext::state)
    /// for one it asked for.
    #[error(
        "job {job:?} needs state of type `{type_name}`, but the scheduler was given none of that type (SchedulerBuilder::state); {}",
        given_types(.given)
    )]
    MissingState {
        /// The job.
        job: String,
        /// The type it needs.
        type_name: &'static str,
        /// The types the scheduler was given, sorted.
        given: Vec<&'static str>,
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
    /// No job of this name is registered with the scheduler.
    #[error(
        "no job named {name:?} is registered with this scheduler; name one given to SchedulerBuilder::job"
    )]
    UnknownJob {
        /// The name asked for.
        name: String,
    },
    /// A backfill range holds more ticks than the backfill may run
    /// ([`BackfillOptions::max_ticks`](crate::BackfillOptions::max_ticks)).
    #[error(
        "cannot backfill job {job:?} from {from} to {to}: the range holds more than {max_ticks} ticks; backfill it in parts, or raise BackfillOptions::max_ticks"
    )]
    BackfillTooLarge {
        /// The job.
        job: String,
        /// The start of the range.
        from: chrono::DateTime<chrono::Utc>,
        /// The end of the range.
        to: chrono::DateTime<chrono::Utc>,
        /// The most ticks allowed.
        max_ticks: usize,
    },
    /// A backfill range reaching past the store's clock: ticks still to come are the
    /// live schedule's.
    #[error(
        "cannot backfill job {job:?} up to {to}: that is after the store's clock ({now}), and ticks still to come are the live schedule's; end the range in the past"
    )]
    BackfillInFuture {
        /// The job.
        job: String,
        /// The end of the range.
        to: chrono::DateTime<chrono::Utc>,
        /// The store's clock when the backfill began.
        now: chrono::DateTime<chrono::Utc>,
    },
    /// A control or a dynamic schedule that cannot be applied: a bad policy, a
    /// row whose handler no instance registered, arguments that are not JSON, a
    /// trigger of a job no instance runs.
    #[error("{reason}")]
    InvalidControl {
        /// What is wrong, in words.
        reason: String,
    },
    /// A control's input past one of the limits every store keeps, whatever asked
    /// (the API, the CLI, the dashboard): a reason or an actor longer than
    /// [`MAX_TEXT_BYTES`](crate::control::MAX_TEXT_BYTES), an empty actor, an `every`
    /// schedule more often than the store's minimum period or with a time zone.
    /// Nothing was written; what to change is said in words.
    #[error("{reason}")]
    InvalidInput {
        /// What is wrong and what to write instead, in words.
        reason: String,
    },
    /// A trigger of a paused job (paused everywhere, or on the node asked for),
    /// without [`ControlRequest::while_paused`](crate::ControlRequest::while_paused):
    /// nothing was written. A trigger runs the job even while it is paused, so that
    /// must be asked for.
    #[error(
        "{job:?} is paused{} (by {by}{}); triggering it runs it while paused: say so explicitly (ControlRequest::while_paused, the CLI's --while-paused) or resume it first",
        .node.as_ref().map(|n| format!(" on {n}")).unwrap_or_default(),
        if .why.is_empty() { String::new() } else { format!(": {}", .why) }
    )]
    TriggerWhilePaused {
        /// The job.
        job: String,
        /// The node of the pause, `None`: paused everywhere.
        node: Option<String>,
        /// Who paused it.
        by: String,
        /// Why it was paused (may be empty).
        why: String,
    },
    /// A dynamic schedule names a handler that no running instance registered.
    #[error(
        "no instance registered a handler named {handler:?} (registered: {known}); register it with SchedulerBuilder::handler"
    )]
    UnknownHandler {
        /// The handler asked for.
        handler: String,
        /// The handlers registered, comma-separated (`none` when there are none).
        known: String,
    },
    /// One row of a batch ([`Controls::put_schedules`](crate::Controls::put_schedules))
    /// is refused: the whole batch is, nothing was written. `cause` says what is wrong
    /// with the row (the error a put of that row alone would return).
    #[error("row {index} ({name:?}) of the batch is refused, so nothing was written: {cause}")]
    InBatch {
        /// The row's position in the batch, from 0.
        index: usize,
        /// The row's name, as given.
        name: String,
        /// What is wrong with it.
        cause: Box<Error>,
    },
    /// The store has no controls (the store does not keep them).
    #[error("this store keeps no controls (pause, resume, trigger, dynamic schedules)")]
    NoControls,
    /// The store's backend failed (database unreachable, statement failed, …).
    ///
    /// The runtime treats this as transient: it logs it and retries with backoff.
    #[error("lease store failed: {}", error_chain(.cause.as_ref()))]
    Store {
        /// What the backend reported (a store crate's own error: downcast it).
        cause: BoxError,
        /// What kind of trouble it is, as far as the store can tell.
        failure: StoreFailure,
    },
}

/// What kind of trouble a store call met: what the readiness probe reports
/// ([`HealthReport::store_problem`](crate::HealthReport::store_problem)) and what an
/// operator acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreFailure {
    /// The database could not be reached: no connection, a connection lost, no
    /// answer in time, a server starting up or shutting down.
    Unreachable,
    /// The database answers but refuses writes: a read-only server (a standby, an
    /// old primary back after a failover) or a read-only default. Leases cannot be
    /// taken or renewed there; the runtime keeps retrying until a writable server
    /// answers.
    ReadOnly,
    /// Anything else: a statement refused (a missing grant, a lease table altered by
    /// hand), a row that does not decode.
    Other,
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreFailure::Unreachable => "database unreachable",
            StoreFailure::ReadOnly => "database read-only",
            StoreFailure::Other => "store calls failing",
        })
    }
}

impl Error {
    /// Wraps a backend error as [`Error::Store`] of kind [`StoreFailure::Other`].
    pub fn store(source: impl Into<BoxError>) -> Self {
        Self::store_as(StoreFailure::Other, source)
    }

    /// Wraps a backend error as [`Error::Store`] of kind `failure`.
    pub fn store_as(failure: StoreFailure, cause: impl Into<BoxError>) -> Self {
        Error::Store {
            cause: cause.into(),
            failure,
        }
    }

    /// The kind of store trouble, for [`Error::Store`].
    pub fn store_failure(&self) -> Option<StoreFailure> {
        match self {
            Error::Store { failure, .. } => Some(*failure),
            _ => None,
        }
    }
}

/// What an [`Error::MissingState`] says of the types given.
fn given_types(given: &[&'static str]) -> String {
    if given.is_empty() {
        return "it was given no state at all".to_owned();
    }
    let names: Vec<String> = given.iter().map(|name| format!("`{name}`")).collect();
    format!("it was given: {}", names.join(", "))
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error as `main` reports it: `fn main() -> Result<(), Report>` prints `Error: `
/// and the error's causes on one line ([`error_chain`]), where a `BoxError` would
/// print its `Debug` form (`Error: Connect { server: Some(…), cause: …`).
///
/// `?` turns any error (anything `Into<BoxError>`, strings too) into a `Report`:
///
/// ```no_run
/// use scheduler_core::{MemoryStore, Report, Scheduler, shutdown_signal};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Report> {
///     let grace: u64 = std::env::var("GRACE_SECONDS")?.parse()?;
///     let scheduler = Scheduler::builder(MemoryStore::new())
///         .shutdown_grace(std::time::Duration::from_secs(grace))
///         .build()?;
///     scheduler.run_until(shutdown_signal()).await;
///     Ok(())
/// }
/// ```
///
/// A `Report` is not itself a [`std::error::Error`] (so that every error converts
/// into it, as with `anyhow::Error`); [`Report::into_inner`] gives the error back.
/// `{:#?}` prints the error's own `Debug` form.
pub struct Report(BoxError);

impl<E: Into<BoxError>> From<E> for Report {
    fn from(error: E) -> Self {
        Report(error.into())
    }
}

impl Report {
    /// The error reported.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.0.as_ref()
    }

    /// The error reported, to downcast or to pass on.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            std::fmt::Debug::fmt(&self.0, f)
        } else {
            f.write_str(&error_chain(self.0.as_ref()))
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&error_chain(self.0.as_ref()))
    }
}

/// `err` and every source below it, as one line: `a: b: c`.
///
/// For a log line or a `main` that reports an error: each cause is printed once,
/// also when a message already ends with its cause's text (a habit of many error
/// types that also return that cause as their source).
///
/// ```
/// let err = std::io::Error::other("disk full");
/// assert_eq!(scheduler_core::error_chain(&err), "disk full");
/// ```
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let next = e.to_string();
        // A cause the text already says is not repeated.
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;

    /// An error with a message and maybe a source.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1
                .as_deref()
                .map(|s| s as &(dyn std::error::Error + 'static))
        }
    }

    /// What `fn main() -> Result<(), Report>` prints for `report`.
    fn from_main(report: Report) -> String {
        format!("Error: {report:?}")
    }

    #[test]
    fn main_prints_a_nested_error_as_its_chain() {
        let io = Layer("connection refused (os error 111)", None);
        let pool = Layer("pool timed out", Some(Box::new(io)));
        let top = Layer("cannot connect to 127.0.0.1:5432", Some(Box::new(pool)));
        assert_eq!(
            from_main(top.into()),
            "Error: cannot connect to 127.0.0.1:5432: pool timed out: connection refused (os error 111)"
        );
        assert_eq!(from_main("no such job".into()), "Error: no such job");
    }

    #[test]
    fn main_prints_missing_state_in_words() {
        let err = Error::MissingState {
            job: "sweep".to_owned(),
            type_name: "sqlx::PgPool",
            given: vec![],
        };
        assert_eq!(
            from_main(err.into()),
            "Error: job \"sweep\" needs state of type `sqlx::PgPool`, but the scheduler was given \
             none of that type (SchedulerBuilder::state); it was given no state at all"
        );
    }

    #[test]
    fn the_alternate_form_is_the_errors_own_debug() {
        let report = Report::from(Error::NoControls);
        assert_eq!(format!("{report:#?}"), "NoControls");
        assert!(report.into_inner().downcast_ref::<Error>().is_some());
    }
}
