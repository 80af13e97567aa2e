//! The crate's error.

use std::time::Duration;

/// What went wrong in the app or the driver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A process, file or socket operation failed.
    #[error("could not {action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A statement of the app or the driver failed.
    #[error("could not {operation}: {source}")]
    Database {
        /// What the statement was for.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: sea_orm::DbErr,
    },
    /// The lease store failed (connecting, migrating).
    #[error("the lease store failed: {source}")]
    Store {
        /// The store's error.
        #[source]
        source: scheduler_postgres::Error,
    },
    /// The scheduler refused its configuration.
    #[error("the scheduler refused its configuration: {source}")]
    Scheduler {
        /// The scheduler's error.
        #[source]
        source: scheduler_core::Error,
    },
    /// A condition the driver waits for did not come in time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// The condition.
        what: String,
        /// How long the driver waited.
        waited: Duration,
    },
    /// An instance the driver addressed has exited or was never started.
    #[error("instance {name} is not running; see its log {log}")]
    NotRunning {
        /// The instance.
        name: String,
        /// Its log file.
        log: String,
    },
    /// A PostgreSQL URL the driver could not take apart.
    #[error("cannot use the URL {url:?}: {reason}; write it as postgres://user@host:port/database")]
    Url {
        /// The URL, without credentials.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let action = action.into();
        move |source| Error::Io { action, source }
    }

    pub(crate) fn database(operation: &'static str) -> impl FnOnce(sea_orm::DbErr) -> Error {
        move |source| Error::Database { operation, source }
    }
}
