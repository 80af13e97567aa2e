//! The crate's error type. `sea_orm::DbErr` is mapped here, once.

use sea_orm::DbErr;

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
    /// [`Error::Statement`] for `source`, with a hint chosen by its SQLSTATE.
    pub(crate) fn statement(operation: &'static str, source: DbErr) -> Error {
        let hint = statement_hint(sqlstate(&source).as_deref());
        Error::Statement {
            operation,
            source,
            hint,
        }
    }
}

/// What to do about a failed statement, by SQLSTATE.
fn statement_hint(sqlstate: Option<&str>) -> &'static str {
    match sqlstate {
        // undefined_table
        Some("42P01") => {
            "; the table does not exist: run the migrations (open the store with migrate(true)) or check the table name and the search_path"
        }
        // undefined_column, datatype_mismatch, undefined_function (an operator for
        // the wrong types), invalid_column_reference (ON CONFLICT without the primary
        // key), wrong_object_type, feature_not_supported ("cached plan must not change
        // result type": a column's type changed under an open store), and data
        // exceptions from values set by hand
        Some(
            "42703" | "42804" | "42883" | "42P10" | "42809" | "0A000" | "22P02" | "22003" | "22007"
            | "22008" | "23502" | "23514",
        ) => {
            "; the lease table does not have the shape the store expects: was it altered by hand? restore the columns, types and primary key the migrations create"
        }
        // read_only_sql_transaction
        Some("25006") => {
            "; the server is read-only (a hot standby or a read-only replica): point the URL at the primary"
        }
        // insufficient_privilege
        Some("42501") => {
            "; the database user lacks a right: it needs SELECT, INSERT and UPDATE on the lease table (and USAGE on its schema)"
        }
        // invalid_sql_statement_name, duplicate_prepared_statement
        Some("26000" | "42P05") => {
            "; prepared statements are lost between transactions: behind PgBouncer in transaction pooling mode add pgbouncer=true to the URL (for a pool of your own: scheduler_postgres::connect_options(url, &options) with PostgresOptions::for_url(url)), and run your own statements inside store.begin()"
        }
        Some("25P03") => {
            "; the transaction sat idle longer than PostgresOptions::idle_transaction_timeout (a paused process, or slow work between statements inside fenced/keyed): it was rolled back"
        }
        _ => "",
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
