//! The CLI's error type: every message says what to do.

use sea_orm::DbErr;

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `--database-url` nor `DATABASE_URL` was given.
    #[error("no database URL: pass --database-url or set DATABASE_URL")]
    NoUrl,
    /// The URL does not parse or the server cannot be reached.
    #[error(transparent)]
    Connect(#[from] scheduler_postgres::Error),
    /// The database has no lease table of that name.
    #[error(
        "no lease table `{table}` here: has the scheduler run against this database? (--table)"
    )]
    NoLeaseTable {
        /// The table looked for.
        table: String,
    },
    /// A query failed.
    #[error("cannot {what}: {source}")]
    Query {
        /// What the query was for.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// A row did not have the expected shape (a table altered by hand?).
    #[error("unexpected row while trying to {what}: {source}; was the table altered by hand?")]
    BadRow {
        /// What the query was for.
        what: &'static str,
        /// The decoding error.
        #[source]
        source: DbErr,
    },
    /// The JSON output could not be written.
    #[error("cannot write the JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// The error of a `scheduler_postgres::diagnostics` read: a failed statement is a
    /// [`Error::Query`], a row it could not read a [`Error::BadRow`].
    pub(crate) fn read(err: scheduler_postgres::Error) -> Self {
        match err {
            scheduler_postgres::Error::Statement {
                operation, source, ..
            } => Error::Query {
                what: operation,
                source,
            },
            scheduler_postgres::Error::BadRow { operation, source } => Error::BadRow {
                what: operation,
                source,
            },
            other => Error::Connect(other),
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
