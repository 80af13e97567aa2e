//! The crate's error type. `sea_orm::DbErr` is mapped here, once.

use scheduler_core::StoreFailure;
use sea_orm::DbErr;

use crate::hints;
pub(crate) use crate::hints::{sqlstate, sqlx_error};

/// Everything that can go wrong in the PostgreSQL store.
///
/// Each message is whole: it says the driver's error once, in words (the server's
/// message and SQLSTATE, not the server's source line), followed by what to do, so
/// `{err}` in a log line is enough. The driver's error is a field
/// ([`Error::database_error`]), not a [`source`](std::error::Error::source): a
/// report walking the chain would print it a second time.
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
        "cannot connect to the database{}: {}; check that the server runs and the URL's host, port and credentials",
        at(.server), describe(.cause)
    )]
    Connect {
        /// The server asked for (`host:port`), when known.
        server: Option<String>,
        /// The driver's error: the server's refusal or the network's, not only that
        /// the pool timed out.
        cause: DbErr,
    },
    /// The schema of a schema-qualified lease table does not exist, and the store was
    /// not asked to create it ([`PostgresOptions::create_schema`](crate::PostgresOptions::create_schema)).
    #[error(
        "schema {schema:?} of the lease table {table} does not exist: check the table name for a typo \
         (every instance of a cluster must name the same table), create the schema, or let the store \
         create it with PostgresOptions::create_schema(true)"
    )]
    MissingSchema {
        /// The missing schema.
        schema: String,
        /// The lease table, as configured.
        table: String,
    },
    /// A migration failed. Nothing of it was applied (migrations run in one transaction).
    ///
    /// `migration` is `setup` for the steps before any migration (the read-only
    /// check, the bookkeeping table); a missing right is named in the hint, with the
    /// `GRANT` that gives it.
    #[error("migration {migration} failed: {}{hint}", describe(.cause))]
    Migrate {
        /// The migration's name.
        migration: String,
        /// The driver's error.
        cause: DbErr,
        /// What to do about it, when known (`; …`, or empty).
        hint: String,
    },
    /// A statement failed.
    #[error("{operation} failed: {}{hint}", describe(.cause))]
    Statement {
        /// What the statement was for (`take leases`, `renew leases`, …).
        operation: &'static str,
        /// The driver's error.
        cause: DbErr,
        /// What to do about it, known from the SQLSTATE (`; …`, or empty).
        hint: &'static str,
    },
    /// A row of the lease table does not have the expected shape (altered by hand?).
    #[error(
        "unexpected row in the lease table while trying to {operation}: {}; was the table altered by hand?",
        describe(.cause)
    )]
    BadRow {
        /// What the statement was for.
        operation: &'static str,
        /// The decoding error.
        cause: DbErr,
    },
    /// Invalid input, as `scheduler-core` reports it.
    #[error(transparent)]
    Core(#[from] scheduler_core::Error),
}

impl Error {
    /// [`Error::Statement`] for `source`, with the hint the crate's table has for its
    /// SQLSTATE.
    pub(crate) fn statement(operation: &'static str, cause: DbErr) -> Error {
        Error::Statement {
            operation,
            hint: hints::for_error(&cause),
            cause,
        }
    }

    /// [`Error::Connect`] with the server unnamed (a pool that failed to hand out a
    /// connection after the store was opened).
    pub(crate) fn connect(cause: DbErr) -> Error {
        Error::Connect {
            server: None,
            cause,
        }
    }

    /// The driver's error behind this one, if any: to read its SQLSTATE or downcast
    /// it to sqlx's.
    pub fn database_error(&self) -> Option<&DbErr> {
        match self {
            Error::Connect { cause, .. }
            | Error::Migrate { cause, .. }
            | Error::Statement { cause, .. }
            | Error::BadRow { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// ` at host:port`, or nothing.
fn at(server: &Option<String>) -> String {
    server
        .as_deref()
        .map(|server| format!(" at {server}"))
        .unwrap_or_default()
}

/// A driver error in words, once: a server's error as its message and SQLSTATE
/// (sqlx's own text appends the line of the *server's* C source that raised it,
/// and sea-orm prefixes its variant's name), anything else as sqlx says it.
pub(crate) fn describe(err: &DbErr) -> String {
    use sea_orm::sqlx::postgres::PgDatabaseError;
    let Some(sqlx) = sqlx_error(err) else {
        return match err {
            // The store's own words, without sea-orm's "Custom Error: ".
            DbErr::Custom(text) => text.clone(),
            other => other.to_string(),
        };
    };
    let sea_orm::sqlx::Error::Database(db) = sqlx else {
        return sqlx.to_string();
    };
    let message = db.message();
    let detail = db
        .try_downcast_ref::<PgDatabaseError>()
        .and_then(PgDatabaseError::detail)
        .map(|detail| format!(" ({detail})"))
        .unwrap_or_default();
    match db.code() {
        Some(code) => format!("{message}{detail} [SQLSTATE {code}]"),
        None => format!("{message}{detail}"),
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
            Error::Statement { cause, .. } | Error::Migrate { cause, .. } => cause,
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
