//! The crate's error type. `sea_orm::DbErr` is mapped here, once.

use scheduler_core::StoreFailure;
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
            other => {
                let failure = other.failure();
                scheduler_core::Error::store_as(failure, other)
            }
        }
    }
}

impl Error {
    /// What kind of trouble this is, for the runtime's health report: the server
    /// unreachable (no connection, a connection lost, a server starting up or
    /// shutting down), read-only (SQLSTATE 25006: a standby, a demoted primary), or
    /// something else.
    pub fn failure(&self) -> StoreFailure {
        let source = match self {
            Error::Connect { .. } => return StoreFailure::Unreachable,
            Error::Statement { source, .. } | Error::Migrate { source, .. } => source,
            _ => return StoreFailure::Other,
        };
        match sqlstate(source).as_deref() {
            Some("25006") => StoreFailure::ReadOnly,
            // connection_exception; admin_shutdown, crash_shutdown, cannot_connect_now;
            // too_many_connections.
            Some(code) if code.starts_with("08") => StoreFailure::Unreachable,
            Some("57P01" | "57P02" | "57P03" | "53300") => StoreFailure::Unreachable,
            Some(_) => StoreFailure::Other,
            None => match source {
                // Not from the server: the connection, the pool, I/O.
                DbErr::Conn(_) | DbErr::ConnectionAcquire(_) => StoreFailure::Unreachable,
                DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
                | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e))
                    if matches!(
                        &**e,
                        sea_orm::sqlx::Error::Io(_)
                            | sea_orm::sqlx::Error::Tls(_)
                            | sea_orm::sqlx::Error::Protocol(_)
                            | sea_orm::sqlx::Error::PoolTimedOut
                            | sea_orm::sqlx::Error::PoolClosed
                            | sea_orm::sqlx::Error::WorkerCrashed
                    ) =>
                {
                    StoreFailure::Unreachable
                }
                _ => StoreFailure::Other,
            },
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
