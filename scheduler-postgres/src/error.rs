//! The crate's error type. `sea_orm::DbErr` is mapped here, once.

use sea_orm::DbErr;

use crate::hints;

/// Everything that can go wrong in the PostgreSQL store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database URL does not parse.
    #[error("invalid database URL: {reason}; expected postgres://user:password@host:port/database")]
    InvalidUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// The connection given to [`PostgresStore::open`](crate::PostgresStore::open) is
    /// not a PostgreSQL one.
    #[error("the PostgreSQL store needs a PostgreSQL connection, got a {backend} one")]
    NotPostgres {
        /// The connection's backend.
        backend: String,
    },
    /// The lease table name is not a plain identifier.
    #[error(transparent)]
    InvalidTableName(#[from] scheduler_migrations::InvalidTableName),
    /// The server could not be reached or refused the connection.
    #[error(
        "cannot connect to the database: {source}; check that the server runs and the URL's host, port and credentials"
    )]
    Connect {
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// A migration failed. Nothing of it was applied (migrations run in one transaction).
    ///
    /// `migration` is `setup` for the steps before any migration (the read-only
    /// check, the bookkeeping table); a missing right is named in the hint, with the
    /// `GRANT` that gives it.
    #[error("migration {migration} failed: {source}{hint}")]
    Migrate {
        /// The migration's name.
        migration: String,
        /// The driver's error.
        #[source]
        source: DbErr,
        /// What to do about it, when known (`; …`, or empty).
        hint: String,
    },
    /// A statement failed.
    #[error("{operation} failed: {source}{hint}")]
    Statement {
        /// What the statement was for (`take leases`, `renew leases`, …).
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: DbErr,
        /// What to do about it, known from the SQLSTATE (`; …`, or empty).
        hint: &'static str,
    },
    /// A row of the lease table does not have the expected shape (altered by hand?).
    #[error(
        "unexpected row in the lease table while trying to {operation}: {source}; was the table altered by hand?"
    )]
    BadRow {
        /// What the statement was for.
        operation: &'static str,
        /// The decoding error.
        #[source]
        source: DbErr,
    },
    /// Invalid input, as `scheduler-core` reports it.
    #[error(transparent)]
    Core(#[from] scheduler_core::Error),
}

impl Error {
    /// [`Error::Statement`] for `source`, with the hint the crate's table has for its
    /// SQLSTATE.
    pub(crate) fn statement(operation: &'static str, source: DbErr) -> Error {
        Error::Statement {
            operation,
            hint: hints::for_error(&source),
            source,
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for scheduler_core::Error {
    fn from(err: Error) -> Self {
        match err {
            Error::Core(err) => err,
            other => scheduler_core::Error::store(other),
        }
    }
}

/// The SQLSTATE of a database error, if the error came from the server.
pub(crate) fn sqlstate(err: &DbErr) -> Option<String> {
    use sea_orm::RuntimeErr;
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e))
        | DbErr::Conn(RuntimeErr::SqlxError(e)) => match &**e {
            sea_orm::sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        },
        _ => None,
    }
}
