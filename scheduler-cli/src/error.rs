//! The CLI's error type: every message says what to do.

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `--database-url` nor `DATABASE_URL` was given.
    #[error("no database URL: pass --database-url or set DATABASE_URL")]
    NoUrl,
    /// The URL does not parse or the server cannot be reached.
    #[error("{0}")]
    Connect(scheduler_postgres::Error),
    /// The database has no lease table of that name.
    #[error(
        "no lease table `{table}` here: has the scheduler run against this database? (--table)"
    )]
    NoLeaseTable {
        /// The table looked for.
        table: String,
    },
    /// A query failed. The message names the query and says what to do.
    #[error("{0}")]
    Query(scheduler_postgres::Error),
    /// A row did not have the expected shape (a table altered by hand?).
    #[error("{0}")]
    BadRow(scheduler_postgres::Error),
    /// `backfill` asked of this tool, which has the lease table but not the app's jobs.
    #[error(
        "backfill runs job {job:?}'s own code, which lives in your app, not in this tool: mount \
         scheduler_cli::BackfillArgs in your app's command line and call scheduler_cli::backfill \
         with its scheduler's backfiller (see the README's Backfill section); nothing was run"
    )]
    BackfillOutsideApp {
        /// The job asked for.
        job: String,
    },
    /// The backfill was refused, or the store stayed unreachable.
    #[error("{0}")]
    Backfill(scheduler_core::Error),
    /// The JSON output could not be written.
    #[error("cannot write the JSON output: {0}")]
    Json(serde_json::Error),
}

// Each message above is whole (it says its cause once), so none is also returned as
// a `source`: a report walking the chain would print it twice.

impl From<scheduler_postgres::Error> for Error {
    fn from(err: scheduler_postgres::Error) -> Self {
        Error::Connect(err)
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Json(err)
    }
}

impl Error {
    /// The error of a `scheduler_postgres::diagnostics` read: a failed statement is a
    /// [`Error::Query`], a row it could not read a [`Error::BadRow`].
    pub(crate) fn read(err: scheduler_postgres::Error) -> Self {
        match err {
            scheduler_postgres::Error::Statement { .. } => Error::Query(err),
            scheduler_postgres::Error::BadRow { .. } => Error::BadRow(err),
            other => Error::Connect(other),
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
